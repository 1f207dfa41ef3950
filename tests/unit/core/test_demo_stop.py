"""``dxt demo``'s stopping and its checks before starting (issue 15), without Airflow: real
processes and signals, the demo's own functions."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dxt_core.demo import Shutdown, Stopped, stop_session
from dxt_core.procs import session_pids

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

DXT = str(Path(sys.executable).parent / "dxt")

# A leader that starts two children: one in its group, one in a process group of its own
# (as Airflow's task processes put themselves) that ignores SIGTERM.
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    ignore = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring', flush=True); time.sleep(600)"
    )
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    subprocess.Popen([sys.executable, "-c", ignore], process_group=0)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def start_tree() -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    assert sorted([proc.stdout.readline(), proc.stdout.readline()]) == ["ignoring\n", "ready\n"]
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while len(session_pids(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_stop_session_ends_every_process_of_the_session_in_bounded_time():
    proc = start_tree()
    members = session_pids(proc.pid)
    assert len(members) == 3
    groups = {os.getpgid(p) for p in members}
    assert len(groups) == 2  # killpg on the leader's group alone would miss one
    t0 = time.monotonic()
    stop_session(proc, 2, Shutdown())
    took = time.monotonic() - t0
    assert session_pids(proc.pid) == set()
    assert proc.returncode is not None
    assert 2 <= took < 8, took  # the SIGTERM-ignoring one needed the SIGKILL after 2 s


def test_a_second_signal_makes_the_stop_hurry():
    proc = start_tree()
    shutdown = Shutdown()
    shutdown.hurry = True
    t0 = time.monotonic()
    stop_session(proc, 60, shutdown)
    assert session_pids(proc.pid) == set()
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_stopping_signal_raises_stopped_once(sig):
    with Shutdown() as shutdown:
        with pytest.raises(Stopped) as got:
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler runs at once and interrupts this
        assert got.value.signum == sig
        # While stopping, another signal only asks to hurry.
        os.kill(os.getpid(), sig)
        time.sleep(0.1)
        assert shutdown.hurry
    assert signal.getsignal(sig) is not shutdown._handle  # handlers restored


def test_a_signal_while_starting_a_process_waits_until_it_is_registered():
    registered = []
    with Shutdown() as shutdown, pytest.raises(Stopped):
        with shutdown.holding():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            registered.append("callback")  # runs: the signal is held
    assert registered == ["callback"]


def test_processes_left_by_a_killed_demo_are_named_with_the_command_that_ends_them(tmp_path):
    work = tmp_path / "demo"
    work.mkdir()
    # Stand-ins for what a SIGKILLed demo leaves: a process of its Airflow (same environment
    # as the demo gives Airflow, in a session of its own) and one more in that session whose
    # environment was rewritten (as setproctitle does).
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(work / "airflow"),
        "DXT_EXAMON_CATALOG": str(work / "catalog.csv"),
    }
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], env={}); "
        "time.sleep(600)"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(session_pids(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = sorted(session_pids(leader.pid))
        assert len(pids) == 2
        out = subprocess.run(
            [DXT, "demo", "--dir", str(work), "--exit"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "AIRFLOW_HOME": str(work / "airflow")},  # like a user's shell
        )
        assert out.returncode == 2, out.stderr
        assert f"processes of an earlier 'dxt demo --dir {work}' are still running" in out.stderr
        assert f"stop them with:  kill {pids[0]} {pids[1]}" in out.stderr
        assert "simulator" not in out.stdout  # nothing was started
        subprocess.run(["kill", *map(str, pids)], check=True)  # the command it names works
        leader.wait(10)
        deadline = time.monotonic() + 10
        while session_pids(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_pids(leader.pid) == set()
    finally:
        for pid in session_pids(leader.pid):
            os.kill(pid, signal.SIGKILL)
        leader.wait(10)


def test_a_busy_ui_port_is_an_error_naming_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [DXT, "demo", "--dir", str(tmp_path / "demo"), "--port", str(port), "--exit"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2
    assert f"port {port} (the Airflow UI) is in use" in out.stderr
    assert "pass --port" in out.stderr


def test_the_demo_stops_waiting_when_a_component_of_standalone_exited(tmp_path):
    from dxt_core import procs
    from dxt_core.demo import wait_for_runs
    from dxt_core.errors import DxtError
    from tests.unit.core.test_procs import standalone_stand_in, watch_both

    proc = standalone_stand_in(tmp_path)
    try:
        watch = watch_both(proc)
        with socket.socket() as s:  # a port nothing listens on: the API is never reached
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.kill(watch.pids["triggerer"], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(DxtError) as err:
            wait_for_runs(port, {"2024-05-10", "2024-05-11"}, 60, watch, tmp_path / "sa.log")
        assert time.monotonic() - started < 30
        text = str(err.value)
        assert "airflow triggerer exited under airflow standalone" in text, text
        assert "with 0 of 2 runs finished" in text and f"{tmp_path / 'sa.log'}" in text, text
        assert "begin with 'triggerer';" in text, text
    finally:
        procs.stop(proc, 5)


def test_the_demo_kept_running_stops_when_a_component_of_standalone_exited(tmp_path, capsys):
    # after its summary the demo keeps Airflow up for the user; a scheduler that dies then
    # would leave a UI that answers while nothing runs: the demo says which one and stops
    from dxt_core import procs
    from dxt_core.demo import keep_running
    from dxt_core.errors import DxtError
    from tests.unit.core.test_procs import standalone_stand_in, watch_both

    proc = standalone_stand_in(tmp_path)
    try:
        watch = watch_both(proc)
        os.kill(watch.pids["scheduler"], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(DxtError) as err:
            keep_running(watch, tmp_path / "sa.log", poll_s=0.05)
        assert time.monotonic() - started < 30
        text = str(err.value)
        assert "airflow scheduler exited under airflow standalone while the demo kept it" in text
        assert "begin with 'scheduler';" in text and str(tmp_path / "sa.log") in text, text
        assert "Airflow keeps running; press Ctrl-C" in capsys.readouterr().out
    finally:
        procs.stop(proc, 5)


@pytest.mark.slow  # 1.4 s each: a real demo started until its simulator is up
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_demo_stopped_by_a_signal_exits_130_as_every_command_does(tmp_path, sig):
    # README: every command exits 130 for Ctrl-C, SIGTERM or SIGHUP (it was 128 + signum)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [DXT, "demo", "--dir", str(tmp_path / "demo"), "--port", str(port), "--exit"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # stopped once it has started something to stop
            if "simulator at" in line:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 130, err
    assert f"stopped by {sig.name}" in err
