"""An interrupted test run stops every process its fixtures started and drops the databases
it created (tests/cleanup.py, dxt_core/procs.py), driven with real signals: a pytest of its
own runs tests/integration/interrupt_target.py, which starts the Examon simulator, a
redis-server, a PostgreSQL database and a session whose child leaves its process group, and
is then sent SIGINT (Ctrl-C) or SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dxt_core import procs
from tests.conftest import ROOT
from tests.services import psql, require_postgres

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
]

TARGET = "tests/integration/interrupt_target.py"
# pytest with Ctrl-C's usual handler even when this run was started with SIGINT ignored (a
# background job of a shell without job control): ignored, it would not be inherited
PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def alive(pid: int) -> bool:
    st = procs.proc_stat(Path(f"/proc/{pid}"))
    return st is not None and st[0] != "Z"


def interrupt(tmp_path: Path, test: str, sig: int) -> tuple[dict, str, int]:
    """Run ``TARGET::test`` in a pytest of its own, send ``sig`` once it has recorded what it
    started; return the record, its output and its exit status."""
    out = tmp_path / "started.json"
    log = tmp_path / "pytest.log"
    env = {**os.environ, "DXT_INTERRUPT_OUT": str(out)}
    with log.open("w") as f:
        inner = procs.start(
            [sys.executable, "-c", PYTEST, "-q", "-p", "no:cacheprovider", f"{TARGET}::{test}"],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the signal goes to pytest alone, not to its children
        )
    try:
        deadline = time.monotonic() + 120
        while not out.exists():
            assert inner.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        started = json.loads(out.read_text())
        assert all(alive(int(pid)) for pid in started["pids"]), started
        os.kill(inner.pid, sig)
        rc = inner.wait(60)
    finally:
        procs.stop(inner, 0)
    return started, log.read_text(), rc


@pytest.mark.slow  # 4-7 s: a simulator, a redis-server and a database to start
def test_ctrl_c_stops_every_server_and_drops_the_database(tmp_path):
    require_postgres()
    started, output, rc = interrupt(tmp_path, "test_waits_with_servers_running", signal.SIGINT)
    names = " | ".join(started["pids"].values())
    for part in ("examon.simulator", "redis-server", "import subprocess"):
        assert part in names, names
    assert len(started["pids"]) == 4, started  # simulator, redis, the leader and its child
    assert rc == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert "KeyboardInterrupt" in output, output[-3000:]
    left = {pid: cmd for pid, cmd in started["pids"].items() if alive(int(pid))}
    assert left == {}, f"left running after Ctrl-C: {left}\n{output[-3000:]}"
    db = started["database"]
    assert db.startswith("dxt_test_")
    listed = psql(f"SELECT datname FROM pg_database WHERE datname = '{db}'")
    assert listed.returncode == 0, listed.stderr
    assert "(0 rows)" in listed.stdout, f"{db} is still there:\n{listed.stdout}"


def test_sigterm_in_a_fixture_setup_stops_what_it_started(tmp_path):
    started, output, rc = interrupt(tmp_path, "test_waits_in_setup", signal.SIGTERM)
    assert len(started["pids"]) == 2, started  # the leader and its child in a group of its own
    assert rc == pytest.ExitCode.INTERRUPTED, output[-3000:]
    # the fixture never reached its teardown: the run's cleanup stopped its session, and says so
    assert "cleanup: stopped 1 process(es) left running" in output, output[-3000:]
    left = {pid: cmd for pid, cmd in started["pids"].items() if alive(int(pid))}
    assert left == {}, f"left running after SIGTERM: {left}\n{output[-3000:]}"
