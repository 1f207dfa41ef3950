"""Backend simulators, run as separate processes by the demo, the tests and the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from dxt_core import procs
from dxt_core.errors import DxtError


def spawn_simulator(
    backend: str,
    args: list[str],
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    timeout: float = 30,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate BACKEND --port 0 ARGS`` as a process (the simulator module of
    the backend's package, found through the registry); return it once it prints the URL it
    listens on, and that URL.

    Raises:
        DxtError: the simulator exited, or printed no URL within ``timeout`` seconds (it is
            stopped).
    """
    from dxt_core.backends import get

    package = get(backend).package
    return start_listening(
        [sys.executable, "-m", f"{package}.simulator", "--port", "0", *args],
        what=f"the {backend} simulator (args: {' '.join(args)})",
        stderr=stderr,
        timeout=timeout,
    )


def start_listening(
    cmd: list[str],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    stderr: int | IO[Any] | None = None,
    timeout: float = 30,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``cmd`` (a server that prints ``... listening on URL`` once it listens, as
    :mod:`dxt_core.simulate.serving` does); return the process and that URL.

    Raises:
        DxtError: ``what`` (the server, for the message) exited, or printed no URL within
            ``timeout`` seconds (it is stopped).
    """
    proc = procs.start(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "listening on " in line:
            return proc, line.rsplit(" ", 1)[-1].strip()
    procs.stop(proc, 0)
    raise DxtError(f"{what} did not start")
