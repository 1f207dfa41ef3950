"""File helpers of the archive: OS errors that name the path, durable directories, atomic
files, JSON documents and checksums.

Every write on the commit path goes through these: a file is written under a temporary name
beside its final one, fsynced, renamed into place, and its directory fsynced, so a crash
leaves the old file or the new one, never a partial one under a final name.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from dxt_core.errors import ArchiveError
from dxt_core.procs import killed_leftovers, owned_prefix

# Why an OS call on the archive failed, and what to do about it: one line each.
_OS_HINTS = {
    errno.ENOSPC: "the disk is full (or out of inodes: df -i): free space, then rerun",
    errno.EDQUOT: "the disk quota is exhausted: free space, then rerun",
    errno.EROFS: "the archive is on a read-only file system: remount it read-write or point "
    "DXT_ARCHIVE_ROOT elsewhere",
    errno.EACCES: "permission denied: make the archive writable by this user",
    errno.EPERM: "operation not permitted: make the archive writable by this user",
    errno.ENOTDIR: "a file stands where a directory should be: move it away",
    errno.EEXIST: "a file stands where a directory should be: move it away",
    errno.EISDIR: "a directory stands where a file should be: move it away",
    errno.ENAMETOOLONG: "the path is too long for the file system: use a shorter archive root "
    "or shorter names",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f) or the file "
    "system allows",
    errno.EIO: "input/output error: check the disk",
    errno.ENOLCK: "the file system does not support locks (an NFS mount without lockd?)",
}

# Errors that writing through an open file (no file name attached) can raise because of the
# archive's disk, not because of the data source feeding the writer.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.ENAMETOOLONG}
)


#: Errors of the archive's whole file system: a run stops at the first (``run_wide``), as
#: every metric-day after it would fail the same way.
_RUN_WIDE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def os_error(exc: OSError, path: str | os.PathLike[str], action: str) -> ArchiveError:
    """An :class:`ArchiveError` with a one-line cause naming the path, from an OS error; a
    full or read-only file system is ``run_wide``."""
    where = exc.filename if isinstance(exc.filename, str) and exc.filename else os.fspath(path)
    reason = exc.strerror or type(exc).__name__
    hint = _OS_HINTS.get(exc.errno or 0)
    err = ArchiveError(f"cannot {action} {where}: {reason}" + (f"; {hint}" if hint else ""))
    err.run_wide = exc.errno in _RUN_WIDE_ERRNOS
    return err


def fs_errno(directory: Path, known: int = 0) -> int:
    """The OS error number a write into ``directory`` most likely met, for an error that
    carries none (pyarrow's short write, SQLite's codes), told from the file system: a
    read-only one (EROFS) first, else ``known`` when the caller knows it, else a file size
    limit (EFBIG, ulimit -f), no space or no inodes left (ENOSPC), no write permission
    (EACCES); 0 when nothing shows."""
    with contextlib.suppress(OSError, ValueError):
        vfs = os.statvfs(directory)
        if vfs.f_flag & os.ST_RDONLY:
            return errno.EROFS
        if known:
            return known
        if resource_fsize_limited():
            return errno.EFBIG
        if vfs.f_bavail == 0 or (vfs.f_files and vfs.f_favail == 0):
            return errno.ENOSPC
        if not os.access(directory, os.W_OK):
            return errno.EACCES
    return known


def resource_fsize_limited() -> bool:
    """This process may write files of a limited size only (ulimit -f)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return soft != resource.RLIM_INFINITY


def unnumbered_write_error(exc: Exception, path: Path, action: str = "write") -> ArchiveError:
    """The :class:`ArchiveError` of a write that failed with an error carrying no OS error
    number (pyarrow's "N requested and M written" on a full disk), naming ``path``: the
    cause is told from the file system where it shows (:func:`fs_errno`), else the error's
    own words."""
    number = fs_errno(path.parent)
    if number:
        return os_error(OSError(number, os.strerror(number)), path, action)
    return ArchiveError(f"cannot {action} {path}: {exc}")


@contextlib.contextmanager
def archive_io(path: str | os.PathLike[str], action: str) -> Iterator[None]:
    """Turn an OS error raised inside the block into an :class:`ArchiveError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, path, action) from exc


def fsync_dir(path: Path) -> None:
    """Make renames and unlinks in ``path`` durable (a power loss cannot undo them)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # some file systems cannot sync a directory
            raise
    finally:
        os.close(fd)


def make_dirs_durable(path: Path) -> None:
    """``mkdir -p path``, fsyncing each parent that gains a directory (so that a power loss
    cannot drop a new metric directory, and with it the files committed inside it)."""
    missing: list[Path] = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
        fsync_dir(d.parent)


def is_archive_write_error(exc: OSError, *names: str) -> bool:
    """``exc`` is an error of the archive's disk (full, read-only...) on one of ``names``."""
    return (exc.filename is None or exc.filename in names) and exc.errno in _WRITE_ERRNOS


def sweep_killed(final: Path) -> int:
    """Remove the temporary files of :func:`atomic_file` (``owned``) for ``final`` that
    writers of this host left when killed (their process gone). Returns how many (for the
    caller to say)."""
    removed = 0
    for tmp in killed_leftovers(final.parent, f".{final.name}."):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed


@contextlib.contextmanager
def atomic_file(
    final: Path, buffer_size: int = 1 << 20, *, sync_dir: bool = True, owned: bool = False
) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``final``; rename it to ``final`` only on success.

    On any exception the temporary file is removed and ``final`` is left as it was. The file
    is fsynced before the rename and the directory after it (``sync_dir``). OS errors of the
    archive's disk (read-only, full, names too long, a file where a directory should be)
    become an :class:`ArchiveError` naming the path. ``buffer_size`` is the write buffer:
    large for one big file, small when many files are open at once (a backup keeps one per
    node and metric). ``owned``: the temporary name carries this host's tag and pid, so that
    what a killed writer left can be told and removed (:func:`sweep_killed`); not for files
    named after units (their names leave no room: ``dxt_core.paths.UNIT_NAME_RESERVE``).
    """
    with archive_io(final.parent, "create directory"):
        make_dirs_durable(final.parent)
    with archive_io(final, "write"):
        prefix = owned_prefix(f".{final.name}.") if owned else f".{final.name}."
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb", buffering=buffer_size) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
        if sync_dir:
            fsync_dir(final.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if is_archive_write_error(exc, tmp, os.fspath(final)) or exc.filename in (
            tmp,
            os.fspath(final),
            os.fspath(final.parent),
        ):
            raise os_error(exc, final, "write") from exc
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def prepared_file(final: Path, data: bytes) -> Path:
    """``data`` in a durable temporary file beside ``final``, for the caller to rename onto
    it (``os.replace``) when the rest of its change is in place: what needs space is
    written before anything is renamed. On an error the temporary file is removed.

    Raises:
        ArchiveError: the disk refused the write (full, read-only...), naming ``final``.
    """
    with archive_io(final, "write"):
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise os_error(exc, final, "write") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def json_bytes(doc: Any) -> bytes:
    """``doc`` as the archive writes JSON: indented, keys sorted, one final newline."""
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_json_atomic(path: Path, doc: Any) -> None:
    with atomic_file(path) as fh:
        fh.write(json_bytes(doc))


def read_json_object(path: Path, what: str, advice: str) -> dict[str, Any] | None:
    """The JSON object in ``path`` (a ``what``: "manifest"...), or None when there is no
    such file.

    Raises:
        ArchiveError: the file cannot be read, is not JSON or not an object; the message
            names it and ends with ``advice`` (what to do about it).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        # the file may be whole: the advice for a damaged one would mislead
        raise ArchiveError(
            f"{path}: the {what} cannot be read ({exc.strerror}): give this user read access "
            "to the archive (and search access to its folders)"
        ) from exc
    except OSError as exc:
        raise ArchiveError(f"{path}: unreadable {what} ({exc}); {advice}") from exc
    return parse_json_object(raw, str(path), what, advice)


def parse_json_object(raw: bytes, where: str, what: str, advice: str) -> dict[str, Any]:
    """The JSON object ``raw`` holds, read from ``where`` (a path or URL).

    Raises:
        ArchiveError: ``raw`` is not JSON or not an object; the message names ``where`` and
            ends with ``advice``.
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArchiveError(f"{where}: unreadable {what} ({exc}); {advice}") from exc
    if not isinstance(doc, dict):
        raise ArchiveError(f"{where}: {what} is not a JSON object; {advice}")
    return doc


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def now_iso() -> str:
    """Now, in UTC, to the second (``2024-05-01T12:00:00+00:00``)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def create_once(path: Path, doc: dict[str, Any]) -> None:
    """Write ``path`` unless it exists (two first runs at once: one wins, whole)."""
    with archive_io(path.parent, "create directory"):
        make_dirs_durable(path.parent)
    with archive_io(path, "write"):
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(json_bytes(doc))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # fails if another run recorded it first
        finally:
            os.unlink(tmp)
        fsync_dir(path.parent)
