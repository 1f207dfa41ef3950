"""One unit's month as one sorted, typed Parquet file: phase 2.

The buckets of :mod:`dxt_core.publish.series` are taken in the series order, one at a time:
read whole (at most about :data:`~dxt_core.publish.series.BUCKET_ROWS` rows), sorted by
series with a stable radix sort of their rank (rows of one series are already in time order
in an archive's days, which is checked; where they are not, the bucket is sorted by series
and time), and cut into row groups of :data:`ROW_GROUP_ROWS` rows, whatever the buckets'
sizes: the file's bytes depend on the rows only. A bucket too large to sort in memory, or
buckets whose series ranges overlap once every series is known, are split again first from
their files (one more pass over those rows); a single series too large for one bucket is
streamed as it is when its times never go back, else split by time.

Written: ``timestamp`` (UTC), ``value`` (the unit's type), ``name`` when there is one, then
the tags, dictionary-encoded with each row group's dictionary sorted. Times are stored with
``DELTA_BINARY_PACKED`` (a series' times are regular), values dictionary-encoded (falling
back to plain when they do not repeat), all compressed with zstd level :data:`ZSTD_LEVEL`;
``timestamp`` and ``value`` carry min/max statistics.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dxt_core.fsio import atomic_file, unnumbered_write_error
from dxt_core.publish.series import (
    BUCKET_ROWS,
    MIN_FLUSH_ROWS,
    PENDING_ROWS,
    Bucket,
    MonthSpool,
    SeriesTable,
    route_rows,
)
from dxt_core.records import clash_free

#: Rows per row group of a published file.
ROW_GROUP_ROWS = 262_144
#: Fixed writer settings: the same rows give the same bytes.
ZSTD_LEVEL = 3


def _pa() -> Any:
    import pyarrow as pa

    return pa


def arrow_value_type(kind: str) -> Any:
    pa = _pa()
    return {"int64": pa.int64(), "double": pa.float64(), "string": pa.string()}[kind]


def output_columns(table: SeriesTable) -> list[str]:
    """``name`` first when there is one, then the other tags sorted."""
    tags = sorted(table.columns)
    return (["name"] if "name" in tags else []) + [t for t in tags if t != "name"]


def published_names(columns: Sequence[str], folders: Set[str]) -> list[str]:
    """The name each tag column is published under: a column named as one of the dataset's
    ``folders`` keys (``year_month``, ``metric``, ...) becomes ``exported_<key>``; else
    pandas, pyarrow and DuckDB, reading the dataset's Hive partitions, would give every row
    the folder's value instead of its own."""
    return list(clash_free(columns, folders))


def output_schema(kind: str, columns: Sequence[str], unit: str = "ms") -> Any:
    pa = _pa()
    d = pa.dictionary(pa.int32(), pa.string())
    return pa.schema(
        [
            pa.field("timestamp", pa.timestamp(unit, tz="UTC")),
            pa.field("value", arrow_value_type(kind)),
            *(pa.field(c, d) for c in columns),
        ]
    )


@dataclass(slots=True)
class MonthResult:
    rows: int = 0
    row_groups: int = 0
    bytes: int = 0
    units: list[str] = field(default_factory=list)
    #: Median interval between a series' consecutive samples, in the first row group.
    sampling_s: float | None = None
    #: buckets split again (too large, or overlapping series ranges)
    resplit: int = 0


class _Dictionaries:
    """Per output column: each rank's value id, and each value's place in sorted order."""

    def __init__(self, table: SeriesTable, columns: Sequence[str], rank: Any) -> None:
        n = len(table.series)
        by_rank = np.empty(n, np.int64)
        by_rank[rank] = np.arange(n)  # the series id of each rank
        self.vid: list[Any] = []
        self.place: list[Any] = []
        self.words: list[list[str]] = []
        for c in columns:
            ci = table.column(c)
            vids = np.fromiter(
                (table.series[s][ci] if ci < len(table.series[s]) else 0 for s in by_rank),
                np.int64,
                count=n,
            )
            values = table.values[ci]
            ordered = sorted(range(1, len(values)), key=lambda v: str(values[v]))
            place = np.full(len(values), -1, np.int64)  # null: -1
            place[ordered] = np.arange(len(ordered))
            self.vid.append(vids)
            self.place.append(place)
            self.words.append([str(values[v]) for v in ordered])

    def column(self, i: int, ranks: Any, starts: Any, n: int) -> Any:
        """Column ``i`` of a row group of ``n`` rows whose series are ``ranks`` (distinct,
        sorted), series ``k`` starting at row ``starts[k]``."""
        pa = _pa()
        places = self.place[i][self.vid[i][ranks]]
        present = np.unique(places[places >= 0])
        words = pa.array([self.words[i][p] for p in present.tolist()], pa.string())
        idx = np.searchsorted(present, places).astype(np.int32)
        nulls = places < 0
        if len(ranks) == 1 or (not nulls.any() and len(present) == 1):
            rows = np.full(n, idx[0], np.int32)
        else:
            rows = np.repeat(idx, np.diff(np.append(starts, n)))
        validity = None
        if nulls.any():
            row_nulls = np.repeat(nulls, np.diff(np.append(starts, n)))
            validity = pa.py_buffer(np.packbits(~row_nulls, bitorder="little"))
        indices = pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(rows)])
        return pa.DictionaryArray.from_arrays(indices, words)


def _arrow(values: Any, typ: Any, mask: Any = None) -> Any:
    """A NumPy array as an Arrow array of ``typ`` without a copy (``mask``: nulls)."""
    pa = _pa()
    validity = None
    if mask is not None and mask.any():
        validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(values)])


class _GroupWriter:
    """Cuts sorted rows into row groups of exactly ``ROW_GROUP_ROWS`` rows."""

    def __init__(
        self,
        fh: Any,
        table: SeriesTable,
        kind: str,
        columns: list[str],
        unit: str,
        rank: Any,
        names: Sequence[str],
    ) -> None:
        import pyarrow.parquet as pq

        pa = _pa()
        published = dict(zip(columns, names, strict=True))
        self.schema = output_schema(kind, names, unit)
        self.kind, self.unit, self.table = kind, unit, table
        self.dicts = _Dictionaries(table, columns, rank)
        self.texts = pa.array(table.texts, pa.string()) if kind == "string" else None
        # values: a dictionary while they repeat (the writer falls back to plain once the
        # dictionary passes 1 MiB): telemetry values repeat (power in whole watts), and
        # dictionary pages are then both smaller and faster to write than plain values
        encoding = {"timestamp": "DELTA_BINARY_PACKED"}
        dictionary = [*names, "value"]
        self.writer = pq.ParquetWriter(
            fh,
            self.schema,
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=dictionary,
            # the first sort column too: its min/max let a reader skip row groups of other
            # series (a filter on node), as the datacard says
            write_statistics=["timestamp", "value", *(published[c] for c in table.order()[:1])],
            column_encoding=encoding,
            version="2.6",
            # no Arrow schema in the file: readers take the tags as the Parquet file types
            # them, plain strings (dictionary-encoded pages all the same), as M100 ExaData
            # has them; pandas read the stored dictionary type as Categorical, on which
            # PM100's groupby(...).sum() fails from pandas 2 on
            store_schema=False,
        )
        self.carry: list[tuple[Any, Any, Any, Any]] = []
        self.carry_rows = 0
        self.res = MonthResult()

    def add(self, ts: Any, val: Any, mask: Any, rank: Any) -> None:
        """Sorted rows, after those added before: whole row groups go out as slices of
        them, the rest waits for the next rows."""
        n, start, size = len(ts), 0, ROW_GROUP_ROWS

        def part(a: int, b: int) -> tuple[Any, Any, Any, Any]:
            return ts[a:b], val[a:b], None if mask is None else mask[a:b], rank[a:b]

        if self.carry_rows:
            start = min(n, size - self.carry_rows)
            self.carry.append(part(0, start))
            self.carry_rows += start
            if self.carry_rows < size:
                return
            self._flush_carry()
        while n - start >= size:
            self._write(*part(start, start + size))
            start += size
        if start < n:
            self.carry, self.carry_rows = [part(start, n)], n - start

    def _flush_carry(self) -> None:
        parts, self.carry, self.carry_rows = self.carry, [], 0
        if len(parts) == 1:
            self._write(*parts[0])
            return
        masks = [p[2] for p in parts]
        mask = None
        if any(m is not None for m in masks):
            mask = np.concatenate(
                [
                    m if m is not None else np.zeros(len(p[0]), np.bool_)
                    for p, m in zip(parts, masks, strict=True)
                ]
            )
        self._write(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            mask,
            np.concatenate([p[3] for p in parts]),
        )

    def close(self) -> MonthResult:
        if self.carry_rows:
            self._flush_carry()
        self.writer.close()
        return self.res

    def _write(self, ts: Any, val: Any, mask: Any, rank: Any) -> None:
        pa = _pa()
        n = len(ts)
        starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
        ranks = rank[starts]
        arrays = [
            _arrow(np.ascontiguousarray(ts), pa.timestamp(self.unit, tz="UTC")),
            self._value(val, mask),
        ]
        arrays += [self.dicts.column(i, ranks, starts, n) for i in range(len(self.dicts.vid))]
        group = pa.Table.from_arrays(arrays, schema=self.schema)
        self.writer.write_table(group, row_group_size=n)
        self.res.rows += n
        self.res.row_groups += 1
        if self.res.sampling_s is None and n > 1:
            self.res.sampling_s = _median_interval(ts, rank, self.unit)

    def _value(self, val: Any, mask: Any) -> Any:
        if self.kind == "string":
            pa = _pa()
            if self.texts is None or len(self.texts) < len(self.table.texts):
                # numbers of narrower days became text when their bucket was read
                self.texts = pa.array(self.table.texts, pa.string())
            ids = _arrow(np.ascontiguousarray(val), pa.int64(), mask)
            return self.texts.take(ids)
        return _arrow(np.ascontiguousarray(val), arrow_value_type(self.kind), mask)


def _median_interval(ts: Any, rank: Any, unit: str) -> float | None:
    d = np.diff(ts)[(rank[1:] == rank[:-1])]
    d = d[d > 0]
    per_s = 1000.0 if unit == "ms" else 1_000_000.0
    return float(np.median(d)) / per_s if d.size else None


def write_month(
    spool: MonthSpool,
    buckets: list[Bucket],
    kind: str,
    out: Path,
    columns: list[str],
    names: Sequence[str] | None = None,
) -> MonthResult:
    """Phase 2: the spooled rows of one unit-month, sorted into ``out`` (atomic); the tag
    ``columns`` are published under ``names`` (the same by default)."""
    table = spool.table
    rank = table.ranks()
    plan, resplit = _plan(spool, buckets, rank)
    with atomic_file(out) as fh:
        w: _GroupWriter | None = None
        try:
            w = _GroupWriter(fh, table, kind, columns, spool.unit, rank, names or columns)
            for bucket in plan:
                for ts, val, mask, r in _sorted(bucket, kind, table, rank, spool.bucket_rows):
                    w.add(ts, val, mask, r)
                bucket.remove()
            res = w.close()
        except BaseException as exc:
            # the partial file is removed; its writer closed here, once (left to the garbage
            # collector, a writer stopped by Ctrl-C printed "Exception ignored in
            # ParquetWriter.__del__ ... write to closed file")
            if w is not None:
                with contextlib.suppress(Exception):
                    w.writer.close()
            if isinstance(exc, OSError) and not exc.errno:
                # pyarrow's own words for a short write ("N requested and M written"),
                # without the path or the cause
                raise unnumbered_write_error(exc, out) from exc
            raise
        res.bytes = fh.tell()
    res.resplit = resplit
    if "units" in table.columns:
        ci = table.column("units")
        seen: list[int] = []
        if spool.counts is not None:
            seen = np.flatnonzero(spool.counts > 0).tolist()
        res.units = sorted({u for s in seen if (u := table.tag(s, ci))})
    return res


def _plan(spool: MonthSpool, buckets: list[Bucket], rank: Any) -> tuple[list[Bucket], int]:
    """The buckets in series order, each within the memory budget: as spooled when their
    series ranges do not overlap and none is too large, else split again by exact ranges."""
    counts = spool.counts if spool.counts is not None else np.zeros(0, np.int64)
    live = np.flatnonzero(counts > 0)
    limit = spool.bucket_rows * 3 // 2
    if len(buckets) <= 1 and (not buckets or buckets[0].rows <= limit):
        return buckets, 0
    of = np.asarray(spool.bucket_of, np.int64)
    if len(of) < len(counts):
        of = np.pad(of, (0, len(counts) - len(of)), constant_values=-1)
    ok = all(b.rows <= limit for b in buckets)
    if ok and len(buckets) > 1:
        spans = []
        for i in range(len(spool.buckets)):
            sids = live[of[live] == i]
            if len(sids):
                spans.append((int(rank[sids].min()), int(rank[sids].max())))
        ok = all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    if ok:
        return buckets, 0
    # exact groups of whole series in rank order, each within the budget
    order = live[np.argsort(rank[live])]
    group_of = np.zeros(len(counts), np.int64)
    g, filled = 0, 0
    for s in order.tolist():
        if filled and filled + int(counts[s]) > spool.bucket_rows:
            g, filled = g + 1, 0
        group_of[s] = g
        filled += int(counts[s])
    fresh = _buckets([spool.scratch / f"split-{i:04d}" for i in range(g + 1)])
    for b in buckets:
        for ts, val, sid, mask, k in b.iter_raw():
            route_rows(fresh, group_of[sid], ts, val, sid, mask, k)
        b.remove()
    for f in fresh:
        f.flush()
    return [f for f in fresh if f.rows], len(buckets)


def _buckets(paths: list[Path]) -> list[Bucket]:
    """New buckets sharing the budget of buffered rows."""
    flush = max(MIN_FLUSH_ROWS, PENDING_ROWS // max(1, len(paths)))
    return [Bucket(p, flush_rows=flush) for p in paths]


def _sorted(
    bucket: Bucket, kind: str, table: SeriesTable, rank: Any, budget: int
) -> Iterator[tuple[Any, Any, Any, Any]]:
    """The bucket's rows sorted by (rank, time): one block, or a single large series
    streamed (or split by time when its rows are not in time order)."""
    if bucket.rows > budget * 3 // 2:
        yield from _large_series(bucket, kind, table, rank, budget)
        return
    ts, val, sid, mask = bucket.read(kind, table)
    r = rank[sid]
    del sid
    lo, hi = int(r.min()), int(r.max())
    # a stable radix sort of the ranks (16 bits when they fit): rows of a series keep the
    # archive's order, in which their times go forward (checked below)
    local = (r - lo).astype(np.int16) if hi - lo < 32_767 else r
    order = np.argsort(local, kind="stable")
    del local
    ts_s, r_s = ts[order], r[order]
    if ((ts_s[1:] < ts_s[:-1]) & (r_s[1:] == r_s[:-1])).any():
        # not in time order within a series: sort by both
        order = np.lexsort((ts, r))
        ts_s, r_s = ts[order], r[order]
    del ts, r
    yield ts_s, val[order], None if mask is None else mask[order], r_s


def _large_series(
    bucket: Bucket, kind: str, table: SeriesTable, rank: Any, budget: int
) -> Iterator[tuple[Any, Any, Any, Any]]:
    """A bucket of one series (it cannot be split by series) larger than the budget."""
    last = None
    in_order = True
    lo = hi = None
    for ts, _val, _sid, _mask, _k in bucket.iter_raw():
        if len(ts):
            in_order = in_order and bool((np.diff(ts) >= 0).all())
            in_order = in_order and (last is None or int(ts[0]) >= last)
            last = int(ts[-1])
            lo = int(ts.min()) if lo is None else min(lo, int(ts.min()))
            hi = int(ts.max()) if hi is None else max(hi, int(ts.max()))
    if in_order or lo is None or hi is None or lo == hi:
        for ts, val, sid, mask, k in bucket.iter_raw():
            from dxt_core.publish.series import convert_values

            yield ts, convert_values(val, k, kind, table), mask, rank[sid]
        return
    # split by time into parts of about half the budget, each sorted on its own
    parts = max(2, -(-bucket.rows * 2 // budget))
    step = (hi - lo) // parts + 1
    fresh = _buckets([bucket.path.with_name(f"{bucket.path.name}-t{i:04d}") for i in range(parts)])
    for ts, val, sid, mask, k in bucket.iter_raw():
        route_rows(fresh, (ts - lo) // step, ts, val, sid, mask, k)
    for f in fresh:
        f.flush()
        if f.rows:
            yield from _sorted(f, kind, table, rank, max(budget, f.rows))
        f.remove()


__all__ = [
    "BUCKET_ROWS",
    "MonthResult",
    "output_columns",
    "output_schema",
    "published_names",
    "write_month",
]
