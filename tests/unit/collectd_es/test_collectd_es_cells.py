"""Document -> cell logic of the TOKIO Time Series writer, and the correctness bar from the
saved pytokio sample (no server)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from dxt_core.backends.collectd_es.archive_day import export_window, saved_pages
from dxt_core.backends.collectd_es.source import (
    CollectdEsConnection,
    family_of,
    family_query,
    load_saved_pages,
    select_saved_hits,
)
from dxt_core.backends.collectd_es.tokio_hdf5 import (
    TimeGrid,
    TokioTimeSeriesBuilder,
    natural_key,
    read_tokio_dataset,
    write_tokio_hdf5,
)
from dxt_core.cli import main
from dxt_core.errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "pytokio"
SAMPLE_JSON = DATA / "sample_collectdes-full.json.gz"
SAMPLE_HDF5 = DATA / "sample_tokiots.hdf5"
T0 = dt.datetime(2017, 12, 13, 8, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(hours=1)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cpu_hit(host: str, t: dt.datetime, kind: str, value: float, n: int) -> dict:
    return {
        "_index": "cori-collectd-x",
        "_id": f"{host}-{kind}-{t.timestamp()}-{n}",
        "_source": {
            "@timestamp": iso(t),
            "hostname": host,
            "plugin": "cpu",
            "plugin_instance": str(n),
            "type_instance": kind,
            "value": value,
        },
    }


def disk_hit(host: str, dev: str, t: dt.datetime, read: float, write: float, n: int = 0) -> dict:
    return {
        "_index": "cori-collectd-x",
        "_id": f"{host}-{dev}-{t.timestamp()}-{n}",
        "_source": {
            "@timestamp": iso(t),
            "hostname": host,
            "plugin": "disk",
            "plugin_instance": dev,
            "collectd_type": "disk_octets",
            "read": read,
            "write": write,
        },
    }


class GivenPages:
    """A page provider that hands over the pages given, whatever is asked (a server that
    answers more than its query)."""

    where = "the pages given"

    def __init__(self, pages: list[list[dict]]) -> None:
        self.pages = pages

    def __call__(self, family, start, end, full, timestep):
        return iter(self.pages)


def assert_same_as_pytokio(path: Path) -> None:
    for name in ("datatargets/readrates", "datatargets/writerates"):
        cols, ours, _ = read_tokio_dataset(path, name)
        ref_cols, ref, _ = read_tokio_dataset(SAMPLE_HDF5, name)
        assert cols == ref_cols
        assert ours.shape == ref.shape == (360, 64)
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)
        # the same cells are missing (-0.0) and the same are a real 0.0
        assert np.array_equal(np.signbit(ours), np.signbit(ref))
        assert np.signbit(ref).sum() > 1000  # the sample does have missing cells
    with h5py.File(path) as ours, h5py.File(SAMPLE_HDF5) as ref:
        for key in ("start", "end", "version"):
            assert ours.attrs[key] == ref.attrs[key]
        assert np.array_equal(ours["datatargets/timestamps"][:], ref["datatargets/timestamps"][:])
        assert ours["datatargets/readrates"].shape == ref["datatargets/readrates"].shape


def test_correctness_bar_from_saved_input(tmp_path):
    out = tmp_path / "cori.hdf5"
    rc = main(
        [
            "extract",
            "collectd-es",
            "--input",
            str(SAMPLE_JSON),
            "2017-12-13T08:00:00",
            "2017-12-13T09:00:00",
            "--num-nodes",
            "16",
            "--ssds-per-node",
            "4",
            "--timestep",
            "10",
            "--families",
            "disk",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert_same_as_pytokio(out)
    assert [p.name for p in tmp_path.iterdir()] == ["cori.hdf5"]  # no temporary left


def test_jsonl_from_saved_input_keeps_every_hit(tmp_path):
    out = tmp_path / "hits.jsonl.gz"
    args = ["extract", "collectd-es", "--input", str(SAMPLE_JSON), "2017-12-13T08:00:00",
            "2017-12-13T09:00:00", "--format", "jsonl", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    first = out.read_bytes()
    lines = gzip.decompress(first).splitlines()
    saved = [h for page in json.loads(gzip.decompress(SAMPLE_JSON.read_bytes())) for h in page]
    assert len(lines) == len(saved) == 7038
    docs = [json.loads(line) for line in lines]
    assert all(set(d) == {"_index", "_id", "_source"} for d in docs)
    assert {d["_id"]: d["_source"] for d in docs} == {h["_id"]: h["_source"] for h in saved}
    assert main(args) == 0
    assert out.read_bytes() == first  # deterministic gzip


def test_cpu_is_averaged_over_the_cores_reported_in_each_step(tmp_path):
    t = T0
    hits = [
        # step 0: 4 cores report idle; step 1: only 2 do; step 2: nothing
        *[
            cpu_hit("bb1", t + dt.timedelta(seconds=1), "idle", v, n)
            for n, v in enumerate([90.0, 80.0, 70.0, 60.0])
        ],
        *[
            cpu_hit("bb1", t + dt.timedelta(seconds=12), "idle", v, n)
            for n, v in enumerate([50.0, 30.0])
        ],
        # user: 3 cores in step 0, 1 core in step 1
        *[
            cpu_hit("bb1", t + dt.timedelta(seconds=2), "user", v, n)
            for n, v in enumerate([1.0, 2.0, 6.0])
        ],
        cpu_hit("bb1", t + dt.timedelta(seconds=19), "user", 7.5, 0),
        # another host, system only, all idle values 100 -> load exactly 0.0
        cpu_hit("bb2", t, "system", 0.0, 0),
        cpu_hit("bb2", t, "idle", 100.0, 0),
    ]
    b = TokioTimeSeriesBuilder(["cpu"], TimeGrid.of(t, t + dt.timedelta(seconds=30), 10), 4)
    b.add_page(hits)
    out = tmp_path / "cpu.hdf5"
    write_tokio_hdf5(out, b)
    cols, load, attrs = read_tokio_dataset(out, "dataservers/cpuload")
    assert cols == ["bb1", "bb2"]
    assert attrs["units"] == "%"
    expect_load = np.array(
        [
            [np.mean([100 - v for v in (90, 80, 70, 60)]), 0.0],
            [np.mean([100 - v for v in (50, 30)]), -0.0],
            [-0.0, -0.0],
        ]
    )
    np.testing.assert_allclose(load, expect_load)
    assert np.array_equal(np.signbit(load), np.signbit(expect_load))
    _, user, _ = read_tokio_dataset(out, "dataservers/cpuuser")
    np.testing.assert_allclose(user[:, 0], [3.0, 7.5, -0.0])
    sys_cols, sys_, _ = read_tokio_dataset(out, "dataservers/cpusys")
    assert sys_cols == ["bb2"]
    assert sys_[0, 0] == 0.0 and not np.signbit(sys_[0, 0])  # a real zero, not missing
    with h5py.File(out) as f:
        assert f["dataservers"]["cpuload"].shape == (3, 4)  # num_nodes preallocated


def test_rearchiving_a_window_resets_its_rows_first(tmp_path):
    pages = load_saved_pages(SAMPLE_JSON)
    out = tmp_path / "f.hdf5"

    def write(start, end, keep=lambda h: True):
        chosen = [[h for h in p if keep(h)] for p in pages]
        b = TokioTimeSeriesBuilder(["disk"], TimeGrid.of(start, end, 10), 16)
        b.add_pages(select_saved_hits(chosen, "disk", start, end))
        return write_tokio_hdf5(out, b)

    write(T0, T1)
    _, full, _ = read_tokio_dataset(out, "datatargets/writerates")
    mid0, mid1 = T0 + dt.timedelta(minutes=20), T0 + dt.timedelta(minutes=30)
    # documents of bb4 vanished upstream: re-archiving 08:20-08:30 must not keep them
    res = write(mid0, mid1, keep=lambda h: h["_source"]["hostname"] != "bb4")
    assert res.window_rows == (120, 180) and not res.created
    cols, after, _ = read_tokio_dataset(out, "datatargets/writerates")
    bb4 = [i for i, c in enumerate(cols) if c.startswith("bb4:")]
    others = [i for i in range(64) if i not in bb4]
    assert np.all(np.signbit(after[120:180, bb4]) & (after[120:180, bb4] == 0))
    assert (~np.signbit(full[120:180, bb4])).sum() > 0  # there was data to reset
    np.testing.assert_array_equal(after[120:180, others], full[120:180, others])
    np.testing.assert_array_equal(after[:120], full[:120])
    np.testing.assert_array_equal(after[180:], full[180:])
    # re-archiving with all documents again gives the original file's values
    write(mid0, mid1)
    _, again, _ = read_tokio_dataset(out, "datatargets/writerates")
    assert np.array_equal(again, full) and np.array_equal(np.signbit(again), np.signbit(full))


def test_rearchiving_cpu_does_not_double_the_sums(tmp_path):
    t = T0
    hits = [cpu_hit("bb1", t, "idle", v, n) for n, v in enumerate([40.0, 60.0])]
    out = tmp_path / "cpu.hdf5"
    for _ in range(2):
        b = TokioTimeSeriesBuilder(["cpu"], TimeGrid.of(t, t + dt.timedelta(seconds=20), 10), 2)
        b.add_page(hits)
        write_tokio_hdf5(out, b)
    _, load, _ = read_tokio_dataset(out, "dataservers/cpuload")
    assert load[0, 0] == 50.0


def test_out_of_range_documents_are_counted_and_reported(tmp_path, caplog):
    hits = [
        disk_hit("bb1", "nvme0n1", T0 - dt.timedelta(seconds=1), 1, 2),  # before
        disk_hit("bb1", "nvme0n1", T0, 3, 4),
        disk_hit("bb1", "nvme0n1", T0 + dt.timedelta(seconds=59, milliseconds=999), 5, 6),
        disk_hit("bb1", "nvme0n1", T0 + dt.timedelta(seconds=60), 7, 8),  # end is exclusive
        disk_hit("bb1", "nvme0n1", T0 + dt.timedelta(hours=2), 9, 9),
    ]
    grid = TimeGrid.of(T0, T0 + dt.timedelta(minutes=1), 10)
    b = TokioTimeSeriesBuilder(["disk"], grid, 1)
    b.add_page(hits)
    assert (b.stats.documents, b.stats.inserted, b.stats.out_of_range) == (5, 2, 3)
    # the export reports them (log warning + summary)
    report = export_window(
        GivenPages([hits]),
        ["disk"],
        T0,
        T0 + dt.timedelta(minutes=1),
        hdf5_path=tmp_path / "x.hdf5",
        num_nodes=1,
    )
    assert report.build["out_of_range"] == 3
    assert "3 out of range" in report.summary()
    assert any("3 documents out of range" in r.getMessage() for r in caplog.records)
    _, reads, _ = read_tokio_dataset(tmp_path / "x.hdf5", "datatargets/readrates")
    assert reads[0, 0] == 3 and reads[5, 0] == 5 and np.signbit(reads[1:5, 0]).all()


def test_last_document_in_stream_order_wins_a_disk_cell():
    grid = TimeGrid.of(T0, T0 + dt.timedelta(seconds=10), 10)
    b = TokioTimeSeriesBuilder(["disk"], grid, 1)
    b.add_page([disk_hit("bb1", "nvme0n1", T0, 1, 1, 0), disk_hit("bb1", "nvme0n1", T0, 2, 2, 1)])
    b.add_page([disk_hit("bb1", "nvme0n1", T0 + dt.timedelta(seconds=5), 3, 3, 2),
                disk_hit("bb1", "nvme0n1", T0, 4, 4, 3)])  # fmt: skip
    (cols, values) = b.results()["datatargets/readrates"]
    assert cols == ["bb1:nvme0n1"] and values[0, 0] == 4


def test_append_a_later_window_when_the_file_range_covers_it(tmp_path):
    pages = load_saved_pages(SAMPLE_JSON)
    out = tmp_path / "day.hdf5"
    half = T0 + dt.timedelta(minutes=30)
    for s, e in ((T0, half), (half, T1)):
        export_window(
            saved_pages(pages, "bb", "sample"),
            ["disk"],
            s,
            e,
            hdf5_path=out,
            num_nodes=16,
            init_start=T0,
            init_end=T1,
        )
    assert_same_as_pytokio(out)


def test_window_outside_or_off_the_grid_is_a_clear_error(tmp_path):
    out = tmp_path / "f.hdf5"
    b = TokioTimeSeriesBuilder(["disk"], TimeGrid.of(T0, T1, 10), 1)
    b.add_page([disk_hit("bb1", "nvme0n1", T0, 1, 1)])
    write_tokio_hdf5(out, b)
    before = out.read_bytes()
    cases = [
        (TimeGrid.of(T1, T1 + dt.timedelta(hours=1), 10), "outside the range"),
        (TimeGrid.of(T0, T1, 5), "timestep of 10 s, not 5 s"),
        (TimeGrid.of(T0 + dt.timedelta(seconds=5), T1, 10), "not on the 10 s grid"),
    ]
    for grid, words in cases:
        b2 = TokioTimeSeriesBuilder(["disk"], grid, 1)
        with pytest.raises(ConfigError, match=words) as exc:
            write_tokio_hdf5(out, b2)
        assert str(out) in str(exc.value)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["f.hdf5"]


def test_more_columns_than_preallocated_is_a_clear_error():
    b = TokioTimeSeriesBuilder(["disk"], TimeGrid.of(T0, T1, 10), num_nodes=1, devices_per_server=1)
    with pytest.raises(ConfigError, match="--num-nodes"):
        b.add_page([disk_hit("bb1", "nvme0n1", T0, 1, 1), disk_hit("bb2", "nvme0n1", T0, 1, 1)])


def test_bad_input_files_name_the_file_and_place(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json: not JSON"):
        load_saved_pages(p)
    p.write_text(json.dumps({"hits": 1}))
    with pytest.raises(ConfigError, match="expected a list of pages"):
        load_saved_pages(p)
    p.write_text(json.dumps([[{"_id": "a", "_source": {}}], [{"_id": "b"}]]))
    with pytest.raises(ConfigError, match="page 1, hit 0 has no _source"):
        load_saved_pages(p)
    p.write_text(json.dumps([[{"_id": "a", "_source": {"plugin": "memory", "hostname": "bb1",
                                                      "@timestamp": "yesterday"}}]]))  # fmt: skip
    pages = load_saved_pages(p)
    with pytest.raises(ConfigError, match=r"page 0, hit 0 \(_id a\)"):
        list(select_saved_hits(pages, "memory", T0, T1, where=str(p)))


def test_family_queries_and_filters_match_pytokio():
    q = family_query("disk", T0, T1, "bb")
    must = q["constant_score"]["filter"]["bool"]["must"]
    assert must[0] == {
        "range": {
            "@timestamp": {"gte": 1513152000000, "lt": 1513155600000, "format": "epoch_millis"}
        }
    }
    assert {"prefix": {"hostname": "bb"}} in must
    assert {"regexp": {"collectd_type": "disk_(octets|ops)"}} in must
    assert {"term": {"plugin": "cpu"}} in family_query("cpu", T0, T1)["constant_score"]["filter"][
        "bool"
    ]["must"]
    assert (
        family_of({"plugin": "disk", "plugin_instance": "sda", "collectd_type": "disk_octets"})
        is None
    )
    assert family_of({"plugin": "cpu", "type_instance": "nice"}) is None
    assert family_of({"plugin": "memory", "type_instance": "used"}) == "memory"
    with pytest.raises(ConfigError, match="unknown collectd family"):
        family_query("gpu", T0, T1)
    assert sorted(["bb10:nvme0n1", "bb2:nvme1n1", "bb2:nvme0n1"], key=natural_key) == [
        "bb2:nvme0n1", "bb2:nvme1n1", "bb10:nvme0n1"]  # fmt: skip


def test_connection_keeps_credentials_out_of_urls_and_errors():
    c = CollectdEsConnection.from_env(
        "https://es.example.org:9200/",
        env={"PYTOKIO_ES_USER": "u", "PYTOKIO_ES_PASSWORD": "s3cr3t"},
    )
    assert (c.user, c.password) == ("u", "s3cr3t")
    assert c.safe_url == "https://es.example.org:9200" and "s3cr3t" not in repr(c)
    with pytest.raises(ConfigError) as exc:
        CollectdEsConnection("http://u:s3cr3t@es:9200")
    assert "s3cr3t" not in str(exc.value)
    with pytest.raises(ConfigError, match="go together"):
        CollectdEsConnection.from_env("http://es:9200", env={"PYTOKIO_ES_USER": "u"})


def test_cli_times_without_offset_are_utc_and_bad_times_are_explained(tmp_path, capsys):
    out = tmp_path / "x.hdf5"
    rc = main(["extract", "collectd-es", "--input", str(SAMPLE_JSON), "2017-12-13T09:00:00+01:00",
               "2017-12-13T09:00:00", "--num-nodes", "16", "--families", "disk", "--out", str(out)])  # fmt: skip
    assert rc == 0
    with h5py.File(out) as f:
        assert (f.attrs["start"], f.attrs["end"]) == (1513152000, 1513155600)
    rc = main(["extract", "collectd-es", "--input", str(SAMPLE_JSON), "13/12/2017", "2017-12-13",
               "--out", str(tmp_path / "y.hdf5")])  # fmt: skip
    assert rc == 2
    assert "is not ISO 8601" in capsys.readouterr().err
    assert not (tmp_path / "y.hdf5").exists()
    assert os.listdir(tmp_path) == ["x.hdf5"]


def test_a_sub_millisecond_timestamp_is_cut_to_its_millisecond_whatever_its_page():
    """Elasticsearch stores a date's milliseconds by truncation: 08:59:59.9996Z is
    08:59:59.999, inside [08:00, 09:00). Saved pages are parsed with NumPy when every time
    ends in Z and one by one otherwise (a ``+00:00`` neighbour): the same hit must land in
    the same window either way, as must a hit without ``sort`` in the HDF5 conversion."""
    late = "2017-12-13T08:59:59.9996Z"
    last_ms = int((T1 - dt.timedelta(milliseconds=1)).timestamp() * 1000)

    def page(*times: str) -> list[dict]:
        hits = []
        for i, t in enumerate(times):
            h = cpu_hit("bb1", T0, "user", 1.0, i)
            h["_id"], h["_source"]["@timestamp"] = f"h{i}", t
            hits.append(h)
        return hits

    half_ms = int((T0 + dt.timedelta(minutes=30)).timestamp() * 1000)
    alone = page(late)
    with_offset = page(late, "2017-12-13T08:30:00+00:00")
    for hits, expected in (
        (alone, [("h0", [last_ms])]),
        (with_offset, [("h0", [last_ms]), ("h1", [half_ms])]),
    ):
        inside = [h for p in select_saved_hits([hits], "cpu", T0, T1, "bb") for h in p]
        assert [(h["_id"], h["sort"]) for h in inside] == expected
        next_hour = T1 + dt.timedelta(hours=1)
        assert not [h for p in select_saved_hits([hits], "cpu", T1, next_hour, "bb") for h in p]
    # the conversion's own parser, for a hit that comes without sort values
    b = TokioTimeSeriesBuilder(["cpu"], TimeGrid.of(T0, T1, 10), 1)
    b.add_page([{k: v for k, v in h.items() if k != "sort"} for h in page(late)])
    assert (b.stats.inserted, b.stats.out_of_range) == (1, 0)
    assert b.results()["dataservers/cpuuser"][1][-1, 0] == 1.0


def test_what_a_killed_writer_of_the_file_left_is_removed_and_said(tmp_path, caplog):
    """An export killed while it wrote ``out.hdf5`` left ``.out.hdf5.<random>.tmp`` (the whole
    image), which no later run removed or named."""
    import subprocess
    import sys

    from dxt_core.procs import HOST_TAG

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    b = TokioTimeSeriesBuilder(["cpu"], TimeGrid.of(t, t + dt.timedelta(seconds=30), 10), 4)
    b.add_page([cpu_hit("bb1", t, "user", 1.0, 0)])
    out = tmp_path / "out.hdf5"
    left = tmp_path / f".out.hdf5.{HOST_TAG}.{gone}.x1y2.tmp"
    left.write_bytes(b"half an image")
    with caplog.at_level("WARNING"):
        write_tokio_hdf5(out, b)
    assert "removed 1 temporary file(s) that killed writers of it left" in caplog.text
    assert not left.exists() and out.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.hdf5"]


def test_a_file_pytokio_wrote_with_datasets_that_got_no_data_is_updated(tmp_path):
    """pytokio's archive_collectdes writes a dataset that got no data with ``columns =
    numpy.array([])``, an empty float64 attribute (tokio/connectors/hdf5.py): every file of
    a family the window had no documents of. dxt refused to update it ("attribute columns is
    not a list of names"), though docs/collectd_es.md says pytokio's own files are taken.
    The fixture is pytokio 0.13.0's own output for the sample hour (tests/data/pytokio)."""
    theirs = DATA / "archive_collectdes-0.13.0-output.hdf5"
    with h5py.File(theirs) as f:
        empty = f["dataservers/cpuload"].attrs["columns"]
        assert empty.dtype == np.float64 and empty.shape == (0,)  # as pytokio wrote it
    out = tmp_path / "theirs.hdf5"
    out.write_bytes(theirs.read_bytes())
    rc = main(["extract", "collectd-es", "--input", str(SAMPLE_JSON), "2017-12-13T08:30:00",
               "2017-12-13T09:00:00", "--num-nodes", "16", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert_same_as_pytokio(out)  # the disk datasets: the second half written again, the same
    with h5py.File(out) as f:
        assert f["dataservers/cpuload"].attrs["columns"].size == 0  # still no names, no data


def test_the_archived_json_lines_convert_to_hdf5_again(tmp_path, capsys):
    """Once the index has aged out the raw JSON Lines are the only copy: nothing read them
    back ("not JSON (unexpected content after document: line 2)"), so a lost HDF5 file, or
    one at another timestep, could not be made again. ``--input`` reads them."""
    window = ["2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16"]
    raw = tmp_path / "hits.jsonl.gz"
    assert main(["extract", "collectd-es", "--input", str(SAMPLE_JSON), *window,
                 "--format", "jsonl", "--out", str(raw)]) == 0  # fmt: skip
    out = tmp_path / "again.hdf5"
    assert main(["extract", "collectd-es", "--input", str(raw), *window, "--out", str(out)]) == 0
    assert_same_as_pytokio(out)
    plain = tmp_path / "hits.jsonl"
    plain.write_bytes(gzip.decompress(raw.read_bytes()))
    lines = plain.read_bytes().splitlines(keepends=True)
    assert len(lines) == 7038
    plain.write_bytes(b"".join(lines[:2]) + b"{broken\n" + b"".join(lines[3:]))
    capsys.readouterr()
    assert main(["extract", "collectd-es", "--input", str(plain), *window,
                 "--out", str(tmp_path / "x.hdf5")]) == 2  # fmt: skip
    assert f"{plain}: line 3: not JSON" in capsys.readouterr().err
    assert not (tmp_path / "x.hdf5").exists()


def test_json_lines_input_edges_are_named(tmp_path):
    """A search response after a blank line went to the JSON Lines reader ("line 2 has no
    _source object") instead of the whole-file reader's own words; a gzip whose deflate
    data is corrupt raised zlib.error, not a message naming the file."""
    p = tmp_path / "resp.json"
    p.write_text('\n{"took": 3, "hits": {"hits": []}}\n')
    with pytest.raises(ConfigError, match=r"top level is dict, expected a list of pages"):
        load_saved_pages(p)
    raw = tmp_path / "hits.jsonl.gz"
    body = gzip.compress(b"".join(json.dumps(cpu_hit("bb1", T0, "idle", 1.0, i)).encode()
                                  + b"\n" for i in range(2000)), mtime=0)  # fmt: skip
    broken = bytearray(body)
    for i in range(40, 60):  # inside the deflate stream
        broken[i] ^= 0xFF
    raw.write_bytes(bytes(broken))
    with pytest.raises(ConfigError, match=r"hits\.jsonl\.gz: (corrupt gzip|line \d+)"):
        load_saved_pages(raw)
