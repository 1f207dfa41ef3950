"""The record stream between sources and writers.

Sources yield :class:`SeriesBatch` objects, one per query window, in time order. A batch holds
the series of that window exactly as decoded from the backend (lists of ``[ts_ms, value]``
pairs), so no per-point object is ever built: writers format straight from these lists.
"""

from __future__ import annotations

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
