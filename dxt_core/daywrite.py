"""Writing one metric-day as a transaction: staged files, the never-shrink rule, versions.

:meth:`dxt_core.archive.Archive.begin` returns a :class:`DayWrite`:

1. ``begin`` takes the day's lock (:class:`~dxt_core.locks.DayLock`; a second writer gets
   :class:`~dxt_core.errors.ArchiveLocked` naming the holder), removes temporary files of
   crashed earlier attempts and reads the day's current manifest (or, without a readable
   one, the data files beside it: :func:`~dxt_core.manifests.unmanifested_data`). Nothing
   archived is touched.
2. The backend writes its data files under hidden staging names (:meth:`DayWrite.open`,
   :meth:`DayWrite.staging_path`), never under the final name.
3. ``commit`` compares the new row count with the archived one. **An archive never loses rows
   because the source did**: when the day is archived with N rows and this run read M < N
   (or "empty"), the archived file and manifest stay as they are, a ``<day>.kept.json``
   sidecar records the attempt (coverage shows it) and
   :class:`~dxt_core.errors.SourceShrank` is raised (:func:`keep_archived_day`). As many
   rows with other bytes is :class:`~dxt_core.errors.ContentChanged` unless the source's own
   count grew. With ``replace`` the new data wins. Every archived file a commit replaces is
   first kept as ``.versions/<name>.prev-<sha8>`` (written under a temporary name, renamed
   when complete). Then the staged files are renamed into place, the directory is fsynced,
   the manifest is written (fsync of the file, rename, fsync of the directory) and the lock
   is released.

A crash at any point leaves either the old day or the new one, never a partial file under a
final name; between the data rename and the new manifest the day reads "missing" (the old
manifest is parked as ``.<manifest>.pending`` so that the next run still compares against its
row count). The next run trusts a parked manifest only while the files on disk are the ones
it describes (size and sha256): when the interrupted commit had renamed its files into place
(the replaced ones kept in ``.versions/``) the files on disk are the archived day, counted
as they are, and the new manifest names what that commit replaced; a parked manifest left
beside a manifest that matches the files is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

import orjson

from dxt_core import masking
from dxt_core.commit_rules import (
    UNNAMED,
    check_staged,
    content_changed,
    keep_archived_day,
    left_behind,
    replaced_words,
    source_count_grew,
    stray_names,
)
from dxt_core.commitgate import committing
from dxt_core.errors import ArchiveError
from dxt_core.fsio import (
    archive_io,
    fsync_dir,
    is_archive_write_error,
    json_bytes,
    make_dirs_durable,
    os_error,
    prepared_file,
    sha256_file,
    write_json_atomic,
)
from dxt_core.manifests import (
    KEPT_SUFFIX,
    MANIFEST_SUFFIX,
    NOT_OVER,
    VERSIONS_DIR,
    files_intact,
    is_plain_name,
    manifest_files,
    rows_of,
    stray_data,
    unmanifested_data,
)
from dxt_core.samecontent import keep_same_content

if TYPE_CHECKING:
    from dxt_core.archive import Archive, DayKey

log = masking.logger("dxt_core.archive")


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
        self._lock = archive.day_lock(key)
        self._staged: dict[str, Path] = {}  # final file name -> staged path
        self._drop: set[str] = set()  # final file names this commit removes
        self._unnamed: set[str] = set()  # of them, data files no manifest named (strays)
        self.previous: dict[str, Any] | None = None
        #: Why the day's manifest could not be read, when it could not.
        self.damaged_manifest = ""
        #: The archived files this commit replaced by other bytes (kept in .versions/).
        self.replaced: list[dict[str, Any]] = []
        #: the commit wrote what the archive held already (:meth:`same_as_previous`)
        self.unchanged = False
        #: the commit wrote the bytes its manifest already gave over a missing or damaged file
        self.restored = False
        self._state_at_begin: tuple[int, int] | None = None
        self._written: dict[str, Any] = {}
        #: The parked manifest of an interrupted commit that had replaced files already.
        self._interrupted_pending: dict[str, Any] | None = None
        #: (size, mtime in ns) of the manifest this commit wrote, taken under the lock.
        self._manifest_stat: tuple[int, int] | None = None
        self._shas: dict[str, tuple[int, int, str]] = {}
        self.closed = False

    # -- life cycle -------------------------------------------------------------------------
    def _start(self) -> None:
        self.archive.check_root()
        with archive_io(self.directory, "create directory"):
            make_dirs_durable(self.directory)
        self.archive.check_root()  # the first day's root, now that it exists
        from dxt_core.index import directory_state

        # What the directory looked like before this transaction touched it: the index
        # trusts its rows of this directory after the commit only if it did before.
        with archive_io(self.directory, "read"):
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
            pending = self._read_pending()
            if self.previous is not None:
                if pending is not None and self._files_match(self.previous):
                    self._drop_pending()  # obsolete: the commit that parked it finished
            elif pending is not None:
                self.previous = self._from_pending(pending)
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
        removed = 0
        for pattern in patterns:
            for stale in self.directory.glob(pattern):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
                    removed += 1
        if removed:  # said: a run killed here before (it was never committed)
            log.warning(
                "%s: removed %d temporary file(s) an earlier run of this day left when it was "
                "killed or crashed (never committed)",
                self.key,
                removed,
            )

    @property
    def _pending(self) -> Path:
        return self.directory / f".{self.archive.manifest_path(self.key).name}.pending"

    def _read_pending(self) -> dict[str, Any] | None:
        try:
            doc = orjson.loads(self._pending.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def _drop_pending(self) -> None:
        with archive_io(self._pending, "remove"):
            with contextlib.suppress(FileNotFoundError):
                self._pending.unlink()
            fsync_dir(self.directory)

    def _day_data_names(self) -> list[str]:
        """The day's data files on disk (``<day>.<ext>``), as :func:`unmanifested_data`
        finds them."""
        prefix = f"{self.key.day.isoformat()}."
        with archive_io(self.directory, "read"):
            names = sorted(os.listdir(self.directory))
        return [
            n
            for n in names
            if n.startswith(prefix)
            and not n.endswith((MANIFEST_SUFFIX, KEPT_SUFFIX))
            and (self.directory / n).is_file()
        ]

    def _sha_on_disk(self, name: str) -> str | None:
        """The sha256 of the day's file ``name`` on disk, None when there is none (read
        once per transaction while the file's size and mtime stay)."""
        path = self.directory / name
        with archive_io(path, "read"):
            try:
                st = path.stat()
            except FileNotFoundError:
                return None
            seen = self._shas.get(name)
            if seen is not None and seen[:2] == (st.st_size, st.st_mtime_ns):
                return seen[2]
            sha = sha256_file(path)
        self._shas[name] = (st.st_size, st.st_mtime_ns, sha)
        return sha

    def _files_match(self, doc: dict[str, Any]) -> bool:
        """The data files on disk are the ones ``doc`` describes: each file it names is
        there with its size and sha256, and no other data file of the day is."""
        files = manifest_files(doc) if doc.get("status") == "archived" else []
        named: set[str] = set()
        for f in files:
            name = f.get("file")
            if not is_plain_name(name):
                return False
            path = self.directory / str(name)
            named.add(str(name))
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return False
            if isinstance(f.get("bytes"), int) and size != f["bytes"]:
                return False
            want = f.get("sha256")
            if isinstance(want, str) and self._sha_on_disk(str(name)) != want:
                return False
        return set(self._day_data_names()) <= named

    def _from_pending(self, pending: dict[str, Any]) -> dict[str, Any] | None:
        """What the day holds when only the parked manifest of an interrupted commit
        (``.pending``) is left.

        It is trusted only while the files on disk are the ones it describes (the commit
        stopped before its data renames). Otherwise the commit got further: when the files
        it was replacing are kept in ``.versions/``, the files on disk are that commit's
        and are taken as they are (rows counted); else the larger of the two row counts
        stands, so that a rerun never shrinks the day on the word of a stale manifest.
        """
        if self._files_match(pending):
            return pending
        on_disk = unmanifested_data(self.directory, self.key.day)
        if self._pending_versions(pending):
            self._interrupted_pending = pending
            log.warning(
                "%s: an earlier commit was interrupted after replacing the archived files "
                "(the old ones are in %s/); taking the files on disk as the archived day",
                self.key,
                VERSIONS_DIR,
            )
            if on_disk is None:
                return None
            for f in manifest_files(on_disk):
                sha = self._sha_on_disk(str(f["file"]))
                if sha is not None:
                    f["sha256"] = sha
                    if f["file"] == on_disk.get("file"):
                        on_disk["sha256"] = sha
            return on_disk
        if on_disk is None:
            return pending
        if rows_of(pending) > rows_of(on_disk):
            on_disk["rows"] = rows_of(pending)
        return on_disk

    def _pending_versions(self, pending: dict[str, Any]) -> list[dict[str, Any]]:
        """The files of the parked manifest that are no longer on disk as it describes them
        and whose bytes are kept in ``.versions/`` (as ``replaced`` entries); empty unless
        every such file is kept."""
        if pending.get("status") != "archived":
            return []
        out: list[dict[str, Any]] = []
        for f in manifest_files(pending):
            name, sha = f.get("file"), f.get("sha256")
            if not is_plain_name(name) or not isinstance(sha, str):
                return []
            if self._sha_on_disk(str(name)) == sha:
                continue  # still in place
            version = self.directory / VERSIONS_DIR / f"{name}.prev-{sha[:8]}"
            try:
                size = version.stat().st_size
            except OSError:
                return []
            if isinstance(f.get("bytes"), int) and size != f["bytes"]:
                return []
            out.append(
                {
                    "file": str(name),
                    "sha256": sha,
                    "bytes": size,
                    "version": f"{VERSIONS_DIR}/{version.name}",
                }
            )
        return out

    def _replaced_by_interrupted(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """What an interrupted commit of this day had replaced already: a file that now
        holds this commit's bytes (or that neither holds nor writes), whose old bytes are in
        ``.versions/``. The manifest names them, as the interrupted commit's would have."""
        if self._interrupted_pending is None:
            return []
        done = {r["file"] for r in self.replaced}
        new_sha = {
            str(f.get("file")): f.get("sha256")
            for f in (manifest_files(doc) if doc.get("status") == "archived" else [])
        }
        out: list[dict[str, Any]] = []
        for r in self._pending_versions(self._interrupted_pending):
            name = r["file"]
            if name in done:
                continue
            staged = self._staged.get(name)
            if staged is not None:
                new = new_sha.get(name)
                if not isinstance(new, str):
                    with archive_io(staged, "read"):
                        new = sha256_file(staged)
                if self._sha_on_disk(name) != new:
                    continue  # replaced again by this commit: in self.replaced
            elif (self.directory / name).exists():
                continue
            out.append(r)
        return out

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
            raw = open(staged, "wb", buffering=buffer_size)  # noqa: SIM115
            with raw as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(staged, 0o644)
        except OSError as exc:
            with contextlib.suppress(OSError):
                staged.unlink()
            if is_archive_write_error(exc, os.fspath(staged)) or exc.filename == os.fspath(staged):
                raise self.write_error(exc, extension) from exc
            raise
        except BaseException:
            with contextlib.suppress(OSError):
                staged.unlink()
            raise

    def write_error(self, exc: OSError, extension: str) -> ArchiveError:
        """The error of a staged data file the disk refused, naming the day's file."""
        return os_error(exc, self.archive.data_path(self.key, extension), "write")

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
        self.discard(extension)
        self._drop.add(self.archive.data_path(self.key, extension).name)

    # -- commit -----------------------------------------------------------------------------
    def commit(self, doc: dict[str, Any]) -> Path:
        """Apply the never-shrink rule, move the staged files into place and write the
        manifest (``doc`` plus the common fields). Returns the manifest's path.

        Raises:
            SourceShrank: the day is archived with more rows than ``doc`` says and
                ``replace`` is off; the archived day is unchanged.
        """
        self._check_open()
        intact = files_intact(self.directory, self.previous)
        try:
            with committing():  # not once its run has abandoned it (dxt_core.commitgate)
                path = self._commit(doc)
            same = self.same_as_previous(doc)
            self.unchanged = same and intact
            self.restored = same and not intact
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
            manifest_stat=self._manifest_stat,
        )
        return path

    def same_as_previous(self, doc: dict[str, Any]) -> bool:
        """Whether ``doc`` says what the day's previous manifest said: the same status, rows,
        holes and not-over mark, and the same files (names and sha256); nothing replaced.
        A rerun of an archived day (a cleared task, a refetch) that read the same data; not
        the rerun of a commit that did not finish (data found without a manifest: the day was
        never archived, whatever the bytes)."""
        prev = self.previous
        if prev is None or self.replaced or self.damaged_manifest or prev.get("recovered_from"):
            return False
        for field_ in ("status", "holes", NOT_OVER):
            if (prev.get(field_) or None) != (doc.get(field_) or None):
                return False
        if rows_of(prev) != rows_of(doc):
            return False

        def files(d: dict[str, Any]) -> list[tuple[str, str]]:
            if d.get("status") != "archived":
                return []
            return sorted((str(f.get("file")), str(f.get("sha256"))) for f in manifest_files(d))

        return files(prev) == files(doc)

    def carried_replacement(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with the previous manifest's record of what its content replaced
        (``replaced``, ``replaced_rows``) when this commit rewrites that same content and
        replaces nothing itself: a refetch that found the day unchanged erased the record
        (the versions stayed in .versions/, named by nothing; the datacard's count of days
        replaced went down)."""
        prev = self.previous or {}
        if "replaced" not in prev or "replaced" in doc or not self.same_as_previous(doc):
            return doc
        return {**doc, **{k: prev[k] for k in ("replaced", "replaced_rows") if k in prev}}

    def _commit(self, doc: dict[str, Any]) -> Path:
        key, directory = self.key, self.directory
        new_rows = rows_of(doc)
        prev = self.previous
        prev_rows = rows_of(prev)
        prev_files = manifest_files(prev) if prev and prev.get("status") == "archived" else []
        check_staged(key, doc, self._staged)
        shrinks = new_rows < prev_rows
        existing = [directory / f["file"] for f in prev_files if is_plain_name(f.get("file"))]
        if shrinks and any(p.exists() for p in existing) and not self.replace:
            self._keep(prev or {}, doc, new_rows, prev_rows, existing)
        changed = self._changed_files(prev_files, doc)
        intact = [c for c in changed if _matches_manifest(prev_files, c)]
        if (
            intact
            and new_rows == prev_rows
            and not self.replace
            and not source_count_grew(prev, doc)
        ):
            same = keep_same_content(intact, self._staged, doc)  # another pyarrow's bytes
            changed = [c for c in changed if c[0] not in same]
            intact = [c for c in intact if c[0] not in same]
            if intact:
                self._refuse_change(intact, doc, new_rows)
        changed += self._left_behind(prev_files, doc)
        manifest = self.archive.manifest_path(key)
        with archive_io(directory, "update"):
            if changed or self.damaged_manifest:
                self.replaced = self._save_versions(prev, changed, manifest)
        before = self._replaced_by_interrupted(doc)
        if before:
            if not self.replaced:
                prev_rows = rows_of(self._interrupted_pending)
            self.replaced = self.replaced + before
        if self.replaced:
            doc = {**doc, "replaced": self.replaced, "replaced_rows": prev_rows}
        else:
            doc = self.carried_replacement(doc)
        # the new manifest is written before any file is moved: a full disk stops the commit
        # here, with the archived day as it was (only renames follow, which need no space)
        self._written = self.archive.full_manifest(key, doc)
        prepared = prepared_file(manifest, json_bytes(self._written))
        try:
            with archive_io(directory, "update"):
                if manifest.exists() and (changed or self.replaced or self.damaged_manifest):
                    # Parked, not deleted: after a crash from here to the new manifest the day
                    # reads "missing" and the next run still compares with these rows. A
                    # commit that replaces no file by other bytes leaves it in place (it
                    # still tells the truth of the files): a refetch of the same bytes never
                    # shows the day missing.
                    os.replace(manifest, self._pending)
                for name, staged in sorted(self._staged.items()):
                    os.replace(staged, directory / name)
                self._staged.clear()
                for name in sorted(self._drop):
                    with contextlib.suppress(FileNotFoundError):
                        (directory / name).unlink()
                fsync_dir(directory)  # the data's renames are on disk before the manifest's
                self.archive.place_manifest(key, prepared)
        finally:
            with contextlib.suppress(FileNotFoundError):
                prepared.unlink()
        if self.replaced:
            log.warning("%s", replaced_words(key, self.replaced, (prev_rows, new_rows)))
        with contextlib.suppress(OSError):
            st = manifest.stat()
            self._manifest_stat = (st.st_size, st.st_mtime_ns)
        with archive_io(directory, "update"):
            with contextlib.suppress(FileNotFoundError):
                self._pending.unlink()
            with contextlib.suppress(FileNotFoundError):
                self.archive.kept_path(key).unlink()
        return manifest

    def _keep(
        self,
        prev: dict[str, Any],
        doc: dict[str, Any],
        new_rows: int,
        prev_rows: int,
        existing: list[Path],
    ) -> None:
        keep_archived_day(
            self.archive,
            self.key,
            prev,
            doc,
            archive_rows=prev_rows,
            source_rows=new_rows,
            kept=str(next((p for p in existing if p.exists()), existing[0])),
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
            if not is_plain_name(name):
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

    def _left_behind(
        self, prev_files: list[dict[str, Any]], doc: dict[str, Any]
    ) -> list[tuple[str, str, Path]]:
        """The archived files the new manifest no longer names (:func:`left_behind`), on
        disk: removed by this commit after their copy in ``.versions/``."""
        try:  # and the day's data files no manifest names (dxt_core.manifests.stray_data)
            listed = os.listdir(self.directory)
        except FileNotFoundError:
            listed = []
        strays = stray_data(listed, self.key.day, self.previous)
        self._unnamed = stray_names(prev_files, strays)
        gone = left_behind(prev_files + [{"file": n} for n in strays], doc)
        overwritten = [n for n in self._unnamed if n in self._staged]  # the new file's name
        out = []
        for name in sorted({*gone, *overwritten}):
            path = self.directory / name
            # a named file this commit removes or writes already (an empty day's, the new
            # format's) is counted by _changed_files; a stray never is: its bytes are kept
            # whether this commit removes it or writes its name (a symlink: what it shows)
            stray = name in self._unnamed
            if (stray or (name not in self._staged and name not in self._drop)) and path.is_file():
                with archive_io(path, "read"):
                    out.append((name, sha256_file(path), path))
                if name not in self._staged:
                    self._drop.add(name)
        return out

    def _refuse_change(
        self, changed: list[tuple[str, str, Path]], doc: dict[str, Any], rows: int
    ) -> NoReturn:
        name, old, path = changed[0]
        new = next(
            (
                str(f.get("sha256"))
                for f in manifest_files(doc)
                if f.get("file") == name and isinstance(f.get("sha256"), str)
            ),
            "",
        )
        then = (self.previous or {}).get("columns")
        raise content_changed(
            self.key, rows, old, new, kept=str(path), columns=(then, doc.get("columns"))
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
                    **({UNNAMED: True} if name in self._unnamed else {}),
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
            if src.is_symlink():  # a stray link: a copy of the bytes it showed (a hard
                raise OSError  # link would be of the link, or share a file not the archive's)
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
