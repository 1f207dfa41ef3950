"""The README's first command: `dxt demo` end to end (simulator, airflow standalone, backfill),
run again in the same folder, and stopped by SIGTERM (issue 15). One test, three demos: each
demo takes about a minute on 2 cores."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dxt_core import procs
from tests.airflow.conftest import free_port
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.slow,
    pytest.mark.alone,
]  # minutes each: after the other Airflow tests

DXT = str(Path(sys.executable).parent / "dxt")
# The smallest demo that still shows everything: 9 metrics (one per plugin) x 3 days (the
# README's commands after the demo name the three days before today).
DAYS = 3
SMALL = ["--days", str(DAYS), "--metrics-per-plugin", "1"]


def demo(work: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DXT, "demo", "--exit", "--dir", str(work), "--port", str(port), *SMALL, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def assert_summary(out: subprocess.CompletedProcess[str], work: Path) -> None:
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "airflow backfill create --dag-id dxt_examon" in out.stdout
    assert f"metric-days: {9 * DAYS} archived" in out.stdout  # 9 metrics x DAYS days
    assert out.stdout.count(": success") == DAYS
    assert "Airflow UI: http://127.0.0.1:" in out.stdout
    assert len(list((work / "archive" / "examon").rglob("*.csv.gz"))) == 9 * DAYS


def readme_block_after_the_demo() -> str:
    """The README's shell block that follows "Then, from the same folder:"."""
    text = (ROOT / "README.md").read_text()
    after = text.split("Then, from the same folder:", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def run_readme_commands(work: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run that block as printed, in a folder laid out as a clone after ``./run demo``:
    ``.venv`` (this test's environment) and ``.dxt-demo`` (the demo's work folder)."""
    folder.mkdir()
    (folder / ".venv").symlink_to(Path(sys.prefix))
    (folder / ".dxt-demo").symlink_to(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DXT_"))}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_block_after_the_demo()],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def open_backfills(work: Path) -> list[int]:
    with sqlite3.connect(work / "airflow" / "airflow.db") as db:
        return [r[0] for r in db.execute("SELECT id FROM backfill WHERE completed_at IS NULL")]


def _proc_rows() -> dict[int, tuple[int, int, bytes, bytes]]:
    """pid -> (ppid, session id, cmdline, environ) of every process we may read."""
    rows = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmdline = (d / "cmdline").read_bytes()
            environ = (d / "environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            rows[int(d.name)] = (int(fields[1]), int(fields[3]), cmdline, environ)
    return rows


def demo_processes(work: Path, sessions: set[int]) -> dict[int, str]:
    """Processes in one of ``sessions`` or whose command line or environment names ``work``."""
    mark = str(work).encode()
    return {
        pid: cmd.replace(b"\0", b" ").decode(errors="replace")[:100]
        for pid, (_, sid, cmd, env) in _proc_rows().items()
        if pid != os.getpid() and (sid in sessions or mark in cmd or mark in env)
    }


def port_is_free(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_demo_runs_again_in_its_folder_and_sigterm_stops_everything_it_started(tmp_path):
    """Three demos in one folder (one test: each demo takes about a minute): ``--exit``, the
    README's commands on what it made, a second demo stopped by SIGTERM, a third one."""
    work, port = tmp_path / "demo", free_port()
    first = demo(work, port)
    assert_summary(first, work)
    # --exit stopped Airflow only once the scheduler had closed the backfill: before, the
    # next demo here failed with AlreadyRunningBackfill (exit 2).
    assert open_backfills(work) == []
    # the README's commands after the demo work on it as printed: the runs are listed, and
    # the coverage of the three days is complete (exit 0; 3 would mean gaps)
    readme = run_readme_commands(work, tmp_path / "clone")
    assert readme.returncode == 0, readme.stdout[-3000:] + readme.stderr[-3000:]
    assert "backfill__" in readme.stdout  # airflow dags list-runs dxt_examon

    # The second demo in the same folder, left running until SIGTERM
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = procs.start(
            [DXT, "demo", "--dir", str(work), "--port", str(port), *SMALL],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: every process it starts is findable
        )
    try:
        deadline = time.monotonic() + 900
        while "press Ctrl-C" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(2)

        # it ran again where the first one left its folder: nothing of it to cancel
        assert "cancelling backfill" not in log.read_text()
        assert f"metric-days: {9 * DAYS} archived" in log.read_text(), log.read_text()[-3000:]

        # What the demo started: its own session (the simulator) and Airflow's, which
        # standalone leads as the demo's child.
        rows = _proc_rows()
        sessions = {proc.pid} | {sid for _, (ppid, sid, _, _) in rows.items() if ppid == proc.pid}
        sessions |= {
            sid for _, (_, sid, cmd, env) in rows.items() if str(work).encode() in cmd + env
        }
        sessions.discard(os.getsid(0))
        before = demo_processes(work, sessions)
        names = " | ".join(before.values())
        for part in ("examon.simulator", "airflow standalone", "airflow scheduler", "api_server"):
            assert part in names, names
        assert not port_is_free(port)
        # the connection form's Test button works (Airflow 3 ships it disabled: "Testing
        # connections is disabled in Airflow configuration"); our probe names the server
        closed = free_port()
        tested = httpx.post(
            f"http://127.0.0.1:{port}/api/v2/connections/test",
            json={"connection_id": "t", "conn_type": "examon", "host": "127.0.0.1", "port": closed},
            timeout=180,
        )
        assert tested.status_code == 200, tested.text
        assert tested.json()["status"] is False, tested.text
        assert f"127.0.0.1:{closed}" in tested.json()["message"], tested.text

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130, log.read_text()[-3000:]
        assert "stopped by SIGTERM" in log.read_text()
        left = demo_processes(work, sessions)
        while left and time.monotonic() - t0 < 60:
            time.sleep(0.5)
            left = demo_processes(work, sessions)
        assert left == {}, f"left running after SIGTERM: {left}"
        assert port_is_free(port)
        print(f"SIGTERM stopped {len(before)} processes in {time.monotonic() - t0:.1f} s")
    finally:
        procs.stop(proc, 0)

    # A demo stopped before the scheduler closed its backfill leaves it open (the scheduler
    # checks every 30 s): reproduce that state if this one was closed in time.
    if not open_backfills(work):
        with sqlite3.connect(work / "airflow" / "airflow.db") as db:
            db.execute(
                "UPDATE backfill SET completed_at = NULL WHERE id = (SELECT max(id) FROM backfill)"
            )
    again = demo(work, port)
    assert_summary(again, work)
    assert "cancelling backfill" in again.stdout
    assert "left open by an earlier demo in this folder" in again.stdout
    assert open_backfills(work) == []
