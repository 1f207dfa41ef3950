"""Backend simulators, run as separate processes by the demo, the tests and the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import IO, Any

from dxt_core import procs
from dxt_core.errors import DxtError


def _spawn(
    backend: str, args: list[str], stderr: int | IO[Any] | None, timeout: float
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate BACKEND --port 0 ARGS``; return the process once it prints its URL."""
    from dxt_core.backends import get

    package = get(backend).package
    proc = procs.start(
        [sys.executable, "-m", f"{package}.simulator", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            return proc, line.rsplit(" ", 1)[-1].strip()
    procs.stop(proc, 0)
    raise DxtError(f"the {backend} simulator did not start (args: {' '.join(args)})")


def spawn(
    backend: str,
    args: list[str],
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    timeout: float = 30,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate BACKEND --port 0 ARGS`` as a process; return it and its URL."""
    return _spawn(backend, args, stderr, timeout)


def spawn_examon_simulator(
    args: list[str], stderr: int | IO[Any] | None = subprocess.DEVNULL, timeout: float = 30
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate examon --port 0 ARGS`` as a process; return it and its URL."""
    return _spawn("examon", args, stderr, timeout)


def spawn_kwollect_simulator(
    args: list[str], stderr: int | IO[Any] | None = subprocess.DEVNULL, timeout: float = 30
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate kwollect --port 0 ARGS`` as a process; return it and its URL."""
    return _spawn("kwollect", args, stderr, timeout)
