"""The lock of one metric-day: an advisory ``flock`` held for the whole transaction."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

import orjson

from dxt_core.errors import ArchiveLocked
from dxt_core.fsio import archive_io, now_iso, os_error


class DayLock:
    """An advisory ``flock`` on ``.<day>.lock`` in the day's directory, held for the whole
    transaction. The file holds who took it (pid, host, start time), for the error a second
    writer gets. The kernel drops the lock when the process dies, so a lock is never stale;
    on NFS, Linux maps ``flock`` to byte-range locks served by the NFS lock manager.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        while True:
            with archive_io(self.path, "open the lock file"):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise ArchiveLocked(
                    _locked_message(self.what, self.path, holder), holder=holder
                ) from None
            except OSError as exc:
                os.close(fd)
                raise os_error(exc, self.path, "lock") from exc
            # The previous holder unlinks the file when it is done: if that happened between
            # our open and our flock, we hold a lock on a file nobody else will see. Retry.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            info = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": now_iso(),
            }
            try:
                with archive_io(self.path, "write the lock file"):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, orjson.dumps(info), 0)
            except BaseException:
                # let go of the lock as release() does: a process that retries the day (a
                # worker) would otherwise find it held by itself until it exits
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                os.close(fd)
                raise
            self._fd = fd
            return

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Unlink while still holding the lock (see acquire), then let go.
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(fd)


def _read_holder(fd: int) -> dict[str, Any]:
    # The holder writes its details just after taking the lock: give it a moment.
    for _ in range(5):
        try:
            doc = orjson.loads(os.pread(fd, 4096, 0))
        except (OSError, orjson.JSONDecodeError):
            doc = None
        if isinstance(doc, dict):
            return doc
        time.sleep(0.02)
    return {}


def _locked_message(what: str, path: Path, holder: dict[str, Any]) -> str:
    if holder:
        who = (
            f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since "
            f"{holder.get('started', '?')}"
        )
    else:
        who = "another process"
    return (
        f"{what} is being archived by {who} (lock {path}); wait for it to finish, or stop "
        "that process, then rerun"
    )
