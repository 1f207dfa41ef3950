"""What one collectd family is, as Elasticsearch queries (pytokio's): the families, the
query of a family over a window, the window cut into time slices, and ``@timestamp``.

The families pytokio archived, queried over a half-open window ``[start, end)``:

* ``disk``: ``plugin:disk``, ``plugin_instance:nvme*``, ``collectd_type`` disk_octets/disk_ops
* ``cpu``: ``plugin:cpu``, ``type_instance`` idle/user/system
* ``memory``: ``plugin:memory``
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Mapping
from typing import Any

from dxt_core.backends.collectd_es.connection import DEFAULT_HOST_PREFIX
from dxt_core.errors import ConfigError

FAMILIES: tuple[str, ...] = ("disk", "cpu", "memory")

#: ``_source`` fields the HDF5 conversion reads (the JSON Lines output keeps everything).
SOURCE_FIELDS: tuple[str, ...] = (
    "@timestamp",
    "hostname",
    "plugin",
    "plugin_instance",
    "collectd_type",
    "type_instance",
    "value",
    "read",
    "write",
)

Hit = dict[str, Any]
Page = list[Hit]


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ConfigError(f"unknown collectd family {family!r}: choose from {', '.join(FAMILIES)}")
    return family


def to_ms(t: dt.datetime) -> int:
    if t.tzinfo is None:
        raise ConfigError(f"naive datetime {t.isoformat()}: give a time zone (UTC if unsure)")
    return round(t.timestamp() * 1000)


def family_filters(family: str) -> list[dict[str, Any]]:
    """The query clauses selecting one family (pytokio's queries)."""
    check_family(family)
    if family == "disk":
        return [
            {"term": {"plugin": "disk"}},
            {"prefix": {"plugin_instance": "nvme"}},
            {"regexp": {"collectd_type": "disk_(octets|ops)"}},
        ]
    if family == "cpu":
        return [{"term": {"plugin": "cpu"}}, {"regexp": {"type_instance": "(idle|user|system)"}}]
    return [{"term": {"plugin": "memory"}}]


def family_query_ms(
    family: str, lo_ms: int, hi_ms: int, host_prefix: str = DEFAULT_HOST_PREFIX
) -> dict[str, Any]:
    """The query of one family over ``[lo_ms, hi_ms)`` (epoch milliseconds)."""
    must: list[dict[str, Any]] = [
        {"range": {"@timestamp": {"gte": lo_ms, "lt": hi_ms, "format": "epoch_millis"}}},
    ]
    if host_prefix:
        must.append({"prefix": {"hostname": host_prefix}})
    must.extend(family_filters(family))
    return {"constant_score": {"filter": {"bool": {"must": must}}}}


def family_query(
    family: str,
    start: dt.datetime,
    end: dt.datetime,
    host_prefix: str = DEFAULT_HOST_PREFIX,
    since_ms: int | None = None,
) -> dict[str, Any]:
    """The query of one family over ``[start, end)``; ``since_ms`` narrows the start (resume)."""
    lo = to_ms(start) if since_ms is None else max(to_ms(start), since_ms)
    return family_query_ms(family, lo, to_ms(end), host_prefix)


def time_slices(lo_ms: int, hi_ms: int, n: int, align_ms: int = 1) -> list[tuple[int, int]]:
    """``[lo_ms, hi_ms)`` cut into at most ``n`` consecutive ranges of about equal length,
    with inner bounds on multiples of ``align_ms`` after ``lo_ms`` (an HDF5 time step: a
    cell's documents then stay in one slice, so "the last document wins" means the latest).
    Fewer ranges when the window is too short to cut."""
    if n < 1 or hi_ms <= lo_ms:
        raise ConfigError(f"cannot cut [{lo_ms}, {hi_ms}) into {n} slices")
    align = max(1, align_ms)
    bounds = {lo_ms, hi_ms}
    for k in range(1, n):
        b = lo_ms + (hi_ms - lo_ms) * k // n
        b = lo_ms + (b - lo_ms) // align * align
        if lo_ms < b < hi_ms:
            bounds.add(b)
    s = sorted(bounds)
    return list(itertools.pairwise(s))


def family_of(source: Mapping[str, Any]) -> str | None:
    """Which family a ``_source`` belongs to (the query's filters, applied in Python).

    Used on saved hits (``--input``), which may hold documents of any kind.
    """
    plugin = source.get("plugin")
    if plugin == "disk":
        inst = source.get("plugin_instance")
        ok = isinstance(inst, str) and inst.startswith("nvme")
        if ok and source.get("collectd_type") in ("disk_octets", "disk_ops"):
            return "disk"
        return None
    if plugin == "cpu":
        return "cpu" if source.get("type_instance") in ("idle", "user", "system") else None
    if plugin == "memory":
        return "memory"
    return None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)


def parse_timestamp_ms(value: Any) -> int:
    """``@timestamp`` as epoch milliseconds: ISO 8601 strings (``Z`` or offset) or numbers
    (epoch milliseconds, Elasticsearch's default for numeric dates).

    A finer fraction is cut to the millisecond below, as Elasticsearch's ``date`` type
    stores it (millisecond resolution, truncated) and as the vectorised parser of saved
    pages (NumPy ``datetime64[ms]``) reads it: ``08:59:59.9996Z`` is
    ``08:59:59.999``, inside a window ending at 09:00, whichever parser reads it. Exact
    (integer arithmetic, no float rounding)."""
    if isinstance(value, bool):
        raise ValueError(f"bad @timestamp {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        t = dt.datetime.fromisoformat(value)
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.UTC)
        return (t - _EPOCH) // _MS
    raise ValueError(f"bad @timestamp {value!r}")
