"""A rerun whose file has other bytes but the same content as the archived one.

A Parquet file records the library that wrote it (``created_by``: "parquet-cpp-arrow version
15.0.0"), so the same rows written by another pyarrow are other bytes: after a pyarrow
upgrade, every rerun of an unchanged Parquet day was refused as "other values" (the same
rows, another sha256), under the CLI and in every Airflow task. The content is compared
instead, row group by row group (one at a time in memory): equal, the archived file stays
as it is, its bytes and checksum in the new manifest, and the day is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("dxt_core.samecontent")


def parquet_content_equal(archived: Path, new: Path) -> bool:
    """The two Parquet files hold the same schema (its metadata included) and the same
    values in the same row groups; False when they differ, or cannot be read."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    try:
        a, b = pq.ParquetFile(archived), pq.ParquetFile(new)
        if a.num_row_groups != b.num_row_groups or not a.schema_arrow.equals(
            b.schema_arrow, check_metadata=True
        ):
            return False
        for i in range(a.num_row_groups):
            if a.metadata.row_group(i).num_rows != b.metadata.row_group(i).num_rows:
                return False
            if not _bits(a.read_row_group(i)).equals(_bits(b.read_row_group(i))):
                return False
        return True
    except Exception as exc:
        log.debug("%s and %s not compared: %s", archived, new, exc)
        return False


def _bits(table: Any) -> Any:
    """``table`` with its floating-point columns as the integers of their bits: values are
    compared as stored (a NaN equals the same NaN, ``-0.0`` differs from ``0.0``)."""
    import pyarrow as pa

    columns = []
    for column in table.columns:
        kind = column.type
        if pa.types.is_floating(kind):
            as_int = (
                pa.int16()
                if kind.bit_width == 16
                else pa.int32()
                if kind.bit_width == 32
                else pa.int64()
            )
            column = pa.chunked_array([c.view(as_int) for c in column.chunks], type=as_int)
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def keep_same_content(
    changed: Sequence[tuple[str, str, Path]],
    staged: dict[str, Path],
    doc: dict[str, Any],
) -> set[str]:
    """The archived files of ``changed`` (name, sha256, path) whose staged replacement has
    the same content in other bytes (Parquet only): each staged file is dropped, and ``doc``
    names the archived file's bytes and checksum instead. Returns their names."""
    kept: set[str] = set()
    for name, sha, path in changed:
        new = staged.get(name)
        if new is None or not name.endswith(".parquet") or not parquet_content_equal(path, new):
            continue
        size = path.stat().st_size
        entries = [f for f in doc.get("files") or [] if isinstance(f, dict)]
        for f in entries:
            if f.get("file") == name:
                f["sha256"], f["bytes"] = sha, size
        if doc.get("file") == name:
            doc["sha256"], doc["bytes"] = sha, size
        log.info(
            "%s: the same content as the archived file in other bytes (another writer "
            "version): the archived file is kept",
            name,
        )
        new.unlink(missing_ok=True)
        del staged[name]
        kept.add(name)
    return kept
