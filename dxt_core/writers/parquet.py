"""Parquet in the M100 ExaData style: zstd, ``timestamp`` in UTC milliseconds, ``value`` typed
per metric (float64, int64 or string), ``name`` and tag columns dictionary-encoded.

Rows come in blocks of time (the query-window floor, 5 minutes by default; series by series
within a block), and row groups cover fixed spans of time (an hour from the day start by
default), buffered as compact Arrow columns: a file's bytes do not depend on how the day was
cut into query windows, and memory stays bounded by a window plus one span of Arrow data.
Numeric points that arrive as the server's JSON text are parsed straight into NumPy arrays.
The archive lays these files out as Hive partitions
(``examon/plugin=<p>/metric=<m>/<YYYY-MM-DD>.parquet``) that DuckDB and pandas read as one
dataset.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.records import RawPoints, Record, Series, SeriesBatch, SeriesSchema, block_slices
from dxt_core.writers.base import RecordWriter, SeriesWriter, WriteResult, block_row_order


def require_pyarrow(what: str) -> None:
    """A clear error when pyarrow cannot be imported: ``what`` (Parquet output, ``dxt
    publish``) needs it. Missing (the extra to install), or installed but failing to import
    (a pyarrow built for another NumPy: its own words). The error is run-wide: every unit of
    the run would fail the same way, so a run checks it once, before any request."""
    try:
        import pyarrow  # noqa: F401
    except Exception as exc:
        # only pyarrow itself (or a module of its own) not found means it is not installed
        name = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if (name or "").partition(".")[0] == "pyarrow":
            error = ConfigError(f"{what} needs pyarrow: pip install 'dxt-archive[parquet]'")
        else:
            words = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            error = ConfigError(
                f"{what} needs pyarrow, which is installed but failed to import: "
                f"{type(exc).__name__}: {words or '(no message)'}; reinstall it, or a pyarrow "
                "that works with the installed NumPy (pip install -U 'dxt-archive[parquet]')"
            )
        error.run_wide = True
        raise error from exc


if TYPE_CHECKING:
    import numpy as np
# NumPy and pyarrow are imported where they are used: an Airflow task process that writes
# CSV should not pay ~0.15 s to import them.

#: Rows are grouped in blocks of this length; query windows must be whole blocks.
DEFAULT_BLOCK_MS = 300_000


class HashingFile:
    """Write-through file wrapper that counts and hashes what Parquet writes."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.sha = hashlib.sha256()
        self.bytes = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._out.write(view)
        self.sha.update(view)
        self.bytes += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:  # the archive owns the real file
        self.closed = True

    def finish(self, result: WriteResult, **extra: Any) -> WriteResult:
        """``result`` with what was written (bytes, sha256) and ``extra``."""
        result.sha256 = self.sha.hexdigest()
        result.bytes = self.bytes
        result.extra = extra
        return result


class BlockParquet:
    """What the Parquet writers whose row groups span whole blocks share: closing (the
    pending row group written, the file's bytes, hash and row order recorded)."""

    _file: HashingFile
    _writer: Any
    _result: WriteResult
    _compression: str
    _value_type: str
    _block_ms: int

    def _flush(self) -> None:
        raise NotImplementedError

    def close(self) -> WriteResult:
        if self._writer is not None:
            self._flush()
            self._writer.close()
        return self._file.finish(
            self._result,
            compression=self._compression,
            value_type=self._value_type,
            row_order=block_row_order(self._block_ms),
        )


def _value_type(batch: SeriesBatch) -> str:
    kinds: set[type] = set()
    for s in batch.series:
        pts = s.points
        if isinstance(pts, RawPoints):
            kinds.add(int if pts.all_integers() else float)
        else:
            kinds.update(type(p[1]) for p in pts)
    if str in kinds or not kinds <= {int, float, bool}:
        return "string"
    return "double" if float in kinds else "int64"


def _numeric_columns(series: Series, value_type: str) -> tuple[Any, Any]:
    """(timestamps int64, values) of one series as NumPy arrays (values as a list for
    strings); numeric text from the server is parsed without Python objects per point."""
    import numpy as np

    pts = series.points
    if isinstance(pts, RawPoints) and value_type != "string":
        flat = np.fromstring(pts.text.translate(None, b"[]"), dtype=np.float64, sep=",")
        if flat.size == 2 * len(pts):
            ts = flat[0::2].astype(np.int64)
            if value_type == "int64":  # exact beyond 2**53: parse the digits as integers
                return ts, np.array(pts.tokens[1::2]).astype(np.int64)
            return ts, flat[1::2].copy()
    ts = np.fromiter((p[0] for p in pts), dtype=np.int64, count=len(pts))
    if value_type == "string":
        return ts, [None if p[1] is None else str(p[1]) for p in pts]
    dtype = np.float64 if value_type == "double" else np.int64
    return ts, np.fromiter((p[1] for p in pts), dtype=dtype, count=len(pts))


# pa.array() imports pandas when it is installed (about 50 MB of memory) to check for its
# types; arrays built from buffers do not, so numeric and label columns are built that way.
def _fixed_array(arrow_type: Any, values: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def _string_array(items: list[str]) -> Any:
    import numpy as np
    import pyarrow as pa

    encoded = [v.encode() for v in items]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def _tag_getter(key: str) -> Any:
    return lambda s: s.tags.get(key, "")


class ParquetSeriesWriter(BlockParquet, SeriesWriter):
    """Writes one metric-day as Parquet (needs the ``pyarrow`` package)."""

    extension = "parquet"

    def __init__(
        self,
        out: BinaryIO,
        block_ms: int = DEFAULT_BLOCK_MS,
        origin_ms: int = 0,
        compression: str = "zstd",
        row_group_ms: int = 3_600_000,
        value_type: str | None = None,
    ) -> None:
        super().__init__(out)
        require_pyarrow("Parquet output")
        self._file = HashingFile(out)
        self._block_ms, self._origin_ms = block_ms, origin_ms
        self._compression = compression
        self._schema: SeriesSchema | None = None
        self._writer: Any = None
        self._arrow_schema: Any = None
        if value_type not in (None, "double", "int64", "string"):
            raise ConfigError(f"value_type must be double, int64 or string, not {value_type!r}")
        # Set by the caller (a rule stable across windows and days), or else taken from
        # the first window that holds points.
        self._fixed_type = value_type
        self._value_type = ""
        self._result = WriteResult()
        if row_group_ms % block_ms:
            raise ConfigError("row_group_ms must be a whole number of blocks")
        self._span_ms = row_group_ms
        self._pending: list[Any] = []
        self._pending_span: int | None = None

    def header(self, schema: SeriesSchema) -> None:
        self._schema = schema
        self._result.columns = list(schema.columns)

    def _start(self, value_type: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert self._schema is not None
        vt = {"double": pa.float64(), "int64": pa.int64(), "string": pa.string()}[value_type]
        fields = [
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("value", vt),
            pa.field("name", pa.dictionary(pa.int32(), pa.string())),
            *(
                pa.field(c, pa.dictionary(pa.int32(), pa.string()))
                for c in self._schema.tag_columns
            ),
        ]
        self._arrow_schema = pa.schema(fields)
        self._value_type = value_type
        self._writer = pq.ParquetWriter(
            self._file, self._arrow_schema, compression=self._compression, use_dictionary=True
        )

    def rows(self, batch: SeriesBatch) -> None:
        import numpy as np

        schema = self._schema
        if schema is None:
            raise ArchiveError("ParquetSeriesWriter.rows called before header()")
        kept, cuts = block_slices(batch, self._origin_ms, self._block_ms)
        if not kept:
            return
        if self._writer is None:
            self._start(self._fixed_type or _value_type(batch))
        cols = [_numeric_columns(series, self._value_type) for series in kept]
        # Dictionary codes per series: one dictionary per column for this window.
        dicts: list[tuple[list[str], np.ndarray]] = []
        for getter in [lambda s: s.name, *(_tag_getter(k) for k in schema.tag_keys)]:
            labels = [getter(series) for series in kept]
            uniq = sorted(set(labels))
            pos = {v: i for i, v in enumerate(uniq)}
            dicts.append((uniq, np.array([pos[v] for v in labels], dtype=np.int32)))
        spans, ts, values, owner = self._block_order(batch, cols, cuts)
        table = self._table(schema.name, ts, values, owner, dicts)
        offset = 0
        for span, n in spans:
            if n == 0:
                continue
            if self._pending_span is not None and span != self._pending_span:
                self._flush()
            self._pending_span = span
            self._pending.append(table.slice(offset, n))
            offset += n
        self._result.add(len(ts), int(ts.min()), int(ts.max()))

    def _block_order(
        self, batch: SeriesBatch, cols: list[tuple[Any, Any]], cuts: list[list[int]]
    ) -> tuple[list[tuple[int, int]], Any, Any, Any]:
        """The window's rows block by block, series by series within a block: the
        (row-group span, rows) runs, timestamps, values and the series of each row."""
        import numpy as np

        first_block = (batch.start_ms - self._origin_ms) // self._block_ms
        per_span = self._span_ms // self._block_ms
        spans: list[tuple[int, int]] = []  # (span index, rows) runs, in row order
        ts_parts: list[Any] = []
        value_parts: list[Any] = []
        owner_parts: list[Any] = []
        rows = 0
        for b_i in range(len(cuts[0]) - 1):
            span = (first_block + b_i) // per_span
            if not spans or spans[-1][0] != span:
                spans.append((span, 0))
            before = rows
            for s_i, c in enumerate(cuts):
                lo, hi = c[b_i], c[b_i + 1]
                if hi <= lo:
                    continue
                ts_parts.append(cols[s_i][0][lo:hi])
                value_parts.append(cols[s_i][1][lo:hi])
                owner_parts.append(np.full(hi - lo, s_i, dtype=np.int32))
                rows += hi - lo
            spans[-1] = (span, spans[-1][1] + rows - before)
        if self._value_type == "string":
            values: Any = [v for part in value_parts for v in part]
        else:
            values = np.concatenate(value_parts)
        return spans, np.concatenate(ts_parts), values, np.concatenate(owner_parts)

    def _table(
        self, name: str, ts: Any, values: Any, owner: Any, dicts: list[tuple[list[str], Any]]
    ) -> Any:
        """The rows as an Arrow table of the file's schema."""
        import pyarrow as pa

        try:
            vtype = self._arrow_schema.field("value").type
            columns = [
                _fixed_array(pa.timestamp("ms", tz="UTC"), ts),
                pa.array(values, vtype)
                if self._value_type == "string"
                else _fixed_array(vtype, values),
                *(
                    pa.DictionaryArray.from_arrays(
                        _fixed_array(pa.int32(), codes[owner]), _string_array(uniq)
                    )
                    for uniq, codes in dicts
                ),
            ]
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ArchiveError(
                f"{name}: values changed type during the day ({exc}); the file started "
                f"as {self._value_type}. Archive this metric as CSV (--format csv)"
            ) from exc
        return pa.Table.from_arrays(columns, schema=self._arrow_schema)

    def abort(self) -> None:
        # Finish the Parquet file in the temporary file (which the failed day discards)
        # rather than leave pyarrow's writer open.
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            # One row group per span; combine_chunks gives the same layout whatever the windows.
            group = pa.concat_tables(self._pending).combine_chunks()
            self._writer.write_table(group, row_group_size=max(group.num_rows, 1))
        self._pending = []
        self._pending_span = None


class ParquetTableWriter(RecordWriter[Sequence[str], Sequence[Record]]):
    """Plain records (job accounting rows) as one Parquet table, zstd: one column per name
    given to :meth:`header`, each :meth:`rows` call one row group. Holds one call's records
    as Arrow columns while it writes them.

    A column's type never depends on the day's values: it is the one ``column_types``
    declares (``bool``, ``double``, ``int64``, ``string``), else ``string``, a non-string
    value then stored as its JSON text (``123``, ``24.5``, ``true``). A column that is null
    all day, or whose values change kind from one day to the next, so keeps one type. A
    value that does not fit its declared type fails with an :class:`ArchiveError` naming it.
    """

    extension = "parquet"

    def __init__(
        self,
        out: BinaryIO,
        column_types: Mapping[str, str] | None = None,
        table: str = "job table",
    ) -> None:
        super().__init__(out)
        self._declared = dict(column_types or {})
        self._table = table
        self._file = HashingFile(out)
        self._writer: Any = None
        self._schema: Any = None
        self._result = WriteResult()

    def header(self, columns: Sequence[str]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._result.columns = list(columns)
        kinds = [self._declared.get(c, "string") for c in columns]
        self._schema = pa.schema(
            [(c, _ARROW_TYPES[k]()) for c, k in zip(columns, kinds, strict=True)]
        )
        self._writer = pq.ParquetWriter(self._file, self._schema, compression="zstd")

    def rows(self, records: Sequence[Record]) -> None:
        import pyarrow as pa

        if self._writer is None:
            raise ArchiveError("ParquetTableWriter.rows called before header()")
        start = self._result.rows
        arrays = []
        for c, f in zip(self._result.columns, self._schema, strict=True):
            kind = self._declared.get(c, "string")
            col = [_cell(r.get(c), kind, c, start + i, self._table) for i, r in enumerate(records)]
            arrays.append(pa.array(col, f.type))
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        self._result.rows += len(records)

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()

    def close(self) -> WriteResult:
        if self._writer is not None:
            self._writer.close()
        types = {c: self._declared.get(c, "string") for c in self._result.columns}
        return self._file.finish(self._result, compression="zstd", column_types=types)


def _arrow(name: str) -> Any:
    def make() -> Any:
        import pyarrow as pa

        return getattr(pa, name)()

    return make


_ARROW_TYPES = {
    "bool": _arrow("bool_"),
    "double": _arrow("float64"),
    "int64": _arrow("int64"),
    "string": _arrow("string"),
}


def _cell(v: Any, kind: str, column: str, row: int, table: str) -> Any:
    if v is None:
        return None
    if kind == "string":
        return v if isinstance(v, str) else orjson.dumps(v).decode()
    if kind == "int64":
        if type(v) is int:
            return v
        if type(v) is float and v.is_integer():
            return int(v)
    elif kind == "double":
        if type(v) in (int, float):
            return float(v)
    elif kind == "bool" and type(v) is bool:
        return v
    raise ArchiveError(
        f"{table}: record {row} has {column} = {orjson.dumps(v).decode()[:80]}, which is not "
        f'{kind}; declare {column} = "string" (or another type) in column_types of the '
        "plugin options, or archive as CSV"
    )
