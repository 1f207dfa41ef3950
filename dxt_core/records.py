"""The record stream between sources and writers.

Sources yield :class:`SeriesBatch` objects, one per query window, in time order. A batch holds
the series of that window exactly as decoded from the backend (lists of ``[ts_ms, value]``
pairs), so no per-point object is ever built: writers format straight from these lists.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: One point as decoded from JSON: ``[epoch_ms, value]``; value is int, float or str.
Point = Sequence[Any]


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


@dataclass(frozen=True, slots=True)
class SeriesSchema:
    """Column layout of a metric-day: the metric name and its tag keys (sorted)."""

    name: str
    tag_keys: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return ("timestamp", "value", "name", *self.tag_keys)


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
    kept: list[Series] = []
    cuts: list[list[int]] = []
    for series in batch.series:
        points = series.points
        if not points:
            continue
        ts = [p[0] for p in points]
        kept.append(series)
        cuts.append([0, *(bisect_left(ts, e) for e in edges), len(ts)])
    return kept, cuts
