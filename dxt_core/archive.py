"""The on-disk archive: layout, atomic commits, manifests, the never-shrink rule and coverage.

Layout: ``<root>/<source>/<part>/.../<YYYY-MM-DD>.<ext>`` with a manifest
``<YYYY-MM-DD>.manifest.json`` beside each day. A day counts as archived only when its manifest
exists, and a manifest with ``"status": "empty"`` records a day that was fetched and held no
data (distinct from a day never fetched). In Hive-partitioned layouts (``plugin=<p>/metric=<m>``,
used for Parquet) manifests and other sidecars start with ``_`` so that dataset readers skip
them.

Writing one metric-day is a transaction (:meth:`Archive.begin`, see :class:`DayWrite`):

1. ``begin`` takes an advisory lock of the day (``.<day>.lock``; a second writer gets
   :class:`~dxt_core.errors.ArchiveLocked` naming the holder), removes temporary files of
   crashed earlier attempts and reads the day's current manifest. Nothing archived is touched.
2. The backend writes its data files under hidden staging names (:meth:`DayWrite.open`,
   :meth:`DayWrite.staging_path`), never under the final name.
3. ``commit`` compares the new row count with the archived one. **An archive never loses rows
   because the source did**: when the day is archived with N rows and this run read M < N
   (or "empty"), the archived file and manifest stay as they are, a ``<day>.kept.json``
   sidecar records the attempt (coverage shows it) and
   :class:`~dxt_core.errors.SourceShrank` is raised. With ``replace`` the new data wins, and
   the replaced file and manifest are kept as ``.versions/<name>.prev-<sha8>``.
   Otherwise the staged files are renamed into place, the directory is fsynced, the manifest
   is written (fsync of the file, rename, fsync of the directory) and the lock is released.

A crash at any point leaves either the old day or the new one, never a partial file under a
final name; between the data rename and the new manifest the day reads "missing" (the old
manifest is parked as ``.<manifest>.pending`` so that the next run still compares against its
row count).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import gzip
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from dxt_core._version import __version__
from dxt_core.errors import (
    ArchiveError,
    ArchiveLocked,
    ConfigError,
    ContentChanged,
    SourceShrank,
)
from dxt_core.paths import check_path_component
from dxt_core.store import is_url, parse_root

MANIFEST_SCHEMA = "dxt-archive/manifest/1"
KEPT_SCHEMA = "dxt-archive/kept/1"
MANIFEST_SUFFIX = ".manifest.json"
KEPT_SUFFIX = ".kept.json"
VERSIONS_DIR = ".versions"
DAYS_SCHEMA = "dxt-archive/days/1"
#: How a day is cut out of time, recorded with the zone (see :meth:`Archive.check_day_zone`).
DAY_DEFINITION = "[local midnight, next local midnight)"

log = logging.getLogger("dxt_core.archive")

#: What to do about a manifest that cannot be read. Deleting it loses nothing either: the data
#: file beside it is kept by the next run as archived data (see :func:`unmanifested_data`).
DAMAGED_MANIFEST_ADVICE = (
    "rerun the day to write a new one (the data file beside it is kept: a rerun with fewer "
    "rows or other values fails and changes nothing, and any replaced bytes go to .versions/)"
)

Status = Literal["archived", "empty", "missing", "corrupt"]

# Why an OS call on the archive failed, and what to do about it: one line each.
_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free space, then rerun",
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


def os_error(exc: OSError, path: str | os.PathLike[str], action: str) -> ArchiveError:
    """An :class:`ArchiveError` with a one-line cause naming the path, from an OS error."""
    where = exc.filename if isinstance(exc.filename, str) and exc.filename else os.fspath(path)
    reason = exc.strerror or type(exc).__name__
    hint = _OS_HINTS.get(exc.errno or 0)
    return ArchiveError(f"cannot {action} {where}: {reason}" + (f"; {hint}" if hint else ""))


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


def _is_archive_write_error(exc: OSError, *names: str) -> bool:
    return (exc.filename is None or exc.filename in names) and exc.errno in _WRITE_ERRNOS


@contextlib.contextmanager
def atomic_file(
    final: Path, buffer_size: int = 1 << 20, *, sync_dir: bool = True
) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``final``; rename it to ``final`` only on success.

    On any exception the temporary file is removed and ``final`` is left as it was. The file
    is fsynced before the rename and the directory after it (``sync_dir``). OS errors of the
    archive's disk (read-only, full, names too long, a file where a directory should be)
    become an :class:`ArchiveError` naming the path. ``buffer_size`` is the write buffer:
    large for one big file, small when many files are open at once (a backup keeps one per
    node and metric).
    """
    with archive_io(final.parent, "create directory"):
        make_dirs_durable(final.parent)
    with archive_io(final, "write"):
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
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
        if _is_archive_write_error(exc, tmp, os.fspath(final)) or exc.filename in (
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


def _dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_json_atomic(path: Path, doc: Any) -> None:
    with atomic_file(path) as fh:
        fh.write(_dumps(doc))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class DayKey:
    """Where one unit of work lives: source, path parts (e.g. plugin, metric) and day."""

    source: str
    parts: tuple[str, ...]
    day: dt.date

    def __post_init__(self) -> None:
        for p in (self.source, *self.parts):
            problem = check_path_component(p, "archive path component")
            if problem:
                raise ConfigError(problem)

    def __str__(self) -> str:
        return f"{'/'.join((self.source, *self.parts))} {self.day.isoformat()}"


def manifest_files(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The data files a manifest names: ``files`` entries, else the single ``file``."""
    files = doc.get("files")
    if isinstance(files, list) and files:
        return [f for f in files if isinstance(f, dict)]
    if isinstance(doc.get("file"), str):
        return [{"file": doc["file"], "bytes": doc.get("bytes"), "sha256": doc.get("sha256")}]
    return []


def _rows(doc: dict[str, Any] | None) -> int:
    if not doc or doc.get("status") != "archived":
        return 0
    rows = doc.get("rows")
    return rows if isinstance(rows, int) and rows > 0 else 0


# --------------------------------------------------------------------------------------------
# The lock of one metric-day
# --------------------------------------------------------------------------------------------


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
                "started": _now(),
            }
            with archive_io(self.path, "write the lock file"):
                os.ftruncate(fd, 0)
                os.pwrite(fd, orjson.dumps(info), 0)
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


# --------------------------------------------------------------------------------------------
# One metric-day written as a transaction
# --------------------------------------------------------------------------------------------


class DayWrite:
    """Writing one metric-day: staged files, then :meth:`commit` (or :meth:`abort`).

    Use as a context manager (``with archive.begin(key) as day:``): leaving the block
    without a commit, or with an exception, aborts (removes the staged files, releases the
    lock) and leaves the archived day as it was.
    """

    def __init__(self, archive: Archive, key: DayKey, replace: bool) -> None:
        self.archive = archive
        self.key = key
        self.replace = replace
        self.directory = archive.directory(key)
        self._lock = DayLock(self.directory / f".{key.day.isoformat()}.lock", str(key))
        self._staged: dict[str, Path] = {}  # final file name -> staged path
        self._drop: set[str] = set()  # final file names this commit removes
        self.previous: dict[str, Any] | None = None
        #: Why the day's manifest could not be read, when it could not.
        self.damaged_manifest = ""
        #: The archived files this commit replaced by other bytes (kept in .versions/).
        self.replaced: list[dict[str, Any]] = []
        self._state_at_begin: tuple[int, int] | None = None
        self._written: dict[str, Any] = {}
        self.closed = False

    # -- life cycle -------------------------------------------------------------------------
    def _start(self) -> None:
        with archive_io(self.directory, "create directory"):
            make_dirs_durable(self.directory)
        from dxt_core.index import directory_state

        # What the directory looked like before this transaction touched it: the index
        # trusts its rows of this directory after the commit only if it did before.
        self._state_at_begin = directory_state(self.directory)
        self._lock.acquire()
        try:
            self._clean_stale()
            try:
                self.previous = self.archive.read_manifest(self.key)
            except ArchiveError as exc:
                # A damaged manifest protects nothing by itself: the data file beside it
                # is what is kept (below), and the damaged bytes go to .versions/ at commit.
                self.damaged_manifest = str(exc)
                self.previous = None
            if self.previous is None:
                self.previous = self._read_pending()
            if self.previous is None:
                self.previous = unmanifested_data(self.directory, self.key.day)
        except BaseException:
            self._lock.release()
            raise

    def __enter__(self) -> DayWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def _clean_stale(self) -> None:
        """Remove temporary and staged files of crashed earlier attempts of this day (safe:
        we hold its lock, so no live writer owns them)."""
        day = self.key.day.isoformat()
        patterns = (
            f".{day}.*.tmp",  # data (".<name>.staged.tmp") and manifests
            f"._{day}.*.tmp",  # temporary manifests and sidecars of Hive layouts
            f"..{day}.*.tmp",  # temporary files of writers given a staging path
        )
        for pattern in patterns:
            for stale in self.directory.glob(pattern):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()

    @property
    def _pending(self) -> Path:
        return self.directory / f".{self.archive.manifest_path(self.key).name}.pending"

    def _read_pending(self) -> dict[str, Any] | None:
        try:
            doc = orjson.loads(self._pending.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def abort(self) -> None:
        """Drop the staged files and release the lock; the archived day is untouched."""
        if self.closed:
            return
        self.closed = True
        for staged in self._staged.values():
            with contextlib.suppress(OSError):
                staged.unlink()
        self._staged.clear()
        self._lock.release()
        self.archive._forget(self)

    # -- staging ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ArchiveError(f"{self.key}: this write is already committed or aborted")

    def staging_path(self, extension: str) -> Path:
        """A hidden path to write ``<day>.<extension>`` to; :meth:`commit` renames it into
        place. For writers that need a path (HDF5); others use :meth:`open`."""
        self._check_open()
        final = self.archive.data_path(self.key, extension)
        staged = self.directory / f".{final.name}.staged.tmp"
        self._staged[final.name] = staged
        self._drop.discard(final.name)
        return staged

    @contextlib.contextmanager
    def open(self, extension: str, buffer_size: int = 1 << 20) -> Iterator[BinaryIO]:
        """Write the data file ``<day>.<extension>``: staged until :meth:`commit`.

        On an exception inside the block the staged file is removed.
        """
        staged = self.staging_path(extension)
        try:
            with archive_io(staged, "write"):
                raw = open(staged, "wb", buffering=buffer_size)  # noqa: SIM115
            with raw as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(staged, 0o644)
        except OSError as exc:
            with contextlib.suppress(OSError):
                staged.unlink()
            if _is_archive_write_error(exc, os.fspath(staged)) or exc.filename == os.fspath(staged):
                raise os_error(exc, self.archive.data_path(self.key, extension), "write") from exc
            raise
        except BaseException:
            with contextlib.suppress(OSError):
                staged.unlink()
            raise

    def discard(self, extension: str) -> None:
        """Drop what was staged for ``<day>.<extension>``; the archived file (if any) stays."""
        self._check_open()
        name = self.archive.data_path(self.key, extension).name
        staged = self._staged.pop(name, None)
        if staged is not None:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()

    def remove(self, extension: str) -> None:
        """This commit leaves no ``<day>.<extension>`` (an empty day): drop what was staged
        for it, and remove the archived file at commit (if the rule allows it)."""
        self._check_open()
        name = self.archive.data_path(self.key, extension).name
        staged = self._staged.pop(name, None)
        if staged is not None:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
        self._drop.add(name)

    # -- commit -----------------------------------------------------------------------------
    def commit(self, doc: dict[str, Any]) -> Path:
        """Apply the never-shrink rule, move the staged files into place and write the
        manifest (``doc`` plus the common fields). Returns the manifest's path.

        Raises:
            SourceShrank: the day is archived with more rows than ``doc`` says and
                ``replace`` is off; the archived day is unchanged.
        """
        self._check_open()
        try:
            path = self._commit(doc)
        finally:
            self.abort()  # releases the lock; staged files are gone by now on success
        from dxt_core.index import record_commit

        # After the lock file is gone, so that the directory state the index records is
        # the one readers will find.
        record_commit(
            self.archive.root,
            self.key,
            path,
            self._written,
            state_at_begin=self._state_at_begin,
        )
        return path

    def _commit(self, doc: dict[str, Any]) -> Path:
        key, directory = self.key, self.directory
        new_rows = _rows(doc)
        prev = self.previous
        prev_rows = _rows(prev)
        prev_files = manifest_files(prev) if prev and prev.get("status") == "archived" else []
        # The files this manifest names must be the ones staged in this transaction:
        # a file written under its final name would already have replaced the archived one.
        for f in manifest_files(doc) if doc.get("status") == "archived" else []:
            name = f.get("file")
            if not isinstance(name, str) or name not in self._staged:
                raise ArchiveError(
                    f"{key}: the manifest names {name!r}, which was not written through this "
                    "archive transaction (use DayWrite.open or DayWrite.staging_path)"
                )
            if not self._staged[name].exists():
                raise ArchiveError(f"{key}: staged file for {name} is missing")
        shrinks = new_rows < prev_rows
        existing = [directory / f["file"] for f in prev_files if _plain_name(f.get("file"))]
        if shrinks and any(p.exists() for p in existing) and not self.replace:
            self._keep(prev or {}, doc, new_rows, prev_rows, existing)
        changed = self._changed_files(prev_files, doc)
        intact = [c for c in changed if _matches_manifest(prev_files, c)]
        if (
            intact
            and new_rows == prev_rows
            and not self.replace
            and not _source_count_grew(prev, doc)
        ):
            self._refuse_change(intact, doc, new_rows)
        manifest = self.archive.manifest_path(key)
        with archive_io(directory, "update"):
            if changed or self.damaged_manifest:
                self.replaced = self._save_versions(prev, changed, manifest)
        if self.replaced:
            doc = {**doc, "replaced": self.replaced, "replaced_rows": prev_rows}
            log.warning(
                "%s: replaced the archived %s (%s rows -> %s rows); the old bytes are kept as %s",
                key,
                ", ".join(str(r["file"]) for r in self.replaced),
                f"{prev_rows:,}",
                f"{new_rows:,}",
                ", ".join(str(r["version"]) for r in self.replaced if r.get("version")),
            )
        with archive_io(directory, "update"):
            if manifest.exists():
                # Parked, not deleted: after a crash from here to the new manifest the day
                # reads "missing" and the next run still compares with these rows.
                os.replace(manifest, self._pending)
            for name, staged in sorted(self._staged.items()):
                os.replace(staged, directory / name)
            self._staged.clear()
            for name in sorted(self._drop):
                with contextlib.suppress(FileNotFoundError):
                    (directory / name).unlink()
            fsync_dir(directory)
        self._written = self.archive.full_manifest(key, doc)
        path = self.archive.write_full_manifest(key, self._written, index=False)
        with archive_io(directory, "update"):
            with contextlib.suppress(FileNotFoundError):
                self._pending.unlink()
            with contextlib.suppress(FileNotFoundError):
                self.archive.kept_path(key).unlink()
        return path

    def _keep(
        self,
        prev: dict[str, Any],
        doc: dict[str, Any],
        new_rows: int,
        prev_rows: int,
        existing: list[Path],
    ) -> None:
        key = self.key
        record = {
            "schema": KEPT_SCHEMA,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "at": _now(),
            "archive_rows": prev_rows,
            "source_rows": new_rows,
            "source_status": doc.get("status"),
            "archive_file": prev.get("file"),
            "archive_sha256": prev.get("sha256"),
            "software": {"name": "dxt-archive", "version": __version__},
        }
        write_json_atomic(self.archive.kept_path(key), record)
        main = next((p for p in existing if p.exists()), existing[0])
        raise SourceShrank(
            f"{key}: source has fewer rows than the archive ({prev_rows:,} -> {new_rows:,}); "
            f"kept the archived file {main}; rerun with replace (--replace, or the DAG param "
            "replace) to overwrite it (the replaced file is kept in .versions/)",
            archive_rows=prev_rows,
            source_rows=new_rows,
            path=str(main),
        )

    def _changed_files(
        self, prev_files: list[dict[str, Any]], doc: dict[str, Any]
    ) -> list[tuple[str, str, Path]]:
        """The archived files this commit replaces by other bytes or removes, as (name,
        sha256 of the bytes on disk, path). Computed from the files, not the manifest: a
        hand-edited or recovered file is compared as it is."""
        new_sha = {
            str(f.get("file")): f.get("sha256")
            for f in (manifest_files(doc) if doc.get("status") == "archived" else [])
        }
        out: list[tuple[str, str, Path]] = []
        for f in prev_files:
            name = f.get("file")
            if not _plain_name(name):
                continue
            path = self.directory / str(name)
            if not path.is_file():
                continue
            staged = self._staged.get(str(name))
            if staged is None and str(name) not in self._drop:
                continue  # not written by this commit: stays as it is
            with archive_io(path, "read"):
                old = sha256_file(path)
                new = new_sha.get(str(name))
                if staged is not None and not isinstance(new, str):
                    new = sha256_file(staged)
            if staged is None or new != old:
                out.append((str(name), old, path))
        return out

    def _refuse_change(
        self, changed: list[tuple[str, str, Path]], doc: dict[str, Any], rows: int
    ) -> None:
        name, old, path = changed[0]
        new = next(
            (
                str(f.get("sha256"))
                for f in manifest_files(doc)
                if f.get("file") == name and isinstance(f.get("sha256"), str)
            ),
            "",
        )
        raise ContentChanged(
            f"{self.key}: the source has as many rows as the archive ({rows:,}) but other "
            f"values (sha256 {old[:12]} archived, {new[:12] or 'none'} read now); kept the "
            f"archived file {path}; rerun with replace (--replace, or the DAG param replace) "
            "to take the new values (the replaced file is kept in .versions/)",
            rows=rows,
            archive_sha256=old,
            source_sha256=new,
            path=str(path),
        )

    def _save_versions(
        self,
        prev: dict[str, Any] | None,
        changed: list[tuple[str, str, Path]],
        manifest: Path,
    ) -> list[dict[str, Any]]:
        """Keep the files this commit replaces as ``.versions/<name>.prev-<sha8>`` (and the
        replaced manifest beside them, damaged or not), before anything is replaced.

        Each version is written under a temporary name, fsynced and renamed only when
        complete, so a full disk never leaves a truncated file under a version's name.
        Returns what was kept, for the new manifest's ``replaced`` field.
        """
        versions = self.directory / VERSIONS_DIR
        make_dirs_durable(versions)
        day = self.key.day.isoformat()
        for stale in versions.glob(f".*{day}*.tmp"):  # a crashed earlier copy (we hold the lock)
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        kept: list[dict[str, Any]] = []
        tag = ""
        for name, sha, src in changed:
            tag = tag or sha[:8]
            dst = versions / f"{name}.prev-{sha[:8]}"
            with archive_io(dst, "keep the replaced file as"):
                _copy_complete(src, dst)
            kept.append(
                {
                    "file": name,
                    "sha256": sha,
                    "bytes": dst.stat().st_size,
                    "version": f"{VERSIONS_DIR}/{dst.name}",
                }
            )
        tag = tag or hashlib.sha256(day.encode()).hexdigest()[:8]
        copy = versions / f"{manifest.name}.prev-{tag}"
        if not copy.exists():
            if self.damaged_manifest and manifest.is_file():
                with archive_io(copy, "keep the damaged manifest as"):
                    _copy_complete(manifest, copy)
            elif prev is not None and not prev.get("recovered_from"):
                write_json_atomic(copy, prev)
        fsync_dir(versions)
        fsync_dir(self.directory)
        return kept


def _matches_manifest(prev_files: list[dict[str, Any]], changed: tuple[str, str, Path]) -> bool:
    """The archived file is as its manifest describes it (or no manifest gives a checksum:
    a recovered file): intact archived content, not a damaged file that a rerun repairs."""
    name, sha, _ = changed
    for f in prev_files:
        if f.get("file") == name:
            want = f.get("sha256")
            return not isinstance(want, str) or want == sha
    return True


def _copy_complete(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src`` (a hard link where the file system allows), never a
    partial one: written under a temporary name, fsynced, then renamed. An existing ``dst``
    of the same size is kept (its name holds the checksum of ``src``)."""
    with contextlib.suppress(FileNotFoundError):
        if dst.stat().st_size == src.stat().st_size:
            return
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(src, tmp)  # a hard link: no copy, and the final name stays put
        except OSError:
            with src.open("rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _source_count_grew(prev: dict[str, Any] | None, doc: dict[str, Any]) -> bool:
    """The source says it holds more points than when the day was archived (the
    ``source_count`` field of both manifests, when they have it)."""
    old = (prev or {}).get("source_count")
    new = doc.get("source_count")
    if isinstance(old, bool) or isinstance(new, bool):
        return False
    return isinstance(old, int) and isinstance(new, int) and new > old


def count_rows(path: Path) -> int | None:
    """The rows of an archived data file, counted from the file itself (None when its
    format is not one this function reads): the protection of a day whose manifest is gone.
    """
    name = path.name
    if name.endswith((".csv.gz", ".jsonl.gz")):
        with gzip.open(path, "rb") as fh:
            lines = 0
            last = b"\n"
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
            lines += last != b"\n"
        return max(lines - 1, 0) if name.endswith(".csv.gz") else lines
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    return None


def unmanifested_data(directory: Path, day: dt.date) -> dict[str, Any] | None:
    """What the archive holds for ``day`` in ``directory`` when no manifest says so: its data
    files (``<day>.<ext>``), their rows counted from the files, as a manifest-like document
    (``recovered_from``), or None when there are none. Such files are archived data: the
    never-shrink rule and the versions apply to them as to any other."""
    prefix = f"{day.isoformat()}."
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return None
    files: list[dict[str, Any]] = []
    for name in names:
        if not name.startswith(prefix) or name.endswith((MANIFEST_SUFFIX, KEPT_SUFFIX)):
            continue
        path = directory / name
        if not path.is_file():
            continue
        try:
            rows = count_rows(path)
        except Exception:
            rows = None
        files.append({"file": name, "bytes": path.stat().st_size, "rows": rows})
    if not files:
        return None
    counted = [f for f in files if isinstance(f["rows"], int)]
    main = counted[0] if counted else files[0]
    return {
        "status": "archived",
        "file": main["file"],
        "rows": main["rows"],
        "bytes": main["bytes"],
        "files": files,
        "recovered_from": "data files without a readable manifest",
    }


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ArchiveError(
            f"{path}: unreadable ({exc}); restore it (it records the zone of the archive's "
            "days) or write it again with the zone the archive was made in"
        ) from exc
    return doc if isinstance(doc, dict) else None


def _create_once(path: Path, doc: dict[str, Any]) -> None:
    """Write ``path`` unless it exists (two first runs at once: one wins, whole)."""
    with archive_io(path.parent, "create directory"):
        make_dirs_durable(path.parent)
    with archive_io(path, "write"):
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_dumps(doc))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # fails if another run recorded it first
        finally:
            os.unlink(tmp)
        fsync_dir(path.parent)


def _zone_of_manifests(directory: Path) -> tuple[str, str] | None:
    """The zone named by a manifest in ``directory`` (its ``day_definition`` or
    ``time_zone``), and that manifest's path: how an archive older than the root record
    tells its zone."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(MANIFEST_SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for name in names[-3:]:
        try:
            doc = orjson.loads((directory / name).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(doc, dict):
            continue
        definition = doc.get("day_definition")
        zone = definition.get("time_zone") if isinstance(definition, dict) else None
        zone = zone if isinstance(zone, str) else doc.get("time_zone")
        if isinstance(zone, str) and zone:
            return zone, str(directory / name)
    return None


def _plain_name(name: object) -> bool:
    """``name`` is one file name (no directory part, not ``.``/``..``)."""
    return isinstance(name, str) and check_path_component(name, "file") is None


# --------------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------------


class Archive:
    """An archive rooted at ``root``.

    Args:
        root: the archive's directory.
        replace: default of :meth:`begin`'s ``replace``: let a rerun with fewer rows than the
            archive replace the archived day (the replaced file is kept in ``.versions/``).
    """

    #: An object-store archive (:class:`dxt_core.store.s3.S3Archive`) says True.
    remote = False

    def __new__(cls, root: str | Path = "", *, replace: bool = False, **kw: Any) -> Archive:
        # An s3:// root makes an S3Archive (same interface); an unknown scheme is an error.
        if cls is Archive and is_url(root):
            from dxt_core.store.s3 import S3Archive

            return super().__new__(S3Archive)
        return super().__new__(cls)

    def __init__(self, root: str | Path, *, replace: bool = False) -> None:
        local = parse_root(root)  # ConfigError for an empty root or a URL of another scheme
        if not isinstance(local, Path):
            raise ConfigError(f"{root}: not a local archive root")
        self.root = local.expanduser().resolve()
        self.replace = replace
        self._open: dict[DayKey, DayWrite] = {}
        self._by_thread: dict[int, DayWrite] = {}
        self._mutex = threading.Lock()
        self._zones: dict[str, str] = {}

    @property
    def url(self) -> str:
        """Where the archive is, for messages: its directory, or its ``s3://`` URL."""
        return str(self.root)

    def url_of(self, path: Path) -> str:
        """Where ``path`` (a path this archive returned) is, for messages."""
        return str(path)

    def directory(self, key: DayKey) -> Path:
        return self.root.joinpath(key.source, *key.parts)

    def data_path(self, key: DayKey, extension: str) -> Path:
        return self.directory(key) / f"{key.day.isoformat()}.{extension}"

    def _sidecar(self, key: DayKey, suffix: str) -> Path:
        # In Hive-partitioned layouts (Parquet) sidecars start with "_", which Arrow,
        # pandas, Spark and DuckDB's directory readers skip as metadata.
        prefix = "_" if any("=" in p for p in key.parts) else ""
        return self.directory(key) / f"{prefix}{key.day.isoformat()}{suffix}"

    def manifest_path(self, key: DayKey) -> Path:
        return self._sidecar(key, MANIFEST_SUFFIX)

    def kept_path(self, key: DayKey) -> Path:
        """The sidecar recording a rerun that read fewer rows than the archive holds."""
        return self._sidecar(key, KEPT_SUFFIX)

    # -- the day definition ---------------------------------------------------------------------
    def days_record_path(self, source: str) -> Path:
        """``<root>/.dxt-days-<source>.json``: the zone the source's days are cut in."""
        return self.root / f".dxt-days-{source}.json"

    def check_day_zone(self, key: DayKey, time_zone: str) -> dict[str, Any]:
        """Refuse a run whose days are cut in another zone than the archive's.

        The zone of a source's days is recorded once at the root, by the first run that
        archives a day of it (or, for an archive older than the record, taken from the
        manifests beside ``key``). A run in another zone would archive days that overlap the
        archived ones (rows twice, under two dates), so it fails naming both zones.
        Returns the day definition, for the manifest.

        Raises:
            ConfigError: the archive's days are in another zone.
        """
        definition = {"time_zone": time_zone, "day": DAY_DEFINITION}
        if self._zones.get(key.source) == time_zone:
            return definition
        path = self.days_record_path(key.source)
        recorded = _read_json(path)
        where = str(path)
        if recorded is None:
            found = _zone_of_manifests(self.directory(key))
            if found is not None and found[0] != time_zone:
                recorded, where = {"time_zone": found[0]}, f"manifest {found[1]}"
            else:
                _create_once(
                    path,
                    {
                        "schema": DAYS_SCHEMA,
                        "source": key.source,
                        **definition,
                        "recorded_at": _now(),
                        "software": {"name": "dxt-archive", "version": __version__},
                    },
                )
                recorded = _read_json(path) or definition
        zone_then = recorded.get("time_zone")
        if zone_then != time_zone:
            raise ConfigError(
                f"{self.root}: the {key.source} days of this archive are {DAY_DEFINITION} in "
                f"{zone_then} ({where}); this run cuts them in {time_zone}, which would "
                f"archive overlapping days (rows twice). Run with time zone {zone_then}, or "
                "archive to another root (--archive DIR)"
            )
        self._zones[key.source] = time_zone
        return definition

    # -- transactions -------------------------------------------------------------------------
    def begin(self, key: DayKey, *, replace: bool | None = None) -> DayWrite:
        """Start writing ``key``: lock it, clean stale temporary files, read its manifest.

        The archived day stays as it is until :meth:`DayWrite.commit`. A transaction this
        thread left unfinished (an exception between ``begin`` and the commit) is aborted
        first. ``replace`` defaults to the archive's.

        Raises:
            ArchiveLocked: another process is writing the same metric-day.
            ArchiveError: the directory cannot be created or locked (the cause names it).
        """
        me = threading.get_ident()
        with self._mutex:
            stale = [w for w in (self._open.get(key), self._by_thread.get(me)) if w is not None]
        for w in stale:
            w.abort()
        write = DayWrite(self, key, self.replace if replace is None else replace)
        write._start()
        with self._mutex:
            self._open[key] = write
            self._by_thread[me] = write
        return write

    def _forget(self, write: DayWrite) -> None:
        with self._mutex:
            if self._open.get(write.key) is write:
                del self._open[write.key]
            for tid, w in list(self._by_thread.items()):
                if w is write:
                    del self._by_thread[tid]

    def _write(self, key: DayKey) -> DayWrite | None:
        with self._mutex:
            return self._open.get(key)

    def open_data(
        self, key: DayKey, extension: str, buffer_size: int = 1 << 20
    ) -> contextlib.AbstractContextManager[BinaryIO]:
        """:meth:`DayWrite.open` of the transaction begun for ``key``."""
        write = self._write(key)
        if write is None:
            raise ArchiveError(f"{key}: call Archive.begin before writing its data")
        return write.open(extension, buffer_size)

    def staging_path(self, key: DayKey, extension: str) -> Path:
        """:meth:`DayWrite.staging_path` of the transaction begun for ``key``."""
        write = self._write(key)
        if write is None:
            raise ArchiveError(f"{key}: call Archive.begin before writing its data")
        return write.staging_path(extension)

    def abort(self, key: DayKey) -> None:
        write = self._write(key)
        if write is not None:
            write.abort()

    def abort_thread(self) -> None:
        """Abort the unfinished transaction of the calling thread, if any."""
        with self._mutex:
            write = self._by_thread.get(threading.get_ident())
        if write is not None:
            write.abort()

    def close(self) -> None:
        """Abort every unfinished transaction of this archive object."""
        with self._mutex:
            writes = list(self._open.values())
        for w in writes:
            w.abort()

    def commit_manifest(self, key: DayKey, doc: dict[str, Any]) -> Path:
        """Commit the transaction begun for ``key`` with manifest ``doc`` (see
        :meth:`DayWrite.commit`); without one, just write the manifest."""
        write = self._write(key)
        if write is not None:
            return write.commit(doc)
        return self.write_manifest(key, doc)

    def write_manifest(self, key: DayKey, doc: dict[str, Any], *, index: bool = True) -> Path:
        """Write ``key``'s manifest: ``doc`` plus the common fields (schema, source, parts,
        day, software, written_at). Atomic and durable; no never-shrink check (use a
        transaction for that). ``index``: update the manifest index now (a transaction
        does it after releasing the day's lock, see :meth:`DayWrite.commit`)."""
        return self.write_full_manifest(key, self.full_manifest(key, doc), index=index)

    def write_full_manifest(self, key: DayKey, full: dict[str, Any], *, index: bool = True) -> Path:
        """Write a manifest made by :meth:`full_manifest` (atomic, durable)."""
        path = self.manifest_path(key)
        write_json_atomic(path, full)
        if index:
            from dxt_core.index import record_commit  # the index follows every commit

            record_commit(self.root, key, path, full)
        return path

    def full_manifest(self, key: DayKey, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with the fields every manifest carries."""
        return {
            "schema": MANIFEST_SCHEMA,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "software": {"name": "dxt-archive", "version": __version__},
            "written_at": _now(),
            **doc,
        }

    def remove_data(self, key: DayKey, extension: str) -> None:
        """No ``<day>.<extension>`` for ``key``: in a transaction, at its commit (and only if
        the never-shrink rule allows it); without one, now."""
        write = self._write(key)
        if write is not None:
            write.remove(extension)
            return
        path = self.data_path(key, extension)
        with contextlib.suppress(FileNotFoundError), archive_io(path, "remove"):
            path.unlink()

    # -- reading ------------------------------------------------------------------------------
    def read_manifest(self, key: DayKey) -> dict[str, Any] | None:
        path = self.manifest_path(key)
        try:
            doc = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ArchiveError(
                f"{path}: unreadable manifest ({exc}); {DAMAGED_MANIFEST_ADVICE}"
            ) from exc
        if not isinstance(doc, dict):
            raise ArchiveError(f"{path}: manifest is not a JSON object; {DAMAGED_MANIFEST_ADVICE}")
        return doc

    def read_kept(self, key: DayKey) -> dict[str, Any] | None:
        """The record of the last rerun that kept the archived day, if any."""
        try:
            doc = orjson.loads(self.kept_path(key).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def status(self, key: DayKey, verify: bool = False) -> tuple[Status, str]:
        """The state of one day and, for corrupt days, why.

        A manifest may only name files in its own directory: any other name reads corrupt.
        """
        try:
            doc = self.read_manifest(key)
        except ArchiveError as exc:
            return "corrupt", str(exc)
        if doc is None:
            return "missing", ""
        if doc.get("status") == "empty":
            return "empty", ""
        files = manifest_files(doc)
        if not files:
            return "corrupt", "manifest names no data file"
        directory = self.directory(key)
        for f in files:
            name = f.get("file")
            if not _plain_name(name):
                return "corrupt", (
                    f"manifest names {name!r}, not a file of its own directory {directory}"
                )
            data = directory / str(name)
            try:
                size = data.stat().st_size
            except FileNotFoundError:
                return "corrupt", f"{data} is missing"
            except OSError as exc:
                return "corrupt", str(os_error(exc, data, "read"))
            if size != f.get("bytes"):
                return "corrupt", f"{data} has {size} bytes, manifest says {f.get('bytes')}"
            if verify:
                try:
                    digest = sha256_file(data)
                except OSError as exc:
                    return "corrupt", str(os_error(exc, data, "read"))
                if digest != f.get("sha256"):
                    return "corrupt", f"{data} does not match the manifest's sha256"
        kept = self.read_kept(key)
        if kept is not None:
            return "archived", _kept_detail(kept)
        return "archived", _holes_detail(doc)


def _holes_detail(doc: dict[str, Any]) -> str:
    """ "holes: ..." for a day archived around unreadable windows (dxt_core.reconcile)."""
    if not doc.get("holes"):
        return ""
    from dxt_core.reconcile import holes_detail

    return holes_detail(doc)


def _kept_detail(kept: dict[str, Any]) -> str:
    try:
        a, s = int(kept["archive_rows"]), int(kept["source_rows"])
    except (KeyError, TypeError, ValueError):
        return "kept: a rerun read fewer rows than the archive holds"
    return (
        f"kept: on {kept.get('at', '?')} the source had {s:,} rows, the archive {a:,}; "
        "the archived file was kept"
    )


@dataclass(frozen=True, slots=True)
class CoverageRow:
    parts: tuple[str, ...]
    day: dt.date
    status: Status
    detail: str = ""
    kept: bool = False  # a rerun read fewer rows than the archive holds; the archive was kept


def coverage(
    archive: Archive,
    source: str,
    units: Iterable[Sequence[str]],
    days: Iterable[dt.date],
    verify: bool = False,
) -> list[CoverageRow]:
    """Status of every (unit, day): archived, empty, missing or corrupt."""
    day_list = list(days)
    rows: list[CoverageRow] = []
    for parts in units:
        for day in day_list:
            status, detail = archive.status(DayKey(source, tuple(parts), day), verify=verify)
            kept = status == "archived" and detail.startswith("kept:")
            rows.append(CoverageRow(tuple(parts), day, status, detail, kept))
    return rows
