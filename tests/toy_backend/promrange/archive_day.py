"""One (metric, UTC day) through the archive-one-day template, as gzip CSV."""

from __future__ import annotations

import datetime as dt

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.http import RequestStats
from dxt_core.windows import day_window
from dxt_core.writers.csv_gzip import GzipCsvTableWriter
from tests.toy_backend.promrange.source import PromRangeSource


def archive_promrange_day(
    source: PromRangeSource, metric: str, day: dt.date, archive: Archive
) -> DayReport:
    key = DayKey("promrange", (metric,), day)
    window = day_window(day, "UTC")
    stats = RequestStats()

    def write(staging: Staging) -> None:
        records = list(source.records(metric, window, stats))
        if records:
            with staging.open("csv.gz") as fh:
                staging.done("csv.gz", GzipCsvTableWriter(fh).write_all(records))

    manifest = {
        "source_url": source.conn.url,
        "metric": metric,
        "query_window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "step_s": source.conn.step_s,
    }
    return archive_one_day(archive, key, write, manifest=manifest, stats=stats)
