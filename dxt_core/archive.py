"""The on-disk archive: where each metric-day lives, its transactions, and reading it back.

Layout: ``<root>/<source>/<part>/.../<YYYY-MM-DD>.<ext>`` with a manifest
``<YYYY-MM-DD>.manifest.json`` beside each day (:mod:`dxt_core.manifests`). Writing one
metric-day is a transaction (:meth:`Archive.begin` returns a
:class:`~dxt_core.daywrite.DayWrite`): the day is locked, its data files are staged under
hidden names, and the commit applies the never-shrink rule, keeps replaced bytes in
``.versions/`` and renames everything into place (see :mod:`dxt_core.daywrite`). A crash at
any point leaves either the old day or the new one, never a partial file under a final name.
The zone the days are cut in is recorded once at the root (:meth:`Archive.check_day_zone`).
Coverage (the state of many days at once) is :func:`dxt_core.coverage.coverage`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from dxt_core._version import __version__
from dxt_core.daywrite import DayWrite
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.fsio import (
    archive_io,
    atomic_file,
    create_once,
    fsync_dir,
    now_iso,
    os_error,
    read_json_object,
    sha256_file,
    write_json_atomic,
)
from dxt_core.locks import DayLock
from dxt_core.manifests import (
    DAMAGED_MANIFEST_ADVICE,
    DAY_DEFINITION,
    DAYS_SCHEMA,
    KEPT_SUFFIX,
    MANIFEST_SCHEMA,
    MANIFEST_SUFFIX,
    Status,
    day_complete,
    holes_detail,
    is_plain_name,
    kept_applies,
    kept_detail,
    manifest_files,
    not_over_detail,
    stray_data,
    stray_detail,
)
from dxt_core.paths import check_path_component
from dxt_core.store import is_url, parse_root

#: MANIFEST_SUFFIX, atomic_file, manifest_files and sha256_file moved to their own modules
#: (manifests.py, fsio.py) and are re-exported: code of several owners (the publish and
#: backend packages) imports them from here. New code imports them from where they live.
__all__ = [
    "MANIFEST_SUFFIX",
    "Archive",
    "DayKey",
    "atomic_file",
    "days_record",
    "manifest_files",
    "sha256_file",
    "zone_mismatch",
]


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


def _holds_file(directory: Path) -> bool:
    """Whether a file lies anywhere under ``directory``: stops at the first, so a unit's
    folder of years of days costs one directory read, not a listing of it."""
    pending = [str(directory)]
    while pending:
        below: list[str] = []
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_file():
                        return True
                    if entry.is_dir():
                        below.append(entry.path)
        except OSError:
            continue
        pending += below
    return False


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
        #: (device, inode) of the root when this process first wrote a day into it
        self._root_id: tuple[int, int] | None = None

    @property
    def url(self) -> str:
        """Where the archive is, for messages: its directory, or its ``s3://`` URL."""
        return str(self.root)

    def url_of(self, path: Path) -> str:
        """Where ``path`` (a path this archive returned) is, for messages."""
        return str(path)

    def directory(self, key: DayKey) -> Path:
        return self.root.joinpath(key.source, *key.parts)

    def check_root(self) -> None:
        """Before a day is written: the root is the directory the first day of this process
        was written into. The first write creates a missing root; after it, a root that is
        gone or another directory (a file system unmounted under the run, the folder removed
        or moved) is an error, not created again: the days would go to another disk.

        Raises:
            ArchiveError: the root disappeared or was replaced during the run.
        """
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            st = None
        except OSError:
            return  # unreadable, a name too long...: the day's first I/O names it
        with self._mutex:
            seen = self._root_id
            if st is not None and seen is None:
                self._root_id = (st.st_dev, st.st_ino)
                return
        if seen is None:
            return  # the first day creates the root
        if st is None or (st.st_dev, st.st_ino) != seen:
            what = "disappeared" if st is None else "was replaced by another directory"
            err = ArchiveError(
                f"archive root {self.root} {what} after this run wrote its first day into it "
                "(a file system unmounted, the folder removed or moved?): the run writes no "
                "day elsewhere; mount or restore it, then rerun"
            )
            err.run_wide = True
            raise err

    def holds(self, source: str) -> bool:
        """Something of ``source`` is archived here: a manifest under ``<root>/<source>/``
        (on S3, an object under ``<prefix>/<source>/``: one LIST request)."""
        top = self.root / source
        return top.is_dir() and next(top.rglob(f"*{MANIFEST_SUFFIX}"), None) is not None

    def subdirectories(self, *parts: str) -> list[str]:
        """The sorted names of the directories under ``<root>/<parts>/`` that hold a file (on
        S3, the common prefixes under ``<prefix>/<parts>/``, which exist only while an
        object lies under them), hidden ones (``.name``) left out: a unit's folder left
        empty by a day that failed is not a unit the archive holds."""
        top = self.root.joinpath(*parts)
        if not top.is_dir():
            return []
        return sorted(
            p.name for p in top.iterdir() if p.is_dir() and p.name[:1] != "." and _holds_file(p)
        )

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

    def recorded_day_zone(self, source: str) -> tuple[str, str] | None:
        """The zone ``source``'s days are cut in, as recorded at the root, with where it is
        recorded; None when no day of it is archived yet (or the archive predates the
        record)."""
        if not self.root.is_dir():
            return None  # nothing archived yet (a root that is a file is said by the run)
        path = self.days_record_path(source)
        doc = read_json_object(path, "day definition", _DAYS_RECORD_ADVICE)
        zone_then = doc.get("time_zone") if doc else None
        return (zone_then, str(path)) if isinstance(zone_then, str) else None

    def refuse_other_day_zone(self, source: str, time_zone: str) -> None:
        """Before a run looks at any day: refuse one whose days are cut in another zone than
        the archive's (its days would be skipped as "already archived", being the archive's
        days of another zone). Writes nothing.

        Raises:
            ConfigError: the archive's days are in another zone (``run_wide``).
        """
        found = self.recorded_day_zone(source)
        if found is not None and found[0] != time_zone:
            raise zone_mismatch(self.url, source, found[0], found[1], time_zone)

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
        recorded = read_json_object(path, "day definition", _DAYS_RECORD_ADVICE)
        where = str(path)
        if recorded is None:
            found = _zone_of_manifests(self.directory(key))
            if found is not None and found[0] != time_zone:
                recorded, where = {"time_zone": found[0]}, f"manifest {found[1]}"
            else:
                create_once(path, days_record(key.source, definition))
                recorded = read_json_object(path, "day definition", _DAYS_RECORD_ADVICE)
                recorded = recorded or definition
        zone_then = recorded.get("time_zone")
        if zone_then != time_zone:
            raise zone_mismatch(self.url, key.source, zone_then, where, time_zone)
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
        write = self._day_write(key, self.replace if replace is None else replace)
        write._start()
        with self._mutex:
            self._open[key] = write
            self._by_thread[me] = write
        return write

    def day_lock(self, key: DayKey) -> DayLock:
        """The lock a commit of ``key`` holds (not taken yet): ``.<day>.lock`` in the day's
        directory (an object store has its own)."""
        return DayLock(self.directory(key) / f".{key.day.isoformat()}.lock", str(key))

    def _day_write(self, key: DayKey, replace: bool) -> DayWrite:
        """The transaction object :meth:`begin` starts (an archive of another kind returns
        its own :class:`DayWrite`)."""
        return DayWrite(self, key, replace)

    def _forget(self, write: DayWrite) -> None:
        with self._mutex:
            if self._open.get(write.key) is write:
                del self._open[write.key]
            for tid, w in list(self._by_thread.items()):
                if w is write:
                    del self._by_thread[tid]

    def _write(self, key: DayKey) -> DayWrite | None:
        """The unfinished transaction of ``key`` begun through this object, if any (for
        subclasses: :class:`dxt_core.store.s3.S3Archive`)."""
        with self._mutex:
            return self._open.get(key)

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

    def place_manifest(self, key: DayKey, prepared: Path) -> Path:
        """Move a day's new manifest, written and fsynced beside it (``prepared``), into place
        and make the rename durable: the last step of a day's commit."""
        path = self.manifest_path(key)
        os.replace(prepared, path)
        fsync_dir(path.parent)
        return path

    def full_manifest(self, key: DayKey, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with the fields every manifest carries."""
        return {
            "schema": MANIFEST_SCHEMA,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "software": {"name": "dxt-archive", "version": __version__},
            "written_at": now_iso(),
            **doc,
        }

    # -- reading ------------------------------------------------------------------------------
    def read_manifest(self, key: DayKey) -> dict[str, Any] | None:
        """``key``'s manifest, None when it has none.

        Raises:
            ArchiveError: the manifest is damaged (the message says what to do).
        """
        return read_json_object(self.manifest_path(key), "manifest", DAMAGED_MANIFEST_ADVICE)

    def latest_manifest(self, source: str, parts: Sequence[str]) -> dict[str, Any] | None:
        """The latest readable manifest of the unit (of its last 5 days that have one), for
        what a refill must ask as its days were made; None when it has none."""
        for name in self.manifest_names(source, parts)[:5]:
            with contextlib.suppress(ValueError, DxtError):
                day = dt.date.fromisoformat(name.lstrip("_")[:10])
                doc = self.read_manifest(DayKey(source, tuple(parts), day))
                if doc and doc.get("status") in ("archived", "empty"):
                    return doc
        return None

    def manifest_names(self, source: str, parts: Sequence[str]) -> list[str]:
        """The names of the unit's manifests, latest day first."""
        folder = self.root.joinpath(source, *parts)
        return sorted((p.name for p in folder.glob(f"*{MANIFEST_SUFFIX}")), reverse=True)

    def read_kept(self, key: DayKey) -> dict[str, Any] | None:
        """The record of the last rerun that kept the archived day, if any."""
        try:
            doc = orjson.loads(self.kept_path(key).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def internal_path(self, name: str, *parts: str) -> Path:
        """``<root>/.dxt-<name>/<parts>``: a record only the archive reads (Examon's tag-key
        cache), out of the day directories that dataset readers list."""
        return self.root.joinpath(f".dxt-{name}", *parts)

    def read_internal(self, name: str, *parts: str) -> bytes | None:
        """The bytes of the record :meth:`internal_path` names; None when there is none or
        it cannot be read (a cache: the caller asks the source again)."""
        try:
            return self.internal_path(name, *parts).read_bytes()
        except OSError:
            return None

    def update_internal(
        self, name: str, parts: Sequence[str], update: Callable[[bytes | None], dict[str, Any]]
    ) -> None:
        """Replace the record with ``update(its bytes or None)``, atomically and one writer at
        a time: on disk under an advisory ``flock`` of ``<record>.lock`` (threads and
        processes, NFS included); an object store writes only if nobody wrote in between."""
        path = self.internal_path(name, *parts)
        lock = path.with_name(path.name + ".lock")
        with archive_io(lock, "lock the record"):
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            with archive_io(lock, "lock the record"):
                fcntl.flock(fd, fcntl.LOCK_EX)
            write_json_atomic(path, update(self.read_internal(name, *parts)))
        finally:
            os.close(fd)

    def write_kept(self, key: DayKey, record: dict[str, Any]) -> None:
        """Store ``record`` (:func:`~dxt_core.manifests.kept_record`) as the day's ``kept``
        sidecar, where coverage reads it: atomically on disk (an object store overrides it)."""
        write_json_atomic(self.kept_path(key), record)

    def complete_days(
        self,
        source: str,
        parts: Sequence[str],
        days: Sequence[dt.date],
        expects: Sequence[tuple[str, Any]] = (),
    ) -> set[dt.date]:
        """The unit's ``days`` that need no rerun (:func:`~dxt_core.manifests.day_complete`)."""
        keys = [DayKey(source, tuple(parts), day) for day in days]
        return {
            key.day
            for key, status, doc in self.day_states(keys, tuple(k for k, _ in expects))
            if doc is not None and day_complete(status, doc, expects)
        }

    def day_states(
        self, keys: Sequence[DayKey], fields: Sequence[str]
    ) -> Iterator[tuple[DayKey, Status, dict[str, Any] | None]]:
        """Each day of ``keys`` (one unit's) with its status and its manifest, each manifest
        read once (a day whose manifest cannot be read is left out). ``fields``: the manifest
        fields the caller reads beside the status and the not-over mark and holes (an object
        store answers from its index where that holds them)."""
        for key in keys:
            with contextlib.suppress(DxtError):  # unreadable: not complete
                doc = self.read_manifest(key)
                yield key, self.status_of(key, doc)[0], doc

    def status(self, key: DayKey, verify: bool = False) -> tuple[Status, str]:
        """The state of one day and, for corrupt days, why; ``verify``: every data file
        hashed, and data of the day that its manifest does not name found."""
        if verify:
            return next(self.verify_checks(key.source, [key.parts], [key.day]))[1]()
        try:
            doc = self.read_manifest(key)
        except ArchiveError as exc:
            return "corrupt", str(exc)
        return self.status_of(key, doc, verify)

    def verify_checks(
        self, source: str, units: Sequence[tuple[str, ...]], days: Sequence[dt.date]
    ) -> Iterator[tuple[DayKey, Callable[[], tuple[Status, str]]]]:
        """Each (unit, day)'s check with every data file hashed and the day's data files
        that its manifest does not name looked for (:func:`stray_data`), to run on any
        thread; a unit's directory is listed once, as its first day is taken."""
        for parts in units:
            try:
                names = frozenset(os.listdir(self.root.joinpath(source, *parts)))
            except (FileNotFoundError, NotADirectoryError):
                names = frozenset()
            for day in days:
                key = DayKey(source, parts, day)
                yield key, partial(self._verified_status, key, names)

    def _verified_status(self, key: DayKey, names: frozenset[str]) -> tuple[Status, str]:
        try:
            doc = self.read_manifest(key)
        except ArchiveError as exc:
            return "corrupt", str(exc)
        status, detail = self.status_of(key, doc, True)
        if status in ("archived", "empty"):
            directory = self.directory(key)
            # the listing came before the check: a file moved away since is not a stray
            # files only (a symlink to one too: a glob reads it); the commit moves no other
            strays = [n for n in stray_data(names, key.day, doc) if (directory / n).is_file()]
            if strays:
                return "corrupt", stray_detail(str(directory), strays, key.day)
        return status, detail

    def status_of(
        self, key: DayKey, doc: dict[str, Any] | None, verify: bool = False
    ) -> tuple[Status, str]:
        """The state of one day whose manifest is ``doc`` (None: none).

        A manifest may only name files in its own directory: any other name reads corrupt.
        """
        if doc is None:
            return "missing", ""
        if doc.get("status") == "empty":
            return "empty", not_over_detail(doc)
        files = manifest_files(doc)
        if not files:
            return "corrupt", "manifest names no data file"
        directory = self.directory(key)
        for f in files:
            name = f.get("file")
            if not is_plain_name(name):
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
        if kept is not None and kept_applies(kept, doc):
            return "archived", kept_detail(kept)
        return "archived", holes_detail(doc)


def days_record(source: str, definition: dict[str, Any]) -> dict[str, Any]:
    """The record of how ``source``'s days are cut (``definition``: zone and day), kept once
    at the archive's root by the first run that archives a day of it."""
    return {
        "schema": DAYS_SCHEMA,
        "source": source,
        **definition,
        "recorded_at": now_iso(),
        "software": {"name": "dxt-archive", "version": __version__},
    }


def zone_mismatch(
    archive_url: str, source: str, zone_then: object, where: str, time_zone: str
) -> ConfigError:
    """The error of a run whose days would be cut in ``time_zone`` in an archive whose
    ``source`` days are cut in ``zone_then`` (recorded at ``where``): every day of the run
    would fail the same way (``run_wide``)."""
    err = ConfigError(
        f"{archive_url}: the {source} days of this archive are {DAY_DEFINITION} in "
        f"{zone_then} ({where}); this run cuts them in {time_zone}, which would archive "
        f"overlapping days (rows twice). Run with time zone {zone_then} (--tz {zone_then}; "
        "under Airflow the connection's time_zone extra), or archive to another root "
        "(--archive DIR)"
    )
    err.run_wide = True
    return err


#: What to do about an unreadable ``.dxt-days-<source>.json``.
_DAYS_RECORD_ADVICE = (
    "restore it (it records the zone of the archive's days) or write it again with the zone "
    "the archive was made in"
)


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
