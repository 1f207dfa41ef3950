"""The on-disk archive: layout, atomic commits, manifests and coverage.

Layout: ``<root>/<source>/<part>/.../<YYYY-MM-DD>.<ext>`` with a manifest
``<YYYY-MM-DD>.manifest.json`` beside each day. A data file is written under a temporary
name in the same directory and renamed into place only when complete, so a crash never leaves
a partial file under a final name. The manifest is written last: a day counts as archived only
when its manifest exists, and a manifest with ``"status": "empty"`` records a day that was
fetched and held no data (distinct from a day never fetched). In Hive-partitioned layouts
(``plugin=<p>/metric=<m>``, used for Parquet) manifests are named
``_<YYYY-MM-DD>.manifest.json`` so that dataset readers skip them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from dxt_core._version import __version__
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.paths import check_path_component

MANIFEST_SCHEMA = "dxt-archive/manifest/1"
MANIFEST_SUFFIX = ".manifest.json"

Status = Literal["archived", "empty", "missing", "corrupt"]


@contextlib.contextmanager
def atomic_file(final: Path, buffer_size: int = 1 << 20) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``final``; rename it to ``final`` only on success.

    On any exception the temporary file is removed and ``final`` is left as it was.
    ``buffer_size`` is the write buffer: large for one big file, small when many files are
    open at once (a backup keeps one per node and metric).
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb", buffering=buffer_size) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, doc: Any) -> None:
    with atomic_file(path) as fh:
        fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


class Archive:
    """An archive rooted at ``root``."""

    def __init__(self, root: str | Path) -> None:
        if not str(root):
            raise ConfigError("archive root is empty: set DXT_ARCHIVE_ROOT or pass --archive DIR")
        self.root = Path(root).expanduser().resolve()

    def directory(self, key: DayKey) -> Path:
        return self.root.joinpath(key.source, *key.parts)

    def data_path(self, key: DayKey, extension: str) -> Path:
        return self.directory(key) / f"{key.day.isoformat()}.{extension}"

    def manifest_path(self, key: DayKey) -> Path:
        # In Hive-partitioned layouts (Parquet) the manifest starts with "_", which Arrow,
        # pandas, Spark and DuckDB's directory readers skip as metadata.
        prefix = "_" if any("=" in p for p in key.parts) else ""
        return self.directory(key) / f"{prefix}{key.day.isoformat()}{MANIFEST_SUFFIX}"

    def begin(self, key: DayKey) -> None:
        """Forget the previous record of ``key`` before rewriting it.

        Removing the old manifest first means a crash between the data rename and the new
        manifest leaves the day "missing" (to be refetched), never described by a stale
        manifest.
        """
        with contextlib.suppress(FileNotFoundError):
            self.manifest_path(key).unlink()
        # Temporary files left by a crashed earlier attempt (never under a final name).
        directory = self.directory(key)
        if directory.is_dir():
            for stale in directory.glob(f".{key.day.isoformat()}.*.tmp"):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()

    def commit_manifest(self, key: DayKey, doc: dict[str, Any]) -> Path:
        path = self.manifest_path(key)
        full = {
            "schema": MANIFEST_SCHEMA,
            "source": key.source,
            "parts": list(key.parts),
            "day": key.day.isoformat(),
            "software": {"name": "dxt-archive", "version": __version__},
            "written_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            **doc,
        }
        write_json_atomic(path, full)
        from dxt_core.index import record_commit  # the manifest index follows every commit

        record_commit(self.root, key, path, full)
        return path

    def remove_data(self, key: DayKey, extension: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.data_path(key, extension).unlink()

    def read_manifest(self, key: DayKey) -> dict[str, Any] | None:
        path = self.manifest_path(key)
        try:
            doc = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ArchiveError(f"{path}: unreadable manifest ({exc}); delete it and rerun") from exc
        if not isinstance(doc, dict):
            raise ArchiveError(f"{path}: manifest is not a JSON object; delete it and rerun")
        return doc

    def status(self, key: DayKey, verify: bool = False) -> tuple[Status, str]:
        """The state of one day and, for corrupt days, why."""
        try:
            doc = self.read_manifest(key)
        except ArchiveError as exc:
            return "corrupt", str(exc)
        if doc is None:
            return "missing", ""
        if doc.get("status") == "empty":
            return "empty", ""
        name = doc.get("file")
        if not isinstance(name, str):
            return "corrupt", "manifest names no data file"
        data = self.directory(key) / name
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            return "corrupt", f"{data} is missing"
        if size != doc.get("bytes"):
            return "corrupt", f"{data} has {size} bytes, manifest says {doc.get('bytes')}"
        if verify and sha256_file(data) != doc.get("sha256"):
            return "corrupt", f"{data} does not match the manifest's sha256"
        return "archived", ""


@dataclass(frozen=True, slots=True)
class CoverageRow:
    parts: tuple[str, ...]
    day: dt.date
    status: Status
    detail: str = ""


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
            rows.append(CoverageRow(tuple(parts), day, status, detail))
    return rows
