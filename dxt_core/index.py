"""The manifest index: one SQLite file per archive that answers coverage questions fast.

Reading 300,000 manifests per question (811 metrics x 365 days) takes minutes; the index
holds one row per manifest (source, unit, day, status, data files with their sizes, rows,
bytes, sha256) in ``<root>/.dxt-index.sqlite``. Every manifest written
(:meth:`dxt_core.archive.Archive.write_manifest`) updates it (:func:`record_commit`),
``dxt index rebuild --archive ROOT`` recreates it from the manifests (:func:`rebuild`), and
``dxt coverage`` and the Airflow coverage view read it (:mod:`dxt_core.scan`).

The index is a cache, never the record: the manifests are. A failed index update is logged
and the commit stands. The index records the state of each unit's directory when it last
matched it (:func:`directory_state`), so that readers can tell a stale unit with one ``stat``
and read its manifests instead (:mod:`dxt_core.scan`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from dxt_core import masking
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import fs_errno, os_error
from dxt_core.manifests import MANIFEST_SUFFIX, holes_detail, manifest_files, not_over_detail
from dxt_core.procs import killed_leftovers, owned_prefix

if TYPE_CHECKING:
    from dxt_core.archive import DayKey

log = masking.logger("dxt_core.index")
#: Held while an index of an older schema is rebuilt (:meth:`ManifestIndex._rebuild_older`).
_REBUILDING = threading.Lock()

INDEX_NAME = ".dxt-index.sqlite"
#: Version 4 added each manifest's size and mtime (``msize``, ``mtime_ns``), version 5 the
#: detail of a day archived before it ended ("not over: ..."), version 6 that detail also of
#: manifests older than the mark (``manifests.not_over_mark``): an index of an older version
#: is rebuilt by the first process that opens it for writing.
SCHEMA_VERSION = "6"
#: Seconds a writer waits for another writer's lock before giving up on the index update.
BUSY_TIMEOUT_S = 30.0

#: A manifest's file name; its group: the day.
MANIFEST_NAME = re.compile(r"^_?(\d{4}-\d{2}-\d{2})" + re.escape(MANIFEST_SUFFIX) + "$")

_INSERT = "INSERT OR REPLACE INTO manifests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS manifests (
    source TEXT NOT NULL,
    unit TEXT NOT NULL,
    day TEXT NOT NULL,
    status TEXT NOT NULL,
    manifest TEXT NOT NULL,
    file TEXT,
    rows INTEGER,
    bytes INTEGER,
    sha256 TEXT,
    written_at TEXT,
    detail TEXT NOT NULL DEFAULT '',
    names TEXT NOT NULL DEFAULT '',
    sizes TEXT NOT NULL DEFAULT '',
    msize INTEGER,
    mtime_ns INTEGER,
    PRIMARY KEY (source, unit, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dirs (
    source TEXT NOT NULL,
    unit TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL,
    entries INTEGER NOT NULL,
    PRIMARY KEY (source, unit)
) WITHOUT ROWID;
"""
#: The state of a unit's directory when the index last matched it: (mtime in ns, entries).
DirState = tuple[int, int]


def directory_state(directory: Path) -> DirState | None:
    """What a directory looks like to the index: its mtime (ns) and number of entries.

    Every rename, creation or removal in the directory (a manifest rewritten, a data file
    deleted, a lock file) changes its mtime; the count catches two changes within one tick
    of the file system's clock that add or remove names. None when it does not exist.
    """
    try:
        st = os.stat(directory)
        return (st.st_mtime_ns, len(os.listdir(directory)))
    except (FileNotFoundError, NotADirectoryError):
        return None


def index_path(root: str | Path) -> Path:
    return Path(root) / INDEX_NAME


def unit_of(parts: Sequence[str]) -> str:
    """The unit name of archive path parts: ``("ipmi_pub", "ambient")`` -> ``ipmi_pub/ambient``."""
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What one manifest says, as the index keeps it."""

    source: str
    unit: str
    day: str
    status: str
    manifest: str
    file: str | None = None
    rows: int | None = None
    bytes: int | None = None
    sha256: str | None = None
    written_at: str | None = None
    detail: str = ""
    #: the data files the manifest names, joined by "/" (which no file name holds), and
    #: their sizes in bytes, joined the same way ("" for a size the manifest does not give)
    names: str = ""
    sizes: str = ""
    #: the manifest file's size and mtime (ns) when it was read: a reader that finds the
    #: file otherwise (rewritten in place, which a directory's state does not show) reads it
    msize: int | None = None
    mtime_ns: int | None = None

    def as_tuple(self) -> tuple[Any, ...]:
        return (
            self.source,
            self.unit,
            self.day,
            self.status,
            self.manifest,
            self.file,
            self.rows,
            self.bytes,
            self.sha256,
            self.written_at,
            self.detail,
            self.names,
            self.sizes,
            self.msize,
            self.mtime_ns,
        )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plain(name: object) -> bool:
    return isinstance(name, str) and bool(name) and "/" not in name and name not in (".", "..")


def manifest_status(doc: dict[str, Any]) -> tuple[str, str]:
    """The indexed status of a manifest document, and why when it is corrupt."""
    status = doc.get("status")
    if status == "empty":
        return "empty", not_over_detail(doc)
    if status == "archived":
        files = manifest_files(doc)
        if not files:
            return "corrupt", "manifest names no data file"
        for f in files:
            if not _plain(f.get("file")):
                return "corrupt", f"manifest names {f.get('file')!r}, not a file of its directory"
        # archived around unreadable windows (dxt_core.reconcile), or before the day ended
        return "archived", holes_detail(doc)
    return "corrupt", f"manifest status {status!r} is unknown"


def entry_from_manifest(
    source: str,
    parts: Sequence[str],
    day: dt.date | str,
    manifest: str,
    doc: dict[str, Any],
    manifest_stat: tuple[int, int] | None = None,
) -> IndexEntry:
    """The index row of the manifest ``doc``; ``manifest_stat``: the file's (size, mtime in
    ns) when it was read, or written."""
    status, detail = manifest_status(doc)
    name = doc.get("file")
    files = (
        [f for f in manifest_files(doc) if _plain(f.get("file"))] if status == "archived" else []
    )
    sizes = (_int_or_none(f.get("bytes")) for f in files)
    return IndexEntry(
        source=source,
        unit=unit_of(parts),
        day=day if isinstance(day, str) else day.isoformat(),
        status=status,
        manifest=manifest,
        file=name if isinstance(name, str) and name else None,
        rows=_int_or_none(doc.get("rows")),
        bytes=_int_or_none(doc.get("bytes")),
        sha256=doc.get("sha256") if isinstance(doc.get("sha256"), str) else None,
        written_at=doc.get("written_at") if isinstance(doc.get("written_at"), str) else None,
        detail=detail,
        names="/".join(str(f["file"]) for f in files),
        sizes="/".join("" if n is None else str(n) for n in sizes),
        msize=manifest_stat[0] if manifest_stat else None,
        mtime_ns=manifest_stat[1] if manifest_stat else None,
    )


def file_stat(path: Path) -> tuple[int, int] | None:
    """A manifest file's (size, mtime in ns), None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _connect(path: Path) -> sqlite3.Connection:
    # Rollback journal, not WAL: WAL needs shared memory, which network file systems (where
    # archives often live) do not give between machines.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@dataclass
class UnitRepair:
    """What a reader found changed in one unit's directory (:meth:`ManifestIndex.repair_units`):
    the rows of the manifests it read again, the ``(day, manifest, msize, mtime_ns)`` of rows
    whose manifest is gone, and the directory's state before it was listed."""

    unit: str
    rows: list[tuple[Any, ...]]
    gone: list[tuple[str, str, int | None, int | None]]
    state: DirState


class ManifestIndex:
    """The index of the archive at ``root`` (created on first write)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.path = index_path(self.root)
        self._conn: sqlite3.Connection | None = None
        #: The index is read without being written (this process cannot write it).
        self.read_only = False

    def exists(self) -> bool:
        """True when the index file exists and this version can read it."""
        if not self.path.is_file():
            return False
        try:
            self._connection()
        except sqlite3.Error as exc:
            log.warning("%s; reading the manifests instead", exc)
            return False
        return True

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self._writable():
                self._conn = self._read_only_connection()
                return self._conn
            conn = self._open_writable()
            if self._older_schema(conn):
                conn.close()
                self._rebuild_older()
                conn = self._open_writable()
            try:
                self._check_schema(conn)
            except sqlite3.Error:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _open_writable(self) -> sqlite3.Connection:
        conn = _connect(self.path)
        try:
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)",
                (SCHEMA_VERSION,),
            )
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    @staticmethod
    def _older_schema(conn: sqlite3.Connection) -> str | None:
        """The schema version of an index older than this version's, else None."""
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        try:
            older = found is not None and int(found[0]) < int(SCHEMA_VERSION)
        except (TypeError, ValueError):
            return None
        return str(found[0]) if older else None

    def _rebuild_older(self) -> None:
        """Replace an index of an older schema by one rebuilt from the manifests (once; a
        reader of an index it cannot write reads the manifests instead). One thread of the
        process rebuilds it; the others wait and find it rebuilt (each rebuilt it, into
        the process's one temporary file, and removed it under the others: "disk I/O
        error", on the first run after an upgrade with --workers)."""
        with _REBUILDING:
            conn = self._open_writable()
            try:
                older = self._older_schema(conn)
            finally:
                conn.close()
            if older:
                self._rebuild_now()

    def _rebuild_now(self) -> None:
        log.warning(
            "%s was written by an older version (index schema older than %s): rebuilding it "
            "from the manifests (once)",
            self.path,
            SCHEMA_VERSION,
        )
        try:
            report = rebuild(self.root)
        except ArchiveError as exc:
            raise sqlite3.OperationalError(f"could not rebuild the index: {exc}") from exc
        log.warning("%s rebuilt: %d manifests", self.path, report.manifests)

    def _writable(self) -> bool:
        target = self.path if self.path.exists() else self.root
        return os.access(target, os.W_OK) and os.access(self.root, os.W_OK)

    def _read_only_connection(self) -> sqlite3.Connection:
        """The index of an archive this process cannot write (a read-only mount, another
        user's archive): read as it is, never created, updated or repaired."""
        uri = f"file:{quote(str(self.path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            self._check_schema(conn)
        except sqlite3.Error:
            conn.close()
            raise
        self.read_only = True
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if found is None or found[0] != SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{self.path} has index schema {found[0] if found else None}, this "
                f"version writes {SCHEMA_VERSION}: run 'dxt index rebuild --archive "
                f"{self.root}'"
            )

    def dir_states(self, source: str) -> dict[str, DirState]:
        """The directory state each unit of ``source`` had when the index last matched it
        (none for an index older than this record: every unit is then read from disk)."""
        try:
            rows = self._connection().execute(
                "SELECT unit, mtime_ns, entries FROM dirs WHERE source = ?", (source,)
            )
            return {u: (m, n) for u, m, n in rows}
        except sqlite3.OperationalError:  # a read-only index without the table
            return {}

    def dir_states_one(self, source: str, unit: str) -> DirState | None:
        try:
            row = (
                self._connection()
                .execute(
                    "SELECT mtime_ns, entries FROM dirs WHERE source = ? AND unit = ?",
                    (source, unit),
                )
                .fetchone()
            )
        except sqlite3.OperationalError:
            return None
        return (int(row[0]), int(row[1])) if row else None

    def unit_stats(self, source: str, unit: str) -> dict[str, tuple[str, int | None, int | None]]:
        """``day -> (manifest, msize, mtime_ns)`` of every row of one unit."""
        rows = self._connection().execute(
            "SELECT day, manifest, msize, mtime_ns FROM manifests WHERE source = ? AND unit = ?",
            (source, unit),
        )
        return {d: (m, size, mtime) for d, m, size, mtime in rows}

    def repair_units(self, source: str, repairs: Iterable[UnitRepair]) -> None:
        """Units' rows brought up to date in one transaction: the manifests read again
        written, the rows of manifests gone deleted (each only as it was when found gone),
        and each directory's state recorded."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for r in repairs:
                conn.executemany(
                    "DELETE FROM manifests WHERE source = ? AND unit = ? AND day = ? "
                    "AND manifest = ? AND msize IS ? AND mtime_ns IS ?",
                    [(source, r.unit, *gone) for gone in r.gone],
                )
                conn.executemany(_INSERT, r.rows)
                conn.execute(
                    "INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?)", (source, r.unit, *r.state)
                )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def set_dir_state(self, source: str, unit: str, state: DirState) -> None:
        self._connection().execute(
            "INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?)", (source, unit, *state)
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ManifestIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upsert(self, entries: Iterable[IndexEntry]) -> int:
        conn = self._connection()
        rows = [e.as_tuple() for e in entries]
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                _INSERT,
                rows,
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return len(rows)

    def entries(
        self, source: str, first: dt.date, last: dt.date
    ) -> Iterator[tuple[str, str, str, str, str]]:
        """``(unit, day, status, names, sizes)`` of every indexed day of ``source`` in range
        (``names``, ``sizes``: the data files and their sizes, each joined by "/")."""
        if not self.exists():
            return iter(())
        rows = self._connection().execute(
            "SELECT unit, day, status, names, sizes, manifest, msize, mtime_ns FROM manifests "
            "WHERE source = ? AND day BETWEEN ? AND ?",
            (source, first.isoformat(), last.isoformat()),
        )
        return self._checked(source, rows)

    def _checked(
        self, source: str, rows: Iterable[tuple[Any, ...]]
    ) -> Iterator[tuple[str, str, str, str, str]]:
        """The rows, each checked against its manifest file (one ``stat``): a manifest
        rewritten in place since it was indexed (its size or mtime differ; the directory's
        state does not show it) is read again, and its row repaired at the end."""
        changed: list[IndexEntry] = []
        base = os.path.join(os.fspath(self.root), source)
        current, prefix = None, ""
        # Plain strings and one os.stat per row: 300,000 rows take a fraction of a second.
        for unit, day, status, names, sizes, manifest, msize, mtime_ns in rows:
            if unit != current:
                current, prefix = unit, f"{base}/{unit}/"
            try:
                st = os.stat(prefix + manifest)
            except OSError:  # gone: the directory listing tells
                yield unit, day, status, names, sizes
                continue
            if st.st_size == msize and st.st_mtime_ns == mtime_ns:
                yield unit, day, status, names, sizes
                continue
            directory = self.root.joinpath(source, *unit.split("/"))
            entry = next(iter(unit_entries(directory, source, unit.split("/"), [manifest])), None)
            if entry is None:
                yield unit, day, status, names, sizes
                continue
            changed.append(entry)
            yield unit, day, entry.status, entry.names, entry.sizes
        self._repair(changed)

    def _repair(self, entries: list[IndexEntry]) -> None:
        if not entries or self.read_only:
            return
        try:
            self.upsert(entries)
        except sqlite3.Error as exc:
            log.warning("%s: could not repair %d rows (%s)", self.path, len(entries), exc)
            return
        log.info(
            "%s: %d manifests changed since they were indexed: repaired", self.path, len(entries)
        )

    def day_details(self, source: str, first: dt.date, last: dt.date) -> dict[tuple[str, str], str]:
        """``(unit, day) -> detail`` of the days in range archived with holes, or archived
        or found empty before the day ended (:func:`dxt_core.manifests.holes_detail`)."""
        if not self.exists():
            return {}
        rows = self._connection().execute(
            "SELECT unit, day, detail FROM manifests WHERE source = ? AND day BETWEEN ? AND ? "
            "AND status IN ('archived', 'empty') "
            "AND (detail LIKE 'holes:%' OR detail LIKE 'not over:%')",
            (source, first.isoformat(), last.isoformat()),
        )
        return {(u, d): detail for u, d, detail in rows}

    def get(self, source: str, unit: str, day: dt.date) -> IndexEntry | None:
        """The row as the index holds it (not checked against the manifest file: readers
        use :meth:`entries`)."""
        if not self.exists():
            return None
        row = (
            self._connection()
            .execute(
                "SELECT source, unit, day, status, manifest, file, rows, bytes, sha256, "
                "written_at, detail, names, sizes, msize, mtime_ns FROM manifests "
                "WHERE source = ? AND unit = ? AND day = ?",
                (source, unit, day.isoformat()),
            )
            .fetchone()
        )
        return IndexEntry(*row) if row else None

    def units(self, source: str) -> list[str]:
        if not self.exists():
            return []
        return [
            r[0]
            for r in self._connection().execute(
                "SELECT DISTINCT unit FROM manifests WHERE source = ? ORDER BY unit", (source,)
            )
        ]

    def sources(self) -> list[str]:
        if not self.exists():
            return []
        return [
            r[0]
            for r in self._connection().execute(
                "SELECT DISTINCT source FROM manifests ORDER BY source"
            )
        ]


def record_commit(
    root: Path,
    key: DayKey,
    manifest: Path,
    doc: dict[str, Any],
    *,
    state_at_begin: DirState | None = None,
    manifest_stat: tuple[int, int] | None = None,
) -> None:
    """Index a manifest just committed. Never raises: the manifest on disk is the record.

    ``manifest_stat``: the manifest's (size, mtime in ns) taken when it was written (under
    the day's lock); stat'ed here when not given.

    ``state_at_begin`` is the state of the day's directory before its transaction began:
    when the index matched it then, it matches it now (this commit being the only change),
    and the directory's new state is recorded; otherwise the unit stays marked stale and
    the next reader reads its manifests again (and repairs the index).
    """
    try:
        with ManifestIndex(root) as index:
            if index.read_only:
                raise sqlite3.OperationalError("the index is not writable by this process")
            unit = unit_of(key.parts)
            st = manifest_stat or file_stat(manifest)
            index.upsert(
                [entry_from_manifest(key.source, key.parts, key.day, manifest.name, doc, st)]
            )
            if state_at_begin is not None:
                stored = index.dir_states_one(key.source, unit)
                new_directory = stored is None and state_at_begin[1] == 0
                now = directory_state(manifest.parent)
                if now is not None and (stored == state_at_begin or new_directory):
                    index.set_dir_state(key.source, unit, now)
    except (sqlite3.Error, OSError) as exc:
        log.warning(
            "%s: could not index %s (%s); the manifest is committed, readers see the index "
            "is stale there and read the manifests, and 'dxt index rebuild --archive %s' "
            "brings the index up to date",
            index_path(root),
            manifest,
            exc,
            root,
        )


@dataclass
class RebuildReport:
    manifests: int = 0
    corrupt: int = 0
    seconds: float = 0.0
    sources: dict[str, int] = field(default_factory=dict)
    #: the first :data:`NAMED_UNREADABLE` unreadable manifests: their path in the archive
    #: and why
    unreadable: list[str] = field(default_factory=list)
    #: temporary indexes of killed rebuilds (of this host) removed first
    leftovers: int = 0


#: How many unreadable manifests a rebuild names (the rest are counted).
NAMED_UNREADABLE = 20


def _read_manifest(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, f"{path.name}: unreadable manifest ({exc})"
    if not isinstance(doc, dict):
        return None, f"{path.name}: manifest is not a JSON object"
    return doc, ""


def scan_manifests(
    root: Path, states: dict[tuple[str, str], DirState] | None = None
) -> Iterator[IndexEntry]:
    """Every manifest under ``root``, read from disk (hidden directories skipped).

    ``states`` receives each unit directory's state, taken before its manifests are read
    (a commit that lands meanwhile leaves the unit stale, to be read again by readers).
    """
    for dirpath, dirnames, filenames in os.walk(root):
        entries = len(dirnames) + len(filenames)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(root).parts
        if len(rel) < 2:
            continue
        source, parts = rel[0], rel[1:]
        if states is not None:
            with contextlib.suppress(OSError):
                states[(source, unit_of(parts))] = (os.stat(dirpath).st_mtime_ns, entries)
        yield from unit_entries(Path(dirpath), source, parts, filenames)


def unit_entries(
    directory: Path, source: str, parts: Sequence[str], filenames: Iterable[str]
) -> Iterator[IndexEntry]:
    """The index rows of the manifests among ``filenames`` of one unit's directory."""
    for name in sorted(filenames):
        m = MANIFEST_NAME.match(name)
        if not m:
            continue
        # stat'ed before it is read: a change meanwhile shows as a later stat that differs
        st = file_stat(directory / name)
        doc, problem = _read_manifest(directory / name)
        if doc is None:
            yield IndexEntry(
                source,
                unit_of(parts),
                m.group(1),
                "corrupt",
                name,
                detail=problem,
                msize=st[0] if st else None,
                mtime_ns=st[1] if st else None,
            )
        else:
            yield entry_from_manifest(source, parts, m.group(1), name, doc, st)


def rebuild(root: str | Path) -> RebuildReport:
    """Recreate the index of ``root`` from its manifests.

    The new index is written beside the old one and renamed over it, so readers never see a
    half-built index. Commits that land while it runs may be missing from the result: run it
    when no archive task is running, or run it again.
    """
    t0 = time.perf_counter()
    archive_root = Path(root).expanduser().resolve()
    if not archive_root.is_dir():
        what = "is not a directory" if archive_root.exists() else "does not exist"
        raise ArchiveError(f"archive root {archive_root} {what}: check --archive")
    if not _is_an_archive(archive_root):
        raise ConfigError(
            f"no manifests found under {archive_root} (no *{MANIFEST_SUFFIX}, no day-zone "
            "record .dxt-days-*.json, no index): not an archive, so no index is written; "
            "check --archive"
        )
    report = RebuildReport()
    report.leftovers = _sweep_killed_rebuilds(archive_root)
    tmp = archive_root / f"{owned_prefix(INDEX_NAME + '.')}tmp"
    try:
        _rebuild_into(archive_root, tmp, report)
    except OSError as exc:
        raise os_error(exc, tmp, "write the index") from exc
    except sqlite3.Error as exc:
        raise _index_write_error(exc, tmp) from exc
    report.seconds = time.perf_counter() - t0
    return report


def _is_an_archive(root: Path) -> bool:
    """Whether ``root`` holds an index, a day-zone record (:meth:`Archive.days_record_path`)
    or a manifest (the walk stops at the first)."""
    if (root / INDEX_NAME).exists() or any(root.glob(".dxt-days-*.json")):
        return True
    return next(scan_manifests(root), None) is not None


def _sweep_killed_rebuilds(root: Path) -> int:
    """Remove the temporary indexes that rebuilds of this host left when killed. Returns how
    many."""
    removed = 0
    for tmp in killed_leftovers(root, f"{INDEX_NAME}."):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed += 1
    return removed


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on a full disk,
    SQLITE_FULL): a ROLLBACK of none would raise and hide the error that caused it."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _index_write_error(exc: sqlite3.Error, path: Path) -> ArchiveError:
    """The one-line :class:`ArchiveError` of an SQLite error writing the index at ``path``
    (a full or read-only disk), worded as the archive's own OS errors (fsio.os_error).
    SQLite does not pass the OS's error number on: it is told from SQLite's code and the
    file system."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else 0
    number = fs_errno(path.parent, {13: errno.ENOSPC}.get(primary, 0))  # SQLITE_FULL
    if not number and primary == 10:  # SQLITE_IOERR
        number = errno.EIO
    return os_error(OSError(number, str(exc)), path, "write the index")


def _rebuild_into(archive_root: Path, tmp: Path, report: RebuildReport) -> None:
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        conn = _connect(tmp)
        try:
            conn.executescript(_SCHEMA)
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
            conn.execute("BEGIN")
            batch: list[tuple[Any, ...]] = []
            states: dict[tuple[str, str], DirState] = {}
            for entry in scan_manifests(archive_root, states):
                report.manifests += 1
                if entry.status == "corrupt":
                    report.corrupt += 1
                    if len(report.unreadable) < NAMED_UNREADABLE:
                        where = "/".join((entry.source, entry.unit, entry.manifest))
                        # the detail starts with the manifest's name: named once
                        why = entry.detail.removeprefix(f"{entry.manifest}: ")
                        report.unreadable.append(f"{where}: {why}")
                report.sources[entry.source] = report.sources.get(entry.source, 0) + 1
                batch.append(entry.as_tuple())
                if len(batch) >= 10_000:
                    conn.executemany(_INSERT, batch)
                    batch.clear()
            conn.executemany(_INSERT, batch)
            conn.executemany(
                "INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?)",
                [(src, unit, *st) for (src, unit), st in states.items()],
            )
            conn.execute("COMMIT")
        finally:
            conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, index_path(archive_root))
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        for leftover in (f"{tmp}-journal", f"{tmp}-wal", f"{tmp}-shm"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        raise
