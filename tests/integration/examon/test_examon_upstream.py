"""Contract tests of the Examon client: it talks to the servers as they really are.

The simulator (a separate process) plays the upstream servers as their sources show them;
each test names the upstream file it encodes. The client of the previous release fails
these tests (see the commit that added them).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core import Archive, RetryPolicy, day_window
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.simulator.model import JOB_PERIOD_S, DataModel, SimConfig
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.errors import ArchiveError, QueryRejected, RateLimited, SourceError
from tests.conftest import SimulatorProcess
from tests.integration.examon.test_examon_extract import read_rows

pytestmark = pytest.mark.integration

DAY = dt.date(2020, 3, 9)
NODES = 4
PER_DAY = 86_400 // 20
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
FAN = CatalogEntry("fan0_0", "ipmi_pub")
JOBS = CatalogEntry("job_info_marconi100", "job_table")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("upstream") / "catalog.csv"
    p.write_text(
        "metric,plugin\nambient,ipmi_pub\nfan0_0,ipmi_pub\nstate,nagios_pub\n"
        "job_info_marconi100,job_table\n"
    )
    return p


@pytest.fixture(scope="module")
def sim(catalog: Path):
    process = SimulatorProcess(["--catalog", str(catalog), "--nodes", str(NODES)])
    yield process
    process.stop()


@pytest.fixture
def up(sim: SimulatorProcess):
    yield sim
    sim.reset_faults()
    sim.faults(
        fail_status=503,
        fail_message="simulated outage",
        refusal="query_limit",
        rate_limit_next=0,
        rate_limit_status=429,
        retry_after_s=None,
        grafana_timeout_s=30.0,
        corrupt_values=None,
        stray_points=False,
    )


def source(
    url: str,
    retry: RetryPolicy | None = None,
    windows: WindowPolicy | None = None,
    options: ExamonOptions | None = None,
    **kw: Any,
) -> KairosDBSource:
    return KairosDBSource(
        ExamonConnection(url=url, **kw),
        options=options,
        retry=retry or RetryPolicy(attempts=3, backoff_s=0.01),
        windows=windows,
    )


# --------------------------------------------------------------------------------------------
# Jobs: ExamonHPC/examon web/examon-server/server.py, examon-client 0.4 jobsclient.py
# --------------------------------------------------------------------------------------------


def test_job_table_through_v1_and_v2_is_the_same(up: SimulatorProcess, tmp_path: Path) -> None:
    with source(up.url, jobs_url=up.url) as src:  # jobs_api v1, the default
        v1 = archive_examon_day(src, JOBS, DAY, Archive(tmp_path / "v1"))
    with source(up.url, jobs_url=up.url, jobs_api="v2") as src:
        v2 = archive_examon_day(src, JOBS, DAY, Archive(tmp_path / "v2"))
    assert v1.status == "archived" and v1.rows == 86_400 // JOB_PERIOD_S
    assert v1.path is not None and v2.path is not None
    assert v1.path.read_bytes() == v2.path.read_bytes()
    assert v1.stats.retries == 0  # the body is accepted at once, no 500 retried


def test_each_job_lands_in_exactly_one_day(up: SimulatorProcess, tmp_path: Path) -> None:
    # The server selects (start_time, end_time) >= (T1,T1) AND <= (T2,T2): a job of zero
    # length starting at the next midnight comes back with the day before; it belongs to
    # the next day only.
    model = DataModel(SimConfig(catalog=[(JOBS.metric, "job_table")], nodes=NODES))
    day = DAY
    while True:
        midnight = day_window(day + dt.timedelta(days=1)).start_ms
        k = midnight // (JOB_PERIOD_S * 1000)
        start, end = model.job_span_ms(k)
        if start == end == midnight:
            break
        day += dt.timedelta(days=1)
    archive = Archive(tmp_path)
    with source(up.url, jobs_url=up.url) as src:
        first = archive_examon_day(src, JOBS, day, archive)
        second = archive_examon_day(src, JOBS, day + dt.timedelta(days=1), archive)
    assert (
        first.extra["dropped_outside_window"] == 1 and second.extra["dropped_outside_window"] == 0
    )
    manifest = json.loads(first.manifest.read_text())
    assert manifest["dropped_outside_window"] == 1
    ids = []
    for rep in (first, second):
        assert rep.path is not None
        rows = read_rows(rep.path)
        ids.append([int(r[rows[0].index("job_id")]) for r in rows[1:]])
    assert k not in ids[0] and k in ids[1]
    both = sorted(ids[0] + ids[1])
    assert both == list(range(both[0], both[0] + len(both)))  # no job twice, none lost


def test_a_refused_jobs_api_names_the_other(up: SimulatorProcess, tmp_path: Path) -> None:
    # A server without the handler asked for: 404 (or 500 for a body of the other kind).
    for api, other in (("v1", "v2"), ("v2", "v1")):
        with source(up.url, jobs_url=f"{up.url}/elsewhere", jobs_api=api) as src:
            with pytest.raises(QueryRejected, match=f"jobs_api={other}") as ei:
                archive_examon_day(src, JOBS, DAY, Archive(tmp_path))
        assert f"/api/{api}/examon/jobs/query" in str(ei.value)


# --------------------------------------------------------------------------------------------
# KairosDB values: kairosdb v1.2.2 DoubleDataPoint.writeValueToJson + org.json numberToString
# --------------------------------------------------------------------------------------------


def test_parquet_value_type_is_stable_when_kairosdb_prints_24_then_24_5(
    up: SimulatorProcess, tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    archive = Archive(tmp_path)
    with source(up.url, windows=WindowPolicy(initial_s=900)) as src:
        reps = [
            archive_examon_day(src, FAN, DAY + dt.timedelta(days=i), archive, fmt="parquet")
            for i in range(2)
        ]
        csv = archive_examon_day(src, FAN, DAY, Archive(tmp_path / "csv"))
    for rep in reps:
        assert rep.rows == NODES * PER_DAY and rep.path is not None
        assert str(pq.read_schema(rep.path).field("value").type) == "double"
    assert csv.path is not None
    values = {r[1] for r in read_rows(csv.path)[1:]}
    assert any("." not in v for v in values) and any(v.endswith(".5") for v in values)


def test_a_declared_int64_metric_with_a_fraction_is_a_clear_error(
    up: SimulatorProcess, tmp_path: Path
) -> None:
    pytest.importorskip("pyarrow")
    toml = tmp_path / "plugins.toml"
    toml.write_text('[plugins.ipmi_pub]\ncluster_tag = true\nvalue_type = "int64"\n')
    with source(up.url, options=ExamonOptions.from_toml(toml)) as src:
        with pytest.raises(ArchiveError, match=r"ipmi_pub/fan0_0: a non-integer value.*int64"):
            archive_examon_day(src, FAN, DAY, Archive(tmp_path / "a"), fmt="parquet")
    assert not list((tmp_path / "a").rglob("*.parquet"))


@pytest.mark.parametrize(
    ("mode", "shown"), [("trailing_comma", r"\[\d{13},\]"), ("bad_number", r"\[\d{13},1-2e\]")]
)
def test_invalid_numbers_are_refused_naming_metric_window_text(
    up: SimulatorProcess, tmp_path: Path, mode: str, shown: str
) -> None:
    up.faults(corrupt_values=mode)
    with source(up.url) as src:
        with pytest.raises(SourceError) as ei:
            archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    message = str(ei.value)
    assert "ipmi_pub/ambient, window [2020-03-09T00:00:00+01:00, " in message
    assert "not a JSON number" in message
    assert __import__("re").search(shown, message), message
    assert not list(tmp_path.rglob("*.csv.gz")) and not list(tmp_path.rglob("*.manifest.json"))


def test_points_outside_the_window_are_dropped_and_counted(
    up: SimulatorProcess, tmp_path: Path
) -> None:
    up.faults(stray_points=True)  # each answer also holds a point from an hour before
    with source(up.url) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    queries = rep.stats.requests - 2  # the tag query and the count query have no values
    assert rep.rows == NODES * PER_DAY
    assert rep.extra["dropped_outside_window"] == queries > 0
    assert json.loads(rep.manifest.read_text())["dropped_outside_window"] == queries
    w = day_window(DAY)
    assert rep.path is not None
    for r in read_rows(rep.path)[1:]:
        assert w.start <= dt.datetime.fromisoformat(r[0]) < w.end


# --------------------------------------------------------------------------------------------
# Refusals (source.REFUSAL_RULES): KairosDB, Grafana's proxy, nginx in front
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", ["query_limit", "memory", "heap"])
def test_kairosdb_refusals_split_the_window(
    up: SimulatorProcess, tmp_path: Path, refusal: str
) -> None:
    # QueryMonitor.java; util/MemoryMonitorException.java; MetricsResource.java runQuery.
    with source(up.url) as src:
        ref = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "ref"))
    up.faults(max_points=300, refusal=refusal)
    with source(up.url, windows=WindowPolicy(initial_s=86_400)) as src:
        rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "b"))
    assert rep.stats.splits >= 6
    assert rep.path is not None and ref.path is not None
    assert rep.path.read_bytes() == ref.path.read_bytes()


@pytest.mark.parametrize(("status", "retry_after"), [(429, 0.2), (503, None)])
def test_a_rate_limit_is_waited_out_never_split(
    up: SimulatorProcess, tmp_path: Path, status: int, retry_after: float | None
) -> None:
    # nginx ngx_http_limit_req_module.c: limit_req_status (503 by default, often 429), its
    # HTML page ("429 Too Many Requests"), Retry-After only when configured.
    with source(up.url, windows=WindowPolicy(initial_s=86_400)) as src:
        schema = src.schema(AMBIENT, day_window(DAY))
        up.faults(rate_limit_next=2, rate_limit_status=status, retry_after_s=retry_after)
        batches = list(src.iter_batches(AMBIENT, day_window(DAY), schema))
    assert sum(b.points for b in batches) == NODES * PER_DAY
    assert len(batches) == 1  # one 24 h window: nothing was split


def test_a_rate_limit_that_outlasts_the_retries_is_rate_limited(
    up: SimulatorProcess, tmp_path: Path
) -> None:
    up.faults(rate_limit_next=1000, rate_limit_status=429)
    with source(up.url, retry=RetryPolicy(attempts=2, backoff_s=0.01)) as src:
        with pytest.raises(RateLimited, match="limits the request rate"):
            archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))


def test_a_403_quota_refusal_fails_at_once(up: SimulatorProcess, tmp_path: Path) -> None:
    # RFC 9110 15.5.4: 403 is a refusal to authorize; "exceeded" in it is no window size.
    with source(up.url, windows=WindowPolicy(initial_s=3600)) as src:
        schema = src.schema(AMBIENT, day_window(DAY))
        up.faults(fail_next=1, fail_status=403, fail_message="quota exceeded")
        it = src.iter_batches(AMBIENT, day_window(DAY), schema)
        with pytest.raises(QueryRejected) as ei:
            next(it)
    assert ei.value.status == 403 and "quota exceeded" in str(ei.value)
    assert up.stats()["faults_served"] >= 1


@pytest.fixture(scope="module")
def grafana(catalog: Path):
    process = SimulatorProcess(
        ["--catalog", str(catalog), "--nodes", "2", "--user", "g", "--password", "pw"]
    )
    yield process
    process.stop()


@pytest.mark.slow
def test_grafana_proxy_timeout_splits_the_window(grafana: SimulatorProcess, tmp_path: Path) -> None:
    # grafana/grafana pkg/util/proxyutil/reverse_proxy.go: 504 with an empty body once the
    # upstream outlasts [dataproxy] timeout (conf/defaults.ini: 30 s).
    grafana.faults(slow_points=1000, slow_delay_s=5.0, grafana_timeout_s=0.3)
    try:
        with source(
            grafana.url,
            user="g",
            password="pw",
            grafana_proxy=True,
            windows=WindowPolicy(initial_s=86_400, min_s=300),
        ) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        grafana.faults(slow_points=None, slow_delay_s=0.0, grafana_timeout_s=30.0)
    assert rep.stats.splits >= 1 and rep.rows == 2 * PER_DAY


# --------------------------------------------------------------------------------------------
# Tag keys and metric names: examon-client 0.4 kairosdb.py query_metricstags and
# query_metricsnames; kairosdb v1.2.2 MetricsResource.getMetricNames
# --------------------------------------------------------------------------------------------


def test_tag_keys_are_asked_over_all_time(up: SimulatorProcess, tmp_path: Path) -> None:
    httpx.post(f"{up.url}/_sim/stats/reset").raise_for_status()
    with source(up.url) as src:
        archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    asked = up.stats()["last_tags_query"]
    assert asked == {
        "start_absolute": 0,
        "end_absolute": None,
        "start_relative": None,
        "end_relative": None,
    }


def test_a_misspelled_metric_names_the_closest_known_ones(
    up: SimulatorProcess, tmp_path: Path
) -> None:
    httpx.post(f"{up.url}/_sim/stats/reset").raise_for_status()
    with source(up.url) as src:
        for day in (DAY, DAY + dt.timedelta(days=1)):
            with pytest.raises(QueryRejected) as ei:
                archive_examon_day(src, CatalogEntry("ambeint", "ipmi_pub"), day, Archive(tmp_path))
            assert "'ambeint'" in str(ei.value) and "ambient" in str(ei.value)
            assert "/api/v1/metricnames" in str(ei.value)
    assert up.stats()["requests"]["/api/v1/metricnames"] == 1  # cached per source
    # A known metric without series (here: another cluster) is an empty day, not an error
    # (another cluster may lack a metric); the manifest and the log say which clusters it
    # has, so that a mistyped cluster is seen (asked once per metric and source)
    with source(up.url, cluster="marconi10") as src:
        for day in (DAY, DAY + dt.timedelta(days=1)):
            report = archive_examon_day(src, AMBIENT, day, Archive(tmp_path))
            assert report.status == "empty"
            doc = json.loads(report.manifest.read_text())
            assert doc["cluster_note"].startswith(
                "no series of 'ambient' has cluster='marconi10': its series' cluster values "
                "are marconi100; if the cluster is mistyped, fix it (--cluster"
            )


# --------------------------------------------------------------------------------------------
# The first hour: `dxt simulate examon`, then the command it prints
# --------------------------------------------------------------------------------------------


def _printed_command(args: list[str]) -> tuple[subprocess.Popen[str], list[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dxt_core.backends.examon.simulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("archive from it with:"):
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError(
                f"no command printed: {lines} {proc.stderr.read() if proc.stderr else ''}"
            )
        lines.append(line)
    return proc, lines, lines[-1].split(":", 1)[1].strip()


def _run_printed(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    argv = command.split()
    assert argv[:3] == ["dxt", "extract", "examon"]
    argv = [
        sys.executable, "-m", "dxt_core.cli", *argv[1:],
    ]  # fmt: skip
    argv[argv.index("--archive") + 1] = str(tmp_path / "archive")
    argv[argv.index("--start-day") + 1] = "2020-03-09"
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_printed_command_archives_jobs_too(catalog: Path, tmp_path: Path) -> None:
    proc, lines, command = _printed_command(["--port", "0", "--catalog", str(catalog)])
    try:
        assert "listening on" in lines[0]
        out = _run_printed(command, tmp_path)
        assert out.returncode == 0, out.stderr
        assert "archived 4 metric-days" in out.stdout, out.stdout
        assert list((tmp_path / "archive/examon/job_table").rglob("*.csv.gz"))
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_the_simulator_serves_jobs_where_the_cli_looks_by_default(
    catalog: Path, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 5000))
        except OSError:
            pytest.skip("port 5000 is taken on this machine")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, lines, command = _printed_command(["--port", str(port), "--catalog", str(catalog)])
    try:
        assert any("jobs API also on http://127.0.0.1:5000" in line for line in lines)
        assert "--jobs-url" not in command
        out = _run_printed(command, tmp_path)
        assert out.returncode == 0, out.stderr
        assert list((tmp_path / "archive/examon/job_table").rglob("*.csv.gz"))
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_the_printed_command_with_a_user_carries_the_password_variable(
    catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --user, the printed command sets DXT_EXAMON_PASSWORD (dxt extract reads the
    password only from there), and runs as printed in a shell."""
    monkeypatch.setenv("DXT_SIM_PASSWORD", "s3cret-sim")
    proc, lines, command = _printed_command(
        ["--port", "0", "--jobs-port", "off", "--catalog", str(catalog), "--user", "alice"]
    )
    try:
        assert command.startswith('DXT_EXAMON_PASSWORD="$DXT_SIM_PASSWORD" dxt extract examon ')
        assert "--user alice" in command and "s3cret-sim" not in "".join(lines)
        shell = command.replace("--archive ./archive", f"--archive {tmp_path / 'a'}")
        shell = re.sub(r"--start-day \S+", "--start-day 2020-03-09", shell)
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        out = subprocess.run(
            ["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=300
        )
        assert out.returncode == 0, out.stderr
        assert "0 failed" in out.stdout
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
