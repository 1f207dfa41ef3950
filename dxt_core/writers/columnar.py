"""Rows of the archive's CSV from columns of a window's points: the timestamps' text from a
table of the seconds the rows span (:class:`Stamps`, the same text as
:class:`dxt_core.writers.csv_gzip.TimestampFormatter`), and Arrow binary arrays over buffers
without a copy, for rows joined by Arrow's ``binary_join_element_wise``.

Used by the backends whose decoders give columns (Prometheus).
NumPy is imported with this module; pyarrow only by :func:`arrow`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_BUCKET_MS = 900_000  # every UTC-offset change since 1970 falls on a quarter hour
_DAY_MS = 86_400_000
#: The three digits of every millisecond, each one 3-byte item.
_MS_DIGITS = np.frombuffer(b"".join(b"%03d" % i for i in range(1000)), "V3")
#: Width of a formatted time and the comma after it: ``2024-03-31T02:00:00.000+02:00,``.
STAMP = 30


class Stamps:
    """Epoch ms as ISO 8601 local time with milliseconds and the zone's offset, as a matrix
    of ``(rows, 30)`` bytes (the comma after it included): the same text as
    :class:`dxt_core.writers.csv_gzip.TimestampFormatter`, from a table of the seconds the
    rows span."""

    def __init__(self, tz: dt.tzinfo) -> None:
        self.tz = tz
        self._offsets: dict[int, tuple[int, bytes]] = {}

    def _offset(self, bucket: int) -> tuple[int, bytes]:
        hit = self._offsets.get(bucket)
        if hit is None:
            t = _EPOCH + dt.timedelta(milliseconds=bucket * _BUCKET_MS)
            off = t.astimezone(self.tz).utcoffset() or dt.timedelta(0)
            total_min = int(off.total_seconds()) // 60
            sign = "+" if total_min >= 0 else "-"
            hh, mm = divmod(abs(total_min), 60)
            hit = self._offsets[bucket] = (total_min * 60_000, f"{sign}{hh:02d}:{mm:02d}".encode())
        return hit

    def table(self, secs: np.ndarray) -> np.ndarray:
        """``(len(secs), 30)`` bytes: the text of each second (epoch seconds, sorted;
        milliseconds ``000``) and a comma."""
        buckets = secs * 1000 // _BUCKET_MS
        ubuckets, pos = np.unique(buckets, return_inverse=True)
        offs = [self._offset(int(b)) for b in ubuckets.tolist()]
        local = secs * 1000 + np.array([o[0] for o in offs], np.int64)[pos]
        day = local // _DAY_MS
        rem = local - day * _DAY_MS
        udays, dpos = np.unique(day, return_inverse=True)
        dates = b"".join(
            (dt.date(1970, 1, 1) + dt.timedelta(days=d)).isoformat().encode()
            for d in udays.tolist()
        )
        out = np.empty((len(secs), STAMP), np.uint8)
        out[:, :10] = np.frombuffer(dates, np.uint8).reshape(-1, 10)[dpos]
        out[:, 10] = ord("T")
        for col, value in (
            (11, rem // 3_600_000),
            (14, rem // 60_000 % 60),
            (17, rem // 1000 % 60),
        ):
            out[:, col] = 48 + value // 10
            out[:, col + 1] = 48 + value % 10
        out[:, 13] = out[:, 16] = ord(":")
        out[:, 19] = ord(".")
        out[:, 20:23] = ord("0")
        out[:, 23:29] = np.frombuffer(b"".join(o[1] for o in offs), np.uint8).reshape(-1, 6)[pos]
        out[:, 29] = ord(",")
        return out

    def span(self, ts: np.ndarray) -> tuple[np.ndarray, int] | None:
        """The table of every second from the first of ``ts`` to the last (as 30-byte
        items) and that first second, to format times among ``ts`` with; None when they
        are too far apart for a table of every second."""
        first, last = int(ts.min()) // 1000, int(ts.max()) // 1000
        if last - first >= max(4 * len(ts), 100_000):
            return None
        table = self.table(np.arange(first, last + 1, dtype=np.int64))
        return table.view(f"V{STAMP}").ravel(), first

    def __call__(self, ts: np.ndarray, span: tuple[np.ndarray, int] | None = None) -> np.ndarray:
        """``(len(ts), 30)`` bytes: each time's text and a comma (rows gathered as 30-byte
        items); ``span``: :meth:`span` of times that include these (a window's, made once
        for all its rows)."""
        secs = ts // 1000
        span = span or self.span(ts)
        if span is not None:  # a window: every second of its span
            items, first = span
            index = secs - first
        else:  # times far apart: only the seconds they are in
            useconds, index = np.unique(secs, return_inverse=True)
            items = self.table(useconds).view(f"V{STAMP}").ravel()
        rows: np.ndarray = items[index].view(np.uint8)
        rows = rows.reshape(len(ts), STAMP)
        ms = ts - secs * 1000
        rows[:, 20:23] = _MS_DIGITS[ms].view(np.uint8).reshape(len(ts), 3)
        return rows


def arrow() -> tuple[Any, Any] | None:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    return pa, pc


def binary(pa: Any, data: Any, offsets: np.ndarray) -> Any:
    """An Arrow binary array over ``data`` (item ``i``: ``offsets[i]:offsets[i + 1]``),
    without a copy of the data (``pa.array`` would import pandas, 50 MB, when installed)."""
    large = int(offsets[-1]) >= 2**31
    return pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        len(offsets) - 1,
        [
            None,
            pa.py_buffer(offsets.astype(np.int64 if large else np.int32, copy=False)),
            pa.py_buffer(data),
        ],
    )


def ints(pa: Any, values: np.ndarray) -> Any:
    """Row or series numbers as an Arrow index array (int32 or int64, as they are)."""
    values = np.ascontiguousarray(values)
    kind = pa.int32() if values.dtype == np.int32 else pa.int64()
    values = values.astype(np.int32 if values.dtype == np.int32 else np.int64, copy=False)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def lay_out(
    stamps: np.ndarray,
    text: bytes,
    vstart: np.ndarray,
    vlen: np.ndarray,
    tails: tuple[bytes, np.ndarray],
    sid: np.ndarray,
) -> bytes:
    """CSV rows ``<stamp><value><tail>`` without pyarrow: row ``r``'s stamp is
    ``stamps[r]`` (:class:`Stamps`' matrix), its value ``text[vstart[r]:vstart[r] + vlen[r]]``
    (``text`` holds at least the longest value's length of bytes after the last value) and
    its tail the ``sid[r]``-th of ``tails`` (the tails joined, and their offsets).

    Each row is laid out in a matrix wide enough for the longest value and tail, and the
    padding dropped (2.5 times Arrow's join's CPU, measured on Prometheus windows).
    """
    n = len(vstart)
    tlen = np.diff(tails[1])
    maxt, maxv = int(tlen.max()), max(int(vlen.max()), 1)
    table = np.zeros((len(tlen), maxt), np.uint8)
    table[np.arange(maxt)[None, :] < tlen[:, None]] = np.frombuffer(tails[0], np.uint8)
    width = STAMP + maxv + maxt
    m = np.empty((n, width), np.uint8)
    m[:, :STAMP] = stamps
    source = np.frombuffer(text, np.uint8)
    m[:, STAMP : STAMP + maxv] = np.lib.stride_tricks.sliding_window_view(source, maxv)[vstart]
    m[:, STAMP + maxv :] = table[sid]
    col = np.arange(width)
    row_tlen = tlen[sid]
    keep = (col < (STAMP + vlen)[:, None]) | (
        (col >= STAMP + maxv) & (col < (STAMP + maxv + row_tlen)[:, None])
    )
    out: bytes = m[keep].tobytes()
    return out
