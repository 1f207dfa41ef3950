"""One unit's month as one sorted, typed Parquet file, in bounded memory: phase 1.

A unit's rows are sorted by *series* (its tag values: ``node`` first, then ``name``, then the
other tags) and time. The series of a month are few beside its rows (980 nodes for 127
million rows), so a series is a number here: :class:`SeriesTable` maps each distinct tag
value to an id once per dictionary (never per row's string) and each combination of ids to a
series id.

Phase 1 (:class:`MonthSpool`) reads the month's days batch by batch and appends each row's
time, value and series id (20 bytes) to one of a few *bucket* files in the scratch directory.
Buckets are ranges of the series order: the boundaries come from the first batch's series,
each series' bucket is found once, and a batch is split into buckets by a stable radix sort
on the (small) bucket number. Phase 2 (:mod:`dxt_core.publish.monthfile`) sorts one bucket at
a time in memory and writes the month's file; a bucket that came out too large, or buckets
whose ranges overlap once every series is known, are split again from their files first.
Memory holds one batch, a few thousand buffered rows per bucket and one bucket, whatever
the month's size.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dxt_core.errors import ArchiveError

#: The value types, narrowest first: a unit's type is the widest of its days'.
WIDENING = ("int64", "double", "string")
#: Rows sorted in memory at once (phase 2): about 50 bytes each with the sort's copies.
BUCKET_ROWS = 2_000_000
#: Rows buffered before they are appended to the bucket files, in all (split between the
#: buckets: a bucket writes when it holds its share).
PENDING_ROWS = 2_000_000
#: ... but at least this many a bucket.
MIN_FLUSH_ROWS = 4_096
#: At most this many buckets (a bigger month gets bigger buckets).
MAX_BUCKETS = 256
#: The two columns every table has; every other column is a tag (``name`` included).
RESERVED = ("timestamp", "value")
#: Dictionaries remembered with their value ids (and series ids), per unit.
CACHED = 64


def wider(a: str | None, b: str) -> str:
    return b if a is None else WIDENING[max(WIDENING.index(a), WIDENING.index(b))]


def _pa() -> Any:
    import pyarrow as pa

    return pa


def np_values(arr: Any, dtype: Any) -> Any:
    """The values of a fixed-width Arrow array (its slots, nulls included: fill them first
    where it matters) as NumPy, straight from its buffer: ``to_numpy`` would import pandas
    on first use (half a second and more of a process's time)."""
    pa = _pa()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    dt = np.dtype(dtype)
    if pa.types.is_boolean(arr.type):
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        out = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)]
        return out.astype(dt)
    if arr.type.bit_width != 8 * dt.itemsize:
        raise TypeError(f"{arr.type} is not {dt}")
    return np.frombuffer(
        arr.buffers()[1], dtype=dt, count=len(arr), offset=arr.offset * dt.itemsize
    )


def sort_key(value: str | None) -> tuple[bool, str]:
    """Arrow's order of strings (bytewise, as UTF-8 keeps code point order), nulls last."""
    return (value is None, value or "")


class SeriesTable:
    """The series of one unit: its tag columns, their values and each series' value ids.

    Value id 0 of every column is null (a tag a series does not have). A series is the tuple
    of its value ids in the order the columns were first seen, trailing nulls left out (a
    column that appears later leaves the earlier series as they were).
    """

    def __init__(self, series_order: Sequence[str] = ("node",)) -> None:
        self.series_order = tuple(series_order)
        self.columns: list[str] = []
        self._col: dict[str, int] = {}
        self.values: list[list[str | None]] = []
        self._vid: list[dict[str | None, int]] = []
        self.series: list[tuple[int, ...]] = []
        self._sid: dict[tuple[int, ...], int] = {}
        #: value strings of string-typed values (id -> text)
        self.texts: list[str] = []
        self._text_id: dict[str, int] = {}
        # the same dictionaries come again in every row group: mapped once
        self._luts: dict[tuple[int, tuple[str | None, ...]], Any] = {}
        self._by_code: dict[tuple[Any, ...], Any] = {}

    # -- columns and values -------------------------------------------------------------
    def column(self, name: str) -> int:
        ci = self._col.get(name)
        if ci is None:
            ci = self._col[name] = len(self.columns)
            self.columns.append(name)
            self.values.append([None])
            self._vid.append({None: 0})
        return ci

    def value_id(self, ci: int, value: str | None) -> int:
        ids = self._vid[ci]
        vid = ids.get(value)
        if vid is None:
            vid = ids[value] = len(self.values[ci])
            self.values[ci].append(value)
        return vid

    def text_ids(self, values: Any) -> npt.NDArray[np.int64]:
        """String values (an Arrow string array) as ids into :attr:`texts` (nulls: -1)."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(values)
        uniq = enc.dictionary.to_pylist()
        lut = np.empty(len(uniq) + 1, np.int64)
        for i, v in enumerate(uniq):
            tid = self._text_id.get(v)
            if tid is None:
                tid = self._text_id[v] = len(self.texts)
                self.texts.append(v)
            lut[i] = tid
        lut[-1] = -1
        idx = np_values(enc.indices.fill_null(len(uniq)), np.int32)
        ids: npt.NDArray[np.int64] = lut[idx]
        return ids

    def _column_codes(self, ci: int, col: Any) -> list[tuple[Any, Any]]:
        """One tag column of a batch, chunk by chunk, as (``lut``, ``codes``): a row's value
        id is ``lut[code]`` (a dictionary is mapped once a chunk, never a row's string)."""
        import pyarrow.compute as pc

        pa = _pa()
        out = []
        for arr in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
            if not pa.types.is_dictionary(arr.type):
                if not pa.types.is_string(arr.type):
                    arr = pc.cast(arr, pa.string())
                arr = pc.dictionary_encode(arr)
            dictionary = arr.dictionary
            if not pa.types.is_string(dictionary.type):
                dictionary = pc.cast(dictionary, pa.string())
            words = tuple(dictionary.to_pylist())
            lut = self._luts.get((ci, words))
            if lut is None:
                lut = np.fromiter((self.value_id(ci, w) for w in words), np.int64, len(words))
                if len(self._luts) > CACHED:
                    self._luts.clear()
                self._luts[(ci, words)] = lut
            indices = arr.indices
            if indices.null_count:
                indices = indices.fill_null(len(words))
                lut = np.append(lut, 0)  # a null index: the null value
            if indices.type != pa.int32():
                indices = indices.cast(pa.int32())
            out.append((lut, indices))
        return out

    def series_ids(self, table: Any) -> npt.NDArray[np.int32]:
        """The series id of every row of ``table`` (its columns other than time and value).

        Columns whose batch holds one value add it to every series of the batch; the others
        are combined row by row (one column: its dictionary codes are the series directly).
        """
        import pyarrow.compute as pc

        pa = _pa()
        n = table.num_rows
        fixed: dict[int, int] = {}
        varying: list[tuple[int, list[tuple[Any, Any]]]] = []
        for c in table.column_names:
            if c in RESERVED:
                continue
            ci = self.column(c)
            chunks = self._column_codes(ci, table.column(c))
            vids = np.unique(np.concatenate([lut for lut, _ in chunks]))
            if len(vids) <= 1:
                fixed[ci] = int(vids[0]) if len(vids) else 0
            else:
                varying.append((ci, chunks))
        width = len(self.columns)

        def series_of(ids: dict[int, int]) -> int:
            key = [0] * width
            for ci, vid in {**fixed, **ids}.items():
                key[ci] = vid
            return self._series_of(tuple(key))

        if not varying:
            return np.full(n, series_of({}), np.int32)
        if len(varying) == 1:
            ci, chunks = varying[0]
            parts = []
            for lut, indices in chunks:
                key = (tuple(sorted(fixed.items())), ci, lut.tobytes())
                by_code = self._by_code.get(key)
                if by_code is None:
                    by_code = np.fromiter(
                        (series_of({ci: int(v)}) for v in lut), np.int32, len(lut)
                    )
                    if len(self._by_code) > CACHED:
                        self._by_code.clear()
                    self._by_code[key] = by_code
                parts.append(by_code[np_values(indices, np.int32)])
            result: npt.NDArray[np.int32] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return result
        # several varying columns: one number per row, decoded per distinct number
        radix: list[int] = []
        combined: Any = None
        for ci, chunks in varying:
            w = len(self.values[ci])
            if radix and int(np.prod(radix, dtype=object)) * w >= 1 << 62:
                raise ArchiveError(
                    f"too many tag combinations in one batch ({'x'.join(map(str, radix))}"
                    f"x{w}) to number"
                )
            ids = np.concatenate([lut[np_values(ix, np.int32)] for lut, ix in chunks])
            combined = ids if combined is None else combined * w + ids
            radix.append(w)
        enc = pc.dictionary_encode(pa.array(combined))
        idx = np_values(enc.indices, np.int32)
        lut_sid = np.empty(len(enc.dictionary), np.int32)
        for u, number in enumerate(enc.dictionary.to_pylist()):
            ids_of: dict[int, int] = {}
            for (ci, _), w in zip(reversed(varying), reversed(radix), strict=True):
                number, ids_of[ci] = divmod(number, w)
            lut_sid[u] = series_of(ids_of)
        result = lut_sid[idx]
        return result

    def _series_of(self, key: tuple[int, ...]) -> int:
        while key and key[-1] == 0:
            key = key[:-1]
        sid = self._sid.get(key)
        if sid is None:
            sid = self._sid[key] = len(self.series)
            self.series.append(key)
        return sid

    def tag(self, sid: int, ci: int) -> str | None:
        key = self.series[sid]
        return self.values[ci][key[ci]] if ci < len(key) else None

    # -- order --------------------------------------------------------------------------
    def order(self) -> list[str]:
        """The sort columns: the role's series order (those present), ``name``, the rest
        sorted."""
        present = set(self.columns)
        first = [c for c in self.series_order if c in present]
        if "name" in present and "name" not in first:
            first.append("name")
        return first + sorted(present - set(first))

    def series_key(self, sid: int, order_ci: Sequence[int]) -> tuple[tuple[bool, str], ...]:
        return tuple(sort_key(self.tag(sid, ci)) for ci in order_ci)

    def ranks(self) -> npt.NDArray[np.int32]:
        """Each series' place in the final order (over every column seen)."""
        order_ci = [self._col[c] for c in self.order()]
        keys = [self.series_key(s, order_ci) for s in range(len(self.series))]
        rank = np.empty(len(keys), np.int32)
        rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys), dtype=np.int32)
        return rank


@dataclass(slots=True)
class Chunk:
    """Rows appended to a bucket file in one write: how many, their value kind, whether a
    null mask follows, and where they start in the file."""

    rows: int
    kind: str
    masked: bool
    offset: int


@dataclass(slots=True)
class Bucket:
    """One bucket file: its chunks, and the series and time span of its rows."""

    path: Path
    chunks: list[Chunk] = field(default_factory=list)
    rows: int = 0
    size: int = 0
    pending: list[tuple[Any, ...]] = field(default_factory=list)
    pending_rows: int = 0
    flush_rows: int = PENDING_ROWS

    def append(self, ts: Any, val: Any, sid: Any, mask: Any, kind: str) -> None:
        """Rows to add; copied (a slice would keep its whole batch in memory)."""
        copy = np.copy
        self.pending.append(
            (copy(ts), copy(val), copy(sid), None if mask is None else copy(mask), kind)
        )
        self.pending_rows += len(ts)
        if self.pending_rows >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        with self.path.open("ab") as fh:
            for ts, val, sid, mask, kind in self.pending:
                n = len(ts)
                self.chunks.append(Chunk(n, kind, mask is not None, self.size))
                for arr in (ts, val, sid) if mask is None else (ts, val, sid, mask):
                    arr.tofile(fh)
                    self.size += arr.nbytes
                self.rows += n
        self.pending, self.pending_rows = [], 0

    def read(self, kind: str, table: SeriesTable) -> tuple[Any, Any, Any, Any]:
        """All rows: (times, values as ``kind``, series ids, null mask or None)."""
        ts = np.empty(self.rows, np.int64)
        sid = np.empty(self.rows, np.int32)
        val = np.empty(self.rows, np.float64 if kind == "double" else np.int64)
        mask: Any = None
        pos = 0
        with self.path.open("rb") as fh:
            for c in self.chunks:
                fh.seek(c.offset)
                end = pos + c.rows
                _read_into(fh, ts[pos:end])
                if c.kind == kind:
                    _read_into(fh, val[pos:end])
                else:
                    raw = np.empty(c.rows, np.float64 if c.kind == "double" else np.int64)
                    _read_into(fh, raw)
                    val[pos:end] = convert_values(raw, c.kind, kind, table)
                _read_into(fh, sid[pos:end])
                if c.masked:
                    if mask is None:
                        mask = np.zeros(self.rows, np.bool_)
                    _read_into(fh, mask[pos:end])
                pos = end
        return ts, val, sid, mask

    def iter_raw(self) -> Any:
        """Chunk by chunk, as stored: (times, values, series ids, mask or None, kind)."""
        with self.path.open("rb") as fh:
            for c in self.chunks:
                fh.seek(c.offset)
                ts = np.empty(c.rows, np.int64)
                _read_into(fh, ts)
                val = np.empty(c.rows, np.float64 if c.kind == "double" else np.int64)
                _read_into(fh, val)
                sid = np.empty(c.rows, np.int32)
                _read_into(fh, sid)
                mask = None
                if c.masked:
                    mask = np.empty(c.rows, np.bool_)
                    _read_into(fh, mask)
                yield ts, val, sid, mask, c.kind

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def route_rows(dest: list[Bucket], to: Any, ts: Any, val: Any, sid: Any, mask: Any, k: str) -> None:
    """Append each row to bucket ``to[i]`` of ``dest``, keeping the rows' order."""
    to = to.astype(np.int16) if len(dest) < 32_767 else to
    order = np.argsort(to, kind="stable")  # a radix sort of small numbers
    cuts = np.cumsum(np.bincount(to, minlength=len(dest)))
    ts, val, sid = ts[order], val[order], sid[order]
    mask = None if mask is None else mask[order]
    lo = 0
    for i, hi in enumerate(cuts.tolist()):
        if hi > lo:
            p = slice(lo, hi)
            dest[i].append(ts[p], val[p], sid[p], None if mask is None else mask[p], k)
        lo = hi


def _read_into(fh: Any, arr: Any) -> None:
    """Fill ``arr`` (a contiguous NumPy array) from ``fh``."""
    view = memoryview(arr).cast("B")
    if fh.readinto(view) != len(view):
        raise ArchiveError(f"{getattr(fh, 'name', 'a bucket file')}: shorter than written")


def convert_values(raw: Any, have: str, want: str, table: SeriesTable) -> Any:
    """Values stored as ``have`` made ``want`` (a wider kind; strings are text ids)."""
    if have == want:
        return raw
    if want == "double":
        return raw.astype(np.float64)
    pa = _pa()
    import pyarrow.compute as pc

    text = pc.cast(pa.array(raw), pa.string())  # the number as text, as a CSV would hold it
    return table.text_ids(text)


@dataclass(slots=True)
class MonthSpool:
    """Phase 1 of one unit-month: rows spilled into bucket files by series range."""

    scratch: Path
    table: SeriesTable
    expected_rows: int
    unit: str = "ms"
    bucket_rows: int = BUCKET_ROWS
    buckets: list[Bucket] = field(default_factory=list)
    bounds: list[tuple[tuple[bool, str], ...]] | None = None
    bucket_of: list[int] = field(default_factory=list)
    day_types: dict[Any, str] = field(default_factory=dict)
    rows: int = 0
    kind: str | None = None
    #: rows per series id
    counts: Any = None

    def add(self, table: Any, day: Any, where: str) -> None:
        """Spill one batch (``table``) of ``day`` (read from ``where``)."""
        n = table.num_rows
        if not n:
            return
        ts = self._times(table.column("timestamp"), where)
        val, kind, mask = self._values(table.column("value"))
        self.day_types[day] = wider(self.day_types.get(day), kind)
        self.kind = wider(self.kind, kind)
        sid = self.table.series_ids(table)
        per = np.bincount(sid)
        if self.counts is None:
            self.counts = np.zeros(0, np.int64)
        if len(per) > len(self.counts):
            self.counts = np.pad(self.counts, (0, len(per) - len(self.counts)))
        self.counts[: len(per)] += per
        if self.bounds is None:
            self._set_bounds(sid)
        b = self._buckets_of(sid)
        if len(self.buckets) == 1:
            self.buckets[0].append(ts, val, sid, mask, kind)
        else:
            route_rows(self.buckets, b, ts, val, sid, mask, kind)
        self.rows += n

    def finish(self) -> list[Bucket]:
        for b in self.buckets:
            b.flush()
        return [b for b in self.buckets if b.rows]

    def _times(self, col: Any, where: str) -> Any:
        import pyarrow.compute as pc

        pa = _pa()
        if not pa.types.is_timestamp(col.type):
            raise ArchiveError(f"{where}: timestamp is {col.type}, not a time")
        if col.null_count:
            raise ArchiveError(
                f"{where}: {col.null_count} rows have no timestamp; rerun the day to rewrite it"
            )
        want = pa.timestamp(self.unit, tz="UTC")
        if col.type != want:
            col = pc.cast(col, want)
        return np_values(col, np.int64)

    def _values(self, col: Any) -> tuple[Any, str, Any]:
        """(8-byte values, kind, null mask or None): text is typed as the narrowest kind
        every value fits (whole numbers -> int64, numbers -> double), strings become ids."""
        import pyarrow.compute as pc

        pa = _pa()
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_dictionary(arr.type):
            arr = pc.cast(arr, arr.type.value_type)
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            arr, kind = _type_text(arr)
        elif pa.types.is_integer(arr.type) or pa.types.is_boolean(arr.type):
            arr, kind = pc.cast(arr, pa.int64()), "int64"
        elif pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type):
            arr, kind = pc.cast(arr, pa.float64()), "double"
        else:
            arr, kind = pc.cast(arr, pa.string()), "string"
        mask = None
        if arr.null_count:
            mask = np_values(arr.is_null(), np.bool_)
        if kind == "string":
            vals = self.table.text_ids(arr)
        else:
            if arr.null_count:
                arr = arr.fill_null(0 if kind == "int64" else 0.0)
            vals = np_values(arr, np.int64 if kind == "int64" else np.float64)
        return vals, kind, mask

    def _set_bounds(self, sid: Any) -> None:
        """Bucket boundaries: quantiles of the first batch's series in the series order."""
        n_buckets = max(1, min(MAX_BUCKETS, math.ceil(self.expected_rows / self.bucket_rows)))
        flush = max(MIN_FLUSH_ROWS, PENDING_ROWS // n_buckets)
        self.buckets = [
            Bucket(self.scratch / f"bucket-{i:04d}", flush_rows=flush) for i in range(n_buckets)
        ]
        order_ci = [self.table.column(c) for c in self.table.order()]
        keys = sorted({self.table.series_key(int(s), order_ci) for s in np.unique(sid)})
        self.bounds = [keys[i * len(keys) // n_buckets] for i in range(1, n_buckets)]

    def _buckets_of(self, sid: Any) -> Any:
        bounds = self.bounds or []
        if len(self.buckets) == 1:
            return np.zeros(len(sid), np.int16)
        top = int(sid.max())
        if top >= len(self.bucket_of):
            order_ci = [self.table.column(c) for c in self.table.order()]
            for s in range(len(self.bucket_of), top + 1):
                key = self.table.series_key(s, order_ci)
                self.bucket_of.append(bisect.bisect_right(bounds, key))
        lut = np.asarray(self.bucket_of, np.int16)
        return lut[sid]


def _type_text(arr: Any) -> tuple[Any, str]:
    """The narrowest type every value of a text column fits (empty text is null): whole
    numbers -> int64, numbers -> double, else string. Tried as a double first (a failed
    integer parse of float text costs 50 times a successful one); integers only when no
    value has a point, an exponent or a nan/inf."""
    import pyarrow.compute as pc

    pa = _pa()
    if pc.any(pc.equal(arr, "")).as_py():
        arr = pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)
    try:
        doubles = pc.cast(arr, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return arr, "string"
    for mark in (".", "e", "E", "n", "N"):  # (ignore_case would run a regular expression)
        if pc.any(pc.match_substring(arr, mark)).as_py():
            return doubles, "double"
    try:
        return pc.cast(arr, pa.int64()), "int64"
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return doubles, "double"


def type_history(day_types: dict[Any, str]) -> list[dict[str, str]]:
    """Where the unit's (widest so far) value type changed: ``[{type, first_day}]``."""
    out: list[dict[str, str]] = []
    current: str | None = None
    for day in sorted(day_types):
        new = wider(current, day_types[day])
        if new != current:
            out.append({"type": new, "first_day": day.isoformat()})
            current = new
    return out
