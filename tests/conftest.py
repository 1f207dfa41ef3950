"""Shared fixtures: the project's simulators run as separate processes on loopback ports."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dxt_core import procs
from dxt_core.simulate import spawn_simulator
from tests.noida_fixtures import noida_es  # noqa: F401  (session fixture: noida-db)
from tests.services import (  # noqa: F401  (PG_*, psql, in_ci: imported from here by tests)
    PG_HOST,
    PG_PORT,
    PG_USER,
    in_ci,
    program,
    psql,
    require_postgres,
    require_service,
    track_database,
    untrack_database,
)

# tiers (the fast tier by default, --all for every tier) and the cleanup of interrupted runs
pytest_plugins = ["tests.tiers", "tests.cleanup"]

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_finish(session: pytest.Session) -> None:
    """Airflow sets up logging when it is first imported (``airflow/settings.py``
    ``initialize()`` -> ``configure_logging`` -> ``dictConfig`` of the root logger), which
    replaces the root logger's handlers, ``caplog``'s among them. Code under test that first
    imports it in the middle of a test (``dxt_core.config``'s ``[dxt]`` fallback reads
    Airflow's conf once ``dxt_core.airflow`` is imported) would leave that test's ``caplog``
    empty. A process whose collected modules imported ``dxt_core.airflow`` imports Airflow
    here, before any test, rather than by the chance of which test module imported it while
    collecting; one that did not (a pytest run of one file, as some tests start) is spared
    its 1.5 s."""
    if "dxt_core.airflow" in sys.modules:
        with contextlib.suppress(ImportError):  # the tests that need Airflow skip without it
            import airflow  # noqa: F401


@pytest.fixture(autouse=True)
def _root_logger_left_as_found() -> Iterator[None]:
    """Importing ``airflow`` in a test process adds a StreamHandler to the root logger, bound
    to the stdout of that moment: the test's capture, closed when the test ends. A later
    test in the same worker that logs at INFO (the index repair does) then gets a "Logging
    error" traceback on its stderr. Each test leaves the root logger's plain stream handlers
    and level as it found them (pytest's own handlers are subclasses and stay its own)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)


class SimulatorProcess:
    def __init__(self, args: list[str]) -> None:
        self.proc, self.url = spawn_simulator("examon", args, stderr=subprocess.PIPE)

    def faults(self, **changes: object) -> dict[str, object]:
        r = httpx.post(f"{self.url}/_sim/faults", json=changes, timeout=10)
        r.raise_for_status()
        return r.json()

    def reset_faults(self) -> None:
        self.faults(
            delay_s=0.0,
            fail_next=0,
            max_points=None,
            slow_points=None,
            slow_delay_s=0.0,
            fail_metrics=[],
        )

    def stats(self) -> dict[str, object]:
        return httpx.get(f"{self.url}/_sim/stats", timeout=10).json()

    def stop(self) -> None:
        procs.stop(self.proc)


@pytest.fixture(scope="session")
def small_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few metrics of every kind: float, int, string (nagios), no-cluster, job table."""
    p = tmp_path_factory.mktemp("catalog") / "catalog.csv"
    p.write_text(
        "metric,plugin\n"
        "ambient,ipmi_pub\n"
        "pcie,ipmi_pub\n"
        "state,nagios_pub\n"
        "num_nodes,slurm_pub\n"
        "PLC_PLC_Q101.Abilita_inverter,schneider_pub\n"
        "job_info_marconi100,job_table\n"
    )
    return p


@pytest.fixture(scope="module")
def examon_sim(small_catalog: Path) -> Iterator[SimulatorProcess]:
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "4"])
    yield sim
    sim.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture()
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of our own on a free loopback port, in memory only (no RDB, no AOF), in
    a temporary directory; stopped afterwards. Nothing else's Redis is touched."""
    exe = program(
        "redis-server",
        "apt-get install redis-server; the production-path test starts its own on a free port",
    )
    workdir = tmp_path_factory.mktemp("redis")
    log_path = workdir / "redis.log"
    for _ in range(3):  # the free port may be taken between probing and binding
        port = free_port()
        with log_path.open("w") as log:
            proc = procs.start(
                [
                    str(exe),
                    *("--port", str(port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no"),
                    *("--dir", str(workdir), "--daemonize", "no"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline and not _redis_ping(port):
            time.sleep(0.1)
        if proc.poll() is None and _redis_ping(port):
            break
        procs.stop(proc, 0)
    else:
        pytest.fail(f"redis-server did not start:\n{log_path.read_text()[-2000:]}")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        procs.stop(proc)


@pytest.fixture()
def pg_database() -> Iterator[str]:
    """A PostgreSQL database of our own (unique name) on 127.0.0.1:5432, dropped afterwards;
    no other database is touched."""
    require_postgres()
    name = f"dxt_test_{uuid.uuid4().hex[:12]}"
    track_database(name)  # dropped at the end of the run if this teardown does not happen
    created = psql(f"CREATE DATABASE {name}")
    assert created.returncode == 0, created.stderr
    try:
        yield name
    finally:
        dropped = psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if dropped.returncode == 0:
            untrack_database(name)


def run_benchmarks(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[str, dict]:
    """``python -m benchmarks --size tiny ARGS`` from the project root; returns its stdout
    and the JSON file it wrote."""
    out_file = tmp_path / "bench.json"
    proc = procs.start(
        [sys.executable, "-m", "benchmarks", "--size", "tiny", *args, "--out", str(out_file)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        # interrupted or timed out: SIGTERM, and time for the benchmark to stop its servers
        procs.stop(proc, 60)
    assert proc.returncode == 0, stderr[-3000:]
    return stdout, json.loads(out_file.read_text())
