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

from dxt_core import Archive, RetryPolicy
from dxt_core.archive import DayKey
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
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


@pytest.mark.slow  # over 3 s here (tests/tiers.py)
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
    utc = f"{DAY}T00:00:00+00:00"  # Airflow reads a bare date in its default_timezone
    assert f"airflow tasks clear dxt_examon -t archive_metric_day -s {utc} -e {utc}" in late.stdout

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


@pytest.mark.slow  # over 3 s here (tests/tiers.py)
def test_reconcile_counts_the_days_in_the_zone_the_archive_cut_them(
    sim: SimulatorProcess, catalog: Path, tmp_path: Path
) -> None:
    """An archive cut in America/Santiago, reconciled without --tz: counted over Rome's day,
    its 23-hour day (2021-09-05, midnight DST change) differed, and a false "fewer at the
    source" would write a K record. The counts follow the zone each manifest records."""
    common = ["--archive", str(tmp_path), "--catalog", str(catalog)]
    # 2021-09-05 has 23 hours there, 2022-04-02 25 (Rome's: 24): counted over Rome's day,
    # the first showed "more at the source" and the second "fewer" (a K record written)
    for first, last in (("2021-09-04", "2021-09-06"), ("2022-04-01", "2022-04-03")):
        days = ["--start-day", first, "--end-day", last]
        out = dxt("extract", "examon", "--url", sim.url, "--tz", "America/Santiago", *common, *days)
        assert out.returncode == 0, out.stdout + out.stderr
        rec = dxt("coverage", "examon", "--reconcile", "--url", sim.url, *common, *days)
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert "6 equal" in rec.stdout, rec.stdout
    assert not list(tmp_path.rglob("*kept*")), "reconcile wrote a record of fewer rows"


@pytest.mark.slow  # over 3 s here (tests/tiers.py)
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


@pytest.mark.slow  # over 3 s here (tests/tiers.py)
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

    # coverage shows the day archived with holes (h), the hole named
    cov = dxt("coverage", "examon", "--archive", str(tmp_path), "--catalog", str(catalog),
              "--start-day", DAY.isoformat(), "--end-day", DAY.isoformat(), "--all")  # fmt: skip
    line = next(x for x in cov.stdout.splitlines() if x.startswith("ipmi_pub/ambient"))
    assert line.split()[-1] == "h", cov.stdout
    assert f"holes: ipmi_pub/ambient {DAY}: holes: 1 unreadable window(s), 4 points" in cov.stdout
    assert "NaN or Infinity:NaN" in cov.stdout
    # and so does the coverage view: the cell's holes corner and its detail
    from dxt_core.airflow.ui.grid import hole_cells

    parts = [("ipmi_pub", "state"), ("ipmi_pub", "ambient")]
    cells = hole_cells(Archive(tmp_path), "examon", parts, [DAY - dt.timedelta(days=1), DAY])
    assert list(cells) == [(1, 1)] and cells[(1, 1)].startswith("holes: 1 unreadable window")

    # a rerun retries the hole (the day is not complete while it has one) and fills it
    httpx.delete(f"{sim.url}/_sim/points", timeout=10).raise_for_status()
    out = dxt(
        "extract",
        "examon",
        "--url",
        sim.url,
        "--archive",
        str(tmp_path),
        "--metric",
        "ambient",
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


@pytest.fixture(scope="module")
def grafana7(catalog: Path):
    process = SimulatorProcess(
        ["--catalog", str(catalog), "--nodes", "2", "--user", "g", "--password", "pw"]
    )
    yield process
    process.stop()


@pytest.mark.slow  # over 3 s here (tests/tiers.py)
def test_grafana_7s_silence_is_ended_by_the_clients_read_timeout(
    grafana7: SimulatorProcess, tmp_path: Path
) -> None:
    # Grafana 7 has no response timeout on its data proxy (pkg/models/datasource_cache.go
    # GetHttpTransport: [dataproxy] timeout is the dial timeout only): no 504, silence.
    grafana7.faults(
        slow_points=1000, slow_delay_s=3.0, grafana_timeout_s=0.3, grafana_proxy_timeout=False
    )
    try:
        with source(
            grafana7.url,
            user="g",
            password="pw",
            grafana_proxy=True,
            timeout_s=0.5,
            windows=WindowPolicy(initial_s=86_400, min_s=300),
        ) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        grafana7.faults(
            slow_points=None, slow_delay_s=0.0, grafana_timeout_s=30.0, grafana_proxy_timeout=True
        )
    assert rep.stats.splits >= 1 and rep.rows == 2 * PER_DAY
    assert grafana7.stats()["proxy_timeouts"] == 0  # no 504 was sent: the client gave up


# --------------------------------------------------------------------------------------------
# 4. Tag keys: the history asked once, kept in the archive; a failing history falls back
# --------------------------------------------------------------------------------------------


def test_tag_keys_over_all_time_are_asked_once_and_kept(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    archive = Archive(tmp_path)
    with source(sim.url) as src:
        httpx.post(f"{sim.url}/_sim/stats/reset").raise_for_status()
        first = archive_examon_day(src, AMBIENT, DAY, archive)
        assert sim.stats()["last_tags_query"]["start_absolute"] == 0
        cache = tmp_path / ".dxt-tag-keys" / "examon" / "ipmi_pub" / "ambient.json"
        kept = json.loads(cache.read_text())
        assert kept["complete"] and "node" in kept["keys"]
        nxt = DAY + dt.timedelta(days=1)
        second = archive_examon_day(src, AMBIENT, nxt, archive)
        asked = sim.stats()["last_tags_query"]
        assert asked["start_absolute"] == day_window(nxt, zone("Europe/Rome")).start_ms
    one = json.loads(first.manifest.read_text())
    two = json.loads(second.manifest.read_text())
    assert one["tag_keys"]["from"].startswith("query/tags over all time")
    assert two["tag_keys"]["from"] == "archive cache + this day's query/tags"
    assert one["columns"] == two["columns"]


def test_a_history_query_that_times_out_falls_back_to_the_days_keys(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    sim.faults(slow_tags_span_s=30 * 86_400, slow_delay_s=1.0)
    with source(sim.url, timeout_s=0.3, retry=RetryPolicy(attempts=1)) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    sim.faults(slow_tags_span_s=None, slow_delay_s=0.0)
    doc = json.loads(rep.manifest.read_text())
    assert doc["tag_keys"]["from"].startswith("this day's query/tags + cached keys")
    assert "timeout" in doc["tag_keys"]["error"]
    assert doc["rows"] == NODES * PER_DAY and "node" in doc["columns"]
    cache = json.loads((tmp_path / ".dxt-tag-keys/examon/ipmi_pub/ambient.json").read_text())
    assert cache["complete"] is False  # the next day asks the history again


# --------------------------------------------------------------------------------------------
# 6. A daily run reconciles the previous days and refetches the grown ones (no Airflow here:
#    the DAG task calls this function)
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # 7.5 s in CI's fast part (four workers on 2 cores, 6 s scaled limit)
def test_the_daily_reconcile_refetches_a_grown_day_and_keeps_the_old_file(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dxt_core import backends as registry
    from dxt_core.backends.examon.archive_day import examon_recount
    from dxt_core.errors import ConfigError
    from dxt_core.reconcile import reconcile_days

    def setting() -> int:
        return reconcile_days("examon", registry.get("examon").dag_tasks().settings())

    archive = Archive(tmp_path)
    days = [DAY + dt.timedelta(days=i) for i in range(3)]
    with source(sim.url) as src:
        for d in days:
            archive_examon_day(src, AMBIENT, d, archive)
        add_points(sim, [[noon_ms() + 86_400_000 + 900, 22.25]])  # late, into days[1]
        monkeypatch.delenv("DXT_EXAMON_RECONCILE_DAYS", raising=False)
        n = setting()
        monkeypatch.setenv("DXT_EXAMON_RECONCILE_DAYS", "0")
        assert n == 3 and setting() == 0
        monkeypatch.setenv("DXT_EXAMON_RECONCILE_DAYS", "-1")
        with pytest.raises(ConfigError, match="DXT_EXAMON_RECONCILE_DAYS=-1 must be >= 0"):
            setting()
        report = examon_recount(src, [AMBIENT], archive).run(days[-1] + dt.timedelta(days=1), n)
    assert report.days == days
    assert report.counts() == {"equal": 2, "more": 1}
    assert report.refetched == [
        (("ipmi_pub", "ambient"), days[1], NODES * PER_DAY, NODES * PER_DAY + 1)
    ]
    assert "refetched 1 grown: ipmi_pub/ambient 2020-03-10: 12,960 -> 12,961" in report.note()
    folder = tmp_path / "examon" / "ipmi_pub" / "ambient"
    assert (
        json.loads((folder / f"{days[1]}.manifest.json").read_text())["rows"] == NODES * PER_DAY + 1
    )
    assert [p.name.split(".prev-")[0] for p in sorted((folder / ".versions").iterdir())] == [
        f"{days[1]}.csv.gz",
        f"{days[1]}.manifest.json",
    ]


def test_the_daily_reconcile_retries_the_holes(sim: SimulatorProcess, tmp_path: Path) -> None:
    from dxt_core.backends.examon.archive_day import examon_recount

    add_points(sim, [[noon_ms() + 30_500, "Infinity"]])
    archive = Archive(tmp_path)
    nxt = DAY + dt.timedelta(days=1)
    n = NODES * PER_DAY
    with source(sim.url, windows=WindowPolicy(initial_s=86_400)) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, archive)
        assert json.loads(rep.manifest.read_text())["rows"] == n + 1 - 4
        still = examon_recount(src, [AMBIENT], archive).run(nxt, 1)
        assert still.counts() == {"equal": 1}  # rows + the hole's points = the count
        assert still.holes_retried == [(("ipmi_pub", "ambient"), DAY, 1)]  # still unreadable
        httpx.delete(f"{sim.url}/_sim/points", timeout=10).raise_for_status()  # fixed at source
        fixed = examon_recount(src, [AMBIENT], archive).run(nxt, 1)
    # one point fewer than rows + holes (the Infinity is gone), not fewer than the rows:
    # no "kept", the holes retried and filled
    assert fixed.counts() == {"fewer": 1}
    assert fixed.holes_retried == [(("ipmi_pub", "ambient"), DAY, 0)]
    assert not archive.kept_path(DayKey("examon", ("ipmi_pub", "ambient"), DAY)).exists()
    doc = json.loads(rep.manifest.read_text())
    assert "holes" not in doc and doc["rows"] == n
    assert "retried the holes of 1 metric-days (0 unreadable windows left)" in fixed.note()


def test_a_metric_the_server_cannot_count_fails_alone(
    sim: SimulatorProcess, catalog: Path, tmp_path: Path
) -> None:
    from dxt_core.backends.examon.archive_day import day_counter
    from dxt_core.backends.examon.catalog import load_catalog
    from dxt_core.errors import SourceError

    archive = Archive(tmp_path)
    entries = load_catalog(str(catalog))
    with source(sim.url) as src:
        for e in entries:
            archive_examon_day(src, e, DAY, archive)
        sim.faults(fail_metrics=["state"])  # any datapoints query naming it: HTTP 503
        httpx.post(f"{sim.url}/_sim/stats/reset").raise_for_status()
        by_parts = {(e.plugin, e.metric): e for e in entries}
        count = day_counter(src, entries, by_parts, archive)
        assert count(("ipmi_pub", "ambient"), DAY).count == NODES * PER_DAY
        with pytest.raises(SourceError, match=r"simulated outage for state.*HTTP 503"):
            count(("nagios_pub", "state"), DAY)
        asked = sim.stats()["requests"]
        with pytest.raises(SourceError):  # the day's answer is kept: not asked again
            count(("nagios_pub", "state"), DAY)
        assert sim.stats()["requests"] == asked
