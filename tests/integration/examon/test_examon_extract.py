"""Extraction against the Examon simulator, a separate process, over real HTTP."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dxt_core import Archive, RetryPolicy, day_window
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.coverage import coverage
from dxt_core.errors import QueryRejected, SourceUnavailable
from tests.conftest import SimulatorProcess
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration

DAY = dt.date(2020, 3, 9)
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
NODES = 4
PER_DAY = 86_400 // 20


def source(url: str, **kw) -> KairosDBSource:
    retry = kw.pop("retry", RetryPolicy(attempts=3, backoff_s=0.01))
    windows = kw.pop("windows", None)
    options = kw.pop("options", None)
    return KairosDBSource(
        ExamonConnection(url=url, **kw), options=options, retry=retry, windows=windows
    )


def read_rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(gzip.decompress(path.read_bytes()).decode())))


def raw_points(url: str, entry: CatalogEntry, day: dt.date, cluster: str = "marconi100"):
    """The same day asked for directly (independent of dxt_core), as a set of rows."""
    w = day_window(day, "Europe/Rome")
    tags = httpx.post(
        f"{url}/api/v1/datapoints/query/tags",
        json={
            "start_absolute": w.start_ms,
            "end_absolute": w.end_ms - 1,
            "metrics": [{"name": entry.metric, "tags": {"cluster": [cluster]}}],
        },
    ).json()["queries"][0]["results"][0]["tags"]
    keys = sorted(tags)
    doc = httpx.post(
        f"{url}/api/v1/datapoints/query",
        json={
            "start_absolute": w.start_ms,
            "end_absolute": w.end_ms - 1,
            "metrics": [
                {
                    "name": entry.metric,
                    "tags": {"cluster": [cluster]},
                    "group_by": [{"name": "tag", "tags": keys}],
                }
            ],
        },
    ).json()
    out = set()
    for r in doc["queries"][0]["results"]:
        group = next(g["group"] for g in r["group_by"] if g["name"] == "tag")
        for ts, v in r["values"]:
            out.add((ts, str(v), tuple(group[k] for k in keys)))
    return keys, out


def test_metric_day_matches_what_the_server_holds(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    with source(examon_sim.url) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, archive)
    path = tmp_path / "examon/ipmi_pub/ambient/2020-03-09.csv.gz"
    assert rep.path == path and rep.status == "archived"
    rows = read_rows(path)
    keys, expected = raw_points(examon_sim.url, AMBIENT, DAY)
    assert rows[0] == ["timestamp", "value", "name", *keys]
    assert keys == ["chnl", "cluster", "node", "org", "plugin", "rack", "slot", "units"]
    got = set()
    for r in rows[1:]:
        ts = int(dt.datetime.fromisoformat(r[0]).timestamp() * 1000)
        got.add((ts, r[1], tuple(r[3:])))
        assert r[2] == "ambient"
    assert got == expected
    assert len(rows) - 1 == rep.rows == NODES * PER_DAY
    m = json.loads((tmp_path / "examon/ipmi_pub/ambient/2020-03-09.manifest.json").read_text())
    assert m["status"] == "archived" and m["rows"] == rep.rows
    assert m["bytes"] == path.stat().st_size
    # Realistic samples land a few milliseconds after the 20 s grid.
    assert m["first_timestamp"].startswith("2020-03-09T00:00:00.")
    assert m["last_timestamp"].startswith("2020-03-09T23:59:40.")
    assert m["dropped_outside_window"] == 0
    assert m["query_window"]["start"] == "2020-03-09T00:00:00+01:00"
    assert m["query_window"]["end"] == "2020-03-10T00:00:00+01:00"
    assert m["source_url"] == examon_sim.url
    assert m["software"]["name"] == "dxt-archive"
    assert m["columns"] == rows[0]


@pytest.fixture(scope="module")
def tidy_sim(small_catalog):
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", str(NODES), "--tidy"])
    yield sim
    sim.stop()


@pytest.mark.parametrize("mode", ["tidy", "realistic"])
def test_midnight_sample_is_archived_once_and_days_tile(examon_sim, tidy_sim, tmp_path, mode):
    sim = tidy_sim if mode == "tidy" else examon_sim
    archive = Archive(tmp_path)
    with source(sim.url) as src:
        for d in (DAY, DAY + dt.timedelta(days=1)):
            archive_examon_day(src, AMBIENT, d, archive)
    d1 = read_rows(tmp_path / "examon/ipmi_pub/ambient/2020-03-09.csv.gz")[1:]
    d2 = read_rows(tmp_path / "examon/ipmi_pub/ambient/2020-03-10.csv.gz")[1:]
    midnight = dt.datetime.fromisoformat("2020-03-10T00:00:00+01:00")
    first_slot = [
        r for r in d2 if dt.datetime.fromisoformat(r[0]) < midnight + dt.timedelta(seconds=20)
    ]
    assert all(dt.datetime.fromisoformat(r[0]) < midnight for r in d1)
    assert len(first_slot) == NODES
    if mode == "tidy":  # a sample exactly at midnight, in the second day only
        assert {r[0] for r in first_slot} == {"2020-03-10T00:00:00.000+01:00"}
    assert not {tuple(r) for r in d1} & {tuple(r) for r in d2}


@pytest.mark.parametrize(
    ("day", "hours"), [(dt.date(2020, 3, 29), 23), (dt.date(2020, 10, 25), 25)]
)
def test_dst_days(examon_sim, tmp_path, day, hours):
    with source(examon_sim.url) as src:
        rep = archive_examon_day(src, AMBIENT, day, Archive(tmp_path))
    assert rep.rows == NODES * hours * 180


def test_rerun_rewrites_identical_bytes(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    with source(examon_sim.url) as src:
        a = archive_examon_day(src, AMBIENT, DAY, archive)
        first = a.path.read_bytes()
        b = archive_examon_day(src, AMBIENT, DAY, archive)
    assert b.path.read_bytes() == first


def test_string_values_and_int_values(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    with source(examon_sim.url) as src:
        archive_examon_day(src, CatalogEntry("state", "nagios_pub"), DAY, archive)
        archive_examon_day(src, CatalogEntry("num_nodes", "slurm_pub"), DAY, archive)
    nag = read_rows(tmp_path / "examon/nagios_pub/state/2020-03-09.csv.gz")
    assert {"description", "host_group", "state", "state_type"} <= set(nag[0])
    values = {r[1] for r in nag[1:]}
    assert any(not v.replace(".", "").isdigit() for v in values)  # real strings kept
    slurm = read_rows(tmp_path / "examon/slurm_pub/num_nodes/2020-03-09.csv.gz")
    assert all(r[1].lstrip("-").isdigit() for r in slurm[1:])


def test_cluster_filter_only_for_plugins_with_the_tag(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    schneider = CatalogEntry("PLC_PLC_Q101.Abilita_inverter", "schneider_pub")
    with source(examon_sim.url, cluster="leonardo") as src:
        empty = archive_examon_day(src, AMBIENT, DAY, archive)
        full = archive_examon_day(src, schneider, DAY, archive)
    assert empty.status == "empty" and empty.path is None
    m = json.loads(empty.manifest.read_text())
    assert m["status"] == "empty" and m["file"] is None and m["rows"] == 0
    assert not (tmp_path / "examon/ipmi_pub/ambient/2020-03-09.csv.gz").exists()
    assert full.status == "archived" and "cluster" not in read_rows(full.path)[0]


def test_job_table(examon_sim, tmp_path):
    with source(examon_sim.url, jobs_url=examon_sim.url) as src:
        rep = archive_examon_day(
            src, CatalogEntry("job_info_marconi100", "job_table"), DAY, Archive(tmp_path)
        )
    rows = read_rows(rep.path)
    header = rows[0]
    assert header == sorted(header) and "job_id" in header and "start_time" in header
    w = day_window(DAY, "Europe/Rome")
    start_col = header.index("start_time")
    for r in rows[1:]:  # the day's jobs are those that started in it
        start = dt.datetime.fromisoformat(r[start_col].replace("Z", "+00:00"))
        assert w.start <= start < w.end
    assert rep.rows == len(rows) - 1 == 86_400 // 360


def test_transient_errors_are_retried(examon_sim, tmp_path):
    examon_sim.faults(fail_next=2)
    try:
        with source(examon_sim.url) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        examon_sim.reset_faults()
    assert rep.stats.retries == 2 and rep.rows == NODES * PER_DAY


def test_outage_fails_cleanly_without_partial_files(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    with source(examon_sim.url) as src:
        archive_examon_day(src, AMBIENT, DAY, archive)  # a good earlier run
    examon_sim.faults(fail_next=1000)
    try:
        with source(examon_sim.url, windows=WindowPolicy(initial_s=3600)) as src:
            # the tag query succeeds, then the outage starts mid-day
            examon_sim.faults(fail_next=0)
            it = src.iter_batches(AMBIENT, day_window(DAY), src.schema(AMBIENT, day_window(DAY)))
            next(it)
            examon_sim.faults(fail_next=1000)
            with pytest.raises(SourceUnavailable, match="gave up after 3 attempts"):
                archive_examon_day(src, AMBIENT, DAY, archive)
    finally:
        examon_sim.reset_faults()
    d = tmp_path / "examon/ipmi_pub/ambient"
    # the failed rerun wrote only staged files, removed when it failed: the earlier run's
    # file and manifest stand as they were, and the lock is released
    assert sorted(p.name for p in d.iterdir()) == ["2020-03-09.csv.gz", "2020-03-09.manifest.json"]
    assert archive.status(archive_key(DAY), verify=True)[0] == "archived"


def archive_key(day):
    from dxt_core import DayKey

    return DayKey("examon", ("ipmi_pub", "ambient"), day)


def test_refused_windows_are_split_and_stitched_in_order(examon_sim, tmp_path):
    with source(examon_sim.url) as src:
        ref = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "a")).path.read_bytes()
    examon_sim.faults(max_points=300)  # 4 nodes x 75 samples = 25 min
    try:
        with source(examon_sim.url, windows=WindowPolicy(initial_s=86_400)) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "b"))
    finally:
        examon_sim.reset_faults()
    assert rep.stats.splits >= 6
    assert rep.path.read_bytes() == ref


def test_the_next_window_is_asked_while_one_is_read_and_never_left_running(examon_sim, tmp_path):
    """Windows of a day are asked one ahead (the server answers the next while the client
    reads one): the windows are the same as asked one by one, their refusals are split as
    before, and no request thread outlives the day, whether it ends well or not."""
    import threading

    def ask_ahead() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "dxt-ask-ahead" and t.is_alive()]

    policy = WindowPolicy(initial_s=1800, target_points=2_000, min_s=300)
    with source(examon_sim.url, windows=policy) as src:
        batches = list(src.iter_batches(AMBIENT, day_window(DAY, src.tz), src.schema(AMBIENT)))
    assert len(batches) > 3 and not ask_ahead()
    assert [b.start_ms for b in batches[1:]] == [b.end_ms for b in batches[:-1]]
    assert sum(b.points for b in batches) == NODES * PER_DAY
    # a window refused in the thread that asked it ahead is split as any refusal is
    examon_sim.faults(max_points=300)
    try:
        with source(examon_sim.url, windows=policy) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "refused"))
    finally:
        examon_sim.reset_faults()
    assert rep.stats.splits >= 1 and rep.rows == NODES * PER_DAY and not ask_ahead()

    # the second window is asked while the first is read: the server sees it although the
    # consumer has not asked for it; a consumer that stops there leaves no request behind
    def queries() -> int:
        return int(examon_sim.stats()["requests"].get("/api/v1/datapoints/query", 0))

    with source(examon_sim.url, windows=policy) as src:
        found = src.iter_batches(AMBIENT, day_window(DAY, src.tz), src.schema(AMBIENT))
        before = queries()
        next(found)
        deadline = time.monotonic() + 10
        while queries() < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queries() == before + 2
        found.close()
    assert not ask_ahead()


def test_split_floor_gives_a_clear_error(examon_sim, tmp_path):
    examon_sim.faults(max_points=1)
    try:
        with source(examon_sim.url, windows=WindowPolicy(initial_s=600, min_s=300)) as src:
            with pytest.raises(Exception, match="even a 300 s window is refused"):
                archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        examon_sim.reset_faults()
    assert not list(tmp_path.rglob("*.csv.gz"))


@pytest.mark.slow
def test_read_timeouts_split_the_window(examon_sim, tmp_path):
    examon_sim.faults(slow_points=2000, slow_delay_s=3.0)
    try:
        with source(
            examon_sim.url, timeout_s=1.0, windows=WindowPolicy(initial_s=7200, min_s=60)
        ) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        examon_sim.reset_faults()
    assert rep.stats.splits >= 1 and rep.rows == NODES * PER_DAY


def test_coverage_reports_archived_empty_missing_corrupt(examon_sim, tmp_path):
    archive = Archive(tmp_path)
    with source(examon_sim.url, cluster="nope") as src:
        archive_examon_day(src, AMBIENT, DAY, archive)  # empty
    with source(examon_sim.url) as src:
        archive_examon_day(src, CatalogEntry("pcie", "ipmi_pub"), DAY, archive)
        archive_examon_day(src, CatalogEntry("pcie", "ipmi_pub"), DAY + dt.timedelta(1), archive)
    f = tmp_path / "examon/ipmi_pub/pcie/2020-03-10.csv.gz"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))
    rows = coverage(
        archive,
        "examon",
        [("ipmi_pub", "ambient"), ("ipmi_pub", "pcie")],
        [DAY, DAY + dt.timedelta(1)],
        verify=True,
    )
    assert [(r.parts[1], r.day.day, r.status) for r in rows] == [
        ("ambient", 9, "empty"),
        ("ambient", 10, "missing"),
        ("pcie", 9, "archived"),
        ("pcie", 10, "corrupt"),
    ]


@pytest.fixture(scope="module")
def proxied_sim(small_catalog):
    env_pw = "pa55-word"
    sim = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "2", "--user", "grafana", "--password", env_pw]
    )
    yield sim
    sim.stop()


def test_grafana_proxy_with_basic_auth(proxied_sim, tmp_path):
    with source(proxied_sim.url, user="grafana", password="pa55-word", grafana_proxy=True) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
        assert src.api_path("version").startswith("api/datasources/proxy/")
    assert rep.rows == 2 * PER_DAY


def test_bad_password_is_a_clear_error_without_the_secret(proxied_sim, tmp_path):
    with source(
        proxied_sim.url, user="grafana", password="wrong-secret", grafana_proxy=True
    ) as src:
        with pytest.raises(QueryRejected) as ei:
            archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    assert "authentication failed" in str(ei.value) and "wrong-secret" not in str(ei.value)


def _dxt(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


@pytest.mark.slow  # 7.1 s in CI's fast part (four workers on 2 cores, 6 s scaled limit)
def test_cli_extract_and_coverage(examon_sim, small_catalog, tmp_path):
    out = _dxt(
        "extract",
        "examon",
        "--url",
        examon_sim.url,
        "--jobs-url",
        examon_sim.url,
        "--catalog",
        str(small_catalog),
        "--start-day",
        "2020-03-09",
        "--end-day",
        "2020-03-10",
        "--archive",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert "archived 12 metric-days" in out.stdout
    cov = _dxt(
        "coverage",
        "--archive",
        str(tmp_path),
        "--catalog",
        str(small_catalog),
        "--start-day",
        "2020-03-08",
        "--end-day",
        "2020-03-10",
    )
    assert cov.returncode == 3
    assert "12 archived" in cov.stdout and "6 missing" in cov.stdout
    # made by dxt extract (each manifest says so): the refill is a dxt extract command, with
    # the jobs service the job table's manifests record (without it, the job table's days
    # failed against the default port 5000)
    refill = (
        f"dxt extract examon --url {examon_sim.url} --jobs-url {examon_sim.url} --catalog "
        f"{small_catalog} --start-day 2020-03-08 --end-day 2020-03-08 --archive {tmp_path}"
    )
    assert refill in cov.stdout
    assert "airflow backfill" not in cov.stdout
    made = json.loads((tmp_path / "examon/ipmi_pub/ambient/2020-03-09.manifest.json").read_text())
    assert made["made_by"] == {"tool": "dxt"}
    ok = _dxt(
        "coverage",
        "--archive",
        str(tmp_path),
        "--catalog",
        str(small_catalog),
        "--start-day",
        "2020-03-09",
        "--end-day",
        "2020-03-10",
        "--verify",
        "--json",
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["counts"]["archived"] == 12


@pytest.mark.slow  # 3-6 s on 2 cores (the fast tier's limit is 3 s)
def test_cli_keeps_connections_alive_across_metric_days(examon_sim, small_catalog, tmp_path):
    """One source for the whole run: ten KairosDB metric-days on two workers reuse the
    workers' connections instead of opening one per metric-day (a TLS handshake each, on a
    real server)."""
    with FaultProxy(examon_sim.url) as proxy:
        out = _dxt(
            *("extract", "examon", "--url", proxy.url, "--jobs-url", examon_sim.url),
            *("--catalog", str(small_catalog), "--workers", "2", "--archive", str(tmp_path)),
            *("--start-day", "2020-03-09", "--end-day", "2020-03-10"),
        )
        seen = list(proxy.seen)
    assert out.returncode == 0, out.stderr
    assert "archived 12 metric-days" in out.stdout
    connections = {s.client for s in seen}
    # five KairosDB metrics x two days (the job table goes to --jobs-url), several requests
    # each; two workers, each asking its day's count while its data arrives, keep four
    # connections busy (one spare for a race at the start): far fewer than the requests
    assert len(seen) > 10
    assert len(connections) <= 5, (len(connections), len(seen))


def test_cli_bad_input_names_the_problem(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("metric,plugin\nok,p\n../x,p\n")
    out = _dxt(
        "extract",
        "examon",
        "--url",
        "http://127.0.0.1:9",
        "--catalog",
        str(bad),
        "--start-day",
        "2020-03-09",
        "--archive",
        str(tmp_path / "a"),
    )
    assert out.returncode == 2
    assert f"{bad}, line 3" in out.stderr and "escape the archive" in out.stderr
    out = _dxt(
        "extract",
        "examon",
        "--url",
        "http://127.0.0.1:9",
        "--metric",
        "m",
        "--plugin",
        "p",
        "--start-day",
        "9/3/2020",
        "--archive",
        str(tmp_path / "a"),
    )
    assert out.returncode == 2 and "expected YYYY-MM-DD" in out.stderr


@pytest.mark.slow  # 3 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_killed_extraction_leaves_no_partial_file(small_catalog, tmp_path):
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "4", "--delay", "0.3"])
    try:
        cmd = [
            sys.executable,
            "-m",
            "dxt_core.cli",
            "extract",
            "examon",
            "--url",
            sim.url,
            "--metric",
            "ambient",
            "--plugin",
            "ipmi_pub",
            "--start-day",
            "2020-03-09",
            "--archive",
            str(tmp_path),
            "--window-s",
            "600",
            "--target-points",
            "100",
            "-q",
        ]
        p = subprocess.Popen(cmd, env={**os.environ})
        d = tmp_path / "examon/ipmi_pub/ambient"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (d.exists() and any(d.glob(".*.tmp"))):
            time.sleep(0.1)
        time.sleep(1.0)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert any(d.glob(".*.tmp"))  # it was killed mid-write
        assert not (d / "2020-03-09.csv.gz").exists()
        assert not (d / "2020-03-09.manifest.json").exists()
        sim.faults(delay_s=0.0)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert sorted(x.name for x in d.iterdir()) == [
            "2020-03-09.csv.gz",
            "2020-03-09.manifest.json",
        ]
    finally:
        sim.stop()


def test_cli_refuses_a_misspelled_plugin_naming_the_closest(examon_sim, small_catalog, tmp_path):
    """The plugin does not filter the query: a typo would archive the metric's rows under the
    typo. The server's 'plugin' tag values of the metric decide, on --plugin and catalog lines."""
    common = ("extract", "examon", "--url", examon_sim.url, "--start-day", "2020-03-09")
    out = _dxt(*common, "--metric", "ambient", "--plugin", "ipmi_pubb", "--archive", str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert (
        "ipmi_pubb/ambient: the metric 'ambient' is published by plugin 'ipmi_pub', not 'ipmi_pubb'"
    ) in out.stdout + out.stderr
    assert not [p for p in (tmp_path / "examon").rglob("*") if p.is_file()]  # nothing archived
    typo = tmp_path / "typo.csv"
    typo.write_text("metric,plugin\nambient,ipmi_pub\nstate,nagios_pubb\n")
    out = _dxt(*common, "--catalog", str(typo), "--archive", str(tmp_path / "b"))
    assert out.returncode == 1
    assert "published by plugin 'nagios_pub', not 'nagios_pubb'" in out.stdout + out.stderr
    assert (tmp_path / "b/examon/ipmi_pub/ambient/2020-03-09.csv.gz").is_file()
    assert not [p for p in (tmp_path / "b/examon/nagios_pubb").rglob("*") if p.is_file()]


def test_a_day_not_over_is_archived_so_far_and_fetched_again_by_the_next_run(examon_sim, tmp_path):
    """Today (in the archive's zone) has not ended: what the source holds so far is archived,
    the manifest and the summary say the day was not over, and the next run fetches it again
    instead of taking it for complete (before: archived or empty for ever, skipped)."""
    import datetime as dt

    from dxt_core.windows import zone

    today = dt.datetime.now(zone("Europe/Rome")).date().isoformat()
    argv = (
        *("extract", "examon", "--url", examon_sim.url, "--metric", "ambient"),
        *("--plugin", "ipmi_pub", "--start-day", today, "--archive", str(tmp_path), "-q"),
    )
    first = _dxt(*argv)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (
        "0 empty, 1 of the archived and empty days not over yet (what the source holds"
        in first.stdout
    )
    doc = json.loads((tmp_path / f"examon/ipmi_pub/ambient/{today}.manifest.json").read_text())
    assert doc["day_not_over"]["zone"] == "Europe/Rome"
    assert doc["day_not_over"]["ends"] > dt.datetime.now(dt.UTC).isoformat()
    again = _dxt(*argv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already archived" not in again.stdout and "not over yet" in again.stdout


def test_coverage_tells_a_day_archived_before_it_ended(examon_sim, tmp_path):
    """Coverage called such a day plainly archived (or empty), exit 0, and planned no
    refill once it had ended: now it is marked ``~`` with its detail, counted, and refilled
    once over (exit 3, the refill command names it)."""
    import datetime as dt

    from dxt_core.windows import zone

    today = dt.datetime.now(zone("Europe/Rome")).date().isoformat()
    archive = tmp_path / "a"
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    made = _dxt(
        *("extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog)),
        *("--start-day", today, "--archive", str(archive), "-q"),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    cov = ("coverage", "examon", "--archive", str(archive), "--catalog", str(catalog))
    days = ("--start-day", today, "--end-day", today)
    now = _dxt(*cov, *days)
    assert now.returncode == 0, now.stdout + now.stderr  # still running: the next run fetches it
    assert "ipmi_pub/ambient" in now.stdout and " ~\n" in now.stdout, now.stdout
    assert "archived before their day ended" in now.stdout
    assert f"not over: ipmi_pub/ambient {today}: not over: archived before the day ended (" in (
        now.stdout
    )
    [row] = json.loads(_dxt(*cov, *days, "--json").stdout)["rows"]
    assert row["status"] in ("archived", "empty") and row["detail"].startswith("not over:"), row
    # a day archived while it ran, and over since: yesterday's manifest as a run during
    # yesterday wrote it (the source then held part of the day)
    yesterday = (dt.date.fromisoformat(today) - dt.timedelta(days=1)).isoformat()
    made = _dxt(
        *("extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog)),
        *("--start-day", yesterday, "--archive", str(archive), "-q"),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    manifest = archive / f"examon/ipmi_pub/ambient/{yesterday}.manifest.json"
    doc = json.loads(manifest.read_text())
    doc["day_not_over"] = {"ends": f"{today}T00:00:00+01:00", "zone": "Europe/Rome"}
    manifest.write_text(json.dumps(doc))
    later = _dxt(*cov, "--start-day", yesterday, "--end-day", today)
    assert later.returncode == 3, later.stdout + later.stderr
    assert "ipmi_pub/ambient" in later.stdout and " ~~\n" in later.stdout, later.stdout
    assert f"--start-day {yesterday} --end-day {yesterday}" in later.stdout, later.stdout
    # the coverage view tells both days' cells apart from plainly archived ones
    from dxt_core.airflow.ui.grid import hole_cells
    from dxt_core.archive import Archive

    days = [dt.date.fromisoformat(yesterday), dt.date.fromisoformat(today)]
    cells = hole_cells(Archive(archive), "examon", [("ipmi_pub", "ambient")], days)
    assert sorted(cells) == [(0, 0), (0, 1)], cells
    assert all(t.startswith("not over: archived before the day ended (") for t in cells.values())


def test_a_day_an_older_version_archived_before_it_ended_is_fetched_again(examon_sim, tmp_path):
    """dxt before 2026-12-05 wrote no ``day_not_over`` mark: such a day, written before its
    end (``written_at`` before ``query_window.end``), counted as complete for ever (``#``,
    exit 0, skipped by every rerun). It is now a ``~`` day, refilled and refetched."""
    import datetime as dt

    day = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=3)).isoformat()
    archive = tmp_path / "a"
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    extract = (
        *("extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog)),
        *("--start-day", day, "--archive", str(archive), "-q"),
    )
    made = _dxt(*extract)
    assert made.returncode == 0, made.stdout + made.stderr
    manifest = archive / f"examon/ipmi_pub/ambient/{day}.manifest.json"
    doc = json.loads(manifest.read_text())
    assert "day_not_over" not in doc
    # as an older version wrote it at noon of that day (renamed in: the index sees it)
    doc["written_at"] = f"{day}T12:00:00+01:00"
    tmp = manifest.with_name(".older.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(manifest)
    cov = _dxt(
        *("coverage", "examon", "--archive", str(archive), "--catalog", str(catalog)),
        *("--start-day", day, "--end-day", day),
    )
    assert cov.returncode == 3, cov.stdout + cov.stderr
    assert " ~\n" in cov.stdout and f"--start-day {day} --end-day {day}" in cov.stdout, cov.stdout
    again = _dxt(*extract)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already archived" not in again.stdout, again.stdout
    assert "day_not_over" not in json.loads(manifest.read_text())
    assert json.loads(manifest.read_text())["written_at"] > f"{day}T23:59"


def _run_as_printed(line: str) -> None:
    """A command coverage printed, run as a shell would split it (``-q`` added)."""
    refill = subprocess.run(
        [*shlex.split(line), "-q"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert refill.returncode == 0, refill.stdout + refill.stderr


def test_the_refill_asks_for_the_cluster_the_days_were_made_with(examon_sim, tmp_path):
    """Days archived with ``--cluster m100b``: coverage's refill command had no ``--cluster``,
    so it archived the default cluster's series (marconi100) beside them, exit 0. Each
    manifest records the cluster filtered on; the refill and refetch commands ask for it."""
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    root = tmp_path / "a"
    common = ["--url", examon_sim.url, "--archive", str(root), "-q"]
    days = ["--start-day", "2020-03-09", "--end-day", "2020-03-10"]
    made = _dxt(
        "extract", "examon", *common, "--catalog", str(catalog), "--cluster", "m100b", *days
    )
    assert made.returncode == 0 and "4 empty" in made.stdout, made.stdout + made.stderr
    ambient = root / "examon/ipmi_pub/ambient"
    assert json.loads((ambient / "2020-03-09.manifest.json").read_text())["cluster"] == "m100b"
    for f in ambient.glob("2020-03-10.*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog), *days)
    assert cov.returncode == 3, cov.stdout + cov.stderr
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert f"--url {examon_sim.url} --cluster m100b --catalog" in line, line
    _run_as_printed(line)
    again = json.loads((ambient / "2020-03-10.manifest.json").read_text())
    assert again["status"] == "empty" and again["cluster"] == "m100b", again  # not marconi100's
    # a unit made with another cluster: no one command refills both, and it is said
    pcie = ["--metric", "pcie", "--plugin", "ipmi_pub", "--replace", "--refetch"]
    _dxt("extract", "examon", *common, *pcie, "--cluster", "marconi100", *days)
    for f in [*ambient.glob("2020-03-10.*"), *(root / "examon/ipmi_pub/pcie").glob("2020-03-10.*")]:
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog), *days)
    assert "--cluster CLUSTER --catalog" in cov.stdout, cov.stdout
    assert (
        "made with --cluster m100b, marconi100" in cov.stderr and "its own --cluster" in cov.stderr
    )
    # a corrupt day's refetch command asks for its manifest's cluster too
    from dxt_core.backends.examon.cli import refetch_command

    args = argparse.Namespace(archive=str(root), url=examon_sim.url, format=None, catalog=None)
    line = refetch_command(args, ("ipmi_pub", "ambient"), "2020-03-09", "2020-03-09")
    assert "--cluster m100b" in line and "--jobs-url" not in line, line


def test_a_rerun_that_writes_a_missing_file_again_says_restored(examon_sim, tmp_path):
    """A day whose data file was deleted, rerun: the file was written again and the run said
    "archived (unchanged: archived so already)"."""
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    run = ["extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog),
           "--archive", str(tmp_path / "a"), "--start-day", "2020-03-09", "-v"]  # fmt: skip
    assert _dxt(*run).returncode == 0
    data = tmp_path / "a/examon/ipmi_pub/ambient/2020-03-09.csv.gz"
    first = data.read_bytes()
    data.unlink()
    again = _dxt(*run)
    assert again.returncode == 0, again.stdout + again.stderr
    said = again.stdout + again.stderr
    assert "restored: its file was missing or damaged" in said, said
    assert "1 of them restored" in again.stdout and "unchanged" not in said
    assert data.read_bytes() == first
    third = _dxt(*run, "--refetch")  # intact now: a refetch of the same data is unchanged
    said = third.stdout + third.stderr
    assert "unchanged: archived so already" in said and "restored" not in said, said


def test_the_refill_of_a_job_table_missing_in_the_range_asks_its_jobs_service(examon_sim, tmp_path):
    """Every day of the job table in the range missing: no manifest of it was read, so the
    refill command had no --jobs-url and asked port 5000 (exit 4, or another service)."""
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\njob_info_marconi100,job_table\n")
    root = tmp_path / "a"
    made = _dxt("extract", "examon", "--url", examon_sim.url, "--jobs-url", examon_sim.url,
                "--catalog", str(catalog), "--archive", str(root), "--start-day", "2020-03-09",
                "--end-day", "2020-03-11", "-q")  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    for f in (root / "examon/job_table/job_info_marconi100").glob("2020-03-1[01].*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog), "--start-day",
               "2020-03-10", "--end-day", "2020-03-11")  # fmt: skip
    assert cov.returncode == 3, cov.stdout + cov.stderr
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert f"--jobs-url {examon_sim.url} " in line, line


@pytest.mark.slow  # six commands, 6-10 s on this machine
def test_the_refill_reads_the_plugin_options_the_days_were_made_with(examon_sim, tmp_path):
    """Parquet days made with ``--plugin-options`` (``value_type = "int64"``): coverage's
    refill command had no ``--plugin-options`` unless coverage was given it, so the refill
    wrote the missing days as double beside int64 days (one dataset no longer reads as one
    table), exit 0. Each manifest records the options file; the commands read it."""
    pq = pytest.importorskip("pyarrow.parquet")
    options = tmp_path / "my options.toml"
    options.write_text('[plugins.slurm_pub]\ncluster_tag = true\nvalue_type = "int64"\n')
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nnum_nodes,slurm_pub\n")
    root = tmp_path / "a"
    days = ["--start-day", "2020-03-09", "--end-day", "2020-03-10"]
    made = _dxt("extract", "examon", "--url", examon_sim.url, "--archive", str(root), "-q",
                "--catalog", str(catalog), "--plugin-options", str(options), "--format",
                "parquet", *days)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    unit = root / "examon/plugin=slurm_pub/metric=num_nodes"
    doc = json.loads((unit / "_2020-03-09.manifest.json").read_text())
    assert doc["plugin_options"] == str(options), doc
    for f in unit.glob("*2020-03-10.*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog), *days)
    assert cov.returncode == 3, cov.stdout + cov.stderr
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert f"--plugin-options '{options}' --catalog" in line, line
    _run_as_printed(line)
    for day in ("2020-03-09", "2020-03-10"):
        assert str(pq.read_schema(unit / f"{day}.parquet").field("value").type) == "int64", day
    # coverage's own --plugin-options wins over the recorded one
    other = tmp_path / "other.toml"
    other.write_text('cluster = "marconi100"\n')
    for f in unit.glob("*2020-03-10.*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog),
               "--plugin-options", str(other), *days)  # fmt: skip
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert f"--plugin-options {other} --catalog" in line and "my options" not in line, line
    # a unit made with the shipped options beside it: one command cannot refill both
    both = tmp_path / "both.csv"
    both.write_text("metric,plugin\nnum_nodes,slurm_pub\nambient,ipmi_pub\n")
    made = _dxt("extract", "examon", "--url", examon_sim.url, "--archive", str(root), "-q",
                "--metric", "ambient", "--plugin", "ipmi_pub", "--format", "parquet", *days)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    for f in root.glob("examon/plugin=*/metric=*/*2020-03-10.*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(both), *days)
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert "--plugin-options PLUGIN_OPTIONS --catalog" in line, line
    assert f"made with --plugin-options (none: the defaults), {options}" in cov.stderr, cov.stderr
