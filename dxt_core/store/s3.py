"""The archive in an S3 bucket: the same layout, manifests and never-lose rules as on disk.

Layout: the directory archive's, under ``s3://<bucket>/<prefix>/`` (``examon/<plugin>/
<metric>/<day>.csv.gz`` beside ``<day>.manifest.json``, Hive partitions for Parquet). What
only the archive reads lives under ``<prefix>/.dxt/`` (locks, per-unit manifest indexes),
which dataset readers never list; replaced files go to ``<unit>/.versions/`` as on disk.

S3 has no rename, so a metric-day is committed as follows (:class:`S3DayWrite`):

1. ``begin``: the day's lock object ``.dxt/locks/<unit>/<day>.lock`` is created with
   ``If-None-Match: *`` (a second writer gets :class:`~dxt_core.errors.ArchiveLocked`
   naming the holder). A lock left by a dead process is taken over with ``If-Match`` on its
   ETag when its holder is gone (same host, no such pid) or its lease has run out. Unfinished
   multipart uploads of the day (a crash) are aborted; the manifest is read with its ETag.
2. The backend writes its data files into a local staging directory (``DXT_S3_STAGING``,
   default ``$TMPDIR/dxt-s3-staging``), exactly as for a directory archive.
3. ``commit``: the never-shrink rule on the rows (``SourceShrank``, a ``<day>.kept.json``
   beside the day). Then the day is *claimed*: its manifest is replaced by a "writing"
   marker that holds the previous manifest, with ``If-Match`` on the ETag read at begin (or
   ``If-None-Match: *``), so two writers cannot both commit a day and a run cannot replace a
   day it did not read. Replaced objects are copied server-side to ``.versions/``; each data
   file is streamed up (multipart, 8 MiB parts with their SHA-256; an object appears under
   its key only when complete) and checked against S3's checksum of what it stored; the
   manifest is written last, with ``If-Match`` on the marker.

A crash leaves the old day, or the marker (the day reads "missing", and the next run still
compares with the previous rows it holds), never a manifest naming an object that is not
what it says: data under a final key changes only while the marker stands.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from dxt_core._version import __version__
from dxt_core.archive import Archive, DayKey
from dxt_core.coverage import CoverageRow
from dxt_core.daywrite import DayWrite
from dxt_core.daywrite import source_count_grew as _source_count_grew
from dxt_core.errors import ArchiveError, ArchiveLocked, ConfigError, ContentChanged, SourceShrank
from dxt_core.fsio import json_bytes as _dumps
from dxt_core.fsio import now_iso as _now
from dxt_core.locks import DayLock
from dxt_core.manifests import (
    DAY_DEFINITION,
    DAYS_SCHEMA,
    KEPT_SCHEMA,
    KEPT_SUFFIX,
    MANIFEST_SCHEMA,
    MANIFEST_SUFFIX,
    VERSIONS_DIR,
    Status,
    count_rows,
    manifest_files,
)
from dxt_core.manifests import holes_detail as _holes_detail
from dxt_core.manifests import is_plain_name as _plain_name
from dxt_core.manifests import kept_detail as _kept_detail
from dxt_core.manifests import rows_of as _rows
from dxt_core.store import S3Location, client_factory, parse_root
from dxt_core.store.client import ObjectInfo, PreconditionFailed, S3Client

log = logging.getLogger("dxt_core.store.s3")

#: The prefix (under the archive's) of what only the archive reads.
INTERNAL = ".dxt"
WRITING = "writing"
INDEX_SCHEMA = "dxt-archive/s3-index/1"
#: A lock older than this is stale even if its holder cannot be checked (another host).
LOCK_LEASE_S = 6 * 3600


def _lease_s() -> int:
    raw = os.environ.get("DXT_S3_LOCK_LEASE_S", "").strip()
    return int(raw) if raw.isdigit() else LOCK_LEASE_S


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class S3DayLock(DayLock):
    """The lock of one metric-day as an object created with ``If-None-Match: *``."""

    def __init__(self, store: S3Client, key: str, what: str) -> None:
        super().__init__(Path(key), what)
        self.store = store
        self.key = key
        self._etag: str | None = None

    @property
    def held(self) -> bool:
        return self._etag is not None

    def _body(self) -> bytes:
        now = dt.datetime.now(dt.UTC)
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": now.isoformat(timespec="seconds"),
            "expires": (now + dt.timedelta(seconds=_lease_s())).isoformat(timespec="seconds"),
            "token": uuid.uuid4().hex,
        }
        return orjson.dumps(info)

    def acquire(self) -> None:
        try:
            self._etag = self.store.put(self.key, self._body(), if_none_match=True)
            return
        except PreconditionFailed:
            pass
        got = self.store.get(self.key)
        if got is None:  # released between our two calls: try once more
            try:
                self._etag = self.store.put(self.key, self._body(), if_none_match=True)
                return
            except PreconditionFailed:
                got = self.store.get(self.key) or (b"{}", "")
        raw, etag = got
        try:
            holder = orjson.loads(raw)
        except orjson.JSONDecodeError:
            holder = {}
        holder = holder if isinstance(holder, dict) else {}
        if _stale(holder):
            try:
                self._etag = self.store.put(self.key, self._body(), if_match=etag)
                log.warning("%s: took over the stale lock of %s", self.what, _who(holder))
                return
            except PreconditionFailed:
                pass  # someone else took it over first
        raise ArchiveLocked(
            f"{self.what} is being archived by {_who(holder)} (lock "
            f"{self.store.url(self.key)}); wait for it to finish, or stop that process, "
            "then rerun",
            holder=holder,
        )

    def release(self) -> None:
        etag, self._etag = self._etag, None
        if etag is None:
            return
        with contextlib.suppress(ArchiveError):
            self.store.delete(self.key, if_match=etag)


def _who(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process"
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since "
        f"{holder.get('started', '?')}"
    )


def _stale(holder: dict[str, Any]) -> bool:
    """The holder is gone: a dead pid on this host, or a lease that ran out."""
    pid = holder.get("pid")
    same_host = holder.get("host") == socket.gethostname()
    if same_host and isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid):
        return True
    try:
        expires = dt.datetime.fromisoformat(str(holder.get("expires")))
    except ValueError:
        return True
    return expires < dt.datetime.now(dt.UTC)


class S3DayWrite(DayWrite):
    """One metric-day written into an S3 archive (see the module docstring)."""

    archive: S3Archive

    def __init__(self, archive: S3Archive, key: DayKey, replace: bool) -> None:
        super().__init__(archive, key, replace)
        self.prefix = archive.key_of(self.directory)
        self._lock = S3DayLock(
            archive.store,
            archive.internal_key("locks", key.source, *key.parts, f"{key.day.isoformat()}.lock"),
            str(key),
        )
        self._manifest_key = archive.key_of(archive.manifest_path(key))
        self._manifest_etag: str | None = None
        # Staged files in a directory of this transaction's own: another process of this
        # host may be writing the same day into the same staging root (a lock taken over).
        self._stage = (
            self.directory / f".{key.day.isoformat()}.{os.getpid()}-{uuid.uuid4().hex[:8]}.staging"
        )

    def staging_path(self, extension: str) -> Path:
        self._check_open()
        name = self.archive.data_path(self.key, extension).name
        self._stage.mkdir(parents=True, exist_ok=True)
        staged = self._stage / name
        self._staged[name] = staged
        self._drop.discard(name)
        return staged

    def _clean_stale(self) -> None:
        """Remove the staging directories of this day left by dead processes of this host."""
        for stale in self.directory.glob(f".{self.key.day.isoformat()}.*.staging"):
            pid = stale.name.split(".")[-2].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)

    def abort(self) -> None:
        closed = self.closed
        super().abort()
        if not closed:
            shutil.rmtree(self._stage, ignore_errors=True)

    def _start(self) -> None:
        store = self.archive.store
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            self._clean_stale()  # local staging files of a crashed run of this host
            day = self.key.day.isoformat()
            for pre in (f"{self.prefix}/{day}", f"{self.prefix}/_{day}"):
                n = store.abort_uploads(pre)
                if n:
                    log.info("%s: aborted %d unfinished upload(s) of a crashed run", self.key, n)
            try:
                doc, self._manifest_etag = self.archive._read_manifest_etag(self.key)
            except ArchiveError as exc:
                # A damaged manifest protects nothing by itself: the data objects beside it
                # are kept (below), and its bytes go to .versions/ at commit.
                got = store.get(self._manifest_key)
                doc, self._manifest_etag = None, (got[1] if got else None)
                self.damaged_manifest = str(exc)
            if doc is not None and doc.get("status") == WRITING:
                prev = doc.get("previous")
                self.previous = prev if isinstance(prev, dict) else None
            else:
                self.previous = doc
            if self.previous is None:
                self.previous = self._unmanifested_data()
        except BaseException:
            self._lock.release()
            raise

    def _unmanifested_data(self) -> dict[str, Any] | None:
        """Data objects of the day that no manifest names (a manifest deleted by hand):
        archived data all the same, their rows counted from the objects (downloaded into
        staging), so that the never-shrink rule and the versions protect them."""
        store, day = self.archive.store, f"{self.key.day.isoformat()}."
        found = [
            o
            for o in store.list(self.prefix + "/")
            if (n := o.key.rsplit("/", 1)[-1]).startswith(day)
            and not n.endswith((MANIFEST_SUFFIX, KEPT_SUFFIX))
        ]
        if not found:
            return None
        files: list[dict[str, Any]] = []
        self._stage.mkdir(parents=True, exist_ok=True)
        for o in found:
            name = o.key.rsplit("/", 1)[-1]
            tmp = self._stage / f".recovered.{name}"
            try:
                store.download(o.key, tmp)
                try:
                    rows = count_rows(tmp)
                except Exception:
                    rows = None
                files.append(
                    {"file": name, "bytes": o.size, "rows": rows, "sha256": store.file_sha(tmp)}
                )
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        counted = [f for f in files if isinstance(f["rows"], int)]
        main = counted[0] if counted else files[0]
        return {
            "status": "archived",
            "file": main["file"],
            "rows": main["rows"],
            "bytes": main["bytes"],
            "sha256": main["sha256"],
            "files": files,
            "recovered_from": "data objects without a manifest",
        }

    def commit(self, doc: dict[str, Any]) -> Path:
        """:meth:`DayWrite.commit` on S3 (the unit's index object is updated inside)."""
        self._check_open()
        try:
            return self._commit(doc)
        finally:
            self.abort()

    def _commit(self, doc: dict[str, Any]) -> Path:
        key, archive, store = self.key, self.archive, self.archive.store
        new_rows = _rows(doc)
        prev = self.previous
        prev_rows = _rows(prev)
        prev_files = manifest_files(prev) if prev and prev.get("status") == "archived" else []
        new_files = manifest_files(doc) if doc.get("status") == "archived" else []
        for f in new_files:
            name = f.get("file")
            if not isinstance(name, str) or name not in self._staged:
                raise ArchiveError(
                    f"{key}: the manifest names {name!r}, which was not written through this "
                    "archive transaction (use DayWrite.open or DayWrite.staging_path)"
                )
            if not self._staged[name].exists():
                raise ArchiveError(f"{key}: staged file for {name} is missing")
        listing = {o.key.rsplit("/", 1)[-1]: o for o in store.list(self.prefix + "/")}
        existing = [
            str(f["file"])
            for f in prev_files
            if _plain_name(f.get("file")) and f["file"] in listing
        ]
        if new_rows < prev_rows and existing and not self.replace:
            self._keep(prev or {}, doc, new_rows, prev_rows, existing)
        new_sha = {str(f.get("file")): f.get("sha256") for f in new_files}
        old_sha = {str(f.get("file")): f.get("sha256") for f in prev_files}
        # What the archived objects this commit touches hold (the sha256 recorded at their
        # upload, or read): a damaged object is repaired, only intact content is protected.
        touched = [n for n in existing if n in self._staged or n in self._drop]
        actual = {n: self._object_sha(listing[n]) for n in touched}
        changed = [n for n in touched if n not in self._staged or new_sha.get(n) != actual[n]]
        intact = [n for n in changed if actual[n] == old_sha.get(n)]
        if (
            intact
            and new_rows == prev_rows
            and not self.replace
            and not _source_count_grew(prev, doc)
        ):
            name = intact[0]
            old, new = actual[name], str(new_sha.get(name) or "")
            url = store.url(f"{self.prefix}/{name}")
            raise ContentChanged(
                f"{key}: the source has as many rows as the archive ({new_rows:,}) but other "
                f"values (sha256 {old[:12]} archived, {new[:12] or 'none'} read now); kept the "
                f"archived object {url}; rerun with replace (--replace, or the DAG param "
                "replace) to take the new values (the replaced object is kept in .versions/)",
                rows=new_rows,
                archive_sha256=old,
                source_sha256=new,
                path=url,
            )
        if self.damaged_manifest:  # its bytes are kept before the claim replaces them
            mname = archive.manifest_path(key).name
            tag = hashlib.sha256(self.damaged_manifest.encode()).hexdigest()[:8]
            store.copy(self._manifest_key, f"{self.prefix}/{VERSIONS_DIR}/{mname}.prev-{tag}")
        # Claim the day: only the writer that read the current manifest gets past this.
        marker = {
            "schema": MANIFEST_SCHEMA,
            "status": WRITING,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "previous": prev,
            "writer": {"pid": os.getpid(), "host": socket.gethostname(), "at": _now()},
        }
        try:
            if self._manifest_etag is None:
                etag = store.put(self._manifest_key, _dumps(marker), if_none_match=True)
            else:
                etag = store.put(self._manifest_key, _dumps(marker), if_match=self._manifest_etag)
        except PreconditionFailed:
            raise ArchiveLocked(
                f"{key}: another writer committed this day since this run read it "
                f"({store.url(self._manifest_key)}); nothing was changed, rerun"
            ) from None
        replaced: list[dict[str, Any]] = []
        for name in sorted(set(changed)):
            sha = actual[name]
            version = f"{VERSIONS_DIR}/{name}.prev-{sha[:8]}"
            store.copy(f"{self.prefix}/{name}", f"{self.prefix}/{version}")
            replaced.append(
                {"file": name, "sha256": sha, "bytes": listing[name].size, "version": version}
            )
        if replaced and prev is not None:
            mname = archive.manifest_path(key).name
            store.put(
                f"{self.prefix}/{VERSIONS_DIR}/{mname}.prev-{replaced[0]['sha256'][:8]}",
                _dumps(prev),
            )
        for name, staged in sorted(self._staged.items()):
            want = new_sha.get(name)
            if isinstance(want, str) and actual.get(name) == want:
                continue  # the object already holds these bytes: nothing to upload
            store.upload_file(
                staged, f"{self.prefix}/{name}", want if isinstance(want, str) else None
            )
        for name in sorted(self._drop - set(self._staged)):
            if name in listing:
                store.delete(f"{self.prefix}/{name}")
        full = archive.full_manifest(key, doc)
        if replaced:
            full["replaced"] = replaced
            full["replaced_rows"] = prev_rows
            log.warning(
                "%s: replaced the archived %s; the old bytes are kept as %s",
                key,
                ", ".join(r["file"] for r in replaced),
                ", ".join(r["version"] for r in replaced),
            )
        try:
            new_etag = store.put(self._manifest_key, _dumps(full), if_match=etag)
        except PreconditionFailed:
            raise ArchiveError(
                f"{key}: the day's manifest changed while this run wrote it (its lock was "
                f"taken over: a run longer than the lease DXT_S3_LOCK_LEASE_S?); rerun"
            ) from None
        kept = archive.key_of(archive.kept_path(key))
        if kept.rsplit("/", 1)[-1] in listing:
            store.delete(kept)
        archive._index_update(key, full, new_etag)
        for staged in self._staged.values():
            with contextlib.suppress(OSError):
                staged.unlink()
        self._staged.clear()
        return archive.manifest_path(key)

    def _object_sha(self, obj: ObjectInfo) -> str:
        """The sha256 of an archived object: recorded in its metadata by our upload (S3
        replaces metadata with the object, so it describes these bytes), else read."""
        store = self.archive.store
        head = store.head(obj.key) or {}
        meta = (head.get("Metadata") or {}).get("sha256")
        if isinstance(meta, str) and len(meta) == 64 and head.get("ContentLength") == obj.size:
            return meta
        return store.sha256_of(obj.key)

    def _keep(  # type: ignore[override]
        self,
        prev: dict[str, Any],
        doc: dict[str, Any],
        new_rows: int,
        prev_rows: int,
        existing: list[str],
    ) -> None:
        key, archive = self.key, self.archive
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
        archive.store.put(archive.key_of(archive.kept_path(key)), _dumps(record))
        main = archive.store.url(f"{self.prefix}/{existing[0]}")
        raise SourceShrank(
            f"{key}: source has fewer rows than the archive ({prev_rows:,} -> {new_rows:,}); "
            f"kept the archived file {main}; rerun with replace (--replace, or the DAG param "
            "replace) to overwrite it (the replaced file is kept in .versions/)",
            archive_rows=prev_rows,
            source_rows=new_rows,
            path=main,
        )


def _staging_root(location: S3Location) -> Path:
    base = os.environ.get("DXT_S3_STAGING", "").strip() or os.path.join(
        tempfile.gettempdir(), "dxt-s3-staging"
    )
    return Path(base).expanduser().resolve().joinpath(location.bucket, *location.prefix.split("/"))


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
        if client is None and factory is not None:
            client = factory(location)  # an Airflow connection, in a task
        self.store = S3Client(location, client)
        super().__init__(_staging_root(location), replace=replace)
        self._index_mutex = threading.Lock()

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
        """:meth:`Archive.check_day_zone` with the record as the object
        ``<prefix>/.dxt-days-<source>.json``, created once (``If-None-Match: *``)."""
        definition = {"time_zone": time_zone, "day": DAY_DEFINITION}
        if self._zones.get(key.source) == time_zone:
            return definition
        k = self.location.key(f".dxt-days-{key.source}.json")
        got = self.store.get(k)
        if got is None:
            record = {
                "schema": DAYS_SCHEMA,
                "source": key.source,
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
            raise ConfigError(
                f"{self.url}: the {key.source} days of this archive are {DAY_DEFINITION} in "
                f"{zone_then} ({self.store.url(k)}); this run cuts them in {time_zone}, which "
                f"would archive overlapping days (rows twice). Run with time zone {zone_then}, "
                "or archive to another root (--archive DIR)"
            )
        self._zones[key.source] = time_zone
        return definition

    # -- transactions -------------------------------------------------------------------------
    def begin(self, key: DayKey, *, replace: bool | None = None) -> DayWrite:
        me = threading.get_ident()
        with self._mutex:
            stale = [w for w in (self._open.get(key), self._by_thread.get(me)) if w is not None]
        for w in stale:
            w.abort()
        write = S3DayWrite(self, key, self.replace if replace is None else replace)
        write._start()
        with self._mutex:
            self._open[key] = write
            self._by_thread[me] = write
        return write

    def write_manifest(self, key: DayKey, doc: dict[str, Any], *, index: bool = True) -> Path:
        """Write ``key``'s manifest outside a transaction (no never-shrink check)."""
        return self.write_full_manifest(key, self.full_manifest(key, doc), index=index)

    def write_full_manifest(self, key: DayKey, full: dict[str, Any], *, index: bool = True) -> Path:
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
        k = self.key_of(self.manifest_path(key))
        got = self.store.get(k)
        if got is None:
            return None, None
        raw, etag = got
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ArchiveError(
                f"{self.store.url(k)}: unreadable manifest ({exc}); rerun the day"
            ) from exc
        if not isinstance(doc, dict):
            raise ArchiveError(f"{self.store.url(k)}: manifest is not a JSON object; rerun the day")
        return doc, etag

    def read_manifest(self, key: DayKey) -> dict[str, Any] | None:
        """The day's manifest; None when there is none or a commit is under way (or crashed)."""
        doc, _ = self._read_manifest_etag(key)
        if doc is not None and doc.get("status") == WRITING:
            return None
        return doc

    def read_kept(self, key: DayKey) -> dict[str, Any] | None:
        got = self.store.get(self.key_of(self.kept_path(key)))
        if got is None:
            return None
        try:
            doc = orjson.loads(got[0])
        except orjson.JSONDecodeError:
            return None
        return doc if isinstance(doc, dict) else None

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
        if isinstance(entry, dict) and entry.get("etag") == m.etag:
            doc: dict[str, Any] | None = entry
        else:
            try:
                doc, _ = self._read_manifest_etag(key)
            except ArchiveError as exc:
                return "corrupt", str(exc)
        if doc is None or doc.get("status") == WRITING:
            return "missing", ""
        if doc.get("status") == "empty":
            return "empty", ""
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
        kept_name = self.kept_path(key).name
        if kept_name in listing:
            return "archived", _kept_detail(self.read_kept(key) or {})
        return "archived", _holes_detail(doc)

    # -- the per-unit index objects -----------------------------------------------------------
    def _index_key(self, source: str, parts: Sequence[str]) -> str:
        return self.internal_key("index", source, *parts) + ".json"

    def _index_update(self, key: DayKey, manifest: dict[str, Any], etag: str) -> None:
        """Record a committed manifest in its unit's index object (read, change, write with
        ``If-Match``; retried when another day of the unit was committed meanwhile). A lost
        update costs speed, not truth: coverage checks each entry's ETag against a listing."""
        k = self._index_key(key.source, key.parts)
        entry = {
            "etag": etag,
            "status": manifest.get("status"),
            "rows": manifest.get("rows"),
            "file": manifest.get("file"),
            "bytes": manifest.get("bytes"),
            "sha256": manifest.get("sha256"),
        }
        if isinstance(manifest.get("files"), list):
            entry["files"] = [
                {"file": f.get("file"), "bytes": f.get("bytes"), "sha256": f.get("sha256")}
                for f in manifest_files(manifest)
            ]
        for _ in range(20):
            got = self.store.get(k)
            doc: dict[str, Any] = {"schema": INDEX_SCHEMA, "days": {}}
            if got is not None:
                with contextlib.suppress(orjson.JSONDecodeError):
                    loaded = orjson.loads(got[0])
                    if isinstance(loaded, dict) and isinstance(loaded.get("days"), dict):
                        doc = loaded
            doc["days"][key.day.isoformat()] = entry
            try:
                if got is None:
                    self.store.put(k, _dumps(doc), if_none_match=True)
                else:
                    self.store.put(k, _dumps(doc), if_match=got[1])
                return
            except PreconditionFailed:
                continue
        log.warning("%s: the index object %s was not updated (busy)", key, self.store.url(k))

    def _read_index(self, source: str, parts: Sequence[str]) -> dict[str, Any]:
        got = self.store.get(self._index_key(source, parts))
        if got is None:
            return {}
        try:
            doc = orjson.loads(got[0])
        except orjson.JSONDecodeError:
            return {}
        days = doc.get("days") if isinstance(doc, dict) else None
        return days if isinstance(days, dict) else {}

    # -- coverage -----------------------------------------------------------------------------
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
            probe = DayKey(source, parts, days[0] if days else dt.date(2000, 1, 1))
            prefix = self.key_of(self.directory(probe)) + "/"
            listing = {o.key.rsplit("/", 1)[-1]: o for o in self.store.list(prefix)}
            index = self._read_index(source, parts) if listing else {}
            row: list[tuple[Status, str, bool]] = []
            for day in days:
                status, detail = self._status(DayKey(source, parts, day), listing, index, verify)
                row.append((status, detail, status == "archived" and detail.startswith("kept:")))
            out.append(row)
        return out

    def coverage_rows(
        self,
        source: str,
        units: Iterable[Sequence[str]],
        days: Iterable[dt.date],
        verify: bool = False,
    ) -> list[CoverageRow]:
        unit_list = [tuple(u) for u in units]
        day_list = list(days)
        states = self.unit_states(source, unit_list, day_list, verify)
        return [
            CoverageRow(parts, day, status, detail, kept)
            for parts, row in zip(unit_list, states, strict=True)
            for day, (status, detail, kept) in zip(day_list, row, strict=True)
        ]

    def rebuild_index(self, source: str | None = None) -> tuple[int, int]:
        """Rewrite every unit's index object from a listing and its manifests; returns
        (manifests, unreadable)."""
        base = f"{self.location.prefix}/" if self.location.prefix else ""
        prefix = f"{base}{source}/" if source else base
        per_unit: dict[tuple[str, ...], dict[str, Any]] = {}
        n = bad = 0
        for o in self.store.list(prefix, recursive=True):
            rel = o.key[len(base) :]
            if rel.startswith(INTERNAL + "/") or f"/{VERSIONS_DIR}/" in rel:
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
                bad += doc is None
                continue
            n += 1
            entry = {
                "etag": got[1] if got else "",
                "status": doc.get("status"),
                "rows": doc.get("rows"),
                "file": doc.get("file"),
                "bytes": doc.get("bytes"),
                "sha256": doc.get("sha256"),
            }
            if isinstance(doc.get("files"), list):
                entry["files"] = [
                    {"file": f.get("file"), "bytes": f.get("bytes"), "sha256": f.get("sha256")}
                    for f in manifest_files(doc)
                ]
            per_unit.setdefault(tuple(dirs), {})[day] = entry
        for unit, entries in per_unit.items():
            k = self.internal_key("index", *unit) + ".json"
            self.store.put(k, _dumps({"schema": INDEX_SCHEMA, "days": entries}))
        return n, bad


__all__ = ["S3Archive", "S3DayLock", "S3DayWrite"]
