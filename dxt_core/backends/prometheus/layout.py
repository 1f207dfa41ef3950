"""The day's file from columns: gzip CSV and Parquet written a window at a time, in column
batches.

The layout is the archive's (the generic writers' in dxt_core/writers/, byte for byte for
the CSV): rows in blocks of the window floor counted from the day start, series by series
within a block (ordered by their label values, then the metric name), by time within a
series; a file's bytes do not depend on how the day was cut into query windows (windows are
whole blocks). What differs is how the rows are made: the order of a window's rows is one
permutation computed with NumPy, the CSV timestamps come from a per-second table, and a row
is ``<timestamp>,<value>,<name,labels>`` joined by Arrow's ``binary_join_element_wise`` (or,
without pyarrow, by NumPy: the same bytes, slower).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, BinaryIO

import numpy as np

from dxt_core.backends.prometheus.columns import Columns
from dxt_core.backends.prometheus.labels import LabelKey
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.records import SeriesSchema
from dxt_core.writers import columnar
from dxt_core.writers.base import WriteResult
from dxt_core.writers.columnar import STAMP, Stamps
from dxt_core.writers.compress import GzipStream
from dxt_core.writers.csv_gzip import close_block_ordered, csv_field
from dxt_core.writers.parquet import BlockParquet, HashingFile, require_pyarrow

#: Rows assembled at once (about 500 KB of CSV): bounds the writer's memory per step, and
#: keeps its buffers under glibc's fixed mmap threshold (1 MiB, dxt_core.budget), so they are
#: reused from the heap instead of mapped, page-faulted and unmapped at every step
#: (measured at 10,000 series: 2.66 million page faults a day with 32,768 rows, 1.90 with
#: 8,192).
CHUNK_ROWS = 1 << 13


def row_order(cols: Columns, rank: np.ndarray, origin_ms: int, block_ms: int) -> np.ndarray:
    """The rows of ``cols`` in the file's order: by block (``block_ms`` from ``origin_ms``),
    then by series (``rank[i]``: series ``i``'s place), then by time (rows of a series are in
    time order). Returns the permutation: output row ``k`` is input row ``perm[k]``.

    The rows of one series in one block are a run, in the input and in the output: each row
    moves by its run's offset, computed once per (series, block).
    """
    n, ns = cols.rows, len(cols.labels)
    blk = cols.ts - origin_ms
    blk //= block_ms
    blk -= int(blk.min())
    nb = int(blk.max()) + 1
    run = cols.series_of_rows()
    run *= nb
    run += blk  # (series, block) of each row
    counts = np.bincount(run, minlength=ns * nb).reshape(ns, nb)
    # where each run starts in the input ...
    in_start = np.zeros((ns, nb), np.int64)
    np.cumsum(counts[:, :-1], axis=1, out=in_start[:, 1:])
    in_start += cols.starts[:-1, None]
    # ... and in the output (block-major, then series by rank)
    by_rank = np.argsort(rank, kind="stable")
    out_flat = np.zeros(nb * ns, np.int64)
    np.cumsum(counts[by_rank].T.ravel()[:-1], out=out_flat[1:])
    shift = out_flat.reshape(nb, ns).T[rank] - in_start
    dest = shift.ravel()[run]
    rows = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    dest += rows
    perm = np.empty(n, rows.dtype)
    perm[dest] = rows
    return perm


def series_rank(keys: list[tuple[str, ...]]) -> np.ndarray:
    """Each series' place in a block, from its sort key (label values, then name)."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys))
    return rank


class SeriesFields:
    """What a writer needs of each series of the day, computed once per series: its sort key
    (the values of the schema's label columns, then the metric name) and its CSV tail
    (``name,<label values...>`` and the line's end); and of a window's list of series, its
    order and tails, kept for the next window while its list is the same object (as
    :class:`~dxt_core.backends.prometheus.columns.LabelCache` gives it)."""

    def __init__(self, schema: SeriesSchema) -> None:
        self.columns = (*schema.tag_keys, "__name__")
        self._sort: dict[LabelKey, tuple[str, ...]] = {}
        self._tails: dict[LabelKey, bytes] = {}
        self._rank: tuple[list[LabelKey] | None, np.ndarray] = (None, np.zeros(0, np.int64))
        self._joined: tuple[list[LabelKey] | None, bytes, np.ndarray] = (
            None,
            b"",
            np.zeros(1, np.int64),
        )

    def rank(self, cols: Columns) -> np.ndarray:
        """Each series' place among the window's (:func:`series_rank` of its sort keys)."""
        if self._rank[0] is not cols.keys:
            self._rank = (cols.keys, series_rank(self.sort_keys(cols)))
        return self._rank[1]

    def joined_tails(self, cols: Columns) -> tuple[bytes, np.ndarray]:
        """The window's series' CSV tails, joined, and where each starts and ends."""
        if self._joined[0] is not cols.keys:
            tails = self.tails(cols)
            self._joined = (cols.keys, b"".join(tails), _offsets(tails))
        return self._joined[1], self._joined[2]

    def sort_keys(self, cols: Columns) -> list[tuple[str, ...]]:
        out = []
        for labels, key in zip(cols.labels, cols.keys, strict=True):
            hit = self._sort.get(key)
            if hit is None:
                hit = self._sort[key] = tuple([labels.get(k, "") for k in self.columns])
            out.append(hit)
        return out

    def tails(self, cols: Columns) -> list[bytes]:
        out = []
        for labels, key in zip(cols.labels, cols.keys, strict=True):
            hit = self._tails.get(key)
            if hit is None:
                fields = (
                    labels.get("__name__", ""),
                    *(labels.get(k, "") for k in self.columns[:-1]),
                )
                hit = self._tails[key] = (",".join(csv_field(v) for v in fields) + "\n").encode()
            out.append(hit)
        return out


class CsvDayWriter:
    """``timestamp,value,name,<labels...>`` rows as deterministic gzip, a window at a time."""

    extension = "csv.gz"

    def __init__(
        self, out: BinaryIO, tz: dt.tzinfo, block_ms: int, origin_ms: int, arrow: bool = True
    ) -> None:
        if block_ms <= 0:
            raise ArchiveError(f"block_ms must be positive, got {block_ms}")
        self._gz = GzipStream(out)
        self._stamps = Stamps(tz)
        self._block_ms, self._origin_ms = block_ms, origin_ms
        self._arrow: tuple[Any, Any] | None = columnar.arrow() if arrow else None
        self._schema: SeriesSchema | None = None
        self._fields: SeriesFields | None = None
        self._result = WriteResult()

    def open(self, schema: SeriesSchema) -> None:
        self._schema = schema
        self._fields = SeriesFields(schema)
        self._result.columns = list(schema.columns)
        self._gz.write((",".join(csv_field(c) for c in schema.columns) + "\n").encode())

    def write(self, cols: Columns) -> None:
        """Append one window's rows (the window must start on a block edge)."""
        schema = self._schema
        if schema is None:
            raise ArchiveError("CsvDayWriter.write called before open()")
        if not cols.rows:
            return
        if (cols.start_ms - self._origin_ms) % self._block_ms:
            raise ArchiveError("a query window does not start on a block edge")
        fields = self._fields
        assert fields is not None
        perm = row_order(cols, fields.rank(cols), self._origin_ms, self._block_ms)
        tails, tail_offsets = fields.joined_tails(cols)
        sid = cols.series_of_rows()
        if self._arrow is not None:
            pa, pc = self._arrow
            values = columnar.binary(pa, cols.text, cols.offsets)
            tail_arr = columnar.binary(pa, tails, tail_offsets)
            # the separator as an array of empty items: a Python scalar (b"") would go
            # through pa.scalar, which imports pandas when installed (about 50 MB)
            no_sep = columnar.binary(pa, b"", np.zeros(CHUNK_ROWS + 1, np.int32))
        span = self._stamps.span(cols.ts)  # the window's seconds, formatted once
        for lo in range(0, cols.rows, CHUNK_ROWS):
            rows = perm[lo : lo + CHUNK_ROWS]
            stamps = self._stamps(cols.ts[rows], span)
            if self._arrow is None:
                self._gz.write(
                    _assemble_numpy(cols, rows, stamps, (tails, tail_offsets), sid[rows])
                )
                continue
            n = len(rows)
            # short-lived buffers from the system allocator: Arrow's default pool (mimalloc)
            # keeps freed memory (about 13 MB more peak RSS, measured at 10,000 series)
            pool = pa.system_memory_pool()
            joined = pc.binary_join_element_wise(
                columnar.binary(pa, stamps, np.arange(0, (n + 1) * STAMP, STAMP)),
                pc.take(values, columnar.ints(pa, rows), memory_pool=pool),
                pc.take(tail_arr, columnar.ints(pa, sid[rows]), memory_pool=pool),
                no_sep.slice(0, n),
                memory_pool=pool,
            )
            offsets = np.frombuffer(joined.buffers()[1], np.int32, n + 1, joined.offset * 4)
            # GzipStream takes any buffer (it slices with memoryview): no copy of the rows
            rows_text = memoryview(joined.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
            self._gz.write(rows_text)
        self._result.add(cols.rows, int(cols.ts.min()), int(cols.ts.max()))

    def close(self) -> WriteResult:
        return close_block_ordered(self._gz, self._result, self._block_ms)


def _offsets(items: list[bytes]) -> np.ndarray:
    out = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(x) for x in items], out=out[1:])
    return out


def _strings(pa: Any, items: list[str]) -> Any:
    encoded = [x.encode() for x in items]
    offsets = _offsets(encoded).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def _assemble_numpy(
    cols: Columns,
    rows: np.ndarray,
    stamps: np.ndarray,
    tails: tuple[bytes, np.ndarray],
    sid: np.ndarray,
) -> bytes:
    """CSV rows without pyarrow (:func:`columnar.lay_out`); ``tails``: the series' tails
    joined, and their offsets."""
    vstart = cols.offsets[rows]
    vlen = cols.offsets[rows + 1] - vstart
    pad = b"\0" * max(int(vlen.max()), 1)
    return columnar.lay_out(stamps, cols.text + pad, vstart, vlen, tails, sid)


class ParquetDayWriter(BlockParquet):
    """One metric-day as Parquet (zstd): ``timestamp`` (UTC ms), ``value`` (double),
    ``name`` and the labels dictionary-encoded; a row group per ``row_group_ms`` of the day
    (whole blocks), each with the dictionary of the labels it holds, sorted."""

    extension = "parquet"

    def __init__(
        self,
        out: BinaryIO,
        block_ms: int,
        origin_ms: int,
        row_group_ms: int,
        compression: str = "zstd",
    ) -> None:
        require_pyarrow("Parquet output")  # missing or failing to import, said apart
        arrow = columnar.arrow()
        if arrow is None:  # pragma: no cover - pyarrow imports but pyarrow.compute does not
            raise ConfigError("Parquet output needs pyarrow.compute, which failed to import")
        if row_group_ms % block_ms:
            raise ConfigError("row_group_ms must be a whole number of blocks")
        self._pa = arrow[0]
        self._file = HashingFile(out)
        self._block_ms, self._origin_ms = block_ms, origin_ms
        self._per_span = row_group_ms // block_ms
        self._compression = compression
        self._value_type = "double"
        self._schema: SeriesSchema | None = None
        self._writer: Any = None
        self._result = WriteResult()
        self._sorting: SeriesFields | None = None
        self._ids: dict[LabelKey, int] = {}
        self._series: list[tuple[str, ...]] = []  # per series id: name, label values
        self._last_ids: tuple[list[LabelKey] | None, np.ndarray] = (None, np.zeros(0, np.int32))
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_span: int | None = None

    def open(self, schema: SeriesSchema) -> None:
        pa = self._pa
        import pyarrow.parquet as pq

        self._schema = schema
        self._sorting = SeriesFields(schema)
        self._result.columns = list(schema.columns)
        text = pa.dictionary(pa.int32(), pa.string())
        self._arrow_schema = pa.schema(
            [
                pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
                pa.field("value", pa.float64()),
                *(pa.field(c, text) for c in ("name", *schema.tag_columns)),
            ]
        )
        self._writer = pq.ParquetWriter(
            self._file,
            self._arrow_schema,
            compression=self._compression,
            use_dictionary=True,
            memory_pool=pa.system_memory_pool(),  # as the CSV writer's (see there)
        )

    def _series_ids(self, cols: Columns) -> np.ndarray:
        """The day's id of each series of the window (the row of its column values); the
        last window's when its list of series is the same object."""
        if self._last_ids[0] is cols.keys:
            return self._last_ids[1]
        assert self._schema is not None
        tag_keys = self._schema.tag_keys
        out = []
        for lab, key in zip(cols.labels, cols.keys, strict=True):
            sid = self._ids.get(key)
            if sid is None:
                sid = self._ids[key] = len(self._series)
                self._series.append((lab.get("__name__", ""), *(lab.get(k, "") for k in tag_keys)))
            out.append(sid)
        ids = np.array(out, np.int32)
        self._last_ids = (cols.keys, ids)
        return ids

    def write(self, cols: Columns) -> None:
        """Append one window's rows; a row group is written once the windows have passed
        its span."""
        if self._schema is None or self._sorting is None:
            raise ArchiveError("ParquetDayWriter.write called before open()")
        if not cols.rows:
            return
        perm = row_order(cols, self._sorting.rank(cols), self._origin_ms, self._block_ms)
        ts = np.ascontiguousarray(cols.ts[perm])
        values = np.ascontiguousarray(cols.values()[perm])
        ids = self._series_ids(cols)[cols.series_of_rows()[perm]]
        span = (ts - self._origin_ms) // self._block_ms // self._per_span
        edges = np.flatnonzero(np.diff(span)) + 1
        for a, b in zip([0, *edges.tolist()], [*edges.tolist(), len(ts)], strict=True):
            s = int(span[a])
            if self._pending_span is not None and s != self._pending_span:
                self._flush()
            self._pending_span = s
            self._pending.append((ts[a:b], values[a:b], ids[a:b]))
        self._result.add(cols.rows, int(ts.min()), int(ts.max()))

    def _flush(self) -> None:
        """The pending rows as one row group, from the windows' arrays as they are (record
        batches of one table: nothing concatenated), with the dictionaries of the labels
        the group holds, sorted."""
        if not self._pending:
            return
        pa = self._pa
        pending, self._pending, self._pending_span = self._pending, [], None
        seen = np.zeros(len(self._series), bool)
        for _, _, ids in pending:
            seen[ids] = True
        present = np.flatnonzero(seen).tolist()
        dictionaries, codes = [], []
        for c in range(1 + len(self._schema.tag_keys if self._schema else ())):
            texts = [self._series[i][c] for i in present]
            uniq = sorted(set(texts))
            where = {v: k for k, v in enumerate(uniq)}
            code = np.zeros(len(self._series), np.int32)
            code[present] = [where[t] for t in texts]
            dictionaries.append(_strings(pa, uniq))
            codes.append(code)
        batches = []
        for ts, values, ids in pending:
            n = len(ts)
            columns = [
                pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(ts)]),
                pa.Array.from_buffers(pa.float64(), n, [None, pa.py_buffer(values)]),
                *(
                    pa.DictionaryArray.from_arrays(
                        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(code[ids])]),
                        dictionary,
                    )
                    for code, dictionary in zip(codes, dictionaries, strict=True)
                ),
            ]
            batches.append(pa.RecordBatch.from_arrays(columns, schema=self._arrow_schema))
        table = pa.Table.from_batches(batches, schema=self._arrow_schema)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
