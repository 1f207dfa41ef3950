"""The record stream between sources and writers.

Sources yield :class:`SeriesBatch` objects, one per query window, in time order. A batch holds
the series of that window exactly as decoded from the backend (lists of ``[ts_ms, value]``
pairs), so no per-point object is ever built: writers format straight from these lists.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, overload

import orjson

#: One point as decoded from JSON: ``[epoch_ms, value]``; value is int, float or str.
Point = Sequence[Any]


#: Bytes a purely numeric JSON array of ``[ts, value]`` pairs may contain.
_NUMERIC_JSON = b"0123456789.-+eE,[]"


class RawPoints(Sequence[Point]):
    """Numeric points kept as the JSON text the server sent.

    Most telemetry is numeric; formatting it from the server's own digits skips building two
    Python objects per point and printing each number again (the text is the server's; it
    reads back as the same number). Indexing parses the JSON on first use, so writers that
    need Python values (Parquet) get them; the CSV writer reads :attr:`tokens` directly.
    Timestamps are non-negative epoch ms of one width (:attr:`width` digits), so their digit
    strings sort by time as bytes.
    """

    __slots__ = ("_n", "_parsed", "_span", "_tokens", "_ts_tokens", "text", "width")

    def __init__(self, text: bytes, n: int, width: int) -> None:
        self.text = text  # b"[t,v],[t,v]": compact while the batch waits in a queue
        self.width = width
        self._n = n
        self._tokens: list[bytes] | None = None
        self._ts_tokens: list[bytes] | None = None
        self._parsed: list[Any] | None = None
        self._span: tuple[bytes, bytes] | None = None

    @classmethod
    def from_json(cls, inner: bytes) -> RawPoints | None:
        """From the text inside a ``values`` array (``[t,v],[t,v]``), or None if it is not a
        compact, numeric, non-negative-time array (the caller then parses it as JSON)."""
        if len(inner) < 5 or inner[:1] != b"[" or inner[-1:] != b"]":
            return None
        if inner.translate(None, _NUMERIC_JSON):
            return None  # strings, null, whitespace...: not for this fast path
        n = inner.count(b"],[") + 1
        if inner.count(b",") != 2 * n - 1 or inner.count(b"[") != n:
            return None  # some pair is not exactly [ts, value]
        width = inner.find(b",") - 1
        last = inner[inner.rfind(b"[") + 1 :]
        if width < 1 or last.find(b",") != width:
            return None
        if not (inner[1 : 1 + width].isdigit() and last[:width].isdigit()):
            return None
        return cls(inner, n, width)

    @classmethod
    def of_pairs(cls, inner: bytes) -> RawPoints | None:
        """From a ``values`` text already known to be ``[t,v]`` pairs of JSON numbers (the
        decoder's one regular expression checked it), or None if its first and last
        timestamps differ in width: only the count and the width are read here."""
        width = inner.find(b",") - 1
        if inner.find(b",", inner.rfind(b"[")) - inner.rfind(b"[") - 1 != width:
            return None
        return cls(inner, inner.count(b"],[") + 1, width)

    @property
    def tokens(self) -> list[bytes]:
        """``[ts, value, ts, value, ...]`` as the server's digits (split on first use)."""
        if self._tokens is None:
            self._tokens = self.text.translate(None, b"[]").split(b",")
        return self._tokens

    def _points(self) -> list[Any]:
        if self._parsed is None:
            self._parsed = orjson.loads(b"[" + self.text + b"]")
        return self._parsed

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Point: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Point]: ...
    def __getitem__(self, i: int | slice) -> Point | Sequence[Point]:
        return self._points()[i]

    def __iter__(self) -> Iterator[Point]:
        return iter(self._points())

    def all_integers(self) -> bool:
        """True when every value is written as an integer (no fraction, no exponent)."""
        t = self.text  # timestamps are plain digits, so any of these is in a value
        return not (b"." in t or b"e" in t or b"E" in t)

    def ts(self, i: int) -> int:
        """The time of point ``i`` in epoch ms, without parsing the points."""
        if i == 0:
            return int(self.text[1 : 1 + self.width])
        if i == -1:
            return int(self.text[self.text.rfind(b"[") + 1 :][: self.width])
        return int(self.tokens[2 * i])

    def index_at(self, ms: int, digits: bytes | None = None) -> int:
        """Index of the first point at or after ``ms`` (points are in time order);
        ``digits`` is ``str(ms).encode()`` when the caller has it."""
        if ms < 10 ** (self.width - 1):
            return 0
        if ms >= 10**self.width:
            return self._n
        return bisect_left(self.ts_tokens, digits or str(ms).encode())

    def release_tokens(self) -> None:
        """Drop the split tokens (a writer is done with them): a window's points then hold
        only their text until they are freed; the tokens are split again if asked for."""
        self._tokens = self._ts_tokens = None

    @property
    def span(self) -> tuple[bytes, bytes]:
        """The digits of the earliest and the latest timestamp, in any order of the points
        (found once: the reader's window check and the writers share them)."""
        if self._span is None:
            ts = self.ts_tokens
            self._span = (min(ts), max(ts))
        return self._span

    @property
    def ts_tokens(self) -> list[bytes]:
        """The timestamps' digits, ``tokens[0::2]`` (sliced once, shared by the writers)."""
        if self._ts_tokens is None:
            self._ts_tokens = self.tokens[0::2]
        return self._ts_tokens


@dataclass(slots=True)
class Series:
    """One series (one tag group) of one metric inside one window."""

    name: str
    tags: Mapping[str, str]
    points: Sequence[Point]


@dataclass(slots=True)
class SeriesBatch:
    """The series of one query window ``[start_ms, end_ms)``, in a deterministic order."""

    start_ms: int
    end_ms: int
    series: list[Series] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.series)


#: The columns every series file begins with, before one column per tag or label.
SERIES_COLUMNS = ("timestamp", "value", "name")
SERIES_COLUMNS_SET = frozenset(SERIES_COLUMNS)
#: What a tag column named as one of :data:`SERIES_COLUMNS` is called instead (Prometheus's
#: own name for a scraped label that clashes with a target's: ``exported_<label>``).
CLASH_PREFIX = "exported_"


@dataclass(frozen=True, slots=True)
class SeriesSchema:
    """Column layout of a metric-day: the metric name and its tag keys (sorted).

    ``reserved``: further names a tag column may not have, besides :data:`SERIES_COLUMNS`:
    the backend's folder keys that no file column repeats (Examon's Parquet folders are
    ``plugin=<p>/metric=<m>``: a tag ``metric`` would be read as the folder's value)."""

    name: str
    tag_keys: tuple[str, ...]
    reserved: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return (*SERIES_COLUMNS, *self.tag_columns)

    @property
    def tag_columns(self) -> tuple[str, ...]:
        """The column of each tag key, in order: the key itself, or, for a key that is one
        of :data:`SERIES_COLUMNS` (a Prometheus label ``name``: cAdvisor's container name,
        systemd's unit) or of ``reserved``, ``exported_<key>``, prefixed again while that is
        a key too; no two columns of a file have the same name."""
        return clash_free(self.tag_keys, SERIES_COLUMNS_SET.union(self.reserved))


def clash_free(keys: Sequence[str], reserved: Set[str]) -> tuple[str, ...]:
    """``keys`` as column names beside the ``reserved`` ones: a key that is reserved becomes
    ``exported_<key>`` (Prometheus's own name for a scraped label that clashes with a
    target's), prefixed again while that is a key or a column already."""
    if reserved.isdisjoint(keys):
        return tuple(keys)
    taken = {*reserved, *keys}
    out = []
    for key in keys:
        column = key
        if key in reserved:
            column = CLASH_PREFIX + key
            while column in taken:
                column = CLASH_PREFIX + column
            taken.add(column)
        out.append(column)
    return tuple(out)


SeriesStream = Iterator[SeriesBatch]
Record = Mapping[str, Any]


def block_slices(
    batch: SeriesBatch, origin_ms: int, block_ms: int
) -> tuple[list[Series], list[list[int]]]:
    """Cut each series of ``batch`` at the block edges that fall inside it.

    Blocks are ``block_ms`` long, counted from ``origin_ms``. Returns the non-empty series
    and, per series, the indices where each block starts, plus the end: the rows of block
    ``b`` of series ``s`` are ``points[cuts[s][b]:cuts[s][b + 1]]``. Writers emit blocks in
    time order and, within a block, series in batch order: an order that does not depend on
    how a day was cut into query windows (windows are whole blocks).
    """
    first_block = (batch.start_ms - origin_ms) // block_ms
    last_block = -((origin_ms - batch.end_ms) // block_ms)  # ceiling division
    edges = [origin_ms + i * block_ms for i in range(first_block + 1, last_block)]
    edge_digits = [(e, str(e).encode()) for e in edges]
    kept: list[Series] = []
    cuts: list[list[int]] = []
    for series in batch.series:
        points = series.points
        if not points:
            continue
        kept.append(series)
        if isinstance(points, RawPoints):
            cuts.append([0, *(points.index_at(e, d) for e, d in edge_digits), len(points)])
            continue
        ts = [p[0] for p in points]
        cuts.append([0, *(bisect_left(ts, e) for e in edges), len(ts)])
    return kept, cuts
