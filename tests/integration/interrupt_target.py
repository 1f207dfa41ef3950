"""Run by tests/integration/test_interrupted_run.py in a pytest of its own, then interrupted
with a real signal; not collected otherwise (its name does not start with ``test_``).

Each test records the processes and the database the run has started in the JSON file named
by ``DXT_INTERRUPT_OUT``, then waits to be interrupted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core import procs

# a leader whose child moves to a process group of its own, as Airflow's task processes do
TREE = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], process_group=0); "
    "time.sleep(600)"
)


def record(**extra: object) -> None:
    """Write every live process the run started (the tracked ones and their sessions)."""
    pids: dict[int, str] = {}
    for proc in procs.tracked():
        for pid in {proc.pid} | procs.session_pids(proc.pid):
            pids[pid] = " ".join(map(str, proc.args))[:100]
    out = Path(os.environ["DXT_INTERRUPT_OUT"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pids": pids, **extra}))
    tmp.replace(out)  # whole, or not there: the test polls for it


def _tree() -> procs.subprocess.Popen[str]:
    proc = procs.start([sys.executable, "-c", TREE], start_new_session=True)
    deadline = time.monotonic() + 30
    while len(procs.session_pids(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


@pytest.fixture
def interrupted_in_setup() -> Iterator[None]:
    """Interrupted before its ``yield``: pytest has no teardown of it to run."""
    proc = _tree()
    record()
    time.sleep(600)
    yield
    procs.stop(proc)


def test_waits_with_servers_running(examon_sim, redis_url, pg_database):
    proc = _tree()
    try:
        record(database=pg_database)
        time.sleep(600)
    finally:
        procs.stop(proc)


def test_waits_in_setup(interrupted_in_setup):
    raise AssertionError("not reached: the run is interrupted in the fixture's setup")
