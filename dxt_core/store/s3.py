"""The archive in an S3 bucket: the same layout, manifests and never-lose rules as on disk.

Layout: the directory archive's, under ``s3://<bucket>/<prefix>/`` (``examon/<plugin>/
<metric>/<day>.csv.gz`` beside ``<day>.manifest.json``, Hive partitions for Parquet). What
only the archive reads lives under ``<prefix>/.dxt/`` (locks, per-unit manifest indexes),
which dataset readers never list; replaced files go to ``<unit>/.versions/`` as on disk.

A metric-day is written by :class:`~dxt_core.store.s3_write.S3DayWrite` (its lock, the
"writing" marker, the uploads and the manifest last: see that module, which also says what a
reader of the bucket sees mid-commit). This module reads the archive: manifests, the per-unit
index objects, coverage from one listing per unit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from dxt_core import masking
from dxt_core._version import __version__
from dxt_core.archive import Archive, DayKey, zone_mismatch
from dxt_core.coverage import CoverageRow
from dxt_core.daywrite import DayWrite
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.fsio import json_bytes as _dumps
from dxt_core.fsio import now_iso as _now
from dxt_core.fsio import parse_json_object
from dxt_core.manifests import (
    DAMAGED_MANIFEST_ADVICE,
    DAY_DEFINITION,
    DAYS_SCHEMA,
    IDENTITY_FIELDS,
    KEPT_SUFFIX,
    MANIFEST_SUFFIX,
    NOT_OVER,
    VERSIONS_DIR,
    Status,
    kept_applies,
    manifest_files,
    not_over_mark,
    stray_data,
    stray_detail,
)
from dxt_core.manifests import holes_detail as _holes_detail
from dxt_core.manifests import is_plain_name as _plain_name
from dxt_core.manifests import kept_detail as _kept_detail
from dxt_core.store import S3Location, client_factory, parse_root
from dxt_core.store.client import (
    ObjectInfo,
    PreconditionFailed,
    S3Client,
    json_object,
    make_client,
)
from dxt_core.store.s3_write import WRITING, S3DayLock, S3DayWrite

log = masking.logger("dxt_core.store.s3")

#: The prefix (under the archive's) of what only the archive reads.
INTERNAL = ".dxt"
INDEX_SCHEMA = "dxt-archive/s3-index/1"
#: Tries of :meth:`S3Archive.update_internal` against concurrent writers.
INTERNAL_TRIES = 8


def _staging_root(location: S3Location) -> Path:
    """Where this archive's days are written before their upload: under ``DXT_S3_STAGING``
    (default ``$TMPDIR/dxt-s3-staging``). A clear error at once, before any unit, when it
    cannot hold a directory this process writes (each day failed alone with
    ``NotADirectoryError`` or ``PermissionError``)."""
    given = os.environ.get("DXT_S3_STAGING", "").strip()
    base = Path(given or os.path.join(tempfile.gettempdir(), "dxt-s3-staging"))
    base = base.expanduser().resolve()
    root = base.joinpath(location.bucket, *location.prefix.split("/"))
    there = root
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir() or not os.access(there, os.W_OK | os.X_OK):
        what = f"DXT_S3_STAGING={given}" if given else f"the S3 staging directory {base}"
        error = ConfigError(
            f"{what}: {there} is not a directory this process can write; S3 days are written "
            "there before their upload: set DXT_S3_STAGING to a writable directory"
        )
        error.run_wide = True
        raise error
    return root


class S3Archive(Archive):
    """An archive in ``s3://bucket/prefix``.

    ``root`` is the local staging directory of this archive (files are written there, then
    uploaded at commit); :attr:`url` is where the archive is. Paths this class returns
    (:meth:`manifest_path`, a report's ``path``) are under ``root`` and name the object of the
    same relative key: :meth:`url_of` turns one into its ``s3://`` URL.
    """

    remote = True

    def __init__(self, root: str | Path, *, replace: bool = False, client: Any = None) -> None:
        location = parse_root(root)
        if not isinstance(location, S3Location):
            raise ArchiveError(f"{root}: not an s3:// archive root")
        self.location = location
        factory = client_factory()
        make = None
        if client is None and factory is not None:  # an Airflow connection, in a task

            def make() -> Any:
                return factory(location) or make_client()

        self.store = S3Client(location, client, make)
        super().__init__(_staging_root(location), replace=replace)
        self._index_mutex = threading.Lock()
        #: the unreadable manifests the last :meth:`rebuild_index` found (the first ones)
        self.unreadable: list[str] = []
        #: source -> the zone its days are cut in, checked against the bucket at commit
        self._zone_to_check: dict[str, str] = {}

    # -- names --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.location.url

    def key_of(self, path: Path) -> str:
        """The object key of a path under :attr:`root`."""
        return self.location.key(path.relative_to(self.root).as_posix())

    def url_of(self, path: Path) -> str:
        return self.store.url(self.key_of(path))

    def internal_key(self, *parts: str) -> str:
        return self.location.key("/".join((INTERNAL, *parts)))

    # -- the day definition -------------------------------------------------------------------
    def check_day_zone(self, key: DayKey, time_zone: str) -> dict[str, Any]:
        """:meth:`Archive.check_day_zone`, checked against the bucket at the day's commit
        (before anything is written; :meth:`check_zone_now`): no request before the fetch."""
        if self._zones.get(key.source) != time_zone:
            self._zone_to_check[key.source] = time_zone
        return {"time_zone": time_zone, "day": DAY_DEFINITION}

    def recorded_day_zone(self, source: str) -> tuple[str, str] | None:
        """As a directory archive's: ``<prefix>/.dxt-days-<source>.json`` (one GET)."""
        k = self.location.key(f".dxt-days-{source}.json")
        got = self.store.get(k)
        if got is None:
            return None
        try:
            recorded = orjson.loads(got[0])
        except orjson.JSONDecodeError:
            return None  # said when a day is committed (check_zone_now)
        zone_then = recorded.get("time_zone") if isinstance(recorded, dict) else None
        return (zone_then, self.store.url(k)) if isinstance(zone_then, str) else None

    def check_zone_now(self, source: str) -> None:
        """The zone :meth:`check_day_zone` was given for ``source``, against the record
        ``<prefix>/.dxt-days-<source>.json`` (created once, ``If-None-Match: *``)."""
        time_zone = self._zone_to_check.get(source)
        if time_zone is None or self._zones.get(source) == time_zone:
            return
        definition = {"time_zone": time_zone, "day": DAY_DEFINITION}
        k = self.location.key(f".dxt-days-{source}.json")
        got = self.store.get(k)
        if got is None:
            record = {
                "schema": DAYS_SCHEMA,
                "source": source,
                **definition,
                "recorded_at": _now(),
                "software": {"name": "dxt-archive", "version": __version__},
            }
            with contextlib.suppress(PreconditionFailed):  # another first run won: read it
                self.store.put(k, _dumps(record), if_none_match=True)
            got = self.store.get(k)
        try:
            recorded = orjson.loads(got[0]) if got else definition
        except orjson.JSONDecodeError as exc:
            raise ArchiveError(
                f"{self.store.url(k)}: unreadable ({exc}); restore it (it records the zone of "
                "the archive's days) or write it again with the zone the archive was made in"
            ) from exc
        zone_then = recorded.get("time_zone") if isinstance(recorded, dict) else None
        if zone_then != time_zone:
            # the directory archive's error, run-wide as there (every day would fail alike)
            raise zone_mismatch(self.url, source, zone_then, self.store.url(k), time_zone)
        self._zones[source] = time_zone

    # -- transactions -------------------------------------------------------------------------
    def day_lock(self, key: DayKey) -> S3DayLock:
        """The day's lock object under ``<prefix>/.dxt/locks/``."""
        return S3DayLock(
            self.store,
            self.internal_key("locks", key.source, *key.parts, f"{key.day.isoformat()}.lock"),
            str(key),
        )

    def begin(self, key: DayKey, *, replace: bool | None = None) -> DayWrite:
        me = threading.get_ident()
        with self._mutex:
            stale = [w for w in (self._open.get(key), self._by_thread.get(me)) if w is not None]
        for w in stale:
            w.abort()
        # No request here: the lock is taken, and the day read, at commit (S3DayWrite.commit)
        write = S3DayWrite(self, key, self.replace if replace is None else replace)
        with self._mutex:
            self._open[key] = write
            self._by_thread[me] = write
        return write

    def write_manifest(self, key: DayKey, doc: dict[str, Any], *, index: bool = True) -> Path:
        """Write ``key``'s manifest outside a transaction (no never-shrink check)."""
        return self.write_full_manifest(key, self.full_manifest(key, doc), index=index)

    def write_full_manifest(self, key: DayKey, full: dict[str, Any], *, index: bool = True) -> Path:
        self.check_zone_now(key.source)
        etag = self.store.put(self.key_of(self.manifest_path(key)), _dumps(full))
        if index:
            self._index_update(key, full, etag)
        return self.manifest_path(key)

    def remove_data(self, key: DayKey, extension: str) -> None:
        write = self._write(key)
        if write is not None:
            write.remove(extension)
            return
        self.store.delete(self.key_of(self.data_path(key, extension)))

    # -- reading ------------------------------------------------------------------------------
    def _read_manifest_etag(self, key: DayKey) -> tuple[dict[str, Any] | None, str | None]:
        """The day's manifest and its ETag, (None, None) when there is none.

        Raises:
            ArchiveError: the read failed (a network or S3 error: raised by the store), or the
                object is not a JSON object (:meth:`parse_manifest`).
        """
        got = self.store.get(self.key_of(self.manifest_path(key)))
        if got is None:
            return None, None
        return self.parse_manifest(key, got[0]), got[1]

    def parse_manifest(self, key: DayKey, raw: bytes) -> dict[str, Any]:
        """The manifest object ``raw`` holds; ArchiveError naming it when it is damaged."""
        where = self.store.url(self.key_of(self.manifest_path(key)))
        return parse_json_object(raw, where, "manifest", DAMAGED_MANIFEST_ADVICE)

    def read_manifest(self, key: DayKey) -> dict[str, Any] | None:
        """The day's manifest; None when there is none or a commit is under way (or crashed)."""
        doc, _ = self._read_manifest_etag(key)
        if doc is not None and doc.get("status") == WRITING:
            return None
        return doc

    def read_kept(self, key: DayKey) -> dict[str, Any] | None:
        got = self.store.get(self.key_of(self.kept_path(key)))
        return None if got is None else json_object(got[0])

    def read_internal(self, name: str, *parts: str) -> bytes | None:
        """``<prefix>/.dxt/<name>/<parts>`` in the bucket (shared by every worker)."""
        got = self.store.get(self.internal_key(name, *parts))
        return None if got is None else got[0]

    def update_internal(
        self, name: str, parts: Sequence[str], update: Callable[[bytes | None], dict[str, Any]]
    ) -> None:
        """Read, update, and write only if nobody wrote in between (``If-Match``, or
        ``If-None-Match`` for a new record); asked again with what the other writer left,
        up to :data:`INTERNAL_TRIES` times."""
        key = self.internal_key(name, *parts)
        if not self._update_object(key, update, INTERNAL_TRIES):
            raise ArchiveError(
                f"{self.store.url(key)}: other writers changed it {INTERNAL_TRIES} times while "
                "this run updated it; rerun"
            )

    def _update_object(
        self, key: str, update: Callable[[bytes | None], dict[str, Any]], tries: int
    ) -> bool:
        """Read the JSON object ``key``, write ``update(its bytes or None)`` only if nobody
        wrote in between (``If-Match``; ``If-None-Match`` for a new object), and read again
        after another writer won; False when others won ``tries`` times."""
        for _ in range(tries):
            got = self.store.get(key)
            doc = update(None if got is None else got[0])
            try:
                if got is None:
                    self.store.put(key, _dumps(doc), if_none_match=True)
                else:
                    self.store.put(key, _dumps(doc), if_match=got[1])
                return True
            except PreconditionFailed:
                continue
        return False

    def write_kept(self, key: DayKey, record: dict[str, Any]) -> None:
        """One PUT beside the day's manifest (not the staging directory)."""
        self.store.put(self.key_of(self.kept_path(key)), _dumps(record))

    def status(self, key: DayKey, verify: bool = False) -> tuple[Status, str]:
        prefix = self.key_of(self.directory(key)) + "/"
        listing = {o.key.rsplit("/", 1)[-1]: o for o in self.store.list(prefix)}
        return self._status(key, listing, None, verify)

    def _status(
        self,
        key: DayKey,
        listing: dict[str, ObjectInfo],
        index: dict[str, Any] | None,
        verify: bool,
    ) -> tuple[Status, str]:
        mname = self.manifest_path(key).name
        m = listing.get(mname)
        if m is None:
            return "missing", ""
        entry = (index or {}).get(key.day.isoformat())
        # an entry written before the index kept the holes and the not-over mark: the
        # manifest says them (an entry written by 2026-12-05/06's dxt from a manifest older
        # than the mark says None of a day that was not over: `dxt index rebuild` rewrites it;
        # reading every manifest at each coverage would cost a request per unit-day)
        if isinstance(entry, dict) and entry.get("etag") == m.etag and NOT_OVER in entry:
            doc: dict[str, Any] | None = entry
        else:
            got = self.store.get(m.key)  # a failed read raises: not a corrupt day
            if got is None:
                return "missing", ""
            try:
                doc = self.parse_manifest(key, got[0])
            except ArchiveError as exc:
                return "corrupt", str(exc)
        if doc is None:
            return "missing", ""
        if doc.get("status") == WRITING:
            return self._writing_status(key, doc, listing, verify)
        if doc.get("status") == "empty":
            if verify and (strays := self._strays(key, listing, doc)):
                return "corrupt", strays
            return "empty", _holes_detail(doc)
        files = manifest_files(doc)
        if not files:
            return "corrupt", "manifest names no data file"
        prefix = self.key_of(self.directory(key))
        for f in files:
            name = f.get("file")
            if not _plain_name(name):
                return "corrupt", f"manifest names {name!r}, not an object of its own prefix"
            obj = listing.get(str(name))
            url = self.store.url(f"{prefix}/{name}")
            if obj is None:
                return "corrupt", f"{url} is missing"
            if obj.size != f.get("bytes"):
                return "corrupt", f"{url} has {obj.size} bytes, manifest says {f.get('bytes')}"
            if verify and self.store.sha256_of(obj.key) != f.get("sha256"):
                return "corrupt", f"{url} does not match the manifest's sha256"
        if verify and (strays := self._strays(key, listing, doc)):
            return "corrupt", strays
        if self.kept_path(key).name in listing:
            kept = self.read_kept(key) or {}
            if kept_applies(kept, doc):  # not a record a replace failed to delete
                return "archived", _kept_detail(kept)
        return "archived", _holes_detail(doc)

    def _strays(self, key: DayKey, listing: dict[str, ObjectInfo], doc: dict[str, Any]) -> str:
        """The detail of ``key``'s data objects that its manifest does not name
        (:func:`stray_data`), "" when none: the unit's listing came before the check, so a
        suspect day is listed again (one request) and an object removed since is left out."""
        if not stray_data(listing, key.day, doc):
            return ""
        prefix = self.key_of(self.directory(key))
        now = [o.key.rsplit("/", 1)[-1] for o in self.store.list(f"{prefix}/{key.day}.")]
        strays = stray_data(now, key.day, doc)
        return stray_detail(self.store.url(prefix), strays, key.day) if strays else ""

    def _writing_status(
        self, key: DayKey, marker: dict[str, Any], listing: dict[str, ObjectInfo], verify: bool
    ) -> tuple[Status, str]:
        """A day whose manifest is the "writing" marker (a commit under way, or killed):
        missing while its data objects are still those of the previous manifest (compared
        by size, and by sha256 with ``verify``); corrupt when an object under a final key is
        one no manifest names (the commit uploaded it, then did not write the manifest)."""
        writer = marker.get("writer")
        w: dict[str, Any] = writer if isinstance(writer, dict) else {}
        since = (
            f"the manifest is the 'writing' marker of a commit by pid {w.get('pid', '?')} on "
            f"{w.get('host', '?')} since {w.get('at', '?')} (interrupted, or under way)"
        )
        day = f"{key.day.isoformat()}."
        names = sorted(
            n
            for n in listing
            if n.startswith(day) and not n.endswith((MANIFEST_SUFFIX, KEPT_SUFFIX))
        )
        prev = marker.get("previous")
        before: dict[str, dict[str, Any]] = {}
        if isinstance(prev, dict) and prev.get("status") == "archived":
            before = {str(f.get("file")): f for f in manifest_files(prev)}
        prefix = self.key_of(self.directory(key))
        for name in names:
            f, obj = before.get(name), listing[name]
            if (
                f is None
                or obj.size != f.get("bytes")
                or (verify and self.store.sha256_of(obj.key) != f.get("sha256"))
            ):
                url = self.store.url(f"{prefix}/{name}")
                what = f"{url} is under its final key but no manifest names it"
                return "corrupt", f"{what}: {since}; rerun the day"
        state = "the previous manifest's objects are intact" if names else "no data object yet"
        return "missing", f"{since}; {state}; rerun the day"

    # -- the per-unit index objects -----------------------------------------------------------
    def _index_key(self, source: str, parts: Sequence[str]) -> str:
        return self.internal_key("index", source, *parts) + ".json"

    def _index_update(self, key: DayKey, manifest: dict[str, Any], etag: str) -> None:
        """Record a committed manifest in its unit's index object (read, change, write with
        ``If-Match``; retried when another day of the unit was committed meanwhile). A lost
        update costs speed, not truth: coverage checks each entry's ETag against a listing."""
        k = self._index_key(key.source, key.parts)
        entry = _index_entry(manifest, etag)

        def with_entry(raw: bytes | None) -> dict[str, Any]:
            doc: dict[str, Any] = {"schema": INDEX_SCHEMA, "days": {}}
            if raw is not None:
                with contextlib.suppress(orjson.JSONDecodeError):
                    loaded = orjson.loads(raw)
                    if isinstance(loaded, dict) and isinstance(loaded.get("days"), dict):
                        doc = loaded
            doc["days"][key.day.isoformat()] = entry
            return doc

        if not self._update_object(k, with_entry, 20):
            log.warning("%s: the index object %s was not updated (busy)", key, self.store.url(k))

    def _read_index(self, source: str, parts: Sequence[str]) -> dict[str, Any]:
        got = self.store.get(self._index_key(source, parts))
        doc = None if got is None else json_object(got[0])
        days = doc.get("days") if doc is not None else None
        return days if isinstance(days, dict) else {}

    def manifest_names(self, source: str, parts: Sequence[str]) -> list[str]:
        """The names of the unit's manifests, latest day first: one listing of its prefix."""
        probe = self.key_of(self.directory(DayKey(source, tuple(parts), dt.date(2000, 1, 1))))
        names = (o.key.rsplit("/", 1)[-1] for o in self.store.list(probe + "/"))
        return sorted((n for n in names if n.endswith(MANIFEST_SUFFIX)), reverse=True)

    # -- coverage -----------------------------------------------------------------------------
    def units(self, source: str) -> list[tuple[str, ...]]:
        """The units of ``source`` that have an index object (one LIST request per 1,000
        units): every unit a commit or ``dxt index rebuild`` recorded."""
        prefix = self.internal_key("index", source) + "/"
        return sorted(
            tuple(o.key[len(prefix) :].removesuffix(".json").split("/"))
            for o in self.store.list(prefix, recursive=True)
            if o.key.endswith(".json")
        )

    def holds(self, source: str) -> bool:
        """Something of ``source`` is archived here (one LIST request)."""
        prefix = self.location.key(source) + "/"
        r = self.store._call("list", prefix, "list_objects_v2", Prefix=prefix, MaxKeys=1)
        return bool(r.get("KeyCount"))

    def subdirectories(self, *parts: str) -> list[str]:
        """The names of the "directories" (common prefixes) under ``<prefix>/<parts>/``."""
        prefix = self.location.key("/".join(parts)) + "/"
        names: list[str] = []
        kw: dict[str, Any] = {"Prefix": prefix, "Delimiter": "/"}
        while True:
            r = self.store._call("list", prefix, "list_objects_v2", **kw)
            names += [
                str(c["Prefix"])[len(prefix) :].strip("/") for c in r.get("CommonPrefixes", [])
            ]
            if not r.get("IsTruncated"):
                return sorted(n for n in names if n and not n.startswith("."))
            kw["ContinuationToken"] = r["NextContinuationToken"]

    def unit_states(
        self,
        source: str,
        units: Iterable[Sequence[str]],
        days: Sequence[dt.date],
        verify: bool = False,
    ) -> list[list[tuple[Status, str, bool]]]:
        """(status, detail, kept) of every (unit, day): per unit one listing of its prefix
        and one read of its index object; a manifest the index does not know (or knows
        under another ETag) is read; ``verify`` reads every data object and hashes it."""
        out: list[list[tuple[Status, str, bool]]] = []
        for parts in units:
            parts = tuple(parts)
            listing, index = self._unit_listing(source, parts, days)
            row: list[tuple[Status, str, bool]] = []
            for day in days:
                status, detail = self._status(DayKey(source, parts, day), listing, index, verify)
                row.append((status, detail, status == "archived" and detail.startswith("kept:")))
            out.append(row)
        return out

    def day_states(
        self, keys: Sequence[DayKey], fields: Sequence[str]
    ) -> Iterator[tuple[DayKey, Status, dict[str, Any] | None]]:
        """:meth:`Archive.day_states` from one listing of the unit and its index object; a
        manifest is read only where the index does not tell (an entry older than the
        manifest, written by an older version, or without one of ``fields``). Day by day,
        :meth:`status` and then the manifest cost a listing and two reads each."""
        if not keys:
            return
        listing, index = self._unit_listing(keys[0].source, keys[0].parts, [k.day for k in keys])
        for key in keys:
            with contextlib.suppress(DxtError):  # unreadable: left out
                status, _ = self._status(key, listing, index, False)
                if status not in ("archived", "empty"):
                    yield key, status, None
                    continue
                m = listing.get(self.manifest_path(key).name)
                entry = index.get(key.day.isoformat())
                told = (
                    isinstance(entry, dict)
                    and m is not None
                    and entry.get("etag") == m.etag
                    and entry.get("v") == INDEX_ENTRY_VERSION
                    and NOT_OVER in entry
                    and all(k in entry for k in fields)
                )
                yield key, status, entry if told else self.read_manifest(key)

    def _unit_listing(
        self, source: str, parts: tuple[str, ...], days: Sequence[dt.date]
    ) -> tuple[dict[str, ObjectInfo], dict[str, Any]]:
        """One unit's objects by name (one listing) and its index object's entries."""
        probe = DayKey(source, parts, days[0] if days else dt.date(2000, 1, 1))
        prefix = self.key_of(self.directory(probe)) + "/"
        listing = {o.key.rsplit("/", 1)[-1]: o for o in self.store.list(prefix)}
        return listing, self._read_index(source, parts) if listing else {}

    def verify_checks(
        self, source: str, units: Sequence[tuple[str, ...]], days: Sequence[dt.date]
    ) -> Iterator[tuple[DayKey, Callable[[], tuple[Status, str]]]]:
        """Each (unit, day)'s check with every data object read and hashed, to run on any
        thread; a unit is listed (and its index object read) as its first day is taken."""
        for parts in units:
            listing, index = self._unit_listing(source, parts, days)
            for day in days:
                key = DayKey(source, parts, day)
                yield key, partial(self._status, key, listing, index, True)

    def coverage_rows(
        self,
        source: str,
        units: Iterable[Sequence[str]],
        days: Iterable[dt.date],
    ) -> list[CoverageRow]:
        """Every (unit, day)'s row from listings, index objects and manifests (the data
        objects hashed: :meth:`verify_checks`)."""
        unit_list = [tuple(u) for u in units]
        day_list = list(days)
        states = self.unit_states(source, unit_list, day_list)
        return [
            CoverageRow(parts, day, status, detail, kept)
            for parts, row in zip(unit_list, states, strict=True)
            for day, (status, detail, kept) in zip(day_list, row, strict=True)
        ]

    def rebuild_index(self, source: str | None = None) -> tuple[int, int]:
        """Rewrite every unit's index object from a listing and its manifests; returns
        (manifests, unreadable), and keeps the first unreadable ones' URLs in
        ``unreadable`` (at most :data:`dxt_core.index.NAMED_UNREADABLE`). A prefix holding no
        manifest and nothing of ``.dxt/`` is not an archive (a mistyped ``--archive``): a
        :class:`ConfigError`, as a directory's rebuild says it, and nothing is written."""
        from dxt_core.index import NAMED_UNREADABLE

        base = f"{self.location.prefix}/" if self.location.prefix else ""
        prefix = f"{base}{source}/" if source else base
        per_unit: dict[tuple[str, ...], dict[str, Any]] = {}
        n = bad = 0
        internal = False  # a day-zone record or an index object: an archive, its days gone
        self.unreadable = []
        for o in self.store.list(prefix, recursive=True):
            rel = o.key[len(base) :]
            if rel.startswith(INTERNAL + "/") or f"/{VERSIONS_DIR}/" in rel:
                internal = internal or rel.startswith(INTERNAL + "/")
                continue
            if not rel.endswith(MANIFEST_SUFFIX):
                continue
            *dirs, name = rel.split("/")
            day = name.lstrip("_").removesuffix(MANIFEST_SUFFIX)
            got = self.store.get(o.key)
            try:
                doc = orjson.loads(got[0]) if got else None
            except orjson.JSONDecodeError:
                doc = None
            if not isinstance(doc, dict) or doc.get("status") == WRITING:
                if not isinstance(doc, dict):  # a marker is a commit under way, not bad
                    bad += 1
                    if len(self.unreadable) < NAMED_UNREADABLE:
                        self.unreadable.append(self.store.url(o.key))
                continue
            n += 1
            per_unit.setdefault(tuple(dirs), {})[day] = _index_entry(doc, got[1] if got else "")
        if source is None and not (n or bad or internal):
            raise ConfigError(
                f"no manifests found under {self.store.url(prefix)} (no *{MANIFEST_SUFFIX}, no "
                f"{INTERNAL}/ records or index objects): not an archive, so no index is "
                "written; check --archive"
            )
        for unit, entries in per_unit.items():
            k = self.internal_key("index", *unit) + ".json"
            self.store.put(k, _dumps({"schema": INDEX_SCHEMA, "days": entries}))
        return n, bad


#: The version of an index entry: 2 since 2026-12-07, whose not-over mark is the manifest's
#: or inferred from its ``written_at`` (:func:`~dxt_core.manifests.not_over_mark`); the
#: 2026-12-05/06 ``dxt index rebuild`` wrote ``None`` for a manifest older than the mark, so
#: a rerun's planning reads the manifest of an entry without ``v``.
INDEX_ENTRY_VERSION = 2


def _index_entry(manifest: dict[str, Any], etag: str) -> dict[str, Any]:
    """A committed manifest's entry in its unit's index object."""
    entry: dict[str, Any] = {
        "v": INDEX_ENTRY_VERSION,
        "etag": etag,
        "status": manifest.get("status"),
        "rows": manifest.get("rows"),
        "file": manifest.get("file"),
        "bytes": manifest.get("bytes"),
        "sha256": manifest.get("sha256"),
        # what coverage says of a day archived around unreadable windows (usually none)
        "holes": manifest.get("holes") or [],
        # archived before the day ended (usually None), also told of a manifest written
        # before the mark existed (dxt_core.manifests.not_over_mark); an entry without the
        # key was written before coverage told such days: its manifest is read instead
        NOT_OVER: not_over_mark(manifest),
    }
    for name in IDENTITY_FIELDS:  # compared by a rerun's planning (complete_days)
        if name in manifest:
            entry[name] = manifest[name]
    if isinstance(manifest.get("files"), list):
        entry["files"] = [
            {"file": f.get("file"), "bytes": f.get("bytes"), "sha256": f.get("sha256")}
            for f in manifest_files(manifest)
        ]
    return entry


__all__ = ["WRITING", "S3Archive", "S3DayLock", "S3DayWrite"]
