"""One unit of work: archive one (metric, day). The single call that DAG tasks and the CLI make.

catalog entry -> day window -> source (schema, batches) -> writer -> atomic commit + manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.source import TAG_CACHE_DIR, KairosDBSource, QueryCounts
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.reconcile import (
    RecentReport,
    SourceCount,
    check_source_count,
    hole_points,
    is_past,
    reconcile_recent,
)
from dxt_core.records import RawPoints, SeriesBatch
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


def tag_cache_path(archive: Archive, key: DayKey) -> Path:
    """Where the metric's tag keys are kept: ``<root>/.dxt-tag-keys/examon/<parts>.json``,
    out of the day directories (dataset readers and listings see only the days)."""
    *dirs, last = key.parts
    return archive.root.joinpath(TAG_CACHE_DIR, key.source, *dirs, f"{last}.json")


def archive_examon_day(
    source: KairosDBSource,
    entry: CatalogEntry,
    day: dt.date,
    archive: Archive,
    fmt: str = "csv",
) -> DayReport:
    """Fetch ``entry`` for ``day`` and commit it to ``archive``; returns what was done.

    Rerunning over unchanged data rewrites byte-identical data files. Points (or jobs) the
    server sent outside the day are dropped and counted: ``dropped_outside_window`` in the
    manifest and in the report's ``extra``.
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
    plugin = source.options.for_plugin(entry.plugin)
    if plugin.job_table:
        manifest["job_table"] = True
    counts = QueryCounts()
    # Filled by write(); archive_one_day copies it into the report after write() returns.
    report_extra: dict[str, Any] = {}

    def write(staging: Staging) -> None:
        try:
            _write(staging)
        finally:
            staging.manifest["dropped_outside_window"] = counts.dropped_outside_window
            report_extra["dropped_outside_window"] = counts.dropped_outside_window
        _check_count(staging)

    def _check_count(staging: Staging) -> None:
        """The source's own count of the day in the manifest; a past day must match it."""
        written = [f.result.rows for f in staging.files.values() if f.result is not None]
        rows = written[0] if written else 0
        sc = staging.manifest.get("source_count")
        count = (
            SourceCount(int(sc["count"]), str(sc["method"]))
            if isinstance(sc, dict)
            else source.count_day(entry, window, stats)
        )
        staging.manifest["source_count"] = count.as_dict()
        if counts.holes:
            staging.manifest["holes"] = counts.holes
            report_extra["holes"] = len(counts.holes)
        check_source_count(
            str(key),
            rows,
            count,
            past=is_past(window.end),
            holes=hole_points(counts.holes),
            url=source.conn.safe_url,
        )

    def _write(staging: Staging) -> None:
        if plugin.job_table:
            records = source.fetch_jobs(entry.metric, window, stats, counts)
            staging.manifest["source_count"] = SourceCount(
                len(records), "Examon jobs query (the jobs service has no count: the records)"
            ).as_dict()
            if records:
                with staging.open(ext) as fh:
                    if fmt == "parquet":
                        res = write_records_parquet(
                            fh, records, dict(plugin.column_types), table=entry.key
                        )
                    else:
                        res = GzipCsvTableWriter(fh).write_all(records)
                staging.done(ext, res)
            return
        schema, tag_note = source.schema_cached(entry, window, tag_cache_path(archive, key), stats)
        staging.manifest["tag_keys"] = tag_note
        if not schema.tag_keys:
            # No series ever (with this filter): empty, unless KairosDB has never heard of
            # the name at all, which is a catalog error, not an empty day.
            source.check_known(entry, stats)
            staging.manifest["source_count"] = SourceCount(
                0, "query/tags over all time: no series of this metric (with this filter)"
            ).as_dict()
            return
        with staging.open(ext) as fh:
            block_ms = source.windows.min_s * 1000
            batches = prefetched(source.iter_batches(entry, window, schema, stats, counts))
            writer: SeriesWriter
            if fmt == "parquet":
                typed = _typed(batches, entry, plugin.value_type)
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
                    # Finish the Parquet file in the temporary file (which the failed day
                    # discards) rather than leave pyarrow's writer open.
                    with contextlib.suppress(Exception):
                        writer.close()
                    raise
            else:
                writer = GzipCsvWriter(fh, source.tz, origin_ms=window.start_ms)
                writer.open(schema)
                for batch in batches:
                    writer.write_batch(batch)
            res = writer.close()
        staging.done(ext, res)

    report = archive_one_day(
        archive,
        key,
        write,
        manifest=manifest,
        stats=stats,
        tz=source.tz,
        report_extra=report_extra,
        day_zone=source.conn.time_zone,
    )
    log.debug("%s: query window [%s, %s)", key, query_doc["start"], query_doc["end"])
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


def day_counter(
    source: KairosDBSource,
    entries: list[CatalogEntry],
    by_parts: dict[tuple[str, ...], CatalogEntry],
) -> Callable[[tuple[str, ...], dt.date], SourceCount]:
    """(parts, day) -> KairosDB's count: the catalog's counts of a day asked together, once;
    a metric the server cannot count fails alone, a day it cannot answer fails once."""
    by_day: dict[dt.date, tuple[dict[str, SourceCount], dict[str, DxtError]]] = {}
    failed: dict[dt.date, DxtError] = {}

    def count(parts: tuple[str, ...], d: dt.date) -> SourceCount:
        if d in failed:
            raise failed[d]
        if d not in by_day:
            errors: dict[str, DxtError] = {}
            try:
                counts = source.count_day_many(entries, day_window(d, source.tz), errors=errors)
            except DxtError as exc:
                failed[d] = exc
                raise
            by_day[d] = (counts, errors)
        counts, errors = by_day[d]
        key = by_parts[parts].key
        if key in errors:
            raise errors[key]
        return counts[key]

    return count


def reconcile_examon_recent(
    source: KairosDBSource,
    entries: Iterable[CatalogEntry],
    day: dt.date,
    archive: Archive,
    n_days: int,
    fmt: str = "csv",
    *,
    refetch: bool = True,
    record_kept: bool = True,
) -> RecentReport:
    """Reconcile the ``n_days`` days before ``day`` (counts only) and refetch the grown ones.

    The Examon reconcile role (``ExamonTasks.reconcile``, the DAG's ``reconcile_recent_days``
    task) calls this (``DXT_EXAMON_RECONCILE_DAYS``, default 3). A grown day is replaced; the
    file it replaces is kept in ``.versions/``.
    """
    by_parts: dict[tuple[str, ...], CatalogEntry] = {examon_parts(e, fmt): e for e in entries}

    count = day_counter(source, list(by_parts.values()), by_parts)

    def fetch_again(parts: tuple[str, ...], d: dt.date) -> DayReport:
        return archive_examon_day(source, by_parts[parts], d, archive, fmt=fmt)

    return reconcile_recent(
        archive,
        "examon",
        list(by_parts),
        day,
        n_days,
        count,
        fetch_again if refetch else None,
        record_kept=record_kept,
    )
