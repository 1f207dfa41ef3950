"""One unit of work: archive one (metric, day). The single call that DAG tasks and the CLI make.

catalog entry -> day window -> source (schema, batches) -> writer -> atomic commit + manifest.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dxt_core.archive import Archive, DayKey, aborts_unfinished_write
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.errors import ConfigError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.windows import day_window, from_ms
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


@dataclass
class DayReport:
    """What archiving one unit did; printed by the CLI and logged by Airflow tasks."""

    key: DayKey
    status: Literal["archived", "empty"]
    rows: int
    bytes: int
    path: Path | None
    manifest: Path
    seconds: float
    stats: RequestStats = field(default_factory=RequestStats)

    def summary(self) -> str:
        what = "/".join((self.key.source, *self.key.parts))
        s = self.stats
        return (
            f"{what} {self.key.day}: {self.status}, {self.rows} rows, {self.bytes} bytes, "
            f"{self.seconds:.2f} s, {s.requests} requests, {s.retries} retries, "
            f"{s.splits} splits"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.key.source,
            "parts": list(self.key.parts),
            "day": self.key.day.isoformat(),
            "status": self.status,
            "rows": self.rows,
            "bytes": self.bytes,
            "path": str(self.path) if self.path else None,
            "seconds": round(self.seconds, 3),
            **self.stats.as_dict(),
        }


@aborts_unfinished_write
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
    t0 = time.perf_counter()
    key = DayKey("examon", examon_parts(entry, fmt), day)
    window = day_window(day, source.tz)
    stats = RequestStats()
    archive.begin(key)
    ext = ParquetSeriesWriter.extension if fmt == "parquet" else GzipCsvWriter.extension
    target = archive.data_path(key, ext)
    query_doc = {
        "start": window.start.astimezone(source.tz).isoformat(),
        "end": window.end.astimezone(source.tz).isoformat(),
        "end_inclusive_ms": window.end_ms - 1,
        "time_zone": source.conn.time_zone,
    }
    base: dict[str, Any] = {
        "source_url": source.conn.safe_url,
        "plugin": entry.plugin,
        "metric": entry.metric,
        "time_zone": source.conn.time_zone,
        "query_window": query_doc,
        "format": ext,
    }
    res = None
    if source.options.for_plugin(entry.plugin).job_table:
        records = source.fetch_jobs(entry.metric, window, stats)
        if records:
            with archive.open_data(key, ext) as fh:
                if fmt == "parquet":
                    res = write_records_parquet(fh, records)
                else:
                    res = GzipCsvTableWriter(fh).write_all(records)
        base["job_table"] = True
    else:
        schema = source.schema(entry, window, stats)
        if schema.tag_keys:
            with archive.open_data(key, ext) as fh:
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
            if res.rows == 0:
                archive.remove_data(key, ext)
                res = None
    seconds = time.perf_counter() - t0
    stats.seconds = seconds
    base["requests"] = stats.as_dict()
    if res is None or res.rows == 0:
        archive.remove_data(key, ext)
        manifest = archive.commit_manifest(
            key, {**base, "status": "empty", "file": None, "rows": 0, "bytes": 0}
        )
        report = DayReport(key, "empty", 0, 0, None, manifest, seconds, stats)
    else:
        tz = source.tz
        manifest = archive.commit_manifest(
            key,
            {
                **base,
                "status": "archived",
                "file": target.name,
                "rows": res.rows,
                "columns": res.columns,
                "bytes": res.bytes,
                "sha256": res.sha256,
                "first_timestamp": from_ms(res.first_ms, tz).isoformat()
                if res.first_ms is not None
                else None,
                "last_timestamp": from_ms(res.last_ms, tz).isoformat()
                if res.last_ms is not None
                else None,
                **res.extra,
            },
        )
        report = DayReport(key, "archived", res.rows, res.bytes, target, manifest, seconds, stats)
    log.info(
        "%s window [%s, %s) -> %s",
        report.summary(),
        query_doc["start"],
        query_doc["end"],
        report.path or "empty (manifest only)",
    )
    return report
