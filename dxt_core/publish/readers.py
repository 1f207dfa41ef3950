"""Day files as Arrow tables, for the publish roles' ``read_day``.

Every table a role yields has ``timestamp`` (an Arrow timestamp with a zone), ``value``
(integers, floats or strings) and string columns, plain or dictionary-encoded: ``name`` when
the backend has one, then the tags. Tags stay dictionary-encoded where the file has them so
(Parquet) and are read as dictionaries from CSV: the publisher maps dictionaries, never
every row's string.

* :func:`read_series_parquet`: the Parquet day files of Examon and Prometheus
  (``dxt_core.writers.parquet``);
* :func:`read_series_csv`: their gzip CSV (``timestamp,value,name,<tags>``,
  ``dxt_core.writers.csv_gzip``); ``value`` comes as text and is typed by the publisher.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dxt_core.errors import ArchiveError
from dxt_core.records import SERIES_COLUMNS_SET, clash_free

#: Rows per batch read from a day file.
BATCH_ROWS = 262_144
#: The first columns of a series CSV (dxt_core.writers.csv_gzip).
SERIES_CSV_HEADER = ("timestamp", "value", "name")


def current_names(names: Sequence[str], reserved: Sequence[str] = ()) -> list[str]:
    """A series day file's columns as this version names them: ``timestamp,value,name`` and
    the tags through :func:`~dxt_core.records.clash_free` (a tag ``name``, ``value`` or
    ``timestamp``, or one of the backend's ``reserved`` folder keys, is ``exported_<tag>``).
    The files of this version are named so already; older ones held such a tag under its own
    name (twice ``name`` in one file: a Prometheus label ``name``), or a tag ``metric`` that
    newer days of the same unit call ``exported_metric``."""
    return [*names[:3], *clash_free(names[3:], SERIES_COLUMNS_SET.union(reserved))]


def read_series_parquet(
    path: Path, batch_rows: int = BATCH_ROWS, reserved: Sequence[str] = ()
) -> Iterator[Any]:
    """A series Parquet day file in batches; string columns read as dictionaries; the
    columns named as this version names them (:func:`current_names`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        names = current_names(schema.names, reserved)
        strings = [
            f.name
            for f in schema
            if f.name not in ("timestamp", "value")
            and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
        ]
        pf = pq.ParquetFile(path, read_dictionary=strings)
        if "timestamp" not in schema.names or "value" not in schema.names:
            raise ArchiveError(
                f"{path}: columns {schema.names[:6]} lack timestamp and value: not a series "
                "Parquet file of dxt-archive"
            )
        # small row groups are read together: fewer, larger batches (each keeps its own
        # dictionaries as a chunk)
        pending: list[Any] = []
        rows = 0
        for batch in pf.iter_batches(batch_size=batch_rows):
            pending.append(batch)
            rows += batch.num_rows
            if rows >= batch_rows:
                yield pa.Table.from_batches(pending).rename_columns(names)
                pending, rows = [], 0
        if pending:
            yield pa.Table.from_batches(pending).rename_columns(names)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: unreadable Parquet ({exc}); rerun its day") from exc


def csv_header(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            return next(csv.reader(io.StringIO(fh.readline())), [])
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: unreadable gzip CSV ({exc}); rerun its day") from exc


def read_series_csv(
    path: Path, unit: str = "ms", backend: str = "series", reserved: Sequence[str] = ()
) -> Iterator[Any]:
    """A series gzip CSV day file (``timestamp,value,name,<tags>``) in batches: times as
    UTC timestamps, ``value`` as text, the other columns as dictionary strings, named as
    this version names them (:func:`current_names`)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    found = csv_header(path)
    if tuple(found[:3]) != SERIES_CSV_HEADER:
        raise ArchiveError(
            f"{path}: header {found[:3]} is not timestamp,value,name: not a {backend} metric file"
        )
    header = current_names(found, reserved)
    d = pa.dictionary(pa.int32(), pa.string())
    types: dict[str, Any] = {c: d for c in header}
    types["timestamp"] = pa.timestamp(unit, tz="UTC")
    types["value"] = pa.string()
    try:
        reader = pcsv.open_csv(
            pa.input_stream(str(path), compression="gzip"),
            read_options=pcsv.ReadOptions(block_size=1 << 22, column_names=header, skip_rows=1),
            convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False),
        )
        for batch in reader:
            yield pa.Table.from_batches([batch])
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: unreadable CSV ({exc}); rerun its day") from exc


def whole_numbers(arr: Any) -> Any:
    """Floats that are all whole and exact in a double (|x| <= 2**53) as int64: JSON text
    does not tell 12 from 12.0 once parsed, so a day's type is what its numbers hold, as
    for a CSV day (whole numbers -> int64)."""
    import pyarrow.compute as pc

    pa = _pa()
    valid = arr.drop_null()
    if not len(valid):
        return arr
    if not pc.all(pc.equal(pc.floor(valid), valid)).as_py():
        return arr
    mm = pc.min_max(pc.abs(valid))
    if mm["max"].as_py() > 2**53:
        return arr
    return pc.cast(arr, pa.int64())


def _pa() -> Any:
    import pyarrow as pa

    return pa


def gz_line_chunks(path: Path, chunk_bytes: int = 1 << 24) -> Iterator[bytes]:
    """A gzip JSON Lines file in pieces of whole lines, each about ``chunk_bytes``
    (decompressed), without empty lines."""
    try:
        with gzip.open(path, "rb") as fh:
            rest = b""
            while True:
                block = fh.read(chunk_bytes)
                if not block:
                    break
                data = rest + block
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                rest = data[cut + 1 :]
                piece = data[: cut + 1]
                if b"\n\n" in piece or piece.startswith(b"\n"):
                    piece = b"\n".join(x for x in piece.split(b"\n") if x) + b"\n"
                if piece.strip():
                    yield piece
            if rest.strip():
                yield rest + b"\n"
    except (OSError, EOFError) as exc:
        raise ArchiveError(f"{path}: unreadable gzip ({exc}); rerun its day") from exc


def read_json_lines(path: Path, piece: bytes, schema: Any) -> Any:
    """One piece of JSON Lines as a table of ``schema``'s fields (others ignored)."""
    import pyarrow.json as pj

    pa = _pa()
    try:
        return pj.read_json(
            io.BytesIO(piece),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(piece) + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowException as exc:
        raise ArchiveError(f"{path}: a line is not what the archive writes ({exc})") from exc
