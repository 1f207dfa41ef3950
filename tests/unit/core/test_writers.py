import csv
import datetime as dt
import gzip
import hashlib
import io
import subprocess
from zoneinfo import ZoneInfo

import pytest

from dxt_core.records import Series, SeriesBatch, SeriesSchema
from dxt_core.windows import to_ms
from dxt_core.writers import GzipCsvTableWriter, GzipCsvWriter, GzipStream, TimestampFormatter

ROME = ZoneInfo("Europe/Rome")


def _write(batches, schema, backend=None, level=None, origin=0) -> tuple[bytes, object]:
    buf = io.BytesIO()
    w = GzipCsvWriter(buf, ROME, gzip_backend=backend, gzip_level=level, origin_ms=origin)
    w.open(schema)
    for b in batches:
        w.write_batch(b)
    res = w.close()
    return buf.getvalue(), res


def _sample():
    schema = SeriesSchema("state", ("node", "state"))
    t0 = to_ms(dt.datetime(2020, 3, 9, tzinfo=ROME))
    batch = SeriesBatch(
        t0,
        t0 + 3_600_000,
        [
            Series("state", {"node": "r1n01", "state": "0"}, [[t0, 1.5], [t0 + 20_000, 2]]),
            Series(
                "state",
                {"node": 'r1n02,"x"', "state": "2"},
                [[t0, 'CRITICAL - load 9,1 "high"'], [t0 + 20_000, "line\nbreak"]],
            ),
        ],
    )
    return schema, batch, t0


def test_rows_parse_back_exactly_with_csv_module():
    schema, batch, t0 = _sample()
    data, res = _write([batch], schema)
    rows = list(csv.reader(io.StringIO(gzip.decompress(data).decode())))
    assert rows[0] == ["timestamp", "value", "name", "node", "state"]
    assert rows[1] == ["2020-03-09T00:00:00.000+01:00", "1.5", "state", "r1n01", "0"]
    # one block: series by series, by time within a series
    assert rows[2] == ["2020-03-09T00:00:20.000+01:00", "2", "state", "r1n01", "0"]
    assert rows[3][1] == 'CRITICAL - load 9,1 "high"'
    assert rows[3][3] == 'r1n02,"x"'
    assert rows[4][1] == "line\nbreak"
    assert res.rows == 4 and res.first_ms == t0 and res.last_ms == t0 + 20_000
    assert res.sha256 == hashlib.sha256(data).hexdigest()
    assert res.bytes == len(data)


@pytest.mark.parametrize("backend", ["libdeflate", "isal", "zlib"])
def test_output_is_deterministic_standard_gzip(backend, tmp_path):
    schema, batch, _ = _sample()
    a, _ = _write([batch], schema, backend)
    b, _ = _write([batch], schema, backend)
    assert a == b
    assert a[:2] == b"\x1f\x8b" and a[4:8] == b"\0\0\0\0"  # no mtime
    assert a[3] & 0x08 == 0  # no file name
    p = tmp_path / "x.csv.gz"
    p.write_bytes(a)
    out = subprocess.run(["gzip", "-dc", str(p)], capture_output=True, check=True).stdout
    assert out == gzip.decompress(a)


def test_pandas_reads_the_file(tmp_path):
    pd = pytest.importorskip("pandas")
    schema, batch, _ = _sample()
    data, _ = _write([batch], schema)
    p = tmp_path / "x.csv.gz"
    p.write_bytes(data)
    df = pd.read_csv(p, parse_dates=["timestamp"])
    assert len(df) == 4
    assert str(df["timestamp"].dt.tz) == "UTC+01:00"
    assert df["value"].tolist()[0] == "1.5"  # mixed column stays text
    assert df["node"].tolist() == ["r1n01", "r1n01", 'r1n02,"x"', 'r1n02,"x"']


def test_bytes_do_not_depend_on_how_the_day_was_windowed():
    schema = SeriesSchema("m", ("node",))
    t0 = 1_583_708_400_000
    series = {
        n: [[t0 + i * 20_000 + (j if n == "b" else 0), float(i)] for i in range(180)]
        for j, n in enumerate("abc")
    }

    def batches(cuts):
        out = []
        for a, b in zip(cuts, cuts[1:]):
            out.append(
                SeriesBatch(
                    a,
                    b,
                    [
                        Series("m", {"node": n}, [p for p in pts if a <= p[0] < b])
                        for n, pts in series.items()
                    ],
                )
            )
        return out

    # rows come in 1800 s blocks from the day start (origin), whatever the query windows
    whole, _ = _write(batches([t0, t0 + 3_600_000]), schema, origin=t0)
    for cuts in (
        [t0, t0 + 600_000, t0 + 2_100_000, t0 + 3_600_000],
        [t0, t0 + 300_000, t0 + 1_800_000, t0 + 1_800_001, t0 + 3_000_000, t0 + 3_600_000],
        [t0 + i * 900_000 for i in range(5)],
    ):
        for backend in ("libdeflate", "isal", "zlib"):
            assert (
                _write(batches(cuts), schema, origin=t0, backend=backend)[0]
                == _write(batches([t0, t0 + 3_600_000]), schema, origin=t0, backend=backend)[0]
            )
        assert _write(batches(cuts), schema, origin=t0)[0] == whole
    rows = list(csv.reader(io.StringIO(gzip.decompress(whole).decode())))[1:]
    # within the first block (90 samples of each series): a, then b, then c
    assert [r[3] for r in rows[:270]] == ["a"] * 90 + ["b"] * 90 + ["c"] * 90
    assert [r[3] for r in rows[270:360]] == ["a"] * 90
    assert len(rows) == 540


def test_timestamp_offsets_follow_dst():
    f = TimestampFormatter(ROME)
    before = to_ms(dt.datetime(2020, 3, 29, 1, 59, 59, tzinfo=dt.UTC).astimezone(ROME)) - 3_600_000
    assert f(before).endswith("+01:00")
    after = to_ms(dt.datetime(2020, 3, 29, 1, 0, tzinfo=dt.UTC))
    assert f(after) == "2020-03-29T03:00:00.000+02:00"
    assert f(after - 1) == "2020-03-29T01:59:59.999+01:00"
    # Every ms formats like datetime.isoformat does.
    for ms in range(after - 5_000_000, after + 5_000_000, 999_983):
        ref = dt.datetime.fromtimestamp(ms / 1000, tz=ROME).isoformat(timespec="milliseconds")
        assert f(ms) == ref
    assert TimestampFormatter(dt.UTC)(0) == "1970-01-01T00:00:00.000+00:00"


def test_table_writer_takes_union_of_keys():
    buf = io.BytesIO()
    res = GzipCsvTableWriter(buf).write_all([{"b": 1, "a": "x,y"}, {"a": "z", "c": None}])
    rows = list(csv.reader(io.StringIO(gzip.decompress(buf.getvalue()).decode())))
    assert rows == [["a", "b", "c"], ["x,y", "1", ""], ["z", "", ""]]
    assert res.rows == 2


def test_libdeflate_members_are_cut_at_fixed_offsets_and_read_as_one_stream():
    from dxt_core.writers.compress import MEMBER_BYTES

    data = bytes(range(256)) * (MEMBER_BYTES // 256 * 2 + 1000)  # two full members + a tail
    outs = []
    for step in (len(data), 1 << 20, 999_983, 4099):
        buf = io.BytesIO()
        g = GzipStream(buf, "libdeflate", 6)
        view = memoryview(data).cast("b")  # any bytes-like object, whatever its format
        for i in range(0, len(data), step):
            g.write(data[i : i + step] if step != 4099 else view[i : i + step])  # type: ignore[arg-type]
        digest = g.close()
        assert digest == hashlib.sha256(buf.getvalue()).hexdigest()
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] == outs[2] == outs[3]
    assert outs[0].count(b"\x1f\x8b\x08\x00\x00\x00\x00\x00") == 3  # 3 members, mtime 0
    assert gzip.decompress(outs[0]) == data
    with gzip.open(io.BytesIO(outs[0])) as fh:  # streaming readers cross members too
        assert fh.read() == data
    empty = io.BytesIO()
    GzipStream(empty, "libdeflate").close()
    assert gzip.decompress(empty.getvalue()) == b""


def test_gzip_stream_counts_bytes():
    buf = io.BytesIO()
    g = GzipStream(buf, "zlib", 6)
    g.write(b"abc" * 1000)
    digest = g.close()
    assert g.raw_bytes == 3000 and g.bytes == len(buf.getvalue())
    assert digest == hashlib.sha256(buf.getvalue()).hexdigest()


def test_job_records_parquet_types_come_from_declarations_not_values():
    pq = pytest.importorskip("pyarrow.parquet")
    from dxt_core.errors import ArchiveError
    from dxt_core.writers.base import write_stream
    from dxt_core.writers.parquet import ParquetTableWriter

    def write_records_parquet(buf, records, declared, table="job table"):
        columns = sorted({k for r in records for k in r})
        return write_stream(ParquetTableWriter(buf, declared, table), columns, [records])

    declared = {"id": "int64", "t": "double", "ok": "bool"}
    day1 = [{"id": 1, "t": 2, "ok": True, "n": 3, "note": None}]
    day2 = [{"id": 2.0, "t": 2.5, "ok": None, "n": "x", "note": {"k": [1]}}]
    schemas = []
    for records in (day1, day2):
        buf = io.BytesIO()
        res = write_records_parquet(buf, records, declared)
        schemas.append(pq.read_schema(io.BytesIO(buf.getvalue())))
        assert res.extra["column_types"]["n"] == "string"
    assert schemas[0] == schemas[1]
    assert {f.name: str(f.type) for f in schemas[0]} == {
        "id": "int64",
        "n": "string",
        "note": "string",
        "ok": "bool",
        "t": "double",
    }
    with pytest.raises(
        ArchiveError, match=r'job_table/x: record 0 has id = 1.5.*declare id = "string"'
    ):
        write_records_parquet(io.BytesIO(), [{"id": 1.5}], declared, table="job_table/x")


def test_a_tag_named_as_a_fixed_column_gets_a_column_of_its_own(tmp_path):
    """A tag (a Prometheus label) called ``name``, ``value`` or ``timestamp`` is written as
    ``exported_<tag>``, prefixed again while that is a tag too: a file never holds two
    columns of one name (pandas renamed one ``name.1``, Arrow refused to read the Parquet)."""
    from dxt_core.writers.parquet import ParquetSeriesWriter

    pq = pytest.importorskip("pyarrow.parquet")
    schema = SeriesSchema("m", ("exported_name", "name", "node", "value"))
    assert schema.columns == (
        "timestamp",
        "value",
        "name",
        "exported_name",
        "exported_exported_name",
        "node",
        "exported_value",
    )
    assert SeriesSchema("m", ("node",)).columns == ("timestamp", "value", "name", "node")
    t0 = to_ms(dt.datetime(2020, 3, 9, tzinfo=ROME))
    tags = {"exported_name": "e", "name": "web", "node": "n1", "value": "v"}
    batch = SeriesBatch(t0, t0 + 3_600_000, [Series("m", tags, [[t0, 1.5]])])
    data, _ = _write([batch], schema)
    rows = list(csv.reader(io.StringIO(gzip.decompress(data).decode())))
    assert rows[0] == list(schema.columns)
    assert rows[1][1:] == ["1.5", "m", "e", "web", "n1", "v"]
    path = tmp_path / "d.parquet"
    with path.open("wb") as f:
        w = ParquetSeriesWriter(f)
        w.open(schema)
        w.write_batch(batch)
        w.close()
    table = pq.read_table(path)
    assert table.column_names == list(schema.columns)
    assert table.to_pylist()[0]["exported_exported_name"] == "web"


def test_an_examon_tag_named_metric_is_not_read_as_the_parquet_folder(tmp_path):
    """Examon's Parquet days sit in ``plugin=<p>/metric=<m>/``: a tag ``metric`` is written as
    ``exported_metric`` (in CSV too: a day's two formats have the same columns), so that a
    Hive read (pandas, pyarrow, DuckDB) gives each row its own tag and the folder's metric.
    The ``plugin`` tag is the folder's plugin and keeps its name."""
    pq = pytest.importorskip("pyarrow.parquet")
    ds = pytest.importorskip("pyarrow.dataset")
    from dxt_core.backends.examon.tags import examon_schema
    from dxt_core.writers.parquet import ParquetSeriesWriter

    schema = examon_schema("temp", {"node", "plugin", "metric"})
    assert schema.columns == (
        *("timestamp", "value", "name"),
        *("exported_metric", "node", "plugin"),
    )
    t0 = to_ms(dt.datetime(2020, 3, 9, tzinfo=ROME))
    series = [
        Series("temp", {"node": f"n{i}", "plugin": "p", "metric": f"inner{i}"}, [[t0, 1.5]])
        for i in range(2)
    ]
    batch = SeriesBatch(t0, t0 + 3_600_000, series)
    data, _ = _write([batch], schema)
    header = next(csv.reader(io.StringIO(gzip.decompress(data).decode())))
    assert header == list(schema.columns)
    folder = tmp_path / "examon" / "plugin=p" / "metric=temp"
    folder.mkdir(parents=True)
    with (folder / "2020-03-09.parquet").open("wb") as f:
        w = ParquetSeriesWriter(f)
        w.open(schema)
        w.write_batch(batch)
        w.close()
    got = ds.dataset(
        tmp_path / "examon",
        format="parquet",
        partitioning=ds.HivePartitioning.discover(infer_dictionary=True),
    ).to_table()
    rows = sorted(zip(*(got.column(c).to_pylist() for c in ("node", "metric", "exported_metric"))))
    assert rows == [("n0", "temp", "inner0"), ("n1", "temp", "inner1")]
    assert pq.read_table(folder / "2020-03-09.parquet").column_names == list(schema.columns)
