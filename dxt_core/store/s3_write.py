"""Writing one metric-day into an S3 archive: the day's lock and its transaction.

S3 has no rename, so a metric-day is committed as follows (:class:`S3DayWrite`):

1. ``begin`` makes no request: the backend writes its data files into a local staging
   directory (``DXT_S3_STAGING``, default ``$TMPDIR/dxt-s3-staging``), exactly as for a
   directory archive. (The S3 client, boto3, is made at the first request: after the fetch,
   so its ~26 MiB reuse what the fetch freed instead of adding to its peak.)
2. ``commit`` first checks the zone the days are cut in against the bucket's record, then
   takes the day's lock object ``.dxt/locks/<unit>/<day>.lock`` with ``If-None-Match: *``
   (a second writer gets :class:`~dxt_core.errors.ArchiveLocked` naming the holder). A lock
   left by a dead process is taken over with ``If-Match`` on its ETag when its holder is gone
   (same host, no such pid) or its lease has run out. Unfinished multipart uploads of the day
   (a crash) are aborted; the manifest is read with its ETag.
3. The never-shrink rule on the rows (``SourceShrank``, a ``<day>.kept.json`` beside the
   day). Then the day is *claimed*: its manifest is replaced by a "writing" marker that
   holds the previous manifest and the objects about to be replaced, with ``If-Match`` on the
   ETag just read (or ``If-None-Match: *``), so two writers cannot both commit a day and a run
   cannot replace a day it did not read. Replaced objects are copied server-side to
   ``.versions/``; each data file is streamed up (multipart, 8 MiB parts with their SHA-256;
   an object appears under its key only when complete) and checked against S3's checksum of
   what it stored; the manifest is written last, with ``If-Match`` on the marker.

Two runs of the same day may both fetch it; only one commits at a time, and the later one
is a rerun of a committed day (byte-identical: nothing uploaded; fewer rows: refused; other
values: refused without replace).

What a reader of the bucket sees while a commit runs (or after a kill -9 at that point):

* until the claim: the old day, its manifest and objects;
* from the claim on: the marker under the manifest's key (``"status": "writing"``), so dxt
  reports the day missing; data objects still the old ones; ``.versions/`` copies appear;
* during the uploads: each data object turns from its old bytes to its new ones at once
  (never a part of a file); a day of several files may show some new and some old;
* after the uploads, before the manifest: the new objects under their final keys and the
  marker still standing: a dataset reader that lists data files (Arrow, DuckDB) reads the new
  bytes already, and ``dxt coverage --verify`` reports the day corrupt ("no manifest names
  it") until a rerun completes it (the rerun finds the marker, takes over the dead writer's
  lock and commits; the objects already replaced are named in its manifest's ``replaced``).

A reader who wants only committed days goes through the manifests (``status: archived``
and the sha256 of each file), as ``dxt coverage`` does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from dxt_core import masking
from dxt_core.archive import DayKey
from dxt_core.commit_rules import (
    UNNAMED,
    content_changed,
    keep_archived_day,
    left_behind,
    replaced_words,
    stray_names,
)
from dxt_core.commit_rules import source_count_grew as _source_count_grew
from dxt_core.commitgate import committing
from dxt_core.daywrite import DayWrite
from dxt_core.errors import ArchiveError, ArchiveLocked, ConfigError
from dxt_core.fsio import json_bytes as _dumps
from dxt_core.fsio import now_iso as _now
from dxt_core.locks import DayLock
from dxt_core.manifests import (
    KEPT_SUFFIX,
    MANIFEST_SCHEMA,
    MANIFEST_SUFFIX,
    VERSIONS_DIR,
    count_rows,
    manifest_files,
    stray_data,
)
from dxt_core.manifests import is_plain_name as _plain_name
from dxt_core.manifests import rows_of as _rows
from dxt_core.procs import pid_alive
from dxt_core.samecontent import keep_same_content
from dxt_core.store.client import ObjectInfo, PreconditionFailed, S3Client

if TYPE_CHECKING:
    from dxt_core.store.s3 import S3Archive

log = masking.logger("dxt_core.store.s3")

#: The status of the marker that stands under a manifest's key while its day is committed.
WRITING = "writing"
#: The key of a lock object's record that says its holder is done (it could not delete it).
RELEASED = "released"
#: A lock older than this is stale even if its holder cannot be checked (another host).
LOCK_LEASE_S = 6 * 3600
#: Test hook: ``DXT_S3_TEST_STALL_AT=<phase>`` stops every commit of the process at that
#: phase (``read``: the lock taken and the day read; ``claimed``: after the marker;
#: ``versions``: after the first ``.versions/`` copy;
#: ``uploaded``: after the data objects, before the manifest): it writes
#: ``<staging root>/.stalled-<phase>`` and waits until that file is deleted (at most 600 s),
#: so that a test can kill -9 the commit there, or let it go on.
STALL_ENV = "DXT_S3_TEST_STALL_AT"


def _stall(root: Path, phase: str) -> None:
    if os.environ.get(STALL_ENV, "").strip() != phase:
        return
    root.mkdir(parents=True, exist_ok=True)
    flag = root / f".stalled-{phase}"
    flag.write_text(str(os.getpid()))
    log.warning("%s=%s: this commit stops here until %s is deleted", STALL_ENV, phase, flag)
    deadline = time.monotonic() + 600
    while flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@dataclass
class _Plan:
    """What a commit found in the bucket and will change."""

    listing: dict[str, ObjectInfo]
    new_sha: dict[str, Any]
    actual: dict[str, str] = field(default_factory=dict)
    replaced: list[dict[str, Any]] = field(default_factory=list)
    prev_rows: int = 0
    new_rows: int = 0


def _lease_s() -> int:
    """``DXT_S3_LOCK_LEASE_S`` (whole seconds above 0) if set, else :data:`LOCK_LEASE_S`."""
    raw = os.environ.get("DXT_S3_LOCK_LEASE_S", "").strip()
    if not raw:
        return LOCK_LEASE_S
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"DXT_S3_LOCK_LEASE_S must be whole seconds above 0, not {raw!r}")
    return int(raw)


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
        holder: dict[str, Any] = {}
        for _ in range(3):  # freed or taken over between two calls: look again (bounded)
            try:
                self._etag = self.store.put(self.key, self._body(), if_none_match=True)
                return
            except PreconditionFailed:
                pass
            got = self.store.get(self.key)
            if got is None:  # released between our two calls: try once more
                continue
            raw, etag = got
            holder = _holder(raw)
            released = RELEASED in holder  # its holder could not delete it (release)
            if not (released or _stale(holder)):
                break
            try:
                self._etag = self.store.put(self.key, self._body(), if_match=etag)
                if not released:
                    log.warning("%s: took over the stale lock of %s", self.what, _who(holder))
                return
            except PreconditionFailed:
                continue  # another writer took it over first: read who holds it now
        expires = holder.get("expires")
        until = f", its lease runs until {expires}" if expires else ""
        raise ArchiveLocked(
            f"{self.what} is being archived by {_who(holder)} (lock "
            f"{self.store.url(self.key)}{until}); wait for it to finish, or stop that "
            "process, then rerun; if that process is gone (a host that died), delete the "
            "lock object, or rerun once its lease has run out (DXT_S3_LOCK_LEASE_S sets the "
            "lease of new locks)",
            holder=holder,
        )

    def release(self) -> None:
        """Delete the lock object (only while it is this run's: ``If-Match``). When S3
        refuses the delete (a policy without s3:DeleteObject on the locks, a fault), the
        object is overwritten by a "released" record, which the next writer takes over at
        once, wherever it runs; said once per run (per client) at WARNING."""
        etag, self._etag = self._etag, None
        if etag is None:
            return
        try:
            self.store.delete(self.key, if_match=etag)
            return
        except PreconditionFailed:
            return  # another writer took it over (a lease run out): it is theirs now
        except ArchiveError as exc:
            failed = exc
        url = self.store.url(self.key)
        record = {RELEASED: _now(), "pid": os.getpid(), "host": socket.gethostname()}
        try:
            self.store.put(self.key, orjson.dumps(record), if_match=etag)
            then = "wrote a 'released' record in its place: the next run takes the lock over"
        except PreconditionFailed:
            return  # taken over meanwhile: it is the other writer's lock now
        except ArchiveError as exc:
            then = (
                f"nor mark it released ({exc}): the day stays locked for other hosts until "
                f"its lease runs out; delete {url} to free it"
            )
        if self.store.say_once("lock release"):
            log.warning("%s: could not delete its lock %s (%s); %s", self.what, url, failed, then)
        else:
            log.debug("%s: could not delete its lock %s; %s", self.what, url, then)


#: Why an object or the manifest is not as this commit left it, said in its errors.
_TAKEN = (
    "another writer took the day over: its lock was taken over, a run longer than the lease "
    "DXT_S3_LOCK_LEASE_S?, or the bucket was changed by hand"
)


def _who(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process"
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since "
        f"{holder.get('started', '?')}"
    )


def _holder(raw: bytes) -> dict[str, Any]:
    """A lock object's record ({} when it is not a JSON object)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _stale(holder: dict[str, Any]) -> bool:
    """The holder is gone: a dead pid on this host, or a lease that ran out."""
    pid = holder.get("pid")
    same_host = holder.get("host") == socket.gethostname()
    if same_host and isinstance(pid, int) and pid != os.getpid() and not pid_alive(pid):
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
        self._manifest_key = archive.key_of(archive.manifest_path(key))
        self._manifest_etag: str | None = None
        self._interrupted: dict[str, Any] | None = None
        self._kept: list[dict[str, Any]] | None = None
        self._intact = True  # the previous manifest's objects were there, as it gives them
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

    def write_error(self, exc: OSError, extension: str) -> ArchiveError:
        """As a directory archive's, saying that the disk is the local staging area's."""
        err = super().write_error(exc, extension)
        err.args = (
            f"{err}; this is where the S3 archive stages a day before its upload "
            "(DXT_S3_STAGING: set it to a folder on a disk with room)",
        )
        return err

    def _clean_stale(self) -> None:
        """Remove the staging directories of this day left by dead processes of this host."""
        for stale in self.directory.glob(f".{self.key.day.isoformat()}.*.staging"):
            pid = stale.name.split(".")[-2].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
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
                    log.warning(
                        "%s: aborted %d unfinished multipart upload(s) under %s, left by an "
                        "interrupted run (their parts cost storage until aborted; a bucket "
                        "lifecycle rule AbortIncompleteMultipartUpload removes those of days "
                        "never rerun: docs/archive.md)",
                        self.key,
                        n,
                        store.url(pre),
                    )
            got = store.get(self._manifest_key)  # a failed read raises: nothing is changed
            doc, self._manifest_etag = None, (got[1] if got else None)
            if got is not None:
                try:
                    doc = self.archive.parse_manifest(self.key, got[0])
                except ArchiveError as exc:
                    # A damaged manifest protects nothing by itself: the data objects beside
                    # it are kept (below), and its bytes go to .versions/ at commit.
                    self.damaged_manifest = str(exc)
            if doc is not None and doc.get("status") == WRITING:
                self._interrupted = doc  # a commit that did not finish
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
        """:meth:`DayWrite.commit` on S3: the day's zone checked, its lock taken and the day
        read (:meth:`_start`), then the commit; the unit's index object is updated inside."""
        self._check_open()
        try:
            self.archive.check_zone_now(self.key.source)
            with committing():  # not once its run has abandoned it (dxt_core.commitgate)
                self._start()
                _stall(self.archive.root, "read")
                path = self._commit(doc)
            same = self.same_as_previous(doc)
            self.unchanged = same and self._intact  # the same bytes over a missing or
            self.restored = same and not self._intact  # damaged object restored it
            return path
        finally:
            self.abort()

    def _commit(self, doc: dict[str, Any]) -> Path:
        plan = self._check(doc)
        etag = self._claim(plan)
        _stall(self.archive.root, "claimed")
        self._copy_versions(plan)
        self._upload(plan, etag)
        _stall(self.archive.root, "uploaded")
        return self._finish(doc, plan, etag)

    def _check(self, doc: dict[str, Any]) -> _Plan:
        """The rules that run before anything in the bucket changes: every file the manifest
        names was staged, never shrink, never silently change; returns what to replace."""
        key, store = self.key, self.archive.store
        prev = self.previous
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
        self._intact = all(
            str(f.get("file")) in listing and listing[str(f.get("file"))].size == f.get("bytes")
            for f in prev_files
        )
        existing = [
            str(f["file"])
            for f in prev_files
            if _plain_name(f.get("file")) and f["file"] in listing
        ]
        plan = _Plan(listing, {str(f.get("file")): f.get("sha256") for f in new_files})
        plan.prev_rows, new_rows = _rows(prev), _rows(doc)
        plan.new_rows = new_rows
        old_sha = {str(f.get("file")): f.get("sha256") for f in prev_files}
        # What the archived objects this commit touches hold (the sha256 recorded at their
        # upload, or read): a damaged object is repaired, only intact content is protected.
        touched = [n for n in existing if n in self._staged or n in self._drop]
        plan.actual = {n: self._object_sha(listing[n]) for n in touched}
        for r in self._kept_before(plan):
            # an interrupted commit replaced it, the old bytes kept: what it holds now is the
            # archived content (as a directory archive takes an interrupted commit's files)
            if r["file"] in plan.actual:
                old_sha[r["file"]] = plan.actual[r["file"]]
        # ... and its rows, when its marker says them (as a directory archive counts the
        # files an interrupted commit put in place): never fewer than the manifest before
        plan.prev_rows = max(plan.prev_rows, self._interrupted_rows(plan))
        if new_rows < plan.prev_rows and existing and not self.replace:
            self._keep(prev or {}, doc, new_rows, plan.prev_rows, existing)
        changed = sorted(
            n for n in touched if n not in self._staged or plan.new_sha.get(n) != plan.actual[n]
        )
        intact = [n for n in changed if plan.actual[n] == old_sha.get(n)]
        grew = _source_count_grew(prev, doc)
        if intact and new_rows == plan.prev_rows and not self.replace and not grew:
            same = self._same_content(intact, plan, doc)  # another pyarrow's bytes
            changed = [n for n in changed if n not in same]
            intact = [n for n in intact if n not in same]
            if intact:
                self._refuse_s3_change(intact[0], plan, new_rows, doc.get("columns"))
        # another format's, or a file no manifest names (stray_data): kept, then removed
        strays = stray_data(listing, key.day, prev)
        unnamed = stray_names(prev_files, strays)
        gone = left_behind(prev_files + [{"file": n} for n in strays], doc)
        overwritten = [n for n in unnamed if n in self._staged]  # a stray of the new name
        for n in sorted({*gone, *overwritten}):
            if n in listing and (n in unnamed or n not in self._staged) and n not in changed:
                if n not in self._staged:
                    self._drop.add(n)
                plan.actual[n] = self._object_sha(listing[n])
                changed.append(n)
        plan.replaced = [
            {
                "file": n,
                "sha256": plan.actual[n],
                "bytes": listing[n].size,
                "version": f"{VERSIONS_DIR}/{n}.prev-{plan.actual[n][:8]}",
                **({UNNAMED: True} if n in unnamed else {}),
            }
            for n in changed
        ]
        return plan

    def _same_content(self, names: list[str], plan: _Plan, doc: dict[str, Any]) -> set[str]:
        """The archived Parquet objects of ``names`` whose staged replacement holds the same
        content in other bytes (:mod:`dxt_core.samecontent`): kept as they are."""
        same: set[str] = set()
        for name in (n for n in names if n.endswith(".parquet")):
            archived = self._stage / f".archived.{name}"
            try:
                self.archive.store.download(plan.listing[name].key, archived)
                same |= keep_same_content([(name, plan.actual[name], archived)], self._staged, doc)
            finally:
                archived.unlink(missing_ok=True)
            if name in same:
                plan.new_sha[name] = plan.actual[name]
        return same

    def _refuse_s3_change(self, name: str, plan: _Plan, rows: int, columns: Any) -> None:
        old, new = plan.actual[name], str(plan.new_sha.get(name) or "")
        url = self.archive.store.url(f"{self.prefix}/{name}")
        then = (self.previous or {}).get("columns")
        raise content_changed(
            self.key, rows, old, new, kept=url, what="object", columns=(then, columns)
        )

    def _claim(self, plan: _Plan) -> str:
        """Replace the manifest by the "writing" marker (conditional on the ETag read at
        begin): only the writer that read the current manifest gets past this."""
        key, archive, store = self.key, self.archive, self.archive.store
        if self.damaged_manifest:  # its bytes are kept before the claim replaces them
            mname = archive.manifest_path(key).name
            tag = hashlib.sha256(self.damaged_manifest.encode()).hexdigest()[:8]
            store.copy(self._manifest_key, f"{self.prefix}/{VERSIONS_DIR}/{mname}.prev-{tag}")
        marker = {
            "schema": MANIFEST_SCHEMA,
            "status": WRITING,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "previous": self.previous,
            # the objects this commit replaces, and where their old bytes go first; with
            # those an interrupted commit had replaced already (their copies are kept)
            "replacing": plan.replaced + self._replaced_before(plan),
            # what this commit puts in place, for a run that takes an interrupted one over
            "rows": plan.new_rows,
            "files": plan.new_sha,
            "writer": {"pid": os.getpid(), "host": socket.gethostname(), "at": _now()},
        }
        try:
            if self._manifest_etag is None:
                return store.put(self._manifest_key, _dumps(marker), if_none_match=True)
            return store.put(self._manifest_key, _dumps(marker), if_match=self._manifest_etag)
        except PreconditionFailed:
            raise ArchiveLocked(
                f"{key}: another writer committed this day since this run read it "
                f"({store.url(self._manifest_key)}); nothing was changed, rerun"
            ) from None

    def _copy_versions(self, plan: _Plan) -> None:
        """Server-side copies of the objects this commit replaces, then of their manifest."""
        store = self.archive.store
        for i, r in enumerate(plan.replaced):
            listed = plan.listing.get(str(r["file"]))
            try:
                # only the bytes this run read: after a takeover of the lock (a lease run
                # out), another writer's commit may have replaced them since
                store.copy(
                    f"{self.prefix}/{r['file']}",
                    f"{self.prefix}/{r['version']}",
                    if_match=listed.etag if listed is not None else None,
                )
            except PreconditionFailed:
                raise ArchiveLocked(
                    f"{self.key}: {store.url(self.prefix + '/' + str(r['file']))} changed since "
                    "this run read it (its lock was taken over by another writer: a run longer "
                    "than the lease DXT_S3_LOCK_LEASE_S?); its copy in .versions/ is left as "
                    "it was, rerun"
                ) from None
            if i == 0:
                _stall(self.archive.root, "versions")
        if plan.replaced and self.previous is not None:
            mname = self.archive.manifest_path(self.key).name
            # the first copy is kept (as a directory archive keeps it): a day whose bytes
            # come back (A, B, A, C) does not overwrite the manifest of its first A
            with contextlib.suppress(PreconditionFailed):
                store.put(
                    f"{self.prefix}/{VERSIONS_DIR}/{mname}.prev-{plan.replaced[0]['sha256'][:8]}",
                    _dumps(self.previous),
                    if_none_match=True,
                )

    def _upload(self, plan: _Plan, claim: str) -> None:
        """Each object is written (or deleted) only while the day's manifest is still this
        run's claim (``claim``: the marker's ETag, checked before each object) and only if
        the object is still what this run read: no object (If-None-Match), or the ETag
        listed (If-Match). A writer whose lock was taken over (its lease ran out while it
        ran) then stops before the next object instead of replacing or deleting what the
        writer that took the day over committed, also an object that writer left as it was."""
        store = self.archive.store
        target = ""
        try:
            for name, staged in sorted(self._staged.items()):
                want = plan.new_sha.get(name)
                if isinstance(want, str) and plan.actual.get(name) == want:
                    continue  # the object already holds these bytes: nothing to upload
                listed, target = plan.listing.get(name), f"{self.prefix}/{name}"
                self._check_claim(claim, target)
                store.upload_file(
                    staged,
                    target,
                    want if isinstance(want, str) else None,
                    if_match=listed.etag if listed is not None else None,
                    if_none_match=listed is None,
                )
            for name in sorted(self._drop - set(self._staged)):
                if name in plan.listing:
                    target = f"{self.prefix}/{name}"
                    self._check_claim(claim, target)
                    try:
                        store.delete(target, if_match=plan.listing[name].etag)
                    except PreconditionFailed:
                        if store.head(target) is not None:
                            raise  # else gone already: a retried delete's first attempt
        except PreconditionFailed:
            raise ArchiveLocked(
                f"{self.key}: {store.url(target)} changed since this run read it ({_TAKEN}); "
                "this run stopped there and wrote no manifest; rerun"
            ) from None

    def _check_claim(self, claim: str, target: str) -> None:
        """The day's manifest is still the marker this run wrote (one HEAD)."""
        store = self.archive.store
        head = store.head(self._manifest_key)
        if head is None or str(head.get("ETag", "")).strip('"') != claim.strip('"'):
            raise ArchiveLocked(
                f"{self.key}: the day's manifest {store.url(self._manifest_key)} changed since "
                f"this run claimed it ({_TAKEN}); this run stopped before "
                f"{store.url(target)} and wrote no manifest; rerun"
            )

    def _finish(self, doc: dict[str, Any], plan: _Plan, etag: str) -> Path:
        """The manifest, last (conditional on the marker), then the index object."""
        key, archive, store = self.key, self.archive, self.archive.store
        replaced = plan.replaced + self._replaced_before(plan)
        full = archive.full_manifest(key, doc if replaced else self.carried_replacement(doc))
        self.replaced = replaced  # reported in the day's report, as a local commit's
        if replaced:
            full["replaced"] = replaced
            full["replaced_rows"] = plan.prev_rows
            log.warning("%s", replaced_words(key, replaced, (plan.prev_rows, plan.new_rows)))
        try:
            new_etag = store.put(self._manifest_key, _dumps(full), if_match=etag)
        except PreconditionFailed:
            raise ArchiveError(
                f"{key}: the day's manifest changed while this run wrote it (its lock was "
                f"taken over: a run longer than the lease DXT_S3_LOCK_LEASE_S?); rerun"
            ) from None
        # The day is committed: what follows only tidies; a failure is said, not raised (the
        # day would be reported as failed, and retried, when it is archived).
        kept = archive.key_of(archive.kept_path(key))
        if kept.rsplit("/", 1)[-1] in plan.listing:
            try:
                store.delete(kept)
            except ArchiveError as exc:
                log.warning(
                    "%s: committed, but its old 'kept' record %s is still there (%s); "
                    "coverage ignores it (the manifest is newer): delete it",
                    key,
                    store.url(kept),
                    exc,
                )
        try:
            archive._index_update(key, full, new_etag)
        except ArchiveError as exc:
            log.warning(
                "%s: committed, but not recorded in the unit's index object (%s); coverage "
                "reads its manifest until 'dxt index rebuild --archive %s' or the next commit",
                key,
                exc,
                archive.root,
            )
        for staged in self._staged.values():
            with contextlib.suppress(OSError):
                staged.unlink()
        self._staged.clear()
        return archive.manifest_path(key)

    def _replaced_before(self, plan: _Plan) -> list[dict[str, Any]]:
        """What an interrupted commit of this day had replaced already (its marker's
        ``replacing``, whose old bytes are in ``.versions/``), beside what this commit
        replaces: the manifest names every copy kept, as the interrupted commit's would
        have (a replace of a replace names both)."""
        done = {r.get("version") for r in plan.replaced}
        return [r for r in self._kept_before(plan) if r.get("version") not in done]

    def _kept_before(self, plan: _Plan) -> list[dict[str, Any]]:
        """The interrupted commit's ``replacing`` entries whose copy in ``.versions/`` is
        there and whose object it did replace (gone, or no longer the old bytes: one killed
        after its copies but before its upload replaced nothing), asked once per commit."""
        if self._kept is None:
            marker = self._interrupted or {}
            self._kept = [
                r
                for r in marker.get("replacing") or []
                if isinstance(r, dict)
                and _plain_name(r.get("file"))
                and _plain_name(str(r.get("version", "")).removeprefix(f"{VERSIONS_DIR}/"))
                and self.archive.store.head(f"{self.prefix}/{r['version']}") is not None
                and self._now_holds(plan, str(r["file"])) != r.get("sha256")
            ]
        return self._kept

    def _now_holds(self, plan: _Plan, name: str) -> str | None:
        """The sha256 of the object ``name`` now (None when there is none)."""
        if name in plan.actual:
            return plan.actual[name]
        listed = plan.listing.get(name)
        return None if listed is None else self._object_sha(listed)

    def _interrupted_rows(self, plan: _Plan) -> int:
        """The rows of the interrupted commit's day when one of its objects is in place (its
        marker's ``rows`` and ``files``; a marker of an older version says none: 0)."""
        marker = self._interrupted or {}
        rows, files = marker.get("rows"), marker.get("files")
        if not isinstance(rows, int) or not isinstance(files, dict):
            return 0
        placed = any(
            isinstance(sha, str) and _plain_name(name) and self._now_holds(plan, name) == sha
            for name, sha in files.items()
        )
        return rows if placed else 0

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
        archive = self.archive
        keep_archived_day(
            archive,
            self.key,
            prev,
            doc,
            archive_rows=prev_rows,
            source_rows=new_rows,
            kept=archive.store.url(f"{self.prefix}/{existing[0]}"),
        )


__all__ = ["S3DayLock", "S3DayWrite"]
