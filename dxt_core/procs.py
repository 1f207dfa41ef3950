"""Starting and stopping child processes: one helper for the demo, benchmarks and tests.

A child started with ``start_new_session=True`` (Airflow, noida-db, redis-server) leads a
session of its own. Its own children may move to process groups of their own (Airflow's task
processes, a Celery worker's pool), but they stay in the session, so :func:`stop` signals
every live member of the session (Linux ``/proc``; elsewhere the process group): SIGTERM to
each, then, after the grace period or at once when :func:`hurry` was called, SIGKILL to each
one left. A child in our own session is signalled alone.

:func:`start` (or :func:`track` on a process started elsewhere) registers a child;
:func:`stop_tracked` stops every registered child still running. The test suite calls it
when a run is interrupted (Ctrl-C, SIGTERM, a timeout) and at the end of every run, so a
fixture interrupted before its teardown leaves nothing running.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_tracked: dict[int, subprocess.Popen[Any]] = {}
_lock = threading.Lock()
_hurry = threading.Event()


def start(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **popen_kwargs)``, registered for :func:`stop_tracked`."""
    return track(subprocess.Popen(argv, **popen_kwargs))


def track(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """Register ``proc`` for :func:`stop_tracked`; returns it."""
    with _lock:
        _tracked[proc.pid] = proc
    return proc


def untrack(proc: subprocess.Popen[Any]) -> None:
    with _lock:
        _tracked.pop(proc.pid, None)


def tracked() -> list[subprocess.Popen[Any]]:
    """The registered children not yet stopped by :func:`stop`."""
    with _lock:
        return list(_tracked.values())


def hurry() -> None:
    """From now on :func:`stop` sends SIGKILL without waiting (a second Ctrl-C asked)."""
    _hurry.set()


def hurrying() -> bool:
    return _hurry.is_set()


def proc_stat(pid_dir: Path) -> tuple[str, int, int] | None:
    """(state, ppid, session) of a /proc/<pid> entry, or None when it is gone."""
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[3])


def has_proc() -> bool:
    return Path("/proc/self/stat").is_file()


def _live(match: Callable[[tuple[str, int, int]], bool]) -> list[int]:
    """Live (not zombie) processes whose (state, ppid, session) ``match`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = proc_stat(d)
            if st is not None and st[0] != "Z" and match(st):
                out.append(int(d.name))
    return out


def session_pids(sid: int) -> set[int]:
    """Live (not zombie) processes of session ``sid`` (Linux /proc)."""
    return set(_live(lambda st: st[2] == sid))


def _members(proc: subprocess.Popen[Any]) -> set[int]:
    """The processes stopping ``proc`` means: its session when it leads one, else itself."""
    alive = {proc.pid} if proc.poll() is None else set()
    if has_proc():
        # a session id is its leader's pid; Linux does not reuse a pid still naming a session
        return alive | session_pids(proc.pid)
    return alive


def _signal(proc: subprocess.Popen[Any], pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pid == proc.pid and proc.returncode is None:
            proc.send_signal(sig)  # Popen's own call: no signal to a reaped, reused pid
        elif pid != proc.pid:
            os.kill(pid, sig)
    if not has_proc():  # no /proc (macOS): the process group is what can be reached
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)


def _terminate(
    members: Callable[[], set[int]],
    send: Callable[[int, int], None],
    grace: float,
    hurry: Callable[[], bool] | None,
) -> None:
    """Signal ``members()`` until none is left: SIGTERM once to each, SIGKILL to each after
    ``grace`` seconds or as soon as ``hurry()`` (default: :func:`hurrying`) is true."""
    hurried = hurry or hurrying
    deadline = time.monotonic() + grace
    termed: set[int] = set()
    killing_since: float | None = None
    while True:
        kill = hurried() or time.monotonic() >= deadline
        if kill and killing_since is None:
            killing_since = time.monotonic()
        sig = signal.SIGKILL if kill else signal.SIGTERM
        left = members()
        if not left:
            return
        for pid in left:
            if kill or pid not in termed:
                send(pid, sig)
                termed.add(pid)
        if killing_since is not None and time.monotonic() >= killing_since + 10:
            return  # SIGKILL cannot be ignored: what is left is a zombie of a zombie parent
        time.sleep(0.05)


def stop(
    proc: subprocess.Popen[Any], grace: float = 10.0, hurry: Callable[[], bool] | None = None
) -> int | None:
    """Stop ``proc`` and, when it leads a session, every process of that session.

    SIGTERM to each, then SIGKILL to each one left after ``grace`` seconds, or at once when
    ``hurry()`` (default: :func:`hurrying`) turns true. Reaps ``proc``, closes its pipes and
    unregisters it; returns its exit status (None if it could not be reaped).
    """
    try:
        _terminate(lambda: _members(proc), lambda pid, sig: _signal(proc, pid, sig), grace, hurry)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    finally:
        untrack(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    return proc.returncode


def children() -> list[int]:
    """Live child processes of this process (Linux /proc), whoever started them."""
    me = os.getpid()
    return _live(lambda st: st[1] == me)


def stop_child(pid: int, grace: float = 5.0) -> None:
    """Stop child ``pid`` that no Popen of ours holds (code that did not :func:`track` it),
    with its session when it leads one, and reap it."""

    def members() -> set[int]:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it once it is gone: a zombie is no member
        st = proc_stat(Path(f"/proc/{pid}"))
        alive = {pid} if st is not None and st[0] != "Z" and st[1] == os.getpid() else set()
        return alive | session_pids(pid)

    def send(target: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)

    _terminate(members, send, grace, None)


def stop_tracked(grace: float = 5.0, untracked_children: bool = False) -> list[str]:
    """Stop every registered child still running (each with its session) and, with
    ``untracked_children``, every other live child of this process (Linux); returns one line
    (pid and command) per process that was still running, for the caller to report."""
    stopped = []
    for proc in tracked():
        if _members(proc):
            args = proc.args if isinstance(proc.args, list) else [proc.args]
            stopped.append(f"{proc.pid} {' '.join(str(a) for a in args)[:100]}")
        stop(proc, grace)
    if untracked_children and has_proc():
        for pid in children():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            stopped.append(f"{pid} {cmd.strip()[:100]} (not tracked)")
            stop_child(pid, grace)
    return stopped


class StandaloneWatch:
    """Which component of ``airflow standalone`` (``scheduler``, ``dag-processor``,
    ``triggerer``, ``api-server``) has exited.

    ``standalone`` starts each component once and never again
    (airflow/cli/commands/standalone_command.py, ``SubCommand.run``): a scheduler that dies
    leaves standalone, the UI and the API running and nothing scheduled, so a wait on runs
    would last until its timeout. A component is known by its process id, named from its
    command line (``airflow <component>``) when first seen, since components change their
    process title later; it has exited when that process is gone or a zombie (standalone does
    not reap it). Linux ``/proc`` only; elsewhere nothing is ever reported."""

    def __init__(self, proc: subprocess.Popen[Any]) -> None:
        self.proc = proc
        self.pids: dict[str, int] = {}

    def _learn(self) -> None:
        known = set(self.pids.values())
        for pid in _live(lambda st: st[1] == self.proc.pid):
            if pid in known:
                continue
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                # "airflow scheduler", or "python .../bin/airflow scheduler"
                for i, arg in enumerate(argv[:2]):
                    if (arg == b"airflow" or arg.endswith(b"/airflow")) and argv[i + 1 :][:1]:
                        name = argv[i + 1].decode(errors="replace")
                        if name:
                            self.pids.setdefault(name, pid)
                        break

    def exited(self) -> str | None:
        """The name of a component seen running that has exited since, else None."""
        if not has_proc() or self.proc.poll() is not None:
            return None
        self._learn()
        for name, pid in sorted(self.pids.items()):
            st = proc_stat(Path(f"/proc/{pid}"))
            if st is None or st[0] in ("Z", "X") or st[1] != self.proc.pid:
                return name
        return None


def pid_alive(pid: int) -> bool:
    """A process of this host with this pid exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _host_tag() -> str:
    """``h`` and 8 hex digits of this host's name and pid namespace: bounded in length (a
    temporary name stays short), and two containers sharing a host name but not their pids
    tell each other's files apart."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return "h" + hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


#: This host (and pid namespace) in a file name: with ``.<pid>.``, at most 18 characters
#: (pids have at most 7 digits on Linux; ``dxt_core.paths.UNIT_NAME_RESERVE`` counts them).
HOST_TAG = _host_tag()


def owned_prefix(prefix: str) -> str:
    """``<prefix><host>.<pid>.``: a temporary name that says which process of which host
    owns it, so that a later run can tell one a killed process left (:func:`killed_leftovers`)."""
    return f"{prefix}{HOST_TAG}.{os.getpid()}."


def killed_leftovers(directory: Path, prefix: str) -> list[Path]:
    """The entries of ``directory`` named by :func:`owned_prefix` of ``prefix`` whose process
    (of this host: another host's, sharing the directory, are not ours to judge) is gone."""
    start = f"{prefix}{HOST_TAG}."
    out = []
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            pid = entry.name[len(start) :].split(".", 1)[0]
            if entry.name.startswith(start) and pid.isdigit() and not pid_alive(int(pid)):
                out.append(entry)
    return out
