"""The servers' own limits, provoked on the real servers started with small values: the
archive splits by time, then by series, and still writes every sample once."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dxt_core.archive import Archive
from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.policy import too_large
from dxt_core.backends.prometheus.source import PrometheusSource, WindowPolicy
from dxt_core.errors import WindowTooLarge
from dxt_core.windows import Window
from tests.integration.prometheus import data, servers
from tests.integration.prometheus.servers import ServerProcess

pytestmark = pytest.mark.integration

TEMP = CatalogEntry("node_temp_celsius", "node_temp_celsius")
DAY = dt.date(2024, 3, 31)  # 23 hours: 3 series x 5,520 samples
WHOLE_DAY = WindowPolicy(initial_s=86_400, min_s=300, max_s=90_000, target_points=10**9)
#: One-hour windows at a one-hour floor (3 series x 240 samples). VictoriaMetrics 1.79 checks
#: -search.maxUniqueTimeseries only when its tag-filters cache misses, and keys that cache by
#: the filters and the UTC dates of the range (lib/storage/index_db.go ``searchTSIDs``,
#: ``marshalTagFiltersKey``); the archive's /api/v1/series of the whole day (UTC dates
#: 03-30..03-31) fills it, so a whole-day export hits it and passes. The first hour of the
#: day (23:00-24:00 UTC on 03-30) has other dates: a miss, checked, refused.
HOURS = WindowPolicy(initial_s=3600, min_s=3600, max_s=90_000, target_points=3 * 240)
#: The whole day at once, rows in the same one-hour blocks (the same bytes as HOURS')
WHOLE_DAY_HOUR_BLOCKS = WindowPolicy(initial_s=86_400, min_s=3600, target_points=10**9)


@pytest.fixture(scope="module")
def prom_small(
    tmp_path_factory: pytest.TempPathFactory, prom_blocks: Path
) -> Iterator[ServerProcess]:
    # 3 series x 300 s = 60 samples > 45 >= 2 series x 21: the floor window needs a split
    s = servers.start_prometheus(
        tmp_path_factory.mktemp("prom-small"), prom_blocks, ["--query.max-samples=45"]
    )
    yield s
    s.stop()


def _vm(factory: pytest.TempPathFactory, name: str, *flags: str) -> Iterator[ServerProcess]:
    """A VictoriaMetrics of its own with the test data and these limits."""
    s = servers.start_victoriametrics(factory.mktemp(name), list(flags))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def vm_series(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _vm(
        tmp_path_factory,
        "vm-series",
        "-search.maxUniqueTimeseries=2",
        "-search.maxExportSeries=2",
    )


@pytest.fixture(scope="module")
def vm_listing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # node_temp_celsius has 3 series: its listing over a day is refused (measured on 1.79.5:
    # 422 "... cannot find metric names: error when searching tsids: the number of matching
    # timeseries exceeds 2 ...")
    yield from _vm(tmp_path_factory, "vm-listing", "-search.maxSeries=2")


@pytest.fixture(scope="module")
def vm_export_duration(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # VictoriaMetrics' deadlines count whole seconds (app/vmselect/searchutils/searchutils.go
    # ``NewDeadline``, ``Exceeded``: now in seconds > start + timeout in seconds), so a small
    # positive limit refuses only an export that spans a second boundary; a negative one puts
    # the deadline in the past, and every export is refused before it starts
    # (app/vmselect/netstorage/netstorage.go: "timeout exceeded before starting the query
    # processing"), always, as a slow export would be
    yield from _vm(tmp_path_factory, "vm-export-duration", "-search.maxExportDuration=-10s")


@pytest.fixture(scope="module")
def vm_samples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _vm(tmp_path_factory, "vm-samples", "-search.maxSamplesPerQuery=20000")


def _archive(
    server: ServerProcess, tmp_path: Path, windows: WindowPolicy = WHOLE_DAY
) -> tuple[object, dict[str, object]]:
    conn = PrometheusConnection(server.url, time_zone=data.TIME_ZONE)
    with PrometheusSource(conn, windows=windows) as src:
        report = archive_prometheus_day(src, TEMP, DAY, Archive(tmp_path))
    return report, json.loads(report.manifest.read_text())


def test_prometheus_max_samples_refusal_is_read_as_too_large(prom_small: ServerProcess) -> None:
    r = httpx.get(
        prom_small.url + "/api/v1/query",
        params={"query": "node_temp_celsius[1h]", "time": "1711922400"},
    )
    # measured: 422 {"status":"error","errorType":"execution","error":"query processing
    # would load too many samples into memory in query execution"}
    assert r.status_code == 422
    assert "query processing would load too many samples into memory" in r.text
    assert too_large(r.status_code, r.content)


@pytest.mark.parametrize(
    # prom_small (a real Prometheus, getfixturevalue below): 5-13 s measured here
    "name",
    [pytest.param("prom_small", marks=pytest.mark.slow), "vm_series", "vm_samples"],
)
def test_a_refused_day_is_split_and_complete(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server: ServerProcess = request.getfixturevalue(name)
    report, manifest = _archive(server, tmp_path, HOURS if name == "vm_series" else WHOLE_DAY)
    assert report.rows == 3 * 23 * 240  # type: ignore[attr-defined]
    assert manifest["source_count"]["count"] == report.rows  # type: ignore[attr-defined,index]
    assert manifest["requests"]["splits"] > 0  # type: ignore[index]


def test_a_day_split_by_a_dotted_label_name_on_victoriametrics(
    vm_samples: ServerProcess, tmp_path: Path
) -> None:
    """VictoriaMetrics holds label names such as ``k8s.pod`` (OpenTelemetry's), as it was
    sent them. A day split by such a label was asked with the quoted form
    ``{"k8s.pod"=~"p1"}``, which VictoriaMetrics 1.79 refuses (422: unexpected token): the
    day failed for good. MetricsQL takes the name with its dot escaped."""
    from dxt_core.windows import day_window

    day = dt.date(2024, 4, 2)
    window = day_window(day, data.TIME_ZONE)
    step = 10_000  # 3 series x 8,640 samples: over the server's 20,000, each under it
    written = [
        (
            {"__name__": "hpc_pod_cpu", "k8s.pod": pod, "job": "k8s"},
            [(t, float(i % 97)) for i, t in enumerate(range(window.start_ms, window.end_ms, step))],
        )
        for pod in ("p1", "p2", "p3")
    ]
    servers.vm_import(vm_samples.url, written)
    one_day = WindowPolicy(initial_s=86_400, min_s=86_400, max_s=90_000, target_points=10**9)
    conn = PrometheusConnection(vm_samples.url, time_zone=data.TIME_ZONE)
    with PrometheusSource(conn, windows=one_day) as src:
        entry = CatalogEntry("hpc_pod_cpu", "hpc_pod_cpu")
        report = archive_prometheus_day(src, entry, day, Archive(tmp_path))
    assert report.rows == 3 * 8640 and report.stats.splits > 0, report
    header = gzip.decompress(report.path.read_bytes()).split(b"\n", 1)[0]  # type: ignore[union-attr]
    assert header == b"timestamp,value,name,job,k8s.pod"


def test_victoriametrics_unique_series_limit_splits_by_series(
    vm_series: ServerProcess, tmp_path: Path
) -> None:
    # the whole day hits the cache the series listing filled (see HOURS): no refusal at all;
    # the first hour misses it and is refused until its series are split (3 > 2)
    whole, _ = _archive(vm_series, tmp_path / "whole", WHOLE_DAY_HOUR_BLOCKS)
    hours, _ = _archive(vm_series, tmp_path / "hours", HOURS)
    assert whole.stats.splits == 0 and whole.rows == hours.rows  # type: ignore[attr-defined]
    assert hours.stats.splits > 0  # type: ignore[attr-defined]
    assert [m.name for m in (tmp_path / "hours").rglob("*.csv.gz")] == ["2024-03-31.csv.gz"]
    assert (
        tmp_path / "whole" / "prometheus" / "node_temp_celsius" / "2024-03-31.csv.gz"
    ).read_bytes() == (
        tmp_path / "hours" / "prometheus" / "node_temp_celsius" / "2024-03-31.csv.gz"
    ).read_bytes()


def test_a_refused_series_listing_is_split_by_label_values(
    vm_listing: ServerProcess, victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    params = {"match[]": "node_temp_celsius", "start": "1711839600", "end": "1711922399.999"}
    r = httpx.get(vm_listing.url + "/api/v1/series", params=params)
    assert r.status_code == 422 and "the number of matching timeseries exceeds 2" in r.text
    assert too_large(r.status_code, r.content)
    listed, _ = _archive(vm_listing, tmp_path / "listed")
    whole, _ = _archive(victoriametrics, tmp_path / "whole")
    assert listed.rows == whole.rows == 3 * 23 * 240  # type: ignore[attr-defined]
    assert listed.stats.splits > 0 == whole.stats.splits  # type: ignore[attr-defined]
    day = Path("prometheus", "node_temp_celsius", "2024-03-31.csv.gz")
    assert (tmp_path / "listed" / day).read_bytes() == (tmp_path / "whole" / day).read_bytes()
    # a selector unit of two metric names (4 series): split too, every series listed once
    conn = PrometheusConnection(vm_listing.url, time_zone=data.TIME_ZONE)
    with PrometheusSource(conn, windows=WHOLE_DAY) as src:
        window = Window(
            dt.datetime(2024, 3, 31, tzinfo=src.tz), dt.datetime(2024, 4, 1, tzinfo=src.tz)
        )
        found = src.series('{__name__=~"node_temp_celsius|node_temp_max_celsius"}', window)
    expected = [s for s in data.SERIES if s.name.startswith("node_temp_")]
    assert len(found) == len(expected) == 4
    assert len({tuple(sorted(f.items())) for f in found}) == 4
    # a long selector, sent as a form: refused and split too (1.79 quotes the filters before
    # the reason, shortening long values: 546 bytes measured for this one)
    hosts = "|".join(f"host-{i:05d}.example.org:9100" for i in range(400))
    entry = CatalogEntry("temps", f'node_temp_celsius{{instance!~"{hosts}"}}')
    conn = PrometheusConnection(vm_listing.url, time_zone=data.TIME_ZONE)
    with PrometheusSource(conn, windows=WHOLE_DAY) as src:
        report = archive_prometheus_day(src, entry, DAY, Archive(tmp_path / "selector"))
    assert report.rows == 3 * 23 * 240 and report.stats.splits > 0


def test_victoriametrics_export_duration_refusal_fails_the_day_clearly(
    vm_export_duration: ServerProcess, tmp_path: Path
) -> None:
    params = {"match[]": "node_temp_celsius", "start": "1711839600", "end": "1711922399.999"}
    r = httpx.get(vm_export_duration.url + "/api/v1/export", params=params)
    # measured on 1.79.5: 400, text "... timeout exceeded before starting the query
    # processing: -10.000 seconds (elapsed ...); the timeout can be adjusted with
    # `-search.maxExportDuration` command-line flag"
    assert r.status_code == 400 and "-search.maxExportDuration" in r.text
    assert too_large(r.status_code, r.content)
    conn = PrometheusConnection(vm_export_duration.url, time_zone=data.TIME_ZONE)
    with PrometheusSource(conn, windows=WHOLE_DAY) as src, pytest.raises(WindowTooLarge) as e:
        archive_prometheus_day(src, TEMP, DAY, Archive(tmp_path))
    # halved to the floor, then split by series down to one: refused at every size
    assert "refused even for one series and a window at the floor" in str(e.value)
    assert "timeout exceeded before starting the query processing" in str(e.value)
    assert "raise VictoriaMetrics -search.maxQueryDuration / -search.maxExportDuration" in str(
        e.value
    )
    assert not list(tmp_path.rglob("*.csv.gz")) and not list(tmp_path.rglob("*.manifest.json"))


def test_victoriametrics_refusals_are_read_as_too_large(
    vm_series: ServerProcess, vm_samples: ServerProcess
) -> None:
    # filters no other test has asked (see the cache note above)
    fresh = '{__name__="node_temp_celsius",job="node"}'
    params = {"match[]": fresh, "start": "1711839600", "end": "1711922399.999"}
    r = httpx.get(vm_series.url + "/api/v1/export", params=params)
    assert r.status_code == 400 and "the number of matching timeseries exceeds 2" in r.text
    assert too_large(r.status_code, r.content)
    r = httpx.get(vm_samples.url + "/api/v1/export", params=params)
    assert r.status_code == 400
    assert "cannot select more than -search.maxSamplesPerQuery=20000 samples" in r.text
    assert too_large(r.status_code, r.content)
    q = {
        "query": 'count_over_time({__name__="node_temp_celsius",job=~"no.*"}[1d])',
        "time": "1711922400",
    }
    r = httpx.get(vm_series.url + "/api/v1/query", params=q)
    assert r.status_code == 422 and too_large(r.status_code, r.content)


def test_refused_for_one_series_at_the_floor_is_an_error(tmp_path: Path, prom_blocks: Path) -> None:
    s = servers.start_prometheus(tmp_path / "p", prom_blocks, ["--query.max-samples=5"])
    try:
        conn = PrometheusConnection(s.url, time_zone=data.TIME_ZONE)
        with PrometheusSource(conn, windows=WHOLE_DAY) as src, pytest.raises(WindowTooLarge) as e:
            archive_prometheus_day(src, TEMP, DAY, Archive(tmp_path / "a"))
    finally:
        s.stop()
    assert "refused even for one series" in str(e.value)
    assert "raise Prometheus --query.max-samples on the server" in str(e.value)
    assert not list((tmp_path / "a").rglob("*.csv.gz"))
