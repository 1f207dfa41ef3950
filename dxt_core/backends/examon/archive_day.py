"""One unit of work: archive one (metric, day). The single call that DAG tasks and the CLI make.

catalog entry -> day window -> source (schema, batches) -> writer -> atomic commit + manifest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.jobs import JOBS_COUNT_METHOD
from dxt_core.backends.examon.policy import QueryCounts
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.backends.examon.tags import TagCache
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.http import RequestStats
from dxt_core.prefetch import Background, prefetched
from dxt_core.reconcile import (
    Recount,
    SourceCount,
    check_source_count,
    hole_points,
    is_past,
)
from dxt_core.records import RawPoints, Record, SeriesBatch
from dxt_core.urls import redact_url
from dxt_core.windows import day_window, zone
from dxt_core.writers.base import RecordWriter, SeriesWriter, write_stream
from dxt_core.writers.csv_gzip import GzipCsvTableWriter, GzipCsvWriter
from dxt_core.writers.parquet import ParquetSeriesWriter, ParquetTableWriter

log = masking.logger("dxt_core.backends.examon.archive_day")

Format = Literal["csv", "parquet"]
FORMATS: tuple[str, ...] = ("csv", "parquet")


def examon_parts(entry: CatalogEntry, fmt: str = "csv") -> tuple[str, str]:
    """Archive directories of a metric: ``<plugin>/<metric>`` for CSV (dxt_examon's
    layout), Hive partitions ``plugin=<p>/metric=<m>`` for Parquet (M100 ExaData's)."""
    if fmt == "parquet":
        return (f"plugin={entry.plugin}", f"metric={entry.metric}")
    return (entry.plugin, entry.metric)


def tag_cache(archive: Archive, key: DayKey) -> TagCache:
    """Where the metric's tag keys are kept: ``<root>/.dxt-tag-keys/examon/<parts>.json`` on
    disk, ``<prefix>/.dxt/tag-keys/examon/<parts>.json`` in a bucket, out of the day
    directories (dataset readers and listings see only the days)."""
    *dirs, last = key.parts
    return TagCache(archive, (key.source, *dirs, f"{last}.json"))


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
    unit = _ExamonDay(source, entry, day, archive, fmt)
    report = archive_one_day(
        archive,
        unit.key,
        unit.write,
        manifest=unit.manifest(),
        stats=unit.stats,
        tz=source.tz,
        report_extra=unit.report_extra,
        day_zone=source.conn.time_zone,
    )
    log.debug("%s: query window [%s, %s)", unit.key, unit.window.start, unit.window.end)
    return report


class _ExamonDay:
    """One (metric, day): its key, window and manifest, and the ``write`` step of
    :func:`dxt_core.archive_day.archive_one_day` (series, or a job table's records, through
    the format's writer, then the source's count checked)."""

    def __init__(
        self, source: KairosDBSource, entry: CatalogEntry, day: dt.date, archive: Archive, fmt: str
    ) -> None:
        self.source, self.entry, self.archive, self.fmt = source, entry, archive, fmt
        self.key = DayKey("examon", examon_parts(entry, fmt), day)
        self.window = day_window(day, source.tz)
        self.stats = RequestStats()
        self.counts = QueryCounts()
        self.plugin = source.options.for_plugin(entry.plugin)
        self.ext = ParquetSeriesWriter.extension if fmt == "parquet" else GzipCsvWriter.extension
        # Filled by write(); archive_one_day copies it into the report after write() returns.
        self.report_extra: dict[str, Any] = {}
        # The source's count of the day, asked on its own thread while the data arrives.
        self._count: Background[SourceCount] | None = None
        self._count_stats = RequestStats()

    def manifest(self) -> dict[str, Any]:
        source, window = self.source, self.window
        doc: dict[str, Any] = {
            "source_url": source.conn.safe_url,
            "plugin": self.entry.plugin,
            "metric": self.entry.metric,
            "time_zone": source.conn.time_zone,
            "query_window": {
                "start": window.start.astimezone(source.tz).isoformat(),
                "end": window.end.astimezone(source.tz).isoformat(),
                "end_inclusive_ms": window.end_ms - 1,
                "time_zone": source.conn.time_zone,
            },
            "format": self.ext,
        }
        # what else chose the day's data, for a refill to ask the same (dxt coverage's
        # commands): the cluster tag filtered on, and the jobs service that was asked
        cluster = source.tag_filter(self.entry).get("cluster")
        if cluster:
            doc["cluster"] = cluster[0]
        if self.plugin.job_table:
            doc["job_table"] = True
            doc["jobs_url"] = redact_url(source.conn.jobs_url or source.conn.default_jobs_url())
        # the options file read (the Parquet value and column types it declares); "": the
        # shipped defaults, so that a refill of days made both ways can tell them apart
        src = source.options.source
        doc["plugin_options"] = str(Path(src).absolute()) if src else ""
        return doc

    def write(self, staging: Staging) -> None:
        try:
            if self.plugin.job_table:
                self._write_jobs(staging)
            else:
                self._write_series(staging)
        except BaseException:
            if self._count is not None:  # no thread of the unit outlives it
                self._count.wait()
            raise
        finally:
            dropped = self.counts.dropped_outside_window
            staging.manifest["dropped_outside_window"] = dropped
            self.report_extra["dropped_outside_window"] = dropped
        self._check_count(staging)

    def _write_jobs(self, staging: Staging) -> None:
        """The job table's records of the day: one answer of the jobs service, streamed as
        records, their fields' union as sorted columns."""
        records = self.source.fetch_jobs(self.entry.metric, self.window, self.stats, self.counts)
        staging.manifest["source_count"] = SourceCount(len(records), JOBS_COUNT_METHOD).as_dict()
        if not records:
            return
        columns = sorted({k for r in records for k in r})
        with staging.open(self.ext) as fh:
            writer: RecordWriter[Sequence[str], Sequence[Record]]
            if self.fmt == "parquet":
                writer = ParquetTableWriter(fh, dict(self.plugin.column_types), self.entry.key)
            else:
                writer = GzipCsvTableWriter(fh)
            res = write_stream(writer, columns, [records])
        staging.done(self.ext, res)

    def _write_series(self, staging: Staging) -> None:
        source, entry, window, stats = self.source, self.entry, self.window, self.stats
        cache = tag_cache(self.archive, self.key)
        schema, tag_note = source.schema_cached(entry, window, cache, stats)
        staging.manifest["tag_keys"] = tag_note
        if not schema.tag_keys:
            # No series ever (with this filter): empty, unless KairosDB has never heard of
            # the name at all, which is a catalog error, not an empty day.
            source.check_known(entry, stats)
            staging.manifest["source_count"] = SourceCount(
                0, "query/tags over all time: no series of this metric (with this filter)"
            ).as_dict()
            note = source.cluster_note(entry, stats)
            if note:
                log.warning("%s %s: empty: %s", entry.key, self.key.day, note)
                staging.manifest["cluster_note"] = note
            return
        with staging.open(self.ext) as fh:
            batches = self._counting_alongside(
                prefetched(source.iter_batches(entry, window, schema, stats, self.counts), depth=0)
            )
            writer: SeriesWriter
            if self.fmt == "parquet":
                typed = _typed(batches, entry, self.plugin.value_type)
                first = next(typed, None)
                writer = ParquetSeriesWriter(
                    fh,
                    block_ms=source.windows.min_s * 1000,
                    origin_ms=window.start_ms,
                    value_type=first[0] if first else "double",
                )
                rest = (batch for _, batch in typed)
                res = write_stream(writer, schema, [first[1], *rest] if first else rest)
            else:
                writer = GzipCsvWriter(fh, source.tz, origin_ms=window.start_ms)
                res = write_stream(writer, schema, batches)
        staging.done(self.ext, res)

    def _counting_alongside(self, batches: Iterator[SeriesBatch]) -> Iterator[SeriesBatch]:
        """``batches``; once the first has arrived, the source's count of the day is asked
        on its own thread (:meth:`_source_count`), so the server counts while the client
        formats the data instead of after it. KairosDB serves requests concurrently
        (kairosdb/kairosdb src/main/java/org/kairosdb/core/http/WebServer.java: a Jetty
        ``Server`` on an ``ExecutorThreadPool``, ``kairosdb.jetty.threads.min``/``max``),
        as the simulator does (a ``ThreadingHTTPServer``). The first window is not slowed
        by it."""
        for batch in batches:
            if self._count is None:
                self._count = Background(self._ask_count, "dxt-count")
            yield batch

    def _ask_count(self) -> SourceCount:
        return self.source.count_day(self.entry, self.window, self._count_stats)

    def _source_count(self) -> SourceCount:
        """The server's count of the day: the one asked alongside the data, else asked now."""
        if self._count is None:
            return self.source.count_day(self.entry, self.window, self.stats)
        try:
            return self._count.result()
        finally:
            got, into = self._count_stats, self.stats
            into.requests += got.requests
            into.retries += got.retries
            into.splits += got.splits
            into.bytes_received += got.bytes_received
            into.url_used = into.url_used or got.url_used

    def _check_count(self, staging: Staging) -> None:
        """The source's own count of the day in the manifest; a past day must match it."""
        written = [f.result.rows for f in staging.files.values() if f.result is not None]
        rows = written[0] if written else 0
        sc = staging.manifest.get("source_count")
        count = (
            SourceCount(int(sc["count"]), str(sc["method"]))
            if isinstance(sc, dict)
            else self._source_count()
        )
        staging.manifest["source_count"] = count.as_dict()
        holes = self.counts.holes
        if holes:
            staging.manifest["holes"] = holes
            self.report_extra["holes"] = len(holes)
        check_source_count(
            str(self.key),
            rows,
            count,
            past=is_past(self.window.end),
            holes=hole_points(holes),
            url=self.source.conn.safe_url,
        )


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
    archive: Archive,
) -> Callable[[tuple[str, ...], dt.date], SourceCount]:
    """(parts, day) -> KairosDB's count of the archived day, in the zone its manifest records
    (the connection's when it records none): the catalog's counts of a day asked together,
    once; a metric the server cannot count fails alone, a day it cannot answer fails once."""
    Day = tuple[dt.date, str]
    by_day: dict[Day, tuple[dict[str, SourceCount], dict[str, DxtError]]] = {}
    failed: dict[Day, DxtError] = {}

    def count(parts: tuple[str, ...], d: dt.date) -> SourceCount:
        doc = archive.read_manifest(DayKey("examon", parts, d)) or {}
        tz = str(doc.get("time_zone") or source.conn.time_zone)
        if (d, tz) in failed:
            raise failed[d, tz]
        if (d, tz) not in by_day:
            errors: dict[str, DxtError] = {}
            try:
                counts = source.count_day_many(entries, day_window(d, zone(tz)), errors=errors)
            except DxtError as exc:
                failed[d, tz] = exc
                raise
            by_day[d, tz] = (counts, errors)
        counts, errors = by_day[d, tz]
        key = by_parts[parts].key
        if key in errors:
            raise errors[key]
        return counts[key]

    return count


def examon_recount(
    source: KairosDBSource, entries: Iterable[CatalogEntry], archive: Archive, fmt: str = "csv"
) -> Recount:
    """The Examon reconcile role (``ExamonTasks.recount``, the DAG's ``reconcile_recent_days``
    task, ``DXT_EXAMON_RECONCILE_DAYS``, default 3): the catalog's units, one count query per
    plugin and day (:func:`day_counter`), and a refetch in ``fmt``. A grown day is replaced;
    the file it replaces is kept in ``.versions/``."""
    by_parts: dict[tuple[str, ...], CatalogEntry] = {examon_parts(e, fmt): e for e in entries}

    def fetch_again(parts: tuple[str, ...], d: dt.date) -> DayReport:
        return archive_examon_day(source, by_parts[parts], d, archive, fmt=fmt)

    count = day_counter(source, list(by_parts.values()), by_parts, archive)
    return Recount(archive, "examon", list(by_parts), count, fetch_again)
