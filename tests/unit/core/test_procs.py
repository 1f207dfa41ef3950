"""dxt_core.procs: one way to stop what we start, with real processes and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dxt_core import procs

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def test_stop_ends_a_child_of_our_session_and_unregisters_it():
    proc = procs.start([sys.executable, "-c", "import time; time.sleep(600)"])
    assert proc in procs.tracked()
    assert procs.stop(proc, 10) == -signal.SIGTERM
    assert proc not in procs.tracked()


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period():
    proc = procs.start([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE)
    time.sleep(0.5)  # its handler is set
    t0 = time.monotonic()
    assert procs.stop(proc, 1) == -signal.SIGKILL
    assert 0.9 < time.monotonic() - t0 < 5
    assert proc.stdout is not None and proc.stdout.closed


def test_stop_tracked_stops_what_is_left_and_names_it(monkeypatch):
    # a registry of its own: the session's servers (noida-db...) stay registered and running
    monkeypatch.setattr(procs, "_tracked", {})
    left = procs.start(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    done = procs.start([sys.executable, "-c", "pass"])
    done.wait(30)
    stopped = procs.stop_tracked(grace=5)
    assert [line.split()[0] for line in stopped] == [str(left.pid)]
    assert "time.sleep(600)" in stopped[0]
    assert left.returncode == -signal.SIGTERM
    assert procs.tracked() == []


def test_a_hurried_stop_kills_at_once():
    proc = procs.start([sys.executable, "-c", IGNORES_TERM], start_new_session=True)
    time.sleep(0.5)
    t0 = time.monotonic()
    assert procs.stop(proc, 60, hurry=lambda: True) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5


def test_a_child_nobody_tracked_is_stopped_with_its_session_and_reaped():
    tree = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "process_group=0); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)
    deadline = time.monotonic() + 30
    while len(procs.session_pids(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    members = procs.session_pids(proc.pid)
    assert len(members) == 2
    assert proc.pid in procs.children()
    procs.stop_child(proc.pid, 5)
    assert procs.session_pids(proc.pid) == set()
    assert proc.pid not in procs.children()
    assert not Path(f"/proc/{proc.pid}").exists()  # reaped, not a zombie
    assert proc.poll() == 0  # reaped by stop_child: Popen finds no child left (ECHILD)


def standalone_stand_in(tmp_path: Path) -> subprocess.Popen:
    """A stand-in for ``airflow standalone``: a parent that starts "airflow scheduler" and
    "airflow triggerer" as standalone does (never waited for), then sleeps."""
    airflow = tmp_path / "bin" / "airflow"
    airflow.parent.mkdir()
    airflow.write_text("import time\ntime.sleep(60)\n")
    parent = tmp_path / "standalone.py"
    parent.write_text(
        "import subprocess, sys, time\n"
        "for name in ('scheduler', 'triggerer'):\n"
        f"    subprocess.Popen([sys.executable, {str(airflow)!r}, name])\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = procs.start(
        [sys.executable, str(parent)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def watch_both(proc: subprocess.Popen) -> procs.StandaloneWatch:
    watch = procs.StandaloneWatch(proc)
    deadline = time.monotonic() + 10
    while len(watch.pids) < 2 and time.monotonic() < deadline:
        assert watch.exited() is None
        time.sleep(0.05)
    assert sorted(watch.pids) == ["scheduler", "triggerer"]
    return watch


def test_standalone_watch_names_a_component_that_exited(tmp_path):
    proc = standalone_stand_in(tmp_path)
    try:
        watch = watch_both(proc)
        assert watch.exited() is None
        # killed: it stays a zombie (the parent never reaps it) and is reported
        os.kill(watch.pids["scheduler"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while watch.exited() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.exited() == "scheduler"
    finally:
        procs.stop(proc, 5)
