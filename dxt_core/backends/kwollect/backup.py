"""An experiment's backup: ``<backup_dir>/<node FQDN>/<metric>.<jsonl|csv>.gz`` written as the
points come, one site at a time, and ``manifest.json`` last.

JSON Lines keep every point exactly as the API sent it (labels included); CSV flattens labels
into ``label:<key>`` columns (lists joined with ``;``). Each file goes through a
:class:`~dxt_core.writers.base.RecordWriter` onto an atomic file in a staging directory
(``<backup_dir>/.staging-*``, see :func:`new_staging`) until its site is done. A backup keeps
one open gzip stream per (node, metric): ISA-L (:data:`STREAM_BACKEND`) compresses as it goes
with a small state per stream, where buffering backends would hold megabytes per open file.

The files come under their final names only at the end (:func:`commit_backup`), just before
the manifest that lists them: a backup stopped by Ctrl-C commits the sites that were complete
and a manifest marked incomplete (:class:`BackupInterrupted`), or nothing; a failed one
commits nothing. No file of a run is ever left under a final name without a manifest that
vouches for it.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

import orjson

from dxt_core import masking
from dxt_core.backends.kwollect.source import G5kNode, Point, check_component
from dxt_core.errors import ConfigError, SourceError
from dxt_core.fsio import archive_io, atomic_file, fsync_dir, make_dirs_durable, write_json_atomic
from dxt_core.http import RequestStats
from dxt_core.procs import killed_leftovers, owned_prefix
from dxt_core.records import Record
from dxt_core.writers.base import RecordWriter, WriteResult
from dxt_core.writers.compress import GzipStream
from dxt_core.writers.jsonl_gzip import JsonlGzipWriter

log = masking.logger("dxt_core.backends.kwollect.backup")

BACKUP_MANIFEST = "manifest.json"
BACKUP_SCHEMA = "dxt-archive/kwollect-backup/1"
BackupFormat = Literal["jsonl", "csv"]
#: Name prefix of a backup's staging directory (a leftover of a killed run can be deleted).
STAGING_PREFIX = ".staging-"
#: The columns of a point (CSV adds one ``label:<key>`` column per label key).
POINT_COLUMNS = ("timestamp", "device_id", "metric_id", "value")
STREAM_BACKEND: Literal["isal"] = "isal"


def _label_text(value: Any) -> str:
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return "" if value is None else str(value)


class LabelCsvWriter(RecordWriter[Sequence[str], Sequence[Record]]):
    """Points as gzip CSV: the columns given to :meth:`header`, then one ``label:<key>`` per
    label key seen, sorted.

    The label keys are known only at the end, so rows are spooled to an unnamed temporary
    file (memory stays flat) and the CSV is written at close.
    """

    extension = "csv.gz"

    def __init__(self, out: BinaryIO) -> None:
        super().__init__(out)
        self.spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.keys: dict[str, None] = {}
        self.base: list[str] = list(POINT_COLUMNS)
        self.count = 0

    def header(self, columns: Sequence[str]) -> None:
        self.base = list(columns)

    def rows(self, points: Sequence[Record]) -> None:
        for p in points:
            self.spool.write(orjson.dumps(p) + b"\n")  # a buffered file: small writes
            for k in p.get("labels") or {}:
                self.keys.setdefault(k, None)
        self.count += len(points)

    def abort(self) -> None:
        self.spool.close()

    def close(self) -> WriteResult:
        keys = sorted(self.keys)
        gz = GzipStream(self.out, backend=STREAM_BACKEND)
        text = io.StringIO()
        w = csv.writer(text, lineterminator="\n")
        columns = [*self.base, *(f"label:{k}" for k in keys)]
        w.writerow(columns)
        self.spool.seek(0)
        for line in self.spool:
            p = orjson.loads(line)
            labels = p.get("labels") or {}
            w.writerow(
                [*(p.get(c) for c in self.base), *(_label_text(labels.get(k)) for k in keys)]
            )
            if text.tell() > 1 << 16:
                gz.write(text.getvalue().encode())
                text.seek(0)
                text.truncate()
        gz.write(text.getvalue().encode())
        self.spool.close()
        sha = gz.close()
        return WriteResult(rows=self.count, columns=columns, bytes=gz.bytes, sha256=sha)


@dataclass
class _File:
    path: Path
    writer: RecordWriter[Sequence[str], Sequence[Record]]
    rows: int = 0
    first: str | None = None
    last: str | None = None


class SiteBackup:
    """One site's points, as they come, into one file per (node, metric) under ``root``;
    the files' atomic handles live on ``stack`` (renamed when it closes without error)."""

    def __init__(
        self,
        root: Path,
        site: str,
        nodes: Sequence[G5kNode],
        fmt: BackupFormat,
        stack: contextlib.ExitStack,
    ) -> None:
        self.root, self.site, self.fmt, self.stack = root, site, fmt, stack
        self.names = {n.name: n for n in nodes}
        self.files: dict[tuple[str, str], _File] = {}
        #: points written so far (read by other threads: a count of what a stop discards)
        self.rows = 0

    def add(self, batch: Sequence[Point]) -> None:
        """Write one answer's points, each into its (node, metric) file, in order."""
        groups: dict[tuple[str, str], list[Point]] = {}
        for p in batch:
            node = self.names.get(p.get("device_id", ""))
            if node is not None:
                groups.setdefault((node.fqdn, str(p.get("metric_id"))), []).append(p)
        for key, points in groups.items():
            f = self.files.get(key) or self._open(key)
            f.writer.rows(points)
            f.rows += len(points)
            self.rows += len(points)
            f.first = f.first or points[0]["timestamp"]
            f.last = points[-1]["timestamp"]

    def _open(self, key: tuple[str, str]) -> _File:
        metric = check_component(key[1], "metric name sent by the API", SourceError)
        ext = "jsonl.gz" if self.fmt == "jsonl" else LabelCsvWriter.extension
        path = self.root / key[0] / f"{metric}.{ext}"
        # many files stay open at once: small write buffers
        fh = self.stack.enter_context(atomic_file(path, buffer_size=1 << 16))
        writer: RecordWriter[Sequence[str], Sequence[Record]]
        if self.fmt == "jsonl":
            writer = JsonlGzipWriter(fh, gzip_backend=STREAM_BACKEND)
            writer.header([])
        else:
            writer = LabelCsvWriter(fh)
            writer.header(POINT_COLUMNS)
        f = self.files[key] = _File(path, writer)
        return f

    def abort(self) -> None:
        for f in self.files.values():
            f.writer.abort()

    def close(self) -> list[dict[str, Any]]:
        """Finish every file; their manifest entries."""
        done = []
        for (fqdn, metric), f in sorted(self.files.items()):
            res = f.writer.close()
            done.append(
                {
                    "file": f.path.relative_to(self.root).as_posix(),
                    "node": fqdn,
                    "site": self.site,
                    "metric": metric,
                    "rows": f.rows,
                    "bytes": res.bytes,
                    "sha256": res.sha256,
                    "first_timestamp": f.first,
                    "last_timestamp": f.last,
                }
            )
        return done


def write_backup_manifest(root: Path, doc: dict[str, Any], files: list[dict[str, Any]]) -> Path:
    """``manifest.json``, written last: ``doc`` with the files and their totals."""
    manifest = root / BACKUP_MANIFEST
    write_json_atomic(
        manifest,
        {
            "schema": BACKUP_SCHEMA,
            **doc,
            "files": files,
            "rows": sum(f["rows"] for f in files),
            "bytes": sum(f["bytes"] for f in files),
        },
    )
    return manifest


def new_staging(root: Path) -> Path:
    """A new staging directory in ``root`` (created with its parents), where a backup's
    files are written until :func:`commit_backup` moves them under their final names. Those
    that killed backups of this host left (their process gone) are removed first, and said."""
    with archive_io(root, "create directory"):
        make_dirs_durable(root)
        left = killed_leftovers(root, STAGING_PREFIX)
        for old in left:
            discard_staging(old)
        if left:
            log.warning(
                "%s: removed %d staging director%s that killed backups left (nothing of them "
                "was committed)",
                root,
                len(left),
                "y" if len(left) == 1 else "ies",
            )
        return Path(tempfile.mkdtemp(prefix=owned_prefix(STAGING_PREFIX), dir=root))


def discard_staging(staging: Path) -> None:
    """Remove a staging directory and whatever is left in it."""
    shutil.rmtree(staging, ignore_errors=True)


#: What makes two backups the same backup (a rerun), beside a stop time no earlier.
BACKUP_IDENTITY = ("api_url", "start", "format", "nodes", "metrics")
#: Where an earlier backup replaced by another one (``replace=True``) is kept.
VERSIONS_DIR = ".versions"


def default_backup_dir(start: dt.datetime, stop: dt.datetime) -> Path:
    """``kwollect-backup/<start>_<stop>`` (UTC, to the second): one directory per window, so
    that a backup of another experiment never lands on this one's, and a rerun of the same
    backup (a notebook cell run again) rewrites it."""

    def stamp(t: dt.datetime) -> str:
        return t.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")

    return Path("kwollect-backup") / f"{stamp(start)}_{stamp(stop)}"


def earlier_backup(root: Path, doc: dict[str, Any], replace: bool) -> dict[str, Any] | None:
    """The backup ``root`` already holds, when the new one (described by ``doc``: the fields of
    :data:`BACKUP_IDENTITY` and ``stop``) is another one and ``replace`` lets it take its
    place: it is set aside in :data:`VERSIONS_DIR` when the new one commits. None when
    ``root`` holds no backup, or the same one (the same nodes, metrics, format, server and
    start, a stop no earlier: a rerun, or a running experiment backed up again), which the
    new one rewrites.

    Raises:
        ConfigError: ``root`` holds another backup (or a manifest that cannot be read) and
            ``replace`` is false; names what differs and the ways out.
    """
    manifest = root / BACKUP_MANIFEST
    try:
        old = orjson.loads(manifest.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        old, why = None, f"its {BACKUP_MANIFEST} cannot be read ({exc})"
    if isinstance(old, dict) and old.get("schema") == BACKUP_SCHEMA:
        differ = [k for k in BACKUP_IDENTITY if old.get(k) != doc.get(k)]
        if _ends_later(old.get("stop"), doc.get("stop")):
            differ.append("stop (it ends later)")
        if not differ:
            return None
        why = (
            "it holds another backup: other "
            + ", ".join(differ)
            + (
                f" (it covers {old.get('start')} to {old.get('stop')}, nodes "
                f"{', '.join(old.get('nodes') or [])})"
            )
        )
    elif old is not None:
        why = f"its {BACKUP_MANIFEST} is not a Kwollect backup's"
    if replace:
        return old if isinstance(old, dict) else {}
    raise ConfigError(
        f"backup directory {root}: {why}. Give another backup_dir (the default is one "
        "directory per window), or replace=True (--replace) to put this backup in its place "
        f"(the earlier one is kept in {root / VERSIONS_DIR})"
    )


def _ends_later(old: object, new: object) -> bool:
    try:
        return dt.datetime.fromisoformat(str(old)) > dt.datetime.fromisoformat(str(new))
    except ValueError:
        return old != new


def _set_aside(root: Path, old: dict[str, Any]) -> None:
    """Move the earlier backup (its manifest and the files it lists) into
    ``<root>/.versions/<now, UTC>/``, under the same relative names."""
    kept = root / VERSIONS_DIR / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    listed = [f["file"] for f in old.get("files") or [] if isinstance(f, dict) and "file" in f]
    if old.get("schema") != BACKUP_SCHEMA:  # a manifest unread or another tool's: keep all
        listed = [
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
        ]
    for name in dict.fromkeys([BACKUP_MANIFEST, *listed]):
        source = root / str(name)
        if ".." in Path(name).parts or Path(name).is_absolute() or not source.is_file():
            continue  # a name outside the backup, or a file gone: nothing to keep
        target = kept / name
        with archive_io(target, "keep the earlier backup's file as"):
            make_dirs_durable(target.parent)
            os.replace(source, target)
            fsync_dir(target.parent)
    with archive_io(root, "sync directory"):
        fsync_dir(root)


def commit_backup(
    root: Path,
    staging: Path,
    doc: dict[str, Any],
    files: list[dict[str, Any]],
    replaced: dict[str, Any] | None = None,
) -> Path:
    """Move the staged ``files`` (each complete) under their final names in ``root``, then
    write ``manifest.json`` listing them; the staging directory is removed. An earlier
    backup's manifest is removed first: it no longer describes the directory. ``replaced``
    (from :func:`earlier_backup`): another backup in ``root``, moved into ``.versions/``
    first."""
    if replaced is not None:
        _set_aside(root, replaced)
    manifest = root / BACKUP_MANIFEST
    with archive_io(manifest, "remove"):
        manifest.unlink(missing_ok=True)
        fsync_dir(root)
    moved: set[Path] = set()
    for f in files:
        target = root / f["file"]
        with archive_io(target, "move the staged file to"):
            make_dirs_durable(target.parent)
            os.replace(staging / f["file"], target)
        moved.add(target.parent)
    for d in sorted(moved):
        with archive_io(d, "sync directory"):
            fsync_dir(d)
    write_backup_manifest(root, doc, files)
    discard_staging(staging)
    return manifest


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


class BackupInterrupted(KeyboardInterrupt):
    """A backup stopped by Ctrl-C (SIGINT), after it committed what was complete.

    Attributes:
        root: the backup directory.
        manifest: ``manifest.json`` (marked ``"complete": false``) listing the files of the
            sites that were complete, or None when none was (nothing was written).
        files: those files' manifest entries.
        sites: every site of the backup, in order.
        not_done: the sites not backed up, and how each ended (``stopped``, ``abandoned in
            flight``, ``not started``).
        nodes_not_done: their nodes (FQDNs).
        discarded_rows: points fetched for sites not complete, not kept.
        stats: the requests of the whole run.
    """

    def __init__(
        self,
        root: Path,
        manifest: Path | None,
        files: list[dict[str, Any]],
        sites: list[str],
        not_done: dict[str, str],
        nodes_not_done: list[str],
        discarded_rows: int,
        stats: RequestStats,
    ) -> None:
        self.root, self.manifest, self.files = root, manifest, files
        self.sites, self.not_done, self.nodes_not_done = sites, not_done, nodes_not_done
        self.discarded_rows, self.stats = discarded_rows, stats
        super().__init__(self.summary())

    @property
    def abandoned(self) -> bool:
        """Some site's request was still in flight when the backup gave up waiting."""
        return any(how == "abandoned in flight" for how in self.not_done.values())

    def summary(self) -> str:
        """What the backup did, with counts, in one line."""
        s = self.stats
        rows = sum(f["rows"] for f in self.files)
        size = sum(f["bytes"] for f in self.files)
        missing = ", ".join(f"{site} ({how})" for site, how in self.not_done.items())
        done = len(self.sites) - len(self.not_done)
        cost = (
            f"{_plural(s.requests, 'request')}, {_plural(self.discarded_rows, 'row')} fetched for "
            f"sites not complete discarded, {s.seconds:.1f} s"
        )
        if self.manifest is None:
            earlier = (
                f" (its {BACKUP_MANIFEST} is an earlier backup's, untouched)"
                if (self.root / BACKUP_MANIFEST).exists()
                else ""
            )
            return (
                f"backup INTERRUPTED: no site was complete, nothing written to {self.root}"
                f"{earlier}; not backed up: {missing}; {cost}. Run the backup again to back it "
                "up"
            )
        complete = ", ".join(s for s in self.sites if s not in self.not_done)
        return (
            f"backup INTERRUPTED: {self.manifest}, marked incomplete, lists "
            f"{_plural(len(self.files), 'file')} ({_plural(rows, 'row')}, {size:,} bytes): the "
            f"{done} of {len(self.sites)} sites complete ({complete}); not backed up: {missing}, "
            f"{_plural(len(self.nodes_not_done), 'node')}; {cost}. Run the backup again to "
            "back up everything"
        )
