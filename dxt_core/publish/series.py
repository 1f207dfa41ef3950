"""One metric's month as one sorted, typed Parquet file, in bounded memory.

Phase 1 (:class:`RunSpool`) reads each archived day in batches, in either archive format,
and spills it as *sorted runs*: at most ``run_rows`` rows each, sorted by series (``node``
first, then the other tags) and time, written to a scratch directory. It records each day's
value type. Phase 2 (:func:`merge_runs`) streams a month's runs through a k-way merge: every
run is read a batch at a time; the rows of every series below the smallest "last series in
a buffer" are complete, so they are sorted and emitted, and every run below a batch reads
on. Memory is bounded by a fixed row budget (:data:`MERGE_BUFFER_ROWS`, split between the
runs) + one row group, whatever the month's size. The output is cut into
row groups of a fixed number of rows, so its bytes depend on the rows only, not on how the
days were read.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dxt_core.archive import atomic_file
from dxt_core.errors import ArchiveError
from dxt_core.publish.archive_scan import DayFile

#: The value types, narrowest first: a metric's type is the widest of its days'.
WIDENING = ("int64", "double", "string")
#: Rows per sorted run of phase 1, rows per batch read back in phase 2, rows per row group.
RUN_ROWS = 250_000
RUN_GROUP_ROWS = 1_024
ROW_GROUP_ROWS = 262_144
#: Rows held by the merge's buffers in all (split between the runs of a month).
MERGE_BUFFER_ROWS = 262_144
#: Fixed writer settings: the same rows give the same bytes.
ZSTD_LEVEL = 3

FIXED_COLUMNS = ("timestamp", "value", "name")


def _pa() -> Any:
    import pyarrow as pa

    return pa


def arrow_value_type(kind: str) -> Any:
    pa = _pa()
    return {"int64": pa.int64(), "double": pa.float64(), "string": pa.string()}[kind]


def wider(a: str | None, b: str) -> str:
    return b if a is None else WIDENING[max(WIDENING.index(a), WIDENING.index(b))]


def sort_columns(tags: Sequence[str]) -> list[str]:
    """Series order: ``node`` first (a node's rows are contiguous), then the other tags."""
    return (["node"] if "node" in tags else []) + [t for t in tags if t != "node"]


def _value_kind(arrow_type: Any) -> str:
    pa = _pa()
    if pa.types.is_integer(arrow_type):
        return "int64"
    if pa.types.is_floating(arrow_type):
        return "double"
    return "string"


def _infer_text(values: Any) -> tuple[str, Any]:
    """The narrowest type that every value of a CSV text column fits, and the typed column."""
    import pyarrow.compute as pc

    pa = _pa()
    values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
    for kind in ("int64", "double"):
        try:
            return kind, pc.cast(values, arrow_value_type(kind))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return "string", values


def _csv_header(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        return next(csv.reader(io.StringIO(fh.readline())), [])


def read_day(day: DayFile, batch_rows: int = 65_536) -> Iterator[Any]:
    """The day's rows as Arrow tables: ``timestamp`` (UTC ms), ``value`` (the day's type),
    ``name`` and the tags as plain strings."""
    import pyarrow.compute as pc

    pa = _pa()
    if day.fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(day.path)
        for batch in pf.iter_batches(batch_size=batch_rows):
            yield _plain(pa.Table.from_batches([batch]), pc)
        return
    import pyarrow.csv as pcsv

    header = _csv_header(day.path)
    if header[:3] != list(FIXED_COLUMNS):
        raise ArchiveError(
            f"{day.path}: header {header[:3]} is not timestamp,value,name: not an Examon "
            "metric file"
        )
    types = {c: pa.string() for c in header}
    types["timestamp"] = pa.timestamp("ms", tz="UTC")
    reader = pcsv.open_csv(
        pa.input_stream(str(day.path), compression="gzip"),
        read_options=pcsv.ReadOptions(block_size=1 << 22),
        convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False),
    )
    for batch in reader:
        yield pa.Table.from_batches([batch])


def _plain(table: Any, pc: Any) -> Any:
    pa = _pa()
    cols, names = [], []
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = pc.cast(col, pa.string())
        if name == "timestamp" and col.type != pa.timestamp("ms", tz="UTC"):
            col = pc.cast(col, pa.timestamp("ms", tz="UTC"))
        cols.append(col)
        names.append(name)
    return pa.Table.from_arrays(cols, names=names)


@dataclass(slots=True)
class Run:
    path: Path
    day: Any
    rows: int
    tags: list[str]


@dataclass(slots=True)
class RunSpool:
    """Phase 1 for one metric over the whole range: sorted runs on disk, types per day."""

    scratch: Path
    run_rows: int = RUN_ROWS
    runs: list[Run] = field(default_factory=list)
    day_types: dict[Any, str] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    rows: int = 0

    def add_day(self, day: DayFile) -> int:
        """Spool one day; returns its rows."""
        pa = _pa()
        pending: list[Any] = []
        n_pending = 0
        rows = 0
        for table in read_day(day):
            if day.fmt == "csv":
                kind, typed = _infer_text(table.column("value"))
                table = table.set_column(1, "value", typed)
            else:
                kind = _value_kind(table.schema.field("value").type)
            self.day_types[day.day] = wider(self.day_types.get(day.day), kind)
            pending.append(table)
            n_pending += table.num_rows
            rows += table.num_rows
            if n_pending >= self.run_rows:
                self._spill(day, pending)
                pending, n_pending = [], 0
        if pending:
            self._spill(day, pending)
        if day.day not in self.day_types:
            self.day_types[day.day] = "double"
        self.rows += rows
        del pa
        return rows

    def _spill(self, day: DayFile, tables: list[Any]) -> None:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        pa = _pa()
        kinds = {_value_kind(t.schema.field("value").type) for t in tables}
        kind = max(kinds, key=WIDENING.index)
        tables = [_cast_value(t, kind) for t in tables]
        table = pa.concat_tables(tables, promote_options="default")
        del tables
        tags = [c for c in table.column_names if c not in FIXED_COLUMNS]
        self.tags.update(tags)
        keys = [(c, "ascending") for c in sort_columns(sorted(tags))] + [("timestamp", "ascending")]
        table = table.take(pc.sort_indices(table, sort_keys=keys))
        path = self.scratch / f"run-{len(self.runs):06d}.parquet"
        pq.write_table(table, path, compression="lz4", row_group_size=RUN_GROUP_ROWS)
        self.runs.append(Run(path, day.day, table.num_rows, tags))


def _cast_value(table: Any, kind: str) -> Any:
    import pyarrow.compute as pc

    target = arrow_value_type(kind)
    i = table.column_names.index("value")
    col = table.column(i)
    if col.type == target:
        return table
    return table.set_column(i, "value", pc.cast(col, target))


def type_history(day_types: dict[Any, str]) -> list[dict[str, str]]:
    """Where the metric's (widest so far) value type changed: ``[{type, first_day}]``."""
    out: list[dict[str, str]] = []
    current: str | None = None
    for day in sorted(day_types):
        new = wider(current, day_types[day])
        if new != current:
            out.append({"type": new, "first_day": day.isoformat()})
            current = new
    return out


def output_schema(kind: str, tags: Sequence[str]) -> Any:
    pa = _pa()
    d = pa.dictionary(pa.int32(), pa.string())
    return pa.schema(
        [
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("value", arrow_value_type(kind)),
            pa.field("name", d),
            *(pa.field(t, d) for t in sorted(tags)),
        ]
    )


class _RunReader:
    def __init__(self, run: Run, columns: list[str], kind: str, batch_rows: int) -> None:
        import pyarrow.parquet as pq

        self._batches = pq.ParquetFile(run.path).iter_batches(batch_size=batch_rows)
        self._columns, self._kind = columns, kind
        self.done = False

    def next(self) -> Any | None:
        pa = _pa()
        try:
            batch = next(self._batches)
        except StopIteration:
            self.done = True
            return None
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        cols = []
        for c in self._columns:
            col = table.column(c) if c in table.column_names else pa.nulls(n, pa.string())
            cols.append(col)
        return _cast_value(pa.Table.from_arrays(cols, names=self._columns), self._kind)


def _key(table: Any, keys: list[Any], i: int) -> tuple[tuple[bool, str], ...]:
    out = []
    for col in keys:
        v = col[i].as_py()
        out.append((v is None, v or ""))  # Arrow sorts nulls last
    return tuple(out)


def _first_at_or_above(table: Any, keys: list[Any], bound: tuple[Any, ...]) -> int:
    """Rows of ``table`` (sorted by series) whose series sorts below ``bound``."""

    def key(j: int) -> tuple[tuple[bool, str], ...]:
        return _key(table, keys, j)

    return bisect.bisect_left(range(table.num_rows), bound, key=key)


@dataclass(slots=True)
class MergeResult:
    rows: int = 0
    row_groups: int = 0
    bytes: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    units: list[str] = field(default_factory=list)
    #: Median interval between a series' consecutive samples, in the first row group.
    sampling_s: float | None = None


def merge_runs(runs: list[Run], kind: str, tags: Sequence[str], out: Path) -> MergeResult:
    """Phase 2: the runs of one month, merged into ``out`` sorted by series, then time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pa = _pa()
    schema = output_schema(kind, tags)
    columns = list(schema.names)
    order = sort_columns(sorted(tags))
    sort_keys = [(c, "ascending") for c in order] + [("timestamp", "ascending")]
    # A batch per run, within the budget (a month of 980 nodes at 20 s is ~280 runs).
    batch_rows = max(RUN_GROUP_ROWS, min(16_384, MERGE_BUFFER_ROWS // max(1, len(runs))))
    # (at 980 nodes x 31 days: ~530 runs of 250,000 rows, batches of 1,024 rows)
    readers = [_RunReader(r, columns, kind, batch_rows) for r in runs]
    buffers: list[Any] = [r.next() for r in readers]
    res = MergeResult()
    pending: list[Any] = []
    pending_rows = 0

    with atomic_file(out) as fh:
        writer = pq.ParquetWriter(
            fh,
            schema,
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=True,
            write_statistics=True,
            version="2.6",
        )

        def emit(group: Any, final: bool = False) -> None:
            nonlocal pending, pending_rows
            if group is not None and group.num_rows:
                pending.append(group)
                pending_rows += group.num_rows
            while pending_rows >= ROW_GROUP_ROWS or (final and pending_rows):
                table = pa.concat_tables(pending)
                take = min(ROW_GROUP_ROWS, table.num_rows)
                _write_group(writer, table.slice(0, take), schema, res)
                rest = table.slice(take)
                pending = [rest] if rest.num_rows else []
                pending_rows = rest.num_rows

        try:
            while True:
                for i, r in enumerate(readers):  # every open run shows its next rows
                    while not r.done and (buffers[i] is None or not buffers[i].num_rows):
                        buffers[i] = r.next()
                if not any(b is not None and b.num_rows for b in buffers):
                    break
                live = [i for i, b in enumerate(buffers) if b is not None and b.num_rows]
                lasts = {
                    i: _key(
                        buffers[i], [buffers[i].column(c) for c in order], buffers[i].num_rows - 1
                    )
                    for i in live
                }
                # Rows of series below the bound are all in the buffers; a run that is done
                # holds back nothing.
                open_lasts = [lasts[i] for i in live if not readers[i].done]
                bound = min(open_lasts) if open_lasts else None
                parts = []
                for i in live:
                    b = buffers[i]
                    if bound is None:
                        n = b.num_rows
                    else:
                        n = _first_at_or_above(b, [b.column(c) for c in order], bound)
                    if n:
                        parts.append(b.slice(0, n))
                        buffers[i] = b.slice(n)
                if parts:
                    group = pa.concat_tables(parts)
                    emit(group.take(pc.sort_indices(group, sort_keys=sort_keys)))
                for i, r in enumerate(readers):
                    # Top up every run below a batch (they advance together), and the runs
                    # at the bound: they may hold more of the bound series.
                    b = buffers[i]
                    if r.done or b is None or not b.num_rows:
                        continue
                    if b.num_rows < batch_rows or lasts.get(i) == bound:
                        nxt = r.next()
                        if nxt is not None:
                            buffers[i] = pa.concat_tables([b, nxt])
            emit(None, final=True)
        finally:
            writer.close()
        res.bytes = fh.tell()
    return res


def _write_group(writer: Any, table: Any, schema: Any, res: MergeResult) -> None:
    import pyarrow.compute as pc

    pa = _pa()
    arrays = []
    for f in schema:
        col = table.column(f.name).combine_chunks()
        if pa.types.is_dictionary(f.type):
            col = pc.dictionary_encode(col)
        arrays.append(col)
    group = pa.Table.from_arrays(arrays, schema=schema)
    writer.write_table(group, row_group_size=group.num_rows)
    res.rows += group.num_rows
    res.row_groups += 1
    if "units" in table.column_names:
        seen = set(res.units) | {u for u in pc.unique(table.column("units")).to_pylist() if u}
        res.units = sorted(seen)
    if res.sampling_s is None and table.num_rows > 1:
        res.sampling_s = _median_interval(table, [c for c in schema.names[2:]])
    ts = pc.min_max(table.column("timestamp"))
    lo, hi = ts["min"].value, ts["max"].value
    if lo is not None:
        res.first_ms = lo if res.first_ms is None else min(res.first_ms, lo)
        res.last_ms = hi if res.last_ms is None else max(res.last_ms, hi)


def _median_interval(table: Any, series_columns: list[str]) -> float | None:
    import numpy as np
    import pyarrow.compute as pc

    ts = table.column("timestamp").combine_chunks().cast("int64").to_numpy(zero_copy_only=False)
    same = np.ones(len(ts) - 1, dtype=bool)
    for c in series_columns:
        col = pc.cast(table.column(c).combine_chunks(), "string").fill_null("")
        a, b = col.slice(0, len(ts) - 1), col.slice(1)
        same &= pc.equal(a, b).to_numpy(zero_copy_only=False)
    d = np.diff(ts)[same]
    d = d[d > 0]
    return float(np.median(d)) / 1000 if d.size else None
