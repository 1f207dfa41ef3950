"""Fault matrix, the worst case: the source lost data (retention) and the day is rerun.

In every backend, a rerun that reads fewer rows than the archive holds keeps the archived
file and manifest byte for byte, records the attempt beside them (``<day>.kept.json``, shown
by coverage) and fails with :class:`SourceShrank`. With ``replace`` the new data wins and
the replaced file is kept in ``.versions/``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from dxt_core import Archive, RetryPolicy
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, saved_pages
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.backends.kwollect.archive_day import archive_kwollect_day
from dxt_core.backends.kwollect.source import KwollectClient
from dxt_core.coverage import coverage
from dxt_core.errors import SourceShrank
from tests.conftest import SimulatorProcess
from tests.faults.proxy import Answer, FaultProxy, Seen
from tests.kwollect_sim import KwollectSimProcess
from tests.noida_fixtures import sample_hits

pytestmark = pytest.mark.integration

DAY = dt.date(2020, 3, 9)
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
FULL = 4 * 4320  # 4 nodes, one sample every 20 s
FIRST_HOUR = 4 * 180


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def examon_day(url: str, archive: Archive):
    with KairosDBSource(
        ExamonConnection(url=url), retry=RetryPolicy(attempts=2, backoff_s=0.01)
    ) as src:
        return archive_examon_day(src, AMBIENT, DAY, archive)


@pytest.fixture(scope="module")
def expired_sims(small_catalog):
    """The same server after retention: the day's first hour gone (data from 00:00 UTC =
    01:00 in Rome), and the whole day gone."""
    late = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "4", "--data-start", "2020-03-09"]
    )
    gone = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "4", "--data-start", "2020-03-10"]
    )
    yield late, gone
    late.stop()
    gone.stop()


def test_examon_rerun_after_retention_keeps_the_archive(examon_sim, expired_sims, tmp_path):
    late, gone = expired_sims
    archive = Archive(tmp_path)
    first = examon_day(examon_sim.url, archive)
    assert first.rows == FULL
    d = first.path.parent
    before = snapshot(d)

    with pytest.raises(SourceShrank) as ei:
        examon_day(late.url, archive)
    assert (
        f"source has fewer rows than the archive ({FULL:,} -> {FULL - FIRST_HOUR:,}); "
        f"kept the archived file {first.path}" in str(ei.value)
    )
    with pytest.raises(SourceShrank, match=rf"\({FULL:,} -> 0\)"):
        examon_day(gone.url, archive)  # the source now says "empty"

    after = snapshot(d)
    kept = json.loads(after.pop("2020-03-09.kept.json"))
    assert after == before  # data file and manifest byte for byte
    assert (kept["archive_rows"], kept["source_rows"], kept["source_status"]) == (
        FULL,
        0,
        "empty",
    )
    (row,) = coverage(archive, "examon", [("ipmi_pub", "ambient")], [DAY], verify=True)
    assert row.status == "archived" and row.kept

    # an explicit replace takes the smaller day and keeps the replaced one as a version
    replaced = examon_day(late.url, Archive(tmp_path, replace=True))
    assert replaced.rows == FULL - FIRST_HOUR
    (version,) = (d / ".versions").glob("2020-03-09.csv.gz.prev-*")
    assert version.read_bytes() == before["2020-03-09.csv.gz"]
    assert not (d / "2020-03-09.kept.json").exists()
    # and the full source again fills the day up without a fuss
    assert examon_day(examon_sim.url, archive).rows == FULL


@pytest.mark.slow  # 6-7 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_examon_cli_reports_the_kept_day_as_failed(examon_sim, expired_sims, tmp_path):
    late, _ = expired_sims
    examon_day(examon_sim.url, Archive(tmp_path))
    cmd = [sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", late.url,
           "--metric", "ambient", "--plugin", "ipmi_pub", "--start-day", "2020-03-09",
           "--archive", str(tmp_path), "--refetch", "-q"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "0 failed" not in out.stdout and "1 failed" in out.stdout
    assert (
        f"FAILED ipmi_pub/ambient 2020-03-09: examon/ipmi_pub/ambient 2020-03-09: source has "
        f"fewer rows than the archive ({FULL:,} -> {FULL - FIRST_HOUR:,})" in out.stderr
    )
    assert "Traceback" not in out.stderr
    # coverage keeps calling the day archived, marked K (kept), with the counts
    one = tmp_path / "one.csv"
    one.write_text("metric,plugin\nambient,ipmi_pub\n")
    cov = [sys.executable, "-m", "dxt_core.cli", "coverage", "--archive", str(tmp_path),
           "--catalog", str(one), "--start-day", "2020-03-09", "--end-day", "2020-03-09"]  # fmt: skip
    shown = subprocess.run([*cov, "--all"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"ipmi_pub/ambient\s+K$", shown.stdout, re.M), shown.stdout
    assert "kept: ipmi_pub/ambient 2020-03-09" in shown.stdout
    rows = json.loads(subprocess.run([*cov, "--json"], capture_output=True, text=True).stdout)
    (row,) = [r for r in rows["rows"] if r["metric"] == "ambient"]
    assert row["status"] == "archived" and row["kept"] is True
    # --replace takes the smaller day (the replaced file goes to .versions/)
    out = subprocess.run([*cmd[:-2], "--replace", "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "archived 1 metric-day (" in out.stdout
    # and says it replaced an archived day (a WARNING line only, before)
    assert "; 1 of them replaced an archived day, its old files kept in .versions/)" in (out.stdout)
    d = tmp_path / "examon" / "ipmi_pub" / "ambient"
    assert len(list((d / ".versions").glob("2020-03-09.csv.gz.prev-*"))) == 1
    assert json.loads((d / "2020-03-09.manifest.json").read_text())["rows"] == FULL - FIRST_HOUR


# -- Kwollect: the proxy plays a server whose retention dropped the day's first hour ----------


KW_DAY = dt.date(2024, 11, 26)
CUTOFF = dt.datetime(2024, 11, 26, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))


def retention(req: Seen) -> Seen | Answer | None:
    """Kwollect after retention: nothing before CUTOFF (an empty list, as the API answers
    for a window without data)."""
    parts = urlsplit(req.path)
    if not parts.path.endswith("/metrics") or "start_time" not in parts.query:
        return None
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    start = dt.datetime.fromisoformat(q["start_time"])
    end = dt.datetime.fromisoformat(q["end_time"])
    if end < CUTOFF:
        return Answer(200, b"[]", {"Content-Type": "application/json"})
    if start < CUTOFF:
        q["start_time"] = CUTOFF.isoformat()
    return Seen(req.method, f"{parts.path}?{urlencode(q)}", req.headers, req.body)


@pytest.mark.slow  # 4 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_kwollect_rerun_after_retention_keeps_the_archive(tmp_path):
    sim = KwollectSimProcess()
    try:
        with FaultProxy(sim.url) as proxy, KwollectClient(proxy.url, max_points=50_000) as client:
            nodes = ["nova-1.lyon"]
            archive = Archive(tmp_path)
            first = archive_kwollect_day(
                client, "lyon", "wattmetre_power_watt", nodes, KW_DAY, archive
            )
            assert first.rows == 86_400
            before = snapshot(first.path.parent)
            proxy.rewrite = retention
            with pytest.raises(SourceShrank, match=r"\(86,400 -> 82,800\)"):
                archive_kwollect_day(client, "lyon", "wattmetre_power_watt", nodes, KW_DAY, archive)
            after = snapshot(first.path.parent)
            assert json.loads(after.pop("2024-11-26.kept.json"))["source_rows"] == 82_800
            assert after == before
            again = archive_kwollect_day(
                client,
                "lyon",
                "wattmetre_power_watt",
                nodes,
                KW_DAY,
                Archive(tmp_path, replace=True),
            )
            assert again.rows == 82_800
            lines = gzip.decompress(again.path.read_bytes()).splitlines()
            assert json.loads(lines[0])["timestamp"] == "2024-11-26T01:00:00+01:00"
            assert len(list((again.path.parent / ".versions").iterdir())) == 2
    finally:
        sim.stop()


# -- collectd in Elasticsearch: a saved export before and after the index aged out -------------


def test_collectd_es_rerun_after_retention_keeps_the_archive(tmp_path):
    hits = sample_hits()
    cutoff = "2017-12-13T08:30:00"
    late = [h for h in hits if h["_source"]["@timestamp"] >= cutoff]
    assert 0 < len(late) < len(hits)
    archive = Archive(tmp_path)
    day = dt.date(2017, 12, 13)

    def run(pages, archive=archive):
        return archive_collectd_es_day(
            saved_pages(pages, "bb", "saved"), "disk", day, archive, formats=["jsonl"]
        )

    first = run([hits])
    d = tmp_path / "collectd_es" / "disk"
    before = snapshot(d)
    with pytest.raises(SourceShrank, match=rf"\({len(hits):,} -> {len(late):,}\)"):
        run([late])
    with pytest.raises(SourceShrank, match=rf"\({len(hits):,} -> 0\)"):
        run([[]])
    after = snapshot(d)
    after.pop("2017-12-13.kept.json")
    assert after == before and first.rows == len(hits)
    assert run([late], Archive(tmp_path, replace=True)).rows == len(late)
    assert any((d / ".versions").glob("2017-12-13.jsonl.gz.prev-*"))
