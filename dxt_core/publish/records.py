"""Records for a repository: months grouped into tar files under a size limit.

Zenodo takes at most 50 GB a record, so M100 ExaData shipped its months as tar files grouped
into 12 records. Months go into records in order, as many as fit under ``max_bytes``; a
month larger than the limit is split by unit into several records (``<name>_YY-MM_part1``,
``_part2``...), and only a single file above the limit makes a record above it (with a
warning). Every tar holds its
months' files plus its own listings, ``_<record>.SHA256SUMS`` and ``_<record>.files.json``
(named by the record: the records of a dataset are extracted into one folder, and listings
of one name would overwrite each other, leaving one record's checksums to check all files),
and is written the same way each time: members sorted, mtime fixed (the end of the record's
last month), owner 0/0 with no names, mode 0644, GNU format.
"""

from __future__ import annotations

import calendar
import datetime as dt
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dxt_core.fsio import atomic_file
from dxt_core.publish.describe import FileEntry, dumps, sha256sums

#: Zenodo's limit for one record.
DEFAULT_MAX_RECORD_BYTES = 50_000_000_000

_BLOCK = 512


def tar_bytes(sizes: Sequence[int], names: Sequence[str] = ()) -> int:
    """Size of a GNU tar of files of these sizes (header + padded data each, end marker,
    rounded to tar's 10240-byte records), with the long-name entries ``names`` need."""
    n = sum(_BLOCK + -(-s // _BLOCK) * _BLOCK for s in sizes) + 2 * _BLOCK
    n += sum(_long_name(name) for name in names)
    return -(-n // 10240) * 10240


@dataclass(frozen=True, slots=True)
class Record:
    name: str
    months: tuple[tuple[int, int], ...]
    entries: tuple[FileEntry, ...]

    @property
    def file(self) -> str:
        return f"records/{self.name}.tar"

    @property
    def listings(self) -> tuple[str, str]:
        """The names of its checksums and file list inside the tar (and once extracted):
        starting with ``_``, which pyarrow and pandas pass over, so that a Hive read of the
        folder a record is extracted into reads its Parquet files only."""
        return f"_{self.name}.SHA256SUMS", f"_{self.name}.files.json"


def _size(entries: Sequence[FileEntry]) -> int:
    """A record's tar size, with room for its two listings: per file a checksum line (64 hex
    digits, two spaces, the path, a newline) and a files.json entry (the same and its byte
    count, under 200 bytes of JSON more), plus the record's name and months."""
    paths = sum(len(e.path.encode()) for e in entries)
    listings = 2 * paths + 300 * len(entries) + 4096
    sizes = [e.bytes for e in entries] + [listings // 2, listings // 2]
    return tar_bytes(sizes, [e.path for e in entries])


def _long_name(path: str) -> int:
    """The bytes a GNU tar adds for a member name over 100 bytes (``tarfile``: a
    ``././@LongLink`` header and the name, padded to blocks), else 0."""
    n = len(path.encode())
    return 0 if n <= 100 else _BLOCK + -(-(n + 1) // _BLOCK) * _BLOCK


def _month_name(prefix: str, first: tuple[int, int], last: tuple[int, int]) -> str:
    name = f"{prefix}_{first[0] % 100:02d}-{first[1]:02d}"
    if last != first:
        name += f"_{last[0] % 100:02d}-{last[1]:02d}"
    return name


def group_months(
    prefix: str,
    by_month: dict[tuple[int, int], list[FileEntry]],
    max_bytes: int,
    warnings: list[str],
) -> list[Record]:
    """Whole months in order, as many a record as fit under ``max_bytes``; a month larger
    than that is split by unit (its files in path order) into records ``_part1``,
    ``_part2``...; only a single file larger than the limit makes a record above it (a
    warning says so: a file is never cut)."""
    records: list[Record] = []
    cur: list[tuple[int, int]] = []
    cur_entries: list[FileEntry] = []

    def close() -> None:
        if cur:
            records.append(
                Record(_month_name(prefix, cur[0], cur[-1]), tuple(cur), tuple(cur_entries))
            )

    for month in sorted(by_month):
        entries = sorted(by_month[month], key=lambda e: e.path)
        if _size(entries) > max_bytes:
            close()
            cur, cur_entries = [], []
            records += _split_month(prefix, month, entries, max_bytes, warnings)
            continue
        if cur and _size(cur_entries + entries) > max_bytes:
            close()
            cur, cur_entries = [], []
        cur.append(month)
        cur_entries = cur_entries + entries
    close()
    return records


def _split_month(
    prefix: str,
    month: tuple[int, int],
    entries: list[FileEntry],
    max_bytes: int,
    warnings: list[str],
) -> list[Record]:
    parts: list[list[FileEntry]] = []
    for e in entries:
        if parts and _size([*parts[-1], e]) <= max_bytes:
            parts[-1].append(e)
            continue
        parts.append([e])
        if _size([e]) > max_bytes:
            warnings.append(
                f"{e.path} alone is {e.bytes:,} bytes: its record (with its tar headers and "
                f"listings) is above --max-record-bytes {max_bytes:,} (a file is never cut)"
            )
    base = _month_name(prefix, month, month)
    return [Record(f"{base}_part{i}", (month,), tuple(p)) for i, p in enumerate(parts, start=1)]


def _mtime(months: Sequence[tuple[int, int]]) -> int:
    y, m = months[-1]
    last = dt.datetime(y, m, calendar.monthrange(y, m)[1], tzinfo=dt.UTC) + dt.timedelta(days=1)
    return int(last.timestamp())


def write_record(root: Path, record: Record) -> FileEntry:
    """Write ``records/<name>.tar``; returns its entry (for the top-level SHA256SUMS)."""
    import hashlib

    mtime = _mtime(record.months)
    entries = sorted(record.entries, key=lambda e: e.path)
    listing = dumps(
        {
            "record": record.name,
            "months": [f"{y}-{m:02d}" for y, m in record.months],
            "files": [{"path": e.path, "bytes": e.bytes, "sha256": e.sha256} for e in entries],
        }
    )
    sums = sha256sums(entries)

    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode = size, mtime, 0o644
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    out = root / record.file
    with (
        atomic_file(out) as fh,
        tarfile.open(fileobj=fh, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        for e in entries:
            with (root / e.path).open("rb") as src:
                tar.addfile(info(e.path, e.bytes), src)
        for name, data in zip(record.listings, (sums, listing), strict=True):
            tar.addfile(info(name, len(data)), io.BytesIO(data))
    h = hashlib.sha256()
    with out.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return FileEntry(record.file, out.stat().st_size, h.hexdigest())
