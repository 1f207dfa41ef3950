"""An experiment's backup: ``<backup_dir>/<node FQDN>/<metric>.<jsonl|csv>.gz`` written as the
points come, one site at a time, and ``manifest.json`` last.

JSON Lines keep every point exactly as the API sent it (labels included); CSV flattens labels
into ``label:<key>`` columns (lists joined with ``;``). Each file goes through a
:class:`~dxt_core.writers.base.RecordWriter` onto an atomic file (a temporary name until the
site is done). A backup keeps one open gzip stream per (node, metric): ISA-L
(:data:`STREAM_BACKEND`) compresses as it goes with a small state per stream, where buffering
backends would hold megabytes per open file.
"""

from __future__ import annotations

import contextlib
import csv
import io
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

import orjson

from dxt_core.backends.kwollect.source import G5kNode, Point, check_component
from dxt_core.errors import SourceError
from dxt_core.fsio import atomic_file, write_json_atomic
from dxt_core.records import Record
from dxt_core.writers.base import RecordWriter, WriteResult
from dxt_core.writers.compress import GzipStream
from dxt_core.writers.jsonl_gzip import JsonlGzipWriter

BACKUP_MANIFEST = "manifest.json"
BACKUP_SCHEMA = "dxt-archive/kwollect-backup/1"
BackupFormat = Literal["jsonl", "csv"]
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
