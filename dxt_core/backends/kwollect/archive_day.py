"""Kwollect's daily archive: one (site, metric, day), the ``dxt_kwollect`` DAG's unit of work."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.kwollect.connection import DEFAULT_TIME_ZONE
from dxt_core.backends.kwollect.source import (
    KWOLLECT_COUNT_METHOD,
    G5kNode,
    KwollectClient,
    KwollectStats,
    check_component,
    parse_nodes,
)
from dxt_core.errors import ConfigError
from dxt_core.prefetch import prefetched
from dxt_core.reconcile import SourceCount
from dxt_core.windows import day_window, zone
from dxt_core.writers.jsonl_gzip import JsonlGzipWriter

log = masking.logger("dxt_core.backends.kwollect.archive_day")

__all__ = ["archive_kwollect_day"]


# --------------------------------------------------------------------------------------------
# Daily archive (the dxt_kwollect DAG's unit of work)
# --------------------------------------------------------------------------------------------


def archive_kwollect_day(
    client: KwollectClient,
    site: str,
    metric: str,
    nodes: Sequence[object],
    day: dt.date,
    archive: Archive,
    time_zone: str = DEFAULT_TIME_ZONE,
) -> DayReport:
    """Archive one (site, metric, day) into ``<root>/kwollect/<site>/<metric>/<day>.jsonl.gz``.

    The day is ``[local midnight, next local midnight)`` in ``time_zone``: the request ends one
    microsecond before the next midnight, so a point at exactly midnight belongs to the next
    day only. Points are written in the API's order (chronological); a rerun over unchanged
    data writes identical bytes.

    A node the reference API does not list is named in the manifest (``unlisted_nodes``)
    and the log, not refused: a typo, or a node retired since (its past days may hold data).

    Raises:
        ConfigError: a metric no catalogue knows (an "empty" day for ever); the message
            names it.
    """
    check_component(metric, "metric")
    parsed = parse_nodes(nodes, site)
    if not parsed:
        raise ConfigError(f"no nodes configured for site {site}")
    unlisted = _unlisted_nodes(client, parsed, f"kwollect {site}/{metric} {day}")
    client.check_metrics(site, parsed, [metric])  # the same for a metric
    tz = zone(time_zone)
    window = day_window(day, tz)
    start, stop = window.start, window.end - dt.timedelta(microseconds=1)
    key = DayKey("kwollect", (site, metric), day)
    stats = KwollectStats()
    manifest: dict[str, Any] = {
        **({"unlisted_nodes": unlisted} if unlisted else {}),
        "source_url": client.safe_url,
        "site": site,
        "metric": metric,
        "nodes": [n.name for n in sorted(parsed)],
        "time_zone": time_zone,
        "query_window": {
            "start": start.astimezone(tz).isoformat(),
            "end": window.end.astimezone(tz).isoformat(),
            "end_inclusive": stop.astimezone(tz).isoformat(),
        },
        "format": "jsonl.gz",
    }

    def write(staging: Staging) -> None:
        first: str | None = None
        last: str | None = None
        with staging.open("jsonl.gz") as fh:
            writer = JsonlGzipWriter(fh)
            writer.header([])
            for batch in prefetched(
                client.iter_batches(client.plan(site, parsed, [metric], start, stop), stats)
            ):
                points = [p for p in batch if p.get("metric_id") == metric]
                if points:
                    writer.rows(points)
                    first = first or points[0]["timestamp"]
                    last = points[-1]["timestamp"]
                # free this answer now, not when the next one arrives
                del points
                batch.clear()
            res = writer.close()
        # points the server sent outside the window asked for: dropped, never archived
        manifest["dropped_outside_window"] = stats.outside_window
        # no count API: the count is what these requests returned (see count_points)
        staging.manifest["source_count"] = SourceCount(res.rows, KWOLLECT_COUNT_METHOD).as_dict()
        res.extra.update(first_timestamp=first, last_timestamp=last)
        staging.done("jsonl.gz", res)

    return archive_one_day(archive, key, write, manifest=manifest, stats=stats, day_zone=time_zone)


def _unlisted_nodes(client: KwollectClient, nodes: list[G5kNode], what: str) -> list[str]:
    """The nodes the reference API does not list, each said in the log: a typo, or a node
    retired since the day (its past data may still be there), so named, not refused."""
    unlisted = client.node_problems(nodes)
    for problem in unlisted:
        log.warning("%s: %s (not listed by the reference API)", what, problem)
    return unlisted
