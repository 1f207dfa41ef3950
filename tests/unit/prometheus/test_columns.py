"""Answers as columns, and the day's files from columns: the decoders against the servers'
own answer texts (measured on Prometheus 2.42 and VictoriaMetrics 1.79, or written as their
source writes them), and the writers against the archive's generic writers."""

from __future__ import annotations

import bisect
import functools
import gzip
import io
import itertools

import numpy as np
import pytest

from dxt_core.backends.prometheus.columns import (
    Columns,
    concat,
    decode_export,
    decode_matrix,
    inside,
)
from dxt_core.backends.prometheus.labels import LabelCache, label_key
from dxt_core.backends.prometheus.layout import (
    CHUNK_ROWS,
    CsvDayWriter,
    ParquetDayWriter,
)
from dxt_core.errors import SourceError
from dxt_core.records import Series, SeriesBatch, SeriesSchema
from dxt_core.windows import day_window, zone
from dxt_core.writers.columnar import Stamps
from dxt_core.writers.csv_gzip import GzipCsvWriter, TimestampFormatter
from dxt_core.writers.parquet import ParquetSeriesWriter

URL = "http://server/api"


def test_a_prometheus_matrix() -> None:
    # as Prometheus 2.42 answers (measured): seconds, values as text
    answer = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
        b'"m","node":"n1"},"values":[[1711922385,"21.13"],[1711922400,"5"]]},{"metric":'
        b'{"__name__":"m","node":"n2"},"values":[[1711922385.5,"NaN"],[1711922400.001,"+Inf"],'
        b'[1711922401,"-Inf"]]}]}}'
    )
    cols = decode_matrix(answer, "w", URL, LabelCache())
    assert cols.labels == [{"__name__": "m", "node": "n1"}, {"__name__": "m", "node": "n2"}]
    assert cols.starts.tolist() == [0, 2, 5]
    assert cols.ts.tolist() == [
        1711922385000, 1711922400000, 1711922385500, 1711922400001, 1711922401000,
    ]  # fmt: skip
    # the server's digits; the special values as the CSV writes them
    assert cols.tokens() == ["21.13", "5", "nan", "inf", "-inf"]
    v = cols.values()
    assert v[0] == 21.13 and np.isnan(v[2]) and v[3] == np.inf and v[4] == -np.inf
    # laid out otherwise (spaces, a warning): parsed as JSON, the same columns
    import json

    doc = json.loads(answer)
    doc["warnings"] = ["a warning"]
    other = decode_matrix(json.dumps(doc).encode(), "w", URL, LabelCache())
    assert other.labels == cols.labels and other.keys == cols.keys
    assert other.ts.tolist() == cols.ts.tolist() and other.tokens() == cols.tokens()


def _matrix(*series: tuple[str, list[tuple[int, str]]]) -> bytes:
    parts = [
        b'{"metric":{"__name__":"m","node":"%s"},"values":[%s]}'
        % (node.encode(), b",".join(b'[%d,"%s"]' % (t, v.encode()) for t, v in pairs))
        for node, pairs in series
    ]
    return (
        b'{"status":"success","data":{"resultType":"matrix","result":[' + b",".join(parts) + b"]}}"
    )


def test_a_window_of_the_same_series_reuses_the_last_windows_lists() -> None:
    cache = LabelCache()
    first = decode_matrix(_matrix(("n1", [(1, "1")]), ("n2", [(1, "2")])), "w", URL, cache)
    again = decode_matrix(_matrix(("n1", [(2, "3")]), ("n2", [(2, "4")])), "w", URL, cache)
    # the same objects: the writers keep what they made of the list
    assert again.labels is first.labels and again.keys is first.keys and again.distinct
    assert again.tokens() == ["3", "4"] and again.ts.tolist() == [2000, 2000]
    # another list of series (one more, or the same in another order): new lists, the
    # labels of each series still decoded once
    more = decode_matrix(
        _matrix(("n2", [(3, "5")]), ("n1", [(3, "6")]), ("n3", [(3, "7")])), "w", URL, cache
    )
    assert more.keys is not first.keys and len(cache) == 3
    assert [lab["node"] for lab in more.labels] == ["n2", "n1", "n3"]
    assert more.labels[1] is first.labels[0]
    # a series twice (a proxy joining answers): not distinct, joined by concat
    twice = decode_matrix(_matrix(("n1", [(4, "8")]), ("n1", [(5, "9")])), "w", URL, cache)
    assert not twice.distinct
    joined = concat([twice], 0, 10_000)
    assert joined.distinct and joined.starts.tolist() == [0, 2] and joined.tokens() == ["8", "9"]


def test_a_series_without_samples_in_a_matrix_has_no_rows() -> None:
    body = _matrix(("n1", [(1, "1"), (2, "2")]), ("n2", []), ("n3", [(3, "3")]))
    cols = decode_matrix(body, "w", URL, LabelCache())
    assert cols.starts.tolist() == [0, 2, 2, 3] and cols.tokens() == ["1", "2", "3"]
    assert cols.ts.tolist() == [1000, 2000, 3000]
    none = decode_matrix(_matrix(("n1", []), ("n2", [])), "w", URL, LabelCache())
    assert none.rows == 0 and none.starts.tolist() == [0, 0, 0]


def test_a_label_value_that_looks_like_the_layout_stays_a_label_value() -> None:
    # JSON escapes a quote inside a string: the text that cuts series never appears there
    node = 'x\\"]},{\\"metric\\":{,\\"values\\":['
    cols = decode_matrix(_matrix((node, [(1, "1")]), ("n2", [(1, "2")])), "w", URL, LabelCache())
    assert cols.labels[0]["node"] == 'x"]},{"metric":{,"values":['
    assert cols.tokens() == ["1", "2"] and cols.starts.tolist() == [0, 1, 2]


def test_a_matrix_that_is_not_one_is_a_clear_error() -> None:
    vector = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    with pytest.raises(SourceError, match="expected a matrix"):
        decode_matrix(vector, "w", URL, LabelCache())
    with pytest.raises(SourceError, match="not valid JSON"):
        decode_matrix(b"<html>", "w", URL, LabelCache())
    empty = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
    assert decode_matrix(empty, "w", URL, LabelCache()).rows == 0


def test_a_victoriametrics_export() -> None:
    # as VictoriaMetrics 1.79 exports (app/vmselect/prometheus/export.qtpl): a NaN is
    # "null", or "NaN" as a line's first value (not JSON)
    body = (
        b'{"metric":{"__name__":"m","job":"node"},"values":[21.2,21.27,21],'
        b'"timestamps":[1711922400000,1711922415000,1711922430000]}\n'
        b'{"metric":{"job":"node","__name__":"m","i":"2"},"values":[NaN,null,1000000000000000000000],'
        b'"timestamps":[1711922400000,1711922415000,1711922430000]}\n'
        # the same keys in another order: decoded as JSON
        b'{"timestamps":[1711922400000],"values":[7],"metric":{"__name__":"m","i":"3"}}\n'
    )
    cache = LabelCache()
    cols = decode_export(body, "w", URL, cache)
    assert [c.get("i") for c in cols.labels] == [None, "2", "3"]
    assert cols.tokens() == ["21.2", "21.27", "21", "nan", "nan", "1000000000000000000000", "7"]
    assert cols.ts.tolist()[:3] == [1711922400000, 1711922415000, 1711922430000]
    assert len(cache) == 3 and decode_export(body, "w", URL, cache).labels[1] is cols.labels[1]
    assert cols.keys[1] == (("__name__", "m"), ("i", "2"), ("job", "node"))
    # the lines as VictoriaMetrics writes them: cut at the places found for all at once
    fast = decode_export(b"".join(body.splitlines(keepends=True)[:2]), "w", URL, LabelCache())
    assert fast.tokens() == cols.tokens()[:6] and fast.starts.tolist() == [0, 3, 6]
    assert fast.ts.tolist() == cols.ts.tolist()[:6] and fast.keys == cols.keys[:2]
    with pytest.raises(SourceError, match="export line 2 is not a series"):
        decode_export(body.replace(b'"i":"2"}', b'"i":2"}'), "w", URL, LabelCache())
    with pytest.raises(SourceError, match="export line 3 is not a series"):
        decode_export(body.replace(b'"values":[7]', b'"values":[7,8]'), "w", URL, LabelCache())


def test_an_export_without_a_line_is_no_rows_and_a_line_without_arrays_an_error() -> None:
    # VictoriaMetrics answers an empty body for a window of listed series without samples
    for body in (b"", b"\n", b"\n\n"):
        assert decode_export(body, "w", URL, LabelCache()).rows == 0
    with pytest.raises(SourceError, match="export line 1 is not a series"):
        decode_export(b'{"metric":{"__name__":"m"}}\n', "w", URL, LabelCache())


def test_export_windows_of_the_same_series_in_other_orders_share_the_lists() -> None:
    lines = [
        b'{"metric":{"__name__":"m","i":"%d"},"values":[%d],"timestamps":[%d]}\n' % (i, i, t)
        for i, t in ((2, 10), (1, 10), (3, 10))
    ]
    cache = LabelCache()
    first = decode_export(b"".join(lines), "w", URL, cache)
    again = decode_export(b"".join(lines[::-1]), "w", URL, cache)
    assert [lab["i"] for lab in first.labels] == ["1", "2", "3"]
    assert again.keys is first.keys and again.tokens() == ["1", "2", "3"]


def test_samples_per_export_line_whatever_the_width_of_the_times() -> None:
    # the count of a line is its times' length over 14 only when every time has 13 digits:
    # "100000,200000" is 14 bytes with a comma, two samples
    body = (
        b'{"metric":{"__name__":"m","i":"1"},"values":[1,2],"timestamps":[100000,200000]}\n'
        b'{"metric":{"__name__":"m","i":"2"},"values":[3],"timestamps":[1711922400000]}\n'
    )
    cols = decode_export(body, "w", URL, LabelCache())
    assert cols.starts.tolist() == [0, 2, 3] and cols.ts.tolist() == [100000, 200000, 1711922400000]
    modern = body.replace(b"100000,200000", b"1711922385000,1711922399999")
    cols = decode_export(modern, "w", URL, LabelCache())
    assert cols.starts.tolist() == [0, 2, 3] and cols.tokens() == ["1", "2", "3"]
    with pytest.raises(SourceError, match="a timestamp is not an integer"):
        decode_export(modern.replace(b"1711922399999", b"1711922399999,x"), "w", URL, LabelCache())


def test_an_export_error_names_the_line_of_the_answer() -> None:
    # lines are put in the order of their metric text, and a line without samples is left
    # out: the error still names the line as the server sent it
    body = (
        b'{"metric":{"__name__":"z","i":2"},"values":[1],"timestamps":[1711922400000]}\n'
        b'{"metric":{"__name__":"b"},"values":[],"timestamps":[]}\n'
        b'{"metric":{"__name__":"a"},"values":[2],"timestamps":[1711922400000]}\n'
    )
    with pytest.raises(SourceError, match="export line 1 is not a series"):
        decode_export(body, "w", URL, LabelCache())
    fixed = body.replace(b'"i":2"', b'"i":"2"')
    cols = decode_export(fixed, "w", URL, LabelCache())
    assert [lab["__name__"] for lab in cols.labels] == ["a", "z"]


def test_answers_joined_in_time_order_and_cut_to_the_window() -> None:
    a = decode_export(
        b'{"metric":{"__name__":"m"},"values":[3,4],"timestamps":[30,40]}\n'
        b'{"metric":{"__name__":"m","i":"x"},"values":[1],"timestamps":[5]}\n'
        b'{"metric":{"__name__":"m"},"values":[1,2],"timestamps":[10,20]}\n',
        "w",
        URL,
        LabelCache(),
    )
    cols = concat([a], 10, 40)
    # series in the order of their metric text (VictoriaMetrics' own order changes from
    # window to window), the two lines of one series joined in time order
    assert cols.labels == [{"__name__": "m", "i": "x"}, {"__name__": "m"}]
    assert cols.ts.tolist() == [5, 10, 20, 30, 40] and cols.tokens() == ["1", "1", "2", "3", "4"]
    kept, dropped = inside(cols)
    assert dropped == 2 and kept.ts.tolist() == [10, 20, 30]
    assert kept.tokens() == ["1", "2", "3"] and kept.starts.tolist() == [0, 0, 3]


# -- the writers, against the generic ones --------------------------------------------------

TZ = zone("Europe/Rome")
DAY = day_window(__import__("datetime").date(2024, 3, 31), TZ)  # 23 hours
BLOCK = 300_000
KEYS = ("instance", "job", "rack")


@functools.cache
def _series() -> list[tuple[dict[str, str], list[tuple[int, str]]]]:
    """Seven series with jittered times (some ms), labels to quote, a label missing, values
    of several shapes; the day's every block."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(7):
        labels = {"__name__": "m" if i != 5 else "m_other", "instance": f"n{i % 4}:9100"}
        labels["job"] = 'a,"b"' if i == 2 else "node"
        if i % 3:
            labels["rack"] = f"r{i}"
        step = 15_000 + 5_000 * (i % 2)
        times = np.arange(DAY.start_ms + int(rng.integers(0, 999)), DAY.end_ms, step)
        values = [str(v) for v in np.round(rng.random(len(times)) * 100, i % 3).tolist()]
        values = [v.removesuffix(".0") for v in values]
        out.append((labels, list(zip(times.tolist(), values, strict=True))))
    return out


def _columns(series, a: int, b: int, shared: Columns | None = None) -> Columns:
    """``[a, b)`` of ``series`` as a source would hand it over (values followed by commas);
    with the lists of series of ``shared`` (the same objects), as LabelCache hands over the
    windows of one list of series."""
    labels, counts, ts, toks = [], [], [], []
    for lab, pts in series:
        times = [t for t, _ in pts]
        lo, hi = bisect.bisect_left(times, a), bisect.bisect_left(times, b)
        labels.append(lab)
        counts.append(hi - lo)
        ts += times[lo:hi]
        toks += [v.encode() + b"," for _, v in pts[lo:hi]]
    offsets = np.zeros(len(toks) + 1, np.int64)
    np.cumsum([len(t) for t in toks], out=offsets[1:])
    starts = np.zeros(len(labels) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    keys = [label_key(lab) for lab in labels]
    if shared is not None:
        assert shared.keys == keys
        labels, keys = shared.labels, shared.keys
    return Columns(a, b, labels, keys, starts, np.array(ts, np.int64), b"".join(toks), offsets)


def _batch(series, a: int, b: int) -> SeriesBatch:
    """The day as one batch, series ordered as the source ordered them for the generic
    writers (by label values, then name)."""
    batch = SeriesBatch(a, b)
    for lab, pts in series:
        tags = {k: v for k, v in lab.items() if k != "__name__"}
        batch.series.append(Series(lab["__name__"], tags, [[t, v] for t, v in pts if a <= t < b]))
    batch.series.sort(key=lambda s: (*(s.tags.get(k, "") for k in KEYS), s.name))
    return batch


def _windows() -> list[tuple[int, int]]:
    """The day cut in windows of 1, 2, 7, ... blocks."""
    edges, t = [DAY.start_ms], DAY.start_ms
    for k in itertools.cycle((1, 2, 7, 30, 3)):
        t = min(t + k * BLOCK, DAY.end_ms)
        edges.append(t)
        if t == DAY.end_ms:
            return list(itertools.pairwise(edges))


@pytest.mark.parametrize("lists", ["fresh", "shared"])
@pytest.mark.parametrize("whole_day", [False, True], ids=["windows", "one-window"])
@pytest.mark.parametrize("arrow", [True, False], ids=["arrow", "numpy"])
def test_csv_rows_are_the_generic_writers_byte_for_byte(
    arrow: bool, whole_day: bool, lists: str
) -> None:
    series = _series()
    shared = _columns(series, 0, 0) if lists == "shared" else None
    schema = SeriesSchema("m", KEYS)
    new, old = io.BytesIO(), io.BytesIO()
    w = CsvDayWriter(new, TZ, BLOCK, DAY.start_ms, arrow=arrow)
    w.open(schema)
    # the whole day in one window: rows formatted in several chunks of CHUNK_ROWS
    windows = [(DAY.start_ms, DAY.end_ms)] if whole_day else _windows()
    assert not whole_day or _columns(series, DAY.start_ms, DAY.end_ms).rows > 2 * CHUNK_ROWS
    for a, b in windows:
        w.write(_columns(series, a, b, shared))
    res = w.close()
    g = GzipCsvWriter(old, TZ, block_ms=BLOCK, origin_ms=DAY.start_ms)
    g.open(schema)
    whole = _batch(series, DAY.start_ms, DAY.end_ms)
    g.write_batch(whole)
    ref = g.close()
    assert gzip.decompress(new.getvalue()) == gzip.decompress(old.getvalue())
    assert new.getvalue() == old.getvalue() and res.sha256 == ref.sha256
    assert (res.rows, res.first_ms, res.last_ms) == (ref.rows, ref.first_ms, ref.last_ms)
    assert b'"a,""b"""' in gzip.decompress(new.getvalue())


def test_timestamps_as_the_generic_formatter_writes_them() -> None:
    fmt, stamps = TimestampFormatter(TZ), Stamps(TZ)
    # both 2024 changes in Rome, around midnight, and a few ms
    ts = np.array(
        [DAY.start_ms - 1, DAY.start_ms, 1711846799999, 1711846800000, 1711846800123,
         1729990799999, 1729990800000, 1729994400000, DAY.end_ms - 1],
        np.int64,
    )  # fmt: skip
    got = [bytes(r).decode() for r in stamps(ts)]
    assert got == [fmt(int(t)) + "," for t in ts.tolist()]


def test_parquet_holds_the_generic_writers_table() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    series = _series()
    schema = SeriesSchema("m", KEYS)
    files = []
    # a rerun writes the same bytes, with windows of fresh lists of series or of one list
    for shared in (None, _columns(series, 0, 0)):
        out = io.BytesIO()
        w = ParquetDayWriter(out, BLOCK, DAY.start_ms, 4 * 3_600_000)
        w.open(schema)
        for a, b in _windows():
            w.write(_columns(series, a, b, shared))
        res = w.close()
        files.append(out.getvalue())
    assert files[0] == files[1]
    old = io.BytesIO()
    g = ParquetSeriesWriter(
        old, BLOCK, DAY.start_ms, row_group_ms=4 * 3_600_000, value_type="double"
    )
    g.open(schema)
    g.write_batch(_batch(series, DAY.start_ms, DAY.end_ms))
    ref = g.close()
    new_t = pq.read_table(io.BytesIO(files[0]))
    old_t = pq.read_table(io.BytesIO(old.getvalue()))
    assert new_t.schema == old_t.schema
    for c in new_t.column_names:
        new_c, old_c = new_t[c].combine_chunks(), old_t[c].combine_chunks()
        if c not in ("timestamp", "value"):
            new_c, old_c = new_c.cast(pa.string()), old_c.cast(pa.string())
        assert new_c.equals(old_c), c
    assert pq.ParquetFile(io.BytesIO(files[0])).metadata.num_row_groups == 6  # 23 h / 4 h
    assert (res.rows, res.first_ms, res.last_ms) == (ref.rows, ref.first_ms, ref.last_ms)


def test_parquet_bytes_do_not_depend_on_the_query_windows() -> None:
    # a row group's rows arrive in several windows' arrays; the file is the same however
    # the day was cut (refusals split windows, the point budget sizes them)
    series = [
        ({**lab, "instance": f"{lab['instance']}-{rep}"}, pts)
        for rep in range(4)
        for lab, pts in _series()
    ]
    schema = SeriesSchema("m", KEYS)

    def run(cut: tuple[int, ...]) -> bytes:
        edges, t = [DAY.start_ms], DAY.start_ms
        for k in itertools.cycle(cut):
            t = min(t + k * BLOCK, DAY.end_ms)
            edges.append(t)
            if t == DAY.end_ms:
                break
        out = io.BytesIO()
        w = ParquetDayWriter(out, BLOCK, DAY.start_ms, 4 * 3_600_000)
        w.open(schema)
        for a, b in itertools.pairwise(edges):
            w.write(_columns(series, a, b))
        w.close()
        return out.getvalue()

    whole = run((276,))
    assert run((2,)) == whole and run((7, 3, 30)) == whole


def test_the_day_writers_do_not_load_pandas() -> None:
    """pandas (about 50 MB resident) is not what the writers need: some pyarrow calls load
    it when it is installed (a Python scalar argument, ``to_numpy`` with a copy)."""
    pytest.importorskip("pandas")
    code = """
import io, sys
import tests.unit.prometheus.test_columns as t
from dxt_core.records import SeriesSchema
for make in (lambda o: t.CsvDayWriter(o, t.TZ, t.BLOCK, t.DAY.start_ms),
             lambda o: t.ParquetDayWriter(o, t.BLOCK, t.DAY.start_ms, 4 * 3_600_000)):
    w = make(io.BytesIO())
    w.open(SeriesSchema("m", t.KEYS))
    w.write(t._columns(t._series(), t.DAY.start_ms, t.DAY.end_ms))
    w.close()
print("pandas" in sys.modules)
"""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False"], out.stderr
