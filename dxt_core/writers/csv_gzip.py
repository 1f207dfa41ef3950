"""Gzip CSV, the format dxt_examon users know: ``timestamp,value,name,<tags...>``.

Rows are formatted straight from the decoded JSON lists, one series at a time, and
compressed as they are produced: nothing of the size of a day is ever held. Timestamps are ISO
8601 with millisecond precision and the UTC offset of the configured zone
(``2020-03-09T00:00:00.000+01:00``), computed by arithmetic with cached offsets and dates
rather than through ``datetime`` for every point.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo

import orjson

from dxt_core.errors import ArchiveError
from dxt_core.records import (
    Point,
    RawPoints,
    Record,
    SeriesBatch,
    SeriesSchema,
    block_slices,
)
from dxt_core.writers.base import (
    RecordWriter,
    SeriesWriter,
    WriteResult,
    block_row_order,
    write_stream,
)
from dxt_core.writers.compress import Backend, GzipStream

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_BUCKET_MS = 900_000  # every UTC-offset change since 1970 falls on a quarter hour
_DAY_MS = 86_400_000
_CACHE_LIMIT = 200_000
_NEEDS_QUOTES = (",", '"', "\n", "\r")
_SEC_DIGITS = operator.itemgetter(slice(None, -3))
_MS_DIGITS = operator.itemgetter(slice(-3, None))
#: Rows are grouped in blocks of this length: long runs of one series compress well.
DEFAULT_BLOCK_MS = 1_800_000


def csv_field(value: Any) -> str:
    """One CSV field, quoted only when needed (RFC 4180, as Python's csv module does)."""
    if value is None:
        return ""
    s = value if isinstance(value, str) else str(value)
    if any(c in s for c in _NEEDS_QUOTES):
        return '"' + s.replace('"', '""') + '"'
    return s


class TimestampFormatter:
    """Formats epoch milliseconds as ISO 8601 local time with offset, fast."""

    def __init__(self, tz: ZoneInfo | dt.tzinfo) -> None:
        self.tz = tz
        self._offsets: dict[int, tuple[int, str]] = {}
        self._dates: dict[int, str] = {}
        self._constant: dict[tuple[int, int], bytes | None] = {}
        self.cache: dict[int, str] = {}
        #: Encoded timestamps plus the comma after them, keyed by the epoch-ms digits as the
        #: server sent them.
        self.stamp_comma = _StampCommaCache(self)
        #: The same, split at the second (see :class:`_SecondCache`).
        self.seconds = _SecondCache(self)

    def _offset(self, bucket: int) -> tuple[int, str]:
        t = _EPOCH + dt.timedelta(milliseconds=bucket * _BUCKET_MS)
        off = t.astimezone(self.tz).utcoffset() or dt.timedelta(0)
        total_min = int(off.total_seconds()) // 60
        sign = "+" if total_min >= 0 else "-"
        hh, mm = divmod(abs(total_min), 60)
        entry = (total_min * 60_000, f"{sign}{hh:02d}:{mm:02d}")
        self._offsets[bucket] = entry
        return entry

    def offset_over(self, first_ms: int, last_ms: int) -> bytes | None:
        """``b"<offset>,"`` when the UTC offset is the same at every instant of
        ``[first_ms, last_ms]``, else None."""
        lo, hi = first_ms // _BUCKET_MS, last_ms // _BUCKET_MS
        if (lo, hi) not in self._constant:
            texts = {(self._offsets.get(b) or self._offset(b))[1] for b in range(lo, hi + 1)}
            one = (texts.pop() + ",").encode() if len(texts) == 1 else None
            self._constant[lo, hi] = one
        return self._constant[lo, hi]

    def _date(self, day_index: int) -> str:
        s = (dt.date(1970, 1, 1) + dt.timedelta(days=day_index)).isoformat()
        self._dates[day_index] = s
        return s

    def __call__(self, ms: int) -> str:
        hit = self.cache.get(ms)
        if hit is not None:
            return hit
        off = self._offsets.get(ms // _BUCKET_MS) or self._offset(ms // _BUCKET_MS)
        day, rem = divmod(ms + off[0], _DAY_MS)
        date = self._dates.get(day) or self._date(day)
        h, rem = divmod(rem, 3_600_000)
        m, rem = divmod(rem, 60_000)
        s, f = divmod(rem, 1000)
        out = f"{date}T{h:02d}:{m:02d}:{s:02d}.{f:03d}{off[1]}"
        if len(self.cache) >= _CACHE_LIMIT:
            self.cache.clear()
        self.cache[ms] = out
        return out


class _StampCommaCache(dict[bytes, bytes]):
    def __init__(self, fmt: TimestampFormatter) -> None:
        super().__init__()
        self._fmt = fmt

    def __missing__(self, digits: bytes) -> bytes:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        out = self[digits] = self._fmt(int(digits)).encode() + b","
        return out


class _SecondCache(dict[bytes, bytes]):
    """Epoch-second digits -> ``b"<local date>T<hh:mm:ss>."``; the offset (with the comma
    after it) goes to :attr:`offsets` under the same key.

    Real samples carry millisecond jitter, so few epoch-ms values repeat, but their seconds
    do: a row is then laid out as ``<second>``, ``<the three ms digits>``,
    ``<offset>,`` from two lookups keyed on the second, and Python formats one timestamp per
    distinct second instead of one per point. Offsets change on quarter hours, so one second
    has one offset.
    """

    def __init__(self, fmt: TimestampFormatter) -> None:
        super().__init__()
        self._fmt = fmt
        self.offsets = _OffsetOf(self)

    def __missing__(self, sec: bytes) -> bytes:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
            self.offsets.clear()
        text = self._fmt(int(sec or b"0") * 1000).encode()  # ...T00:00:00.000+01:00
        self.offsets[sec] = text[23:] + b","
        out = self[sec] = text[:20]
        return out


class _OffsetOf(dict[bytes, bytes]):
    def __init__(self, seconds: _SecondCache) -> None:
        super().__init__()
        self._seconds = seconds

    def __missing__(self, sec: bytes) -> bytes:
        self._seconds.__missing__(sec)  # formats the second, fills both caches
        return self[sec]


def _numeric_only(points: Sequence[Point]) -> bool:
    for p in points:
        t = type(p[1])
        if t is not float and t is not int:
            return False
    return True


def _value_field(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return csv_field(v)
    if isinstance(v, (dict, list)):
        return csv_field(orjson.dumps(v).decode())
    return str(v)


def close_block_ordered(gz: GzipStream, result: WriteResult, block_ms: int) -> WriteResult:
    """Close a gzip CSV whose rows go in blocks of ``block_ms`` from the day start, series by
    series within a block: ``result`` with the file's bytes, hash and row order."""
    result.sha256 = gz.close()
    result.bytes = gz.bytes
    result.extra = {
        "compressor": gz.label,
        "csv_bytes": gz.raw_bytes,
        "row_order": block_row_order(block_ms),
    }
    return result


class GzipCsvWriter(SeriesWriter):
    """Writes ``timestamp,value,name,<tag columns>`` rows as deterministic gzip."""

    extension = "csv.gz"

    def __init__(
        self,
        out: BinaryIO,
        tz: ZoneInfo | dt.tzinfo,
        gzip_backend: Backend | None = None,
        gzip_level: int | None = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        origin_ms: int = 0,
    ) -> None:
        super().__init__(out)
        if block_ms <= 0:
            raise ArchiveError(f"block_ms must be positive, got {block_ms}")
        self._gz = GzipStream(out, gzip_backend, gzip_level)
        self._fmt = TimestampFormatter(tz)
        self._block_ms = block_ms
        self._origin_ms = origin_ms
        self._schema: SeriesSchema | None = None
        self._result = WriteResult()
        # Rows of blocks that the windows seen so far have not completed, per block index:
        # (series sort key, encoded rows) in arrival (time) order.
        self._pending: dict[int, list[tuple[tuple[str, ...], bytes]]] = {}
        self._tails: dict[tuple[str, ...], tuple[str, bytes]] = {}

    def header(self, schema: SeriesSchema) -> None:
        self._schema = schema
        self._result.columns = list(schema.columns)
        self._gz.write((",".join(csv_field(c) for c in schema.columns) + "\n").encode())

    def rows(self, batch: SeriesBatch) -> None:
        """Append one window's rows in block order.

        Rows are grouped in fixed blocks of ``block_ms`` counted from ``origin_ms`` (the day
        start); within a block, series by series (ordered by their tag values); within a
        series, by time. A block is written once the windows have passed its end (windows
        come in time order), so the file's bytes do not depend on how the day was cut into
        queries, while rows of one series stay together, which gzip compresses well. Memory
        holds at most one block's rows besides the current window.
        """
        schema = self._schema
        if schema is None:
            raise ArchiveError("GzipCsvWriter.rows called before header()")
        fmt = self._fmt
        res = self._result
        kept, cuts = block_slices(batch, self._origin_ms, self._block_ms)
        first_block = (batch.start_ms - self._origin_ms) // self._block_ms
        pending = self._pending
        for series, c in zip(kept, cuts, strict=True):
            points = series.points
            key, suffix, tail = self._tail(series.name, series.tags, schema.tag_keys)
            if isinstance(points, RawPoints):
                pieces, w = self._raw_pieces(points, tail)
                for b_i in range(len(c) - 1):
                    lo, hi = c[b_i], c[b_i + 1]
                    if hi > lo:
                        pending.setdefault(first_block + b_i, []).append(
                            (key, b"".join(pieces[w * lo : w * hi]))
                        )
                del pieces
                points.release_tokens()  # the rows hold the window now, not its tokens
                first, last = map(int, points.span)  # what is written, in any order
            else:
                # The formatter's cache is looked up inline: most timestamps repeat.
                hit = fmt.cache.get
                if _numeric_only(points):
                    lines = [f"{hit(p[0]) or fmt(p[0])},{p[1]}{suffix}" for p in points]
                else:
                    lines = [
                        f"{hit(p[0]) or fmt(p[0])},{_value_field(p[1])}{suffix}" for p in points
                    ]
                for b_i in range(len(c) - 1):
                    lo, hi = c[b_i], c[b_i + 1]
                    if hi > lo:
                        pending.setdefault(first_block + b_i, []).append(
                            (key, "".join(lines[lo:hi]).encode())
                        )
                first = min(p[0] for p in points)
                last = max(p[0] for p in points)
            res.add(len(points), first, last)
        self._flush((batch.end_ms - self._origin_ms) // self._block_ms)

    def _tail(
        self, name: str, tags: Mapping[str, str], keys: tuple[str, ...]
    ) -> tuple[tuple[str, ...], str, bytes]:
        """A series' sort key and its rows' tail ``,<name>,<tag values>\n`` (text and
        bytes), made once per series of the day, not once per window."""
        tag_values = tuple(tags.get(k, "") for k in keys)
        key = (*tag_values, name)
        hit = self._tails.get(key)
        if hit is None:
            suffix = ",".join(["", *map(csv_field, (name, *tag_values))]) + "\n"
            hit = self._tails[key] = (suffix, suffix.encode())
        return key, hit[0], hit[1]

    def _raw_pieces(self, points: RawPoints, tail: bytes) -> tuple[list[bytes], int]:
        """The rows of ``points`` (server digits as they came) as a flat list of pieces,
        ``w`` per row, laid out by list slicing: no Python code runs per point."""
        fmt = self._fmt
        stamps = points.ts_tokens
        values = points.tokens[1::2]
        n = len(points)
        if points.width <= 3:  # "<local time>,", "<value>", "<tail>"
            pieces = [tail] * (3 * n)
            pieces[0::3] = map(fmt.stamp_comma.__getitem__, stamps)
            pieces[1::3] = values
            return pieces, 3
        # "<second>", "<ms>", "<offset>,", "<value>", "<tail>" (see _SecondCache); the
        # offset is one piece for all rows when it does not change over the series' span
        secs = list(map(_SEC_DIGITS, stamps))
        first, last = points.span
        offset = fmt.offset_over(int(first), int(last))
        if offset is None:
            pieces = [tail] * (5 * n)
            pieces[2::5] = map(fmt.seconds.offsets.__getitem__, secs)
        else:
            pieces = [b"", b"", offset, b"", tail] * n
        pieces[0::5] = map(fmt.seconds.__getitem__, secs)
        pieces[1::5] = map(_MS_DIGITS, stamps)
        pieces[3::5] = values
        return pieces, 5

    def _flush(self, before_block: int | None) -> None:
        """Write the pending blocks with an index below ``before_block`` (all if None)."""
        done = sorted(b for b in self._pending if before_block is None or b < before_block)
        for b in done:
            chunks = self._pending.pop(b)
            chunks.sort(key=lambda kc: kc[0])  # stable: one series' chunks stay in time order
            for _, chunk in chunks:
                self._gz.write(chunk)

    def close(self) -> WriteResult:
        self._flush(None)
        return close_block_ordered(self._gz, self._result, self._block_ms)


class GzipCsvTableWriter(RecordWriter[Sequence[str], Sequence[Record]]):
    """Writes plain records (job accounting rows) as gzip CSV: one column per name given to
    :meth:`header`, a record's missing field an empty cell. Holds nothing between calls."""

    extension = "csv.gz"

    def __init__(
        self, out: BinaryIO, gzip_backend: Backend | None = None, gzip_level: int | None = None
    ) -> None:
        super().__init__(out)
        self._gz = GzipStream(out, gzip_backend, gzip_level)
        self._result = WriteResult()

    def header(self, columns: Sequence[str]) -> None:
        self._result.columns = list(columns)
        self._gz.write((",".join(csv_field(c) for c in columns) + "\n").encode())

    def rows(self, records: Sequence[Record]) -> None:
        columns = self._result.columns
        lines = [",".join(_value_field(r.get(c)) for c in columns) + "\n" for r in records]
        self._gz.write("".join(lines).encode())
        self._result.rows += len(lines)

    def close(self) -> WriteResult:
        res = self._result
        res.sha256 = self._gz.close()
        res.bytes = self._gz.bytes
        res.extra = {"compressor": self._gz.label, "csv_bytes": self._gz.raw_bytes}
        return res

    def write_all(self, records: Iterable[Record]) -> WriteResult:
        """All of ``records`` in one file, their fields' union as sorted columns."""
        rows = list(records)
        return write_stream(self, sorted({k for r in rows for k in r}), [rows])
