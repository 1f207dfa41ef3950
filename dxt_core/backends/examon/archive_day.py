"""One unit of work: archive one (metric, day). The single call that DAG tasks and the CLI make.

catalog entry -> day window -> source (schema, batches) -> writer -> atomic commit + manifest.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.errors import ConfigError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.windows import day_window
from dxt_core.writers.base import SeriesWriter
from dxt_core.writers.csv_gzip import GzipCsvTableWriter, GzipCsvWriter
from dxt_core.writers.parquet import ParquetSeriesWriter, write_records_parquet

log = logging.getLogger("dxt_core.backends.examon.archive_day")

Format = Literal["csv", "parquet"]
FORMATS: tuple[str, ...] = ("csv", "parquet")


def examon_parts(entry: CatalogEntry, fmt: str = "csv") -> tuple[str, str]:
    """Archive directories of a metric: ``<plugin>/<metric>`` for CSV (dxt_examon's
    layout), Hive partitions ``plugin=<p>/metric=<m>`` for Parquet (M100 ExaData's)."""
    if fmt == "parquet":
        return (f"plugin={entry.plugin}", f"metric={entry.metric}")
    return (entry.plugin, entry.metric)


def archive_examon_day(
    source: KairosDBSource,
    entry: CatalogEntry,
    day: dt.date,
    archive: Archive,
    fmt: str = "csv",
) -> DayReport:
    """Fetch ``entry`` for ``day`` and commit it to ``archive``; returns what was done.

    Rerunning over unchanged data rewrites byte-identical data files.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    key = DayKey("examon", examon_parts(entry, fmt), day)
    window = day_window(day, source.tz)
    stats = RequestStats()
    ext = ParquetSeriesWriter.extension if fmt == "parquet" else GzipCsvWriter.extension
    query_doc = {
        "start": window.start.astimezone(source.tz).isoformat(),
        "end": window.end.astimezone(source.tz).isoformat(),
        "end_inclusive_ms": window.end_ms - 1,
        "time_zone": source.conn.time_zone,
    }
    manifest: dict[str, Any] = {
        "source_url": source.conn.safe_url,
        "plugin": entry.plugin,
        "metric": entry.metric,
        "time_zone": source.conn.time_zone,
        "query_window": query_doc,
        "format": ext,
    }
    job_table = source.options.for_plugin(entry.plugin).job_table
    if job_table:
        manifest["job_table"] = True

    def write(staging: Staging) -> None:
        if job_table:
            records = source.fetch_jobs(entry.metric, window, stats)
            if records:
                with staging.open(ext) as fh:
                    if fmt == "parquet":
                        res = write_records_parquet(fh, records)
                    else:
                        res = GzipCsvTableWriter(fh).write_all(records)
                staging.done(ext, res)
            return
        schema = source.schema(entry, window, stats)
        if not schema.tag_keys:
            return
        with staging.open(ext) as fh:
            block_ms = source.windows.min_s * 1000
            writer: SeriesWriter
            if fmt == "parquet":
                writer = ParquetSeriesWriter(fh, block_ms=block_ms, origin_ms=window.start_ms)
            else:
                writer = GzipCsvWriter(fh, source.tz, origin_ms=window.start_ms)
            writer.open(schema)
            for batch in prefetched(source.iter_batches(entry, window, schema, stats)):
                writer.write_batch(batch)
            res = writer.close()
        staging.done(ext, res)

    report = archive_one_day(archive, key, write, manifest=manifest, stats=stats, tz=source.tz)
    log.debug("%s: query window [%s, %s)", key, query_doc["start"], query_doc["end"])
    return report
