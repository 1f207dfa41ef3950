"""One unit of work: archive one (metric, day). The single call that DAG tasks and the CLI make.

catalog entry -> day window -> source (schema, batches) -> writer -> atomic commit + manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dxt_core.archive import Archive, DayKey, atomic_file
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.source import KairosDBSource, QueryCounts
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.records import RawPoints, SeriesBatch
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
    #: Points (or jobs) the server sent outside the queried window, not archived.
    dropped_outside_window: int = 0

    def summary(self) -> str:
        what = "/".join((self.key.source, *self.key.parts))
        s = self.stats
        dropped = (
            f", {self.dropped_outside_window} dropped outside the window"
            if self.dropped_outside_window
            else ""
        )
        return (
            f"{what} {self.key.day}: {self.status}, {self.rows} rows, {self.bytes} bytes, "
            f"{self.seconds:.2f} s, {s.requests} requests, {s.retries} retries, "
            f"{s.splits} splits{dropped}"
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
            "dropped_outside_window": self.dropped_outside_window,
        }


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
    counts = QueryCounts()
    if source.options.for_plugin(entry.plugin).job_table:
        records = source.fetch_jobs(entry.metric, window, stats, counts)
        if records:
            with atomic_file(target) as fh:
                if fmt == "parquet":
                    res = write_records_parquet(fh, records)
                else:
                    res = GzipCsvTableWriter(fh).write_all(records)
        base["job_table"] = True
    else:
        schema = source.schema(entry, window, stats)
        if not schema.tag_keys:
            # No series ever (with this filter): empty, unless KairosDB has never heard of
            # the name at all, which is a catalog error, not an empty day.
            source.check_known(entry, stats)
        else:
            declared = source.options.for_plugin(entry.plugin).value_type
            with atomic_file(target) as fh:
                block_ms = source.windows.min_s * 1000
                batches = prefetched(source.iter_batches(entry, window, schema, stats, counts))
                writer: SeriesWriter
                if fmt == "parquet":
                    typed = _typed(batches, entry, declared)
                    first = next(typed, None)
                    writer = ParquetSeriesWriter(
                        fh,
                        block_ms=block_ms,
                        origin_ms=window.start_ms,
                        value_type=first[0] if first else "double",
                    )
                    writer.open(schema)
                    try:
                        if first is not None:
                            writer.write_batch(first[1])
                        for _, batch in typed:
                            writer.write_batch(batch)
                    except BaseException:
                        # Finish the Parquet file in the temporary file (which the failed
                        # commit deletes) rather than leave pyarrow's writer open.
                        with contextlib.suppress(Exception):
                            writer.close()
                        raise
                else:
                    writer = GzipCsvWriter(fh, source.tz, origin_ms=window.start_ms)
                    writer.open(schema)
                    for batch in batches:
                        writer.write_batch(batch)
                res = writer.close()
            if res.rows == 0:
                target.unlink()
                res = None
    seconds = time.perf_counter() - t0
    stats.seconds = seconds
    base["requests"] = stats.as_dict()
    base["dropped_outside_window"] = counts.dropped_outside_window
    if res is None or res.rows == 0:
        archive.remove_data(key, ext)
        manifest = archive.commit_manifest(
            key, {**base, "status": "empty", "file": None, "rows": 0, "bytes": 0}
        )
        report = DayReport(
            key, "empty", 0, 0, None, manifest, seconds, stats, counts.dropped_outside_window
        )
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
        report = DayReport(
            key,
            "archived",
            res.rows,
            res.bytes,
            target,
            manifest,
            seconds,
            stats,
            counts.dropped_outside_window,
        )
    log.info(
        "%s window [%s, %s) -> %s",
        report.summary(),
        query_doc["start"],
        query_doc["end"],
        report.path or "empty (manifest only)",
    )
    return report


def _typed(
    batches: Iterable[SeriesBatch], entry: CatalogEntry, declared: str | None
) -> Iterator[tuple[str, SeriesBatch]]:
    """The Parquet value type of ``entry`` with each batch, checked against every batch.

    The rule (docs/examon.md), stable across windows and days: the type the plugin options
    declare, else ``string`` for a metric whose series hold text and ``double`` for every
    numeric one. KairosDB prints a whole double without ``.0`` (org.json), so a numeric
    series mixes ``24`` and ``24.5``: the digits alone cannot tell a long from a double.
    """
    value_type = declared
    for batch in batches:
        if not batch.series:
            if value_type is not None:
                yield value_type, batch
            continue
        has_text = any(
            not isinstance(s.points, RawPoints) and any(isinstance(p[1], str) for p in s.points)
            for s in batch.series
        )
        if value_type is None:
            value_type = "string" if has_text else "double"
        elif has_text and value_type != "string":
            raise ArchiveError(
                f"{entry.key}: text values in [{batch.start_ms}, {batch.end_ms}) ms, but the "
                f'Parquet value column is {value_type}; declare value_type = "string" for '
                f"[plugins.{entry.plugin}] in the plugin options, or archive as CSV"
            )
        if value_type == "int64":
            for s in batch.series:
                pts = s.points
                whole = (
                    pts.all_integers()
                    if isinstance(pts, RawPoints)
                    else all(type(p[1]) is int for p in pts)
                )
                if not whole:
                    raise ArchiveError(
                        f"{entry.key}: a non-integer value in [{batch.start_ms}, "
                        f"{batch.end_ms}) ms (series {dict(s.tags)}), but [plugins."
                        f'{entry.plugin}] declares value_type = "int64"; declare '
                        '"double" (or remove the declaration)'
                    )
        yield value_type, batch
