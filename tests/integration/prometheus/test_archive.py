"""Raw samples of whole local days from the real Prometheus 2.42 and VictoriaMetrics 1.79."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import time
from pathlib import Path

import pytest

from dxt_core.archive import Archive
from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.source import PrometheusSource
from dxt_core.errors import ConfigError, CountMismatch, QueryRejected
from dxt_core.windows import day_window
from tests.integration.prometheus import data
from tests.integration.prometheus.servers import ServerProcess

pytestmark = pytest.mark.integration

TEMP = CatalogEntry("node_temp_celsius", "node_temp_celsius")
JOBS = CatalogEntry("node_jobs_total", "node_jobs_total")


def source(server: ServerProcess, **kw: object) -> PrometheusSource:
    kw = {"time_zone": data.TIME_ZONE, **kw}
    return PrometheusSource(PrometheusConnection(server.url, **kw))  # type: ignore[arg-type]


def rows(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode().splitlines()


def test_detects_the_server(server: ServerProcess) -> None:
    with source(server) as src:
        info = src.server()
    assert info.kind == server.kind
    if server.kind == "prometheus":
        assert info.version.startswith("2.42") and not info.left_open
    else:
        # Debian's build sets no version (vm_app_version is absent, buildinfo empty)
        assert info.left_open


@pytest.mark.parametrize("day", [*data.SPRING, *data.AUTUMN], ids=str)
def test_a_day_holds_every_sample_of_its_local_day_once(
    server: ServerProcess, tmp_path: Path, day: dt.date
) -> None:
    archive = Archive(tmp_path)
    with source(server) as src:
        report = archive_prometheus_day(src, TEMP, day, archive)
    hours = {dt.date(2024, 3, 31): 23, dt.date(2024, 10, 27): 25}.get(day, 24)
    assert report.status == "archived"
    assert report.rows == data.expected_rows(TEMP.name, day) == 3 * hours * 240
    lines = rows(report.path)  # type: ignore[arg-type]
    assert lines[0] == "timestamp,value,name,instance,job,node,rack"
    stamps = sorted({line.split(",")[0] for line in lines[1:]})
    w = day_window(day, data.TIME_ZONE)
    # the first sample is the local midnight's, the last is 15 s before the next midnight
    assert len(stamps) == (w.end_ms - w.start_ms) // data.STEP_MS
    assert stamps[0].startswith(f"{day}T00:00:00.000")
    assert stamps[-1].startswith(f"{day}T23:59:45.000")
    manifest = json.loads(report.manifest.read_text())
    assert manifest["source_count"]["count"] == report.rows
    assert "count_over_time(node_temp_celsius[" in manifest["source_count"]["method"]
    # the count's time is shown in the day's zone: the last millisecond of the local day
    assert f"({day}T23:59:59.999+0" in manifest["source_count"]["method"]
    assert manifest["day_definition"]["time_zone"] == data.TIME_ZONE
    assert manifest["server"]["kind"] == server.kind
    assert manifest["dropped_outside_window"] == 0


def test_the_midnight_sample_is_in_exactly_one_day(server: ServerProcess, tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    with source(server) as src:
        a = archive_prometheus_day(src, JOBS, dt.date(2024, 3, 30), archive)
        b = archive_prometheus_day(src, JOBS, dt.date(2024, 3, 31), archive)
    midnight = "2024-03-31T00:00:00.000+01:00"
    in_a = [line for line in rows(a.path) if line.startswith(midnight)]  # type: ignore[arg-type]
    in_b = [line for line in rows(b.path) if line.startswith(midnight)]  # type: ignore[arg-type]
    assert (len(in_a), len(in_b)) == (0, 2)
    # whole values read as numbers without ".0", from both servers
    assert in_b[0].split(",")[1].isdigit()


def test_both_servers_give_the_same_bytes(
    prometheus: ServerProcess, victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    for fmt in ("csv", "parquet"):
        files = []
        for s in (prometheus, victoriametrics):
            with source(s) as src:
                for entry in (TEMP, JOBS):
                    r = archive_prometheus_day(
                        src, entry, dt.date(2024, 3, 31), Archive(tmp_path / s.kind / fmt), fmt=fmt
                    )
                    files.append(r.path.read_bytes())  # type: ignore[union-attr]
        assert files[:2] == files[2:], fmt


def test_days_of_another_zone_are_refused_in_the_same_archive(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The zone that cuts the days is recorded at the archive's root: a day cut in another
    zone would hold samples of the days beside it, so it is refused, naming both zones."""
    archive = Archive(tmp_path)
    with source(server) as src:
        archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), archive)
    with source(server, time_zone="UTC") as src, pytest.raises(ConfigError) as err:
        archive_prometheus_day(src, TEMP, dt.date(2024, 3, 31), archive)
    assert data.TIME_ZONE in str(err.value) and "UTC" in str(err.value)
    assert not (tmp_path / "prometheus/node_temp_celsius/2024-03-31.csv.gz").exists()


def test_the_columns_are_those_of_the_series_with_samples_that_day(
    prom_blocks: Path, tmp_path: Path
) -> None:
    """Both servers list more series than a day holds (/api/v1/series: whole blocks on
    Prometheus, UTC index days on VictoriaMetrics): a series whose one sample is in the
    evening before the day adds no column to the day, and both servers give the same bytes."""
    from tests.integration.prometheus import servers

    evening = (
        int(dt.datetime(2024, 3, 30, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=1))).timestamp())
        * 1000
    )
    a = {"__name__": "node_edge_celsius", "instance": "a:9100", "job": "edge"}
    b = {**a, "instance": "b:9100", "room": "b2"}
    steady = [(evening + i * data.STEP_MS, 21.0 + i % 7) for i in range(-240, 1200)]
    written = [(a, steady), (b, [(evening, 30.5)])]
    prom = servers.start_prometheus(
        tmp_path / "p", prom_blocks, servers.WRITABLE_FLAGS, config_extra=servers.WRITABLE_CONFIG
    )
    vm = servers.start_victoriametrics(tmp_path / "vm", load=False)
    edge = CatalogEntry("node_edge_celsius", "node_edge_celsius")
    try:
        servers.remote_write(prom.url, written)
        servers.vm_import(vm.url, written)
        files = {}
        for s in (prom, vm):
            for day in (dt.date(2024, 3, 30), dt.date(2024, 3, 31)):
                with source(s) as src:
                    r = archive_prometheus_day(src, edge, day, Archive(tmp_path / s.kind))
                files[s.kind, day] = r.path.read_bytes()  # type: ignore[union-attr]
    finally:
        prom.stop()
        vm.stop()
    for kind in ("prometheus", "victoriametrics"):
        day31 = gzip.decompress(files[kind, dt.date(2024, 3, 31)]).decode().splitlines()
        assert day31[0] == "timestamp,value,name,instance,job", kind
        day30 = gzip.decompress(files[kind, dt.date(2024, 3, 30)]).decode().splitlines()
        assert day30[0] == "timestamp,value,name,instance,job,room", kind
        assert day30[-1].startswith("2024-03-30T23:59:45.000+01:00"), kind
    assert (
        files["prometheus", dt.date(2024, 3, 31)] == files["victoriametrics", dt.date(2024, 3, 31)]
    )
    assert (
        files["prometheus", dt.date(2024, 3, 30)] == files["victoriametrics", dt.date(2024, 3, 30)]
    )


def test_staleness_markers_are_not_samples_on_either_server(
    prom_blocks: Path, tmp_path: Path
) -> None:
    """A series that ends (a job over, a target gone) gets a staleness marker from Prometheus
    and vmagent. VictoriaMetrics exports it as a NaN (null) that its count_over_time does not
    count: every day holding one failed ("read 27 points, but the source counts 24"), on
    every rerun. It is left out, as Prometheus' range selection leaves it out, and said."""
    import struct

    import httpx

    from tests.integration.prometheus import servers

    stale = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]  # value.StaleNaN
    t0 = int(dt.datetime(2024, 4, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))).timestamp())
    points = [(t0 * 1000 + i * 60_000, stale if i % 10 == 9 else float(i)) for i in range(30)]
    written = [({"__name__": "node_gone_total", "instance": "a:9100", "job": "gone"}, points)]
    prom = servers.start_prometheus(
        tmp_path / "p", prom_blocks, servers.WRITABLE_FLAGS, config_extra=servers.WRITABLE_CONFIG
    )
    vm = servers.start_victoriametrics(tmp_path / "vm", load=False)
    gone = CatalogEntry("node_gone_total", "node_gone_total")
    files, manifests = {}, {}
    try:
        for s in (prom, vm):
            servers.remote_write(s.url, written)
        httpx.get(vm.url + "/internal/force_flush", timeout=30).raise_for_status()
        for s in (prom, vm):
            with source(s) as src:
                r = archive_prometheus_day(
                    src, gone, dt.date(2024, 4, 1), Archive(tmp_path / s.kind)
                )
            assert r.status == "archived" and r.rows == 27, (s.kind, r)
            files[s.kind] = r.path.read_bytes()  # type: ignore[union-attr]
            manifests[s.kind] = json.loads(r.path.with_name("2024-04-01.manifest.json").read_text())  # type: ignore[union-attr]
    finally:
        prom.stop()
        vm.stop()
    assert files["prometheus"] == files["victoriametrics"]
    assert manifests["victoriametrics"]["stale_markers_left_out"] == 3
    assert "stale_markers_left_out" not in manifests["prometheus"]
    rows = gzip.decompress(files["victoriametrics"]).decode().splitlines()
    assert len(rows) == 28 and not any(",nan," in r for r in rows)


def test_a_server_taken_for_another_kind_fails_its_count_naming_the_flavor(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """VictoriaMetrics named "prometheus" (a proxy that hides its kind could do the same):
    its range ends are read as Prometheus 2's, so the count differs from the rows; the error
    says which kind the server was taken for and how to name it, and nothing is written."""
    with source(victoriametrics, flavor="prometheus") as src, pytest.raises(CountMismatch) as err:
        archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), Archive(tmp_path))
    assert "the server was taken for Prometheus" in str(err.value)
    assert "(named by the flavor setting): if it is another kind, name it (--flavor" in str(
        err.value
    )
    assert not list(tmp_path.rglob("*.csv.gz"))


def test_range_ends_named_by_the_connection_win_over_the_version(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """The same server taken for Prometheus (version unknown: a proxy hiding buildinfo) is
    counted right once the connection says its range ends; said wrong, the count fails and
    says which setting to change."""
    day = dt.date(2024, 4, 1)
    with source(victoriametrics, flavor="prometheus", range_ends="left-open") as src:
        report = archive_prometheus_day(src, TEMP, day, Archive(tmp_path / "ok"))
        assert src.server().describe().endswith("(range ends left-open)")
    assert report.status == "archived" and report.rows == data.expected_rows(TEMP.name, day)
    with source(victoriametrics, range_ends="closed") as src, pytest.raises(CountMismatch) as e:
        archive_prometheus_day(src, TEMP, day, Archive(tmp_path / "bad"))
    assert "(--range-ends, the range_ends extra)" in str(e.value)


def test_rerun_is_byte_identical(server: ServerProcess, tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    with source(server) as src:
        first = archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), archive)
        before = first.path.read_bytes()  # type: ignore[union-attr]
        again = archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), archive)
    assert again.path.read_bytes() == before  # type: ignore[union-attr]


def test_a_day_without_samples_is_empty_with_a_zero_count(
    server: ServerProcess, tmp_path: Path
) -> None:
    with source(server) as src:
        report = archive_prometheus_day(src, TEMP, dt.date(2024, 6, 1), Archive(tmp_path))
    assert report.status == "empty"
    manifest = json.loads(report.manifest.read_text())
    assert manifest["source_count"]["count"] == 0


def test_a_local_day_of_listed_series_without_samples_is_empty(tmp_path: Path) -> None:
    """VictoriaMetrics indexes series by UTC date: a local day east of UTC spans two of them,
    so it lists a series whose samples are all earlier on the first one, then exports an
    empty body. The day is empty with a zero count (it failed with an IndexError)."""
    from tests.integration.prometheus import servers

    noon = int(dt.datetime(2024, 3, 30, 12, tzinfo=dt.UTC).timestamp()) * 1000
    series = {"__name__": "node_gone_celsius", "instance": "a:9100"}
    vm = servers.start_victoriametrics(tmp_path / "vm", load=False)
    try:
        servers.vm_import(vm.url, [(series, [(noon + i * data.STEP_MS, 20.5) for i in range(8)])])
        with source(vm) as src:
            gone = CatalogEntry("node_gone_celsius", "node_gone_celsius")
            # 2024-03-31 in Rome begins at 2024-03-30T23:00Z: the series' UTC date
            report = archive_prometheus_day(src, gone, dt.date(2024, 3, 31), Archive(tmp_path))
    finally:
        vm.stop()
    assert report.status == "empty", report
    assert json.loads(report.manifest.read_text())["source_count"]["count"] == 0


def test_a_label_called_name_gets_a_column_of_its_own(tmp_path: Path) -> None:
    """cAdvisor's ``container_*`` and systemd's unit metrics carry a label ``name``: it is
    written as ``exported_name`` (the file had two ``name`` columns: pandas renamed one,
    Arrow refused the Parquet file, ``dxt publish`` failed)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from tests.integration.prometheus import servers

    t0 = int(dt.datetime(2024, 3, 30, 12, tzinfo=dt.UTC).timestamp()) * 1000
    series = {"__name__": "container_memory_bytes", "name": "web", "image": "nginx"}
    vm = servers.start_victoriametrics(tmp_path / "vm", load=False)
    mem = CatalogEntry("container_memory_bytes", "container_memory_bytes")
    try:
        servers.vm_import(vm.url, [(series, [(t0 + i * data.STEP_MS, 1e6 + i) for i in range(4)])])
        with source(vm) as src:
            day = dt.date(2024, 3, 30)
            csv_day = archive_prometheus_day(src, mem, day, Archive(tmp_path / "csv"))
            pq_day = archive_prometheus_day(src, mem, day, Archive(tmp_path / "pq"), fmt="parquet")
    finally:
        vm.stop()
    columns = ["timestamp", "value", "name", "image", "exported_name"]
    frame = pd.read_csv(csv_day.path)
    assert list(frame.columns) == columns
    assert set(frame["name"]) == {"container_memory_bytes"} and set(frame["exported_name"]) == {
        "web"
    }
    table = pq.read_table(pq_day.path)
    assert table.column_names == columns and len(table) == 4
    assert {str(v) for v in table.column("exported_name").to_pylist()} == {"web"}


def test_a_misspelt_metric_names_the_closest_ones(server: ServerProcess, tmp_path: Path) -> None:
    with source(server) as src, pytest.raises(QueryRejected) as err:
        archive_prometheus_day(
            src,
            CatalogEntry("node_temp_celcius", "node_temp_celcius"),
            dt.date(2024, 3, 31),
            Archive(tmp_path),
        )
    assert "node_temp_celsius" in str(err.value)


def test_a_selector_unit_takes_several_metrics(server: ServerProcess, tmp_path: Path) -> None:
    entry = CatalogEntry("node1", '{instance="n1:9100"}')
    with source(server) as src:
        report = archive_prometheus_day(src, entry, dt.date(2024, 4, 1), Archive(tmp_path))
    lines = rows(report.path)  # type: ignore[arg-type]
    assert lines[0] == "timestamp,value,name,instance,job,node"
    names = {line.split(",")[2] for line in lines[1:]}
    assert names == {"node_jobs_total", "node_temp_celsius", "node_temp_max_celsius"}
    assert report.rows == 3 * 24 * 240
    # the two temperatures share their labels: counted one metric name at a time (a
    # count_over_time of both is refused by both servers: one label set twice)
    manifest = json.loads(report.manifest.read_text())
    assert manifest["source_count"]["count"] == report.rows
    assert "asked per metric name (3)" in manifest["source_count"]["method"]


def test_a_selector_unit_with_a_name_regex_after_another_label_counts_each_name(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Counted one name at a time, the name matcher goes first: VictoriaMetrics 1.79 lists
    and counts nothing for ``{job="node",__name__=~"a|b",__name__=~"a"}`` (measured), and
    the day failed its count there."""
    entry = CatalogEntry(
        "temps", '{job="node",__name__=~"node_temp_celsius|node_temp_max_celsius"}'
    )
    day = dt.date(2024, 4, 1)
    with source(server) as src:
        report = archive_prometheus_day(src, entry, day, Archive(tmp_path))
    expected = data.expected_rows("node_temp_celsius", day) + data.expected_rows(
        "node_temp_max_celsius", day
    )
    assert report.rows == expected
    manifest = json.loads(report.manifest.read_text())
    assert manifest["source_count"]["count"] == expected
    assert "asked per metric name (2)" in manifest["source_count"]["method"]


def test_parquet_reads_back(server: ServerProcess, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    with source(server) as src:
        report = archive_prometheus_day(
            src, TEMP, dt.date(2024, 10, 27), Archive(tmp_path), fmt="parquet"
        )
    table = pq.read_table(io.BytesIO(report.path.read_bytes()))  # type: ignore[union-attr]
    assert table.num_rows == 3 * 25 * 240
    assert table.column_names == ["timestamp", "value", "name", "instance", "job", "node", "rack"]
    assert str(table.schema.field("value").type) == "double"


def test_a_rerun_with_fewer_samples_keeps_the_archive(tmp_path: Path) -> None:
    """Never shrink: VictoriaMetrics deletes a series (its admin API), the rerun reads fewer
    rows, and the archived day stays as it was."""
    import httpx

    from dxt_core.errors import SourceShrank
    from tests.integration.prometheus import servers

    vm = servers.start_victoriametrics(tmp_path / "vm")
    try:
        archive = Archive(tmp_path / "archive")
        with source(vm) as src:
            first = archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), archive)
        kept = first.path.read_bytes()  # type: ignore[union-attr]
        r = httpx.post(
            vm.url + "/api/v1/admin/tsdb/delete_series",
            params={"match[]": 'node_temp_celsius{node="n3"}'},
        )
        r.raise_for_status()
        with source(vm) as src, pytest.raises(SourceShrank) as err:
            archive_prometheus_day(src, TEMP, dt.date(2024, 4, 1), archive)
        assert err.value.archive_rows == 3 * 24 * 240
        assert err.value.source_rows == 2 * 24 * 240
        assert first.path.read_bytes() == kept  # type: ignore[union-attr]
    finally:
        vm.stop()


@pytest.mark.slow
def test_windows_in_flight_by_server_give_the_same_bytes(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prometheus gets two windows asked for at once (its engine evaluates a query on one
    core), VictoriaMetrics one; an explicit number wins. Small windows make many of them;
    the files are the same bytes whatever the number in flight."""
    import threading
    import time

    from dxt_core.backends.prometheus.source import WindowPolicy

    asking, most = 0, 0
    lock = threading.Lock()
    real_ask = PrometheusSource.ask

    def ask(self, *args, **kwargs):  # the real request, counted while it is on its way
        nonlocal asking, most
        with lock:
            asking += 1
            most = max(most, asking)
        try:
            time.sleep(0.03)  # the server's time, made long enough to overlap for sure
            return real_ask(self, *args, **kwargs)
        finally:
            with lock:
                asking -= 1

    monkeypatch.setattr(PrometheusSource, "ask", ask)
    got = {}
    # (the policy's number, the connection's extra): the policy wins, then the connection
    for case, (ahead, extra) in enumerate([(0, 0), (1, 0), (3, 0), (0, 3), (1, 3)]):
        most = 0
        conn = PrometheusConnection(server.url, time_zone=data.TIME_ZONE, in_flight=extra)
        policy = WindowPolicy(initial_s=900, target_points=1, min_s=900, in_flight=ahead)
        with PrometheusSource(conn, windows=policy) as src:
            r = archive_prometheus_day(
                src, TEMP, dt.date(2024, 4, 1), Archive(tmp_path / str(case)), fmt="csv"
            )
        assert r.stats.requests > 20, r.stats  # many windows (15-minute ones), each counted
        got[ahead, extra] = (most, r.path.read_bytes())  # type: ignore[union-attr]
    assert got[0, 0][0] == (2 if server.kind == "prometheus" else 1)
    assert got[1, 0][0] == 1 and got[3, 0][0] == 3
    assert got[0, 3][0] == 3 and got[1, 3][0] == 1
    assert len({b for _, b in got.values()}) == 1


def test_answers_gzip_or_as_they_are_give_the_same_file(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``compression``: the real servers' gzip answers and their plain ones (what ``auto``
    asks of a server on loopback) archive to the same bytes."""
    day = dt.date(2024, 4, 1)
    got = {}
    for mode in ("gzip", "none", "auto"):
        with source(server, compression=mode) as src:
            assert src.compressed is (mode == "gzip")  # the tests' servers: loopback
            r = archive_prometheus_day(src, TEMP, day, Archive(tmp_path / mode))
        assert r.rows == data.expected_rows(TEMP.name, day)
        got[mode] = r.path.read_bytes()  # type: ignore[union-attr]
    assert got["gzip"] == got["none"] == got["auto"]


def test_a_split_by_label_values_with_a_newline_is_a_query_the_server_parses(
    server: ServerProcess,
) -> None:
    """A label value may hold a newline; the split's matcher escapes it (a raw one inside
    "..." is a PromQL parse error on both servers)."""
    from dxt_core.backends.prometheus.promql import with_matcher
    from dxt_core.http import RequestStats

    day = day_window(dt.date(2024, 4, 1), data.TIME_ZONE)
    with source(server) as src:
        narrowed = with_matcher("node_temp_celsius", "node", ["n1\nfake", "n1"])
        n, _ = src.count(narrowed, day, RequestStats())
    assert n == 24 * 240  # n1's day: the newline alternative matches nothing


def test_a_count_that_ends_a_few_seconds_ago_counts_to_its_end(
    victoriametrics: ServerProcess,
) -> None:
    """VictoriaMetrics moves a query time within 30 s of now to now - 30 s unless asked
    with nocache=1: a window just over would be counted short of its samples."""
    from dxt_core.http import RequestStats
    from dxt_core.windows import Window, from_ms
    from tests.integration.prometheus.servers import vm_import

    now = int(time.time() * 1000)
    end = now - 2_000
    start = end - 60_000
    samples = [(t, 1.0) for t in range(start, end, 1_000)]  # one a second, 60 in all
    vm_import(victoriametrics.url, [({"__name__": "dxt_recent", "job": "t"}, samples)])
    window = Window(from_ms(start, dt.UTC), from_ms(end, dt.UTC))
    with source(victoriametrics) as src:
        n, _ = src.count("dxt_recent", window, RequestStats())
    assert n == len(samples) == 60


def _absent_hosts(n: int) -> CatalogEntry:
    """node_temp_celsius narrowed by ``n`` instances it does not have: the same series."""
    absent = "|".join(f"host-{i:05d}.example.org:9100" for i in range(n))
    return CatalogEntry("temps", f'node_temp_celsius{{instance!~"{absent}"}}')


def _same_day_as_temp(server: ServerProcess, entry: CatalogEntry, tmp_path: Path) -> None:
    day = dt.date(2024, 4, 1)
    with source(server) as src:
        long = archive_prometheus_day(src, entry, day, Archive(tmp_path / "long"))
        short = archive_prometheus_day(src, TEMP, day, Archive(tmp_path / "short"))
    assert long.rows == short.rows == data.expected_rows("node_temp_celsius", day)
    assert rows(long.path) == rows(short.path)  # type: ignore[arg-type]


def test_a_selector_too_long_for_a_url_is_sent_as_a_form(
    prometheus: ServerProcess, tmp_path: Path
) -> None:
    """A split into thousands of label values, or a long catalog selector, makes queries
    longer than a URL may be (httpx refuses a query over 64 KiB; proxies often 8 KiB): they
    are sent as POST forms, which both servers read. Before, the day failed in the client
    (httpx: "URL component 'query' too long")."""
    entry = _absent_hosts(4000)
    assert len(entry.selector) > 100_000
    _same_day_as_temp(prometheus, entry, tmp_path)


def test_victoriametrics_reads_long_selectors_as_forms_up_to_its_query_length(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """VictoriaMetrics reads a 12 KB selector from a form (the count, the series list, the
    export: all POST past 4 KB); a count query over ``-search.maxQueryLen`` (16 KB by default)
    it refuses, and the error names that setting without quoting the whole selector."""
    entry = _absent_hosts(400)
    assert 4096 < len(entry.selector) < 16_384
    _same_day_as_temp(victoriametrics, entry, tmp_path)
    with source(victoriametrics) as src, pytest.raises(QueryRejected) as e:
        archive_prometheus_day(src, _absent_hosts(4000), dt.date(2024, 4, 1), Archive(tmp_path))
    assert "-search.maxQueryLen" in str(e.value) and len(str(e.value)) < 1500


def test_a_source_lets_go_of_earlier_days_series_past_its_bound(
    victoriametrics: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoded labels of every series a source saw were kept for the whole run (a CLI
    run over months of a churning metric grew without bound); past the bound, a new day
    starts from an empty table (here the bound is 0: a day keeps twice its own listing)."""
    from dxt_core.backends.prometheus import source as source_module

    monkeypatch.setattr(source_module, "LABEL_CACHE_SERIES", 0)
    day = dt.date(2024, 4, 1)
    with source(victoriametrics) as src:
        archive_prometheus_day(src, TEMP, day, Archive(tmp_path))  # 3 series
        assert len(src._label_cache) == 3
        one = CatalogEntry("node_temp_max_celsius", "node_temp_max_celsius")
        archive_prometheus_day(src, one, day, Archive(tmp_path))  # 1 series: 3 > 2, let go
        assert len(src._label_cache) == 1
