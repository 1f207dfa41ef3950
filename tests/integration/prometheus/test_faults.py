"""Faults the real servers cannot be made to show on demand, from the small simulator
(dxt_core/backends/prometheus/simulator.py) run as a separate process."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dxt_core import procs
from dxt_core.archive import Archive
from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.source import PrometheusSource, WindowPolicy
from dxt_core.errors import CountMismatch, QueryRejected, SourceUnavailable
from dxt_core.http import RetryPolicy
from dxt_core.simulate import spawn_simulator as spawn
from dxt_core.windows import zone

pytestmark = pytest.mark.integration

SIM = CatalogEntry("sim_metric", "sim_metric")
DAY = dt.date(2024, 3, 31)  # Europe/Rome: 23 h, 5,520 samples per series
ROWS = 3 * 5520
FAST = RetryPolicy(attempts=3, backoff_s=0.0, jitter=0.0)


class Sim:
    def __init__(self, args: list[str]) -> None:
        self.proc, self.url = spawn("prometheus", args, stderr=subprocess.DEVNULL)

    def faults(self, **changes: object) -> None:
        httpx.post(f"{self.url}/_sim/faults", json=changes, timeout=10).raise_for_status()

    def stats(self) -> dict[str, int]:
        doc: dict[str, int] = httpx.get(f"{self.url}/_sim/stats", timeout=10).json()
        return doc

    def stop(self) -> None:
        procs.stop(self.proc)


@pytest.fixture(params=["prometheus", "victoriametrics"])
def sim(request: pytest.FixtureRequest) -> Iterator[Sim]:
    s = Sim(["--flavor", request.param])
    yield s
    s.stop()


def _run(sim: Sim, tmp_path: Path, faults: dict[str, object] | None = None, **kw: object) -> object:
    """Archive the day; ``faults`` are set once the server kind is known (its detection
    requests are not the day's)."""
    windows = kw.pop("windows", None)
    conn = PrometheusConnection(sim.url, time_zone="Europe/Rome", **kw)  # type: ignore[arg-type]
    with PrometheusSource(conn, retry=FAST, windows=windows) as src:  # type: ignore[arg-type]
        src.server()
        if faults:
            sim.faults(**faults)
        return archive_prometheus_day(src, SIM, DAY, Archive(tmp_path))


def test_a_503_is_retried(sim: Sim, tmp_path: Path) -> None:
    report = _run(sim, tmp_path, {"fail_next": 2})
    assert report.rows == ROWS  # type: ignore[attr-defined]
    assert report.stats.retries == 2  # type: ignore[attr-defined]
    assert sim.stats()["failed"] == 2


def test_an_answer_slower_than_the_timeout_splits_the_window(sim: Sim, tmp_path: Path) -> None:
    whole_day = WindowPolicy(initial_s=86_400)
    report = _run(sim, tmp_path, timeout_s=0.5, windows=whole_day)
    assert report.rows == ROWS and report.stats.splits == 0  # type: ignore[attr-defined]
    # the first sample request (the whole day) outlasts the 0.5 s read timeout
    report = _run(
        sim, tmp_path / "again", {"slow_next": 1, "delay_s": 2.0}, timeout_s=0.5, windows=whole_day
    )
    assert sim.stats()["slow"] == 1
    assert report.rows == ROWS  # type: ignore[attr-defined]
    assert report.stats.splits >= 1  # type: ignore[attr-defined]


#: the whole day is one window at the floor: it cannot be halved
FLOOR_DAY = WindowPolicy(initial_s=86_400, min_s=86_400)


def test_a_read_timeout_at_the_floor_is_retried_like_a_503(sim: Sim, tmp_path: Path) -> None:
    # issue 19: one slow answer on a window that cannot be split must not fail the day
    report = _run(sim, tmp_path, {"slow_next": 1, "delay_s": 2.0}, timeout_s=0.5, windows=FLOOR_DAY)
    assert sim.stats()["slow"] == 1
    assert report.rows == ROWS  # type: ignore[attr-defined]
    assert report.stats.retries == 1 and report.stats.splits == 0  # type: ignore[attr-defined]


def test_read_timeouts_at_the_floor_through_every_retry_fail_the_day(
    tmp_path: Path,
) -> None:
    s = Sim(["--flavor", "victoriametrics"])
    try:
        with pytest.raises(SourceUnavailable) as err:
            _run(s, tmp_path, {"slow_next": 100, "delay_s": 1.0}, timeout_s=0.3, windows=FLOOR_DAY)
        assert s.stats()["slow"] == FAST.attempts
        assert "timeout" in str(err.value) and f"{FAST.attempts} attempts" in str(err.value)
        assert not list(tmp_path.rglob("*.csv.gz")) and not list(tmp_path.rglob("*.manifest.json"))
    finally:
        s.stop()


def test_a_cut_export_is_fetched_again(tmp_path: Path) -> None:
    s = Sim(["--flavor", "victoriametrics"])
    try:
        report = _run(s, tmp_path, {"cut_next": 1})
        assert report.rows == ROWS  # type: ignore[attr-defined]
        assert s.stats()["cut"] == 1
        with pytest.raises(SourceUnavailable) as err:
            _run(s, tmp_path / "b", {"cut_next": 100})
        assert "ends inside a line" in str(err.value)
        assert not list((tmp_path / "b").rglob("*.csv.gz"))
    finally:
        s.stop()


def test_an_export_ended_by_a_limits_error_line_is_split(tmp_path: Path) -> None:
    """VictoriaMetrics 1.79 writes an error that comes after its answer began as the body's
    last line, status 200: the export's deadline there is a window too large, halved."""
    s = Sim(["--flavor", "victoriametrics"])
    try:
        report = _run(s, tmp_path, {"error_next": 1})
        assert s.stats()["error"] == 1
        assert report.rows == ROWS  # type: ignore[attr-defined]
        assert report.stats.splits >= 1  # type: ignore[attr-defined]
    finally:
        s.stop()


def test_bearer_token(tmp_path: Path) -> None:
    s = Sim(["--bearer-token", "tok-123456"])
    try:
        report = _run(s, tmp_path, auth="bearer", password="tok-123456")
        assert report.rows == ROWS  # type: ignore[attr-defined]
        with pytest.raises(QueryRejected) as err:
            _run(s, tmp_path / "b", auth="bearer", password="tok-wrong99")
        assert err.value.status == 401 and "tok-wrong99" not in str(err.value)
    finally:
        s.stop()


def test_rows_that_differ_from_the_servers_count_fail_the_day(sim: Sim, tmp_path: Path) -> None:
    with pytest.raises(CountMismatch) as err:
        _run(sim, tmp_path, {"count_extra": 1})
    assert f"read {ROWS:,} points, but the source counts {ROWS + 3:,} (count_over_time(" in str(
        err.value
    )
    assert err.value.rows == ROWS and err.value.source_count == ROWS + 3
    assert not list(tmp_path.rglob("*.csv.gz")) and not list(tmp_path.rglob("*.manifest.json"))


def test_a_day_not_over_is_committed_with_the_servers_count(sim: Sim, tmp_path: Path) -> None:
    # today grows while it is read: its rows are not held to the count (issue 19: past days)
    conn = PrometheusConnection(sim.url, time_zone="Europe/Rome")
    today = dt.datetime.now(zone("Europe/Rome")).date()
    with PrometheusSource(conn, retry=FAST) as src:
        src.server()
        sim.faults(count_extra=1)
        report = archive_prometheus_day(src, SIM, today, Archive(tmp_path))
    manifest = json.loads(report.manifest.read_text())
    assert report.status == "archived" and manifest["rows"] == report.rows > 0
    assert manifest["source_count"]["count"] == report.rows + 3


def test_the_simulator_reads_a_form_as_the_real_servers_do(sim: Sim) -> None:
    """Both servers read the API's parameters from a POST form (the client sends long ones
    so; tested on the real servers in test_archive.py); Prometheus's label values take GET
    only (measured on 2.42: 405)."""
    query = {"query": "count_over_time(sim_metric[3600000ms])", "time": "1711922400"}
    got = httpx.get(f"{sim.url}/api/v1/query", params=query, timeout=10).json()
    posted = httpx.post(f"{sim.url}/api/v1/query", data=query, timeout=10).json()
    assert posted == got and len(got["data"]["result"]) == 3
    r = httpx.post(f"{sim.url}/api/v1/label/__name__/values", data={}, timeout=10)
    flavor = "victoriametrics" if httpx.get(f"{sim.url}/health").status_code == 200 else ""
    assert r.status_code == (200 if flavor else 405)


def test_a_negative_series_count_is_refused_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    from dxt_core.backends.prometheus.simulator import main

    with pytest.raises(SystemExit) as stop:
        main(["--port", "0", "--series", "-1"])
    assert stop.value.code == 2
    assert "argument --series: -1: give 0 or more" in capsys.readouterr().err
