"""Issue 19 against the Examon simulator (a separate process answering as KairosDB 1.2.2 does):
the source's own count in every manifest, ``dxt coverage --reconcile`` (late data, retention),
a stored NaN costing one series-minute, a read timeout at the floor retried, Grafana 7's
silence, and the tag keys kept in the archive.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core import Archive, CatalogEntry, KairosDBSource, RetryPolicy, WindowPolicy
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.errors import CountMismatch, SourceUnavailable
from dxt_core.reconcile import SourceCount, check_source_count
from dxt_core.windows import day_window, zone
from tests.conftest import SimulatorProcess

DAY = dt.date(2020, 3, 9)
NODES = 3
PER_DAY = 86_400 // 20
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
NODE0 = "r201n01"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("counts") / "catalog.csv"
    p.write_text("metric,plugin\nambient,ipmi_pub\nstate,nagios_pub\n")
    return p


@pytest.fixture(scope="module")
def sim_process(catalog: Path):
    process = SimulatorProcess(["--catalog", str(catalog), "--nodes", str(NODES)])
    yield process
    process.stop()


@pytest.fixture
def sim(sim_process: SimulatorProcess):
    yield sim_process
    httpx.delete(f"{sim_process.url}/_sim/points", timeout=10).raise_for_status()
    sim_process.reset_faults()


def add_points(sim: SimulatorProcess, points: list[list[Any]], node: str = NODE0) -> None:
    r = httpx.post(
        f"{sim.url}/_sim/points",
        json={"metric": "ambient", "tags": {"node": node}, "points": points},
        timeout=10,
    )
    r.raise_for_status()


def source(url: str, **kw: Any) -> KairosDBSource:
    windows = kw.pop("windows", None)
    retry = kw.pop("retry", None) or RetryPolicy(attempts=3, backoff_s=0.01)
    return KairosDBSource(ExamonConnection(url=url, **kw), retry=retry, windows=windows)


def noon_ms() -> int:
    return day_window(DAY, zone("Europe/Rome")).start_ms + 12 * 3_600_000


def dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args], capture_output=True, text=True, timeout=300
    )


# --------------------------------------------------------------------------------------------
# 1. The source's own count in every manifest
# --------------------------------------------------------------------------------------------


def test_every_manifest_holds_the_sources_own_count(sim: SimulatorProcess, tmp_path: Path) -> None:
    httpx.post(f"{sim.url}/_sim/stats/reset").raise_for_status()
    with source(sim.url) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    doc = json.loads(rep.manifest.read_text())
    assert doc["rows"] == NODES * PER_DAY
    assert doc["source_count"]["count"] == NODES * PER_DAY
    assert "count aggregator" in doc["source_count"]["method"]
    # the count added one request and no data: the day's points once, plus one count value
    stats = sim.stats()
    assert stats["points_served"] == NODES * PER_DAY + 1


def test_the_simulators_count_follows_kairosdbs_range_semantics(sim: SimulatorProcess) -> None:
    # kairosdb v1.2.2 RangeAggregator.java: ranges of `sampling` from the query start; each
    # count stamped with its range's first point (no alignment), or the range start.
    start = day_window(DAY, zone("Europe/Rome")).start_ms
    body: dict[str, Any] = {
        "start_absolute": start,
        "end_absolute": start + 3_600_000 - 1,
        "metrics": [
            {
                "name": "ambient",
                "tags": {"node": [NODE0]},
                "aggregators": [{"name": "count", "sampling": {"value": 10, "unit": "minutes"}}],
            }
        ],
    }
    r = httpx.post(f"{sim.url}/api/v1/datapoints/query", json=body, timeout=10)
    values = r.json()["queries"][0]["results"][0]["values"]
    assert [v[1] for v in values] == [30] * 6
    assert all(0 <= v[0] - (start + i * 600_000) < 20_000 for i, v in enumerate(values))
    body["metrics"][0]["aggregators"][0]["align_start_time"] = True
    r = httpx.post(f"{sim.url}/api/v1/datapoints/query", json=body, timeout=10)
    stamps = [v[0] for v in r.json()["queries"][0]["results"][0]["values"]]
    assert stamps == [start + i * 600_000 for i in range(6)]
    body["metrics"][0]["aggregators"] = [{"name": "avg"}]
    assert (
        httpx.post(f"{sim.url}/api/v1/datapoints/query", json=body, timeout=10).status_code == 400
    )


def test_a_past_day_whose_rows_differ_from_the_count_fails_with_both_numbers() -> None:
    with pytest.raises(CountMismatch) as ei:
        check_source_count(
            "examon/ipmi_pub/ambient 2020-03-09", 100, SourceCount(103, "count"), past=True, holes=2
        )
    assert "read 102 points (100 rows + 2 points in holes)" in str(ei.value)
    assert "source counts 103" in str(ei.value)
    assert ei.value.rows == 102 and ei.value.source_count == 103
    check_source_count("x", 100, SourceCount(103, "count"), past=False)  # today: not checked
    check_source_count("x", 101, SourceCount(103, "count"), past=True, holes=2)


# --------------------------------------------------------------------------------------------
# 2. Reconcile later: late data flagged, refetched, passes; fewer -> K
# --------------------------------------------------------------------------------------------


def test_reconcile_flags_late_data_and_passes_after_the_refetch(
    sim: SimulatorProcess, catalog: Path, tmp_path: Path
) -> None:
    common = ["--archive", str(tmp_path), "--catalog", str(catalog)]
    day = ["--start-day", DAY.isoformat(), "--end-day", DAY.isoformat()]
    out = dxt("extract", "examon", "--url", sim.url, *common, *day, "-q")
    assert out.returncode == 0, out.stderr
    ok = dxt("coverage", "examon", "--reconcile", "--url", sim.url, *common, *day)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 equal" in ok.stdout

    add_points(sim, [[noon_ms() + 500, 21.5], [noon_ms() + 20_500, 21.75]])  # late points
    httpx.post(f"{sim.url}/_sim/stats/reset").raise_for_status()
    late = dxt("coverage", "examon", "--reconcile", "--url", sim.url, *common, *day)
    assert late.returncode == 4, late.stdout + late.stderr
    n = NODES * PER_DAY
    assert f"ipmi_pub/ambient {DAY}: archive {n:,}, source {n + 2:,}" in late.stdout
    assert sim.stats()["points_served"] == 2  # one count per metric-day, never the data
    cmd = next(line.strip() for line in late.stdout.splitlines() if "--refetch" in line)
    assert "--metric ambient --plugin ipmi_pub" in cmd
    assert (
        f"airflow tasks clear dxt_examon -t archive_metric_day -s {DAY} -e {DAY}" in (late.stdout)
        or "airflow tasks clear dxt_examon" in late.stdout
    )

    words = shlex.split(cmd)
    assert words[:3] == ["dxt", "extract", "examon"]
    refetch = dxt(*words[1:], "-q")
    assert refetch.returncode == 0, refetch.stdout + refetch.stderr
    again = dxt("coverage", "examon", "--reconcile", "--url", sim.url, *common, *day)
    assert again.returncode == 0, again.stdout
    folder = tmp_path / "examon" / "ipmi_pub" / "ambient"
    assert json.loads((folder / f"{DAY}.manifest.json").read_text())["rows"] == n + 2
    kept = list((folder / ".versions").iterdir())
    assert any(p.name.startswith(f"{DAY}.csv.gz.prev-") for p in kept), kept


def test_a_source_with_fewer_points_keeps_the_archive_shown_k(
    sim: SimulatorProcess, catalog: Path, tmp_path: Path
) -> None:
    add_points(sim, [[noon_ms() + 700, 30.5]])
    common = ["--archive", str(tmp_path), "--catalog", str(catalog)]
    day = ["--start-day", DAY.isoformat(), "--end-day", DAY.isoformat()]
    assert dxt("extract", "examon", "--url", sim.url, *common, *day, "-q").returncode == 0
    httpx.delete(f"{sim.url}/_sim/points", timeout=10).raise_for_status()  # retention
    rec = dxt("coverage", "examon", "--reconcile", "--url", sim.url, *common, *day)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    n = NODES * PER_DAY
    assert (
        f"fewer at the source (retention; archive kept: K): ipmi_pub/ambient {DAY}: "
        f"archive {n + 1:,}, source {n:,}" in rec.stdout
    )
    cov = dxt("coverage", "examon", *common, *day)
    assert "K" in cov.stdout.split("ipmi_pub/ambient", 1)[1].splitlines()[0]


# --------------------------------------------------------------------------------------------
# 3. One stored NaN costs one series-minute
# --------------------------------------------------------------------------------------------


def test_a_stored_nan_costs_one_series_minute(
    sim: SimulatorProcess, catalog: Path, tmp_path: Path
) -> None:
    t = noon_ms() + 30_500
    add_points(sim, [[t, "NaN"]])
    # the simulator answers as KairosDB 1.2.2 does (DoubleDataPoint.writeValueToJson)
    r = httpx.post(
        f"{sim.url}/api/v1/datapoints/query",
        json={
            "start_absolute": t - 1000,
            "end_absolute": t + 1000,
            "metrics": [{"name": "ambient"}],
        },
        timeout=10,
    )
    assert r.status_code == 500
    assert r.json() == {
        "errors": [f"NaN or Infinity:NaN data point=DataPointHelper{{m_timestamp={t}}}"]
    }

    with source(sim.url, windows=WindowPolicy(initial_s=86_400)) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    doc = json.loads(rep.manifest.read_text())
    assert doc["status"] == "archived"
    [hole] = doc["holes"]
    assert hole["series"]["node"] == NODE0
    assert hole["end_ms"] - hole["start_ms"] <= 60_000
    assert hole["start_ms"] <= t < hole["end_ms"]
    assert hole["message"].startswith("NaN or Infinity:NaN data point=")
    # every other point is archived: the day's points but one series' minute (3 + the NaN)
    assert hole["points"] == 4
    assert doc["rows"] == NODES * PER_DAY + 1 - hole["points"]
    assert doc["source_count"]["count"] == NODES * PER_DAY + 1

    # a rerun retries the hole (the day is not complete while it has one) and fills it
    httpx.delete(f"{sim.url}/_sim/points", timeout=10).raise_for_status()
    common = ["--archive", str(tmp_path), "--catalog", str(catalog), "--metric", "ambient"]
    out = dxt(
        "extract",
        "examon",
        "--url",
        sim.url,
        *common,
        "--plugin",
        "ipmi_pub",
        "--start-day",
        DAY.isoformat(),
        "-q",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "already archived" not in out.stdout
    doc = json.loads(rep.manifest.read_text())
    assert "holes" not in doc and doc["rows"] == NODES * PER_DAY


# --------------------------------------------------------------------------------------------
# 4. A read timeout at the floor is retried; Grafana 7's silence leads to the split
# --------------------------------------------------------------------------------------------


def test_a_read_timeout_at_the_floor_is_retried_before_the_day_fails(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    # every window of 300 s (3 nodes x 15 samples = 45 points) is slow: read timeouts at the
    # floor are retried with backoff, as a 503 is, then the day fails as unavailable
    sim.faults(slow_points=10, slow_delay_s=1.5)
    with (
        source(
            sim.url,
            timeout_s=0.4,
            windows=WindowPolicy(initial_s=300, min_s=300),
            retry=RetryPolicy(attempts=3, backoff_s=0.01),
        ) as src,
        pytest.raises(SourceUnavailable) as ei,
    ):
        archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    assert "gave up after 3 attempts" in str(ei.value) and "timeout" in str(ei.value)
