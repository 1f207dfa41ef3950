"""One unit of work: archive one (metric or selector, day). The call the CLI (and the DAG)
makes; and the reconcile of archived days against the server's own counts.

catalog entry -> day window -> the day's series and columns -> raw samples window by window
-> gzip CSV or Parquet -> the server's own count checked -> atomic commit + manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.columns import Columns
from dxt_core.backends.prometheus.layout import CsvDayWriter, ParquetDayWriter
from dxt_core.backends.prometheus.source import PrometheusSource, QueryCounts
from dxt_core.errors import ConfigError
from dxt_core.http import RequestStats
from dxt_core.reconcile import (
    Recount,
    SourceCount,
    check_source_count,
    is_past,
)
from dxt_core.records import SeriesSchema
from dxt_core.windows import Window, day_window, zone

FORMATS: tuple[str, ...] = ("csv", "parquet")
SOURCE = "prometheus"
#: The manifest's ``format`` of each output format.
EXTENSIONS = {"csv": CsvDayWriter.extension, "parquet": ParquetDayWriter.extension}


#: Rows per Parquet row group aimed at: the writer buffers one group (measured on three hours
#: of the benchmark's 10,000 series: 19 MB less peak RSS than a million rows, the file 2.8 %
#: larger).
ROW_GROUP_ROWS = 500_000


def row_group_ms(day_ms: int, samples: int, block_ms: int) -> int:
    """The span of a Parquet row group: about :data:`ROW_GROUP_ROWS` rows at the day's
    density (the server's count), whole blocks, at most an hour. The count is the same on
    every rerun and server, so the file's layout is too."""
    if samples <= 0:
        return 3_600_000
    span = day_ms * ROW_GROUP_ROWS // samples // block_ms * block_ms
    return max(block_ms, min(3_600_000 // block_ms * block_ms, span))


def prometheus_parts(entry: CatalogEntry) -> tuple[str]:
    return (entry.name,)


def _manifest(
    source: PrometheusSource, entry: CatalogEntry, window: Window, ext: str
) -> dict[str, Any]:
    """The manifest fields that say what was asked of which server."""
    tz = source.tz
    server = source.server()
    return {
        "source_url": source.conn.safe_url,
        "server": {"kind": server.kind, "version": server.version},
        "metric": entry.name,
        "selector": entry.selector,
        "time_zone": source.conn.time_zone,
        "query_window": {
            "start": window.start.astimezone(tz).isoformat(),
            "end": window.end.astimezone(tz).isoformat(),
            "end_inclusive_ms": window.end_ms - 1,
        },
        "format": ext,
    }


def archive_prometheus_day(
    source: PrometheusSource,
    entry: CatalogEntry,
    day: dt.date,
    archive: Archive,
    fmt: str = "csv",
) -> DayReport:
    """Fetch ``entry``'s raw samples of ``day`` and commit them to ``archive``.

    The day is ``[local midnight, next local midnight)`` in the connection's zone. The file
    holds every sample the server stores in it, checked against the server's own count
    (``count_over_time``, see :meth:`PrometheusSource.count`, recorded as the manifest's
    ``source_count``): for a day already over, rows that differ from it fail the day,
    naming both numbers, and nothing is committed (a day still running grows while it is
    read: it is not checked). Reruns over unchanged data write identical bytes.

    Raises:
        QueryRejected: the metric name is unknown to the server (closest names given).
        CountMismatch: a past day's rows differ from the server's count.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    key = DayKey(SOURCE, prometheus_parts(entry), day)
    window = day_window(day, source.tz)
    stats = RequestStats()
    counts = QueryCounts()
    report_extra: dict[str, Any] = {}

    def write(staging: Staging) -> None:
        schema, series = source.schema(entry.selector, window, stats)
        if not series:
            source.check_known(entry.selector, window)
        # counted first: the count sizes the first window (the point budget), and a day
        # whose samples change while it is read fails the comparison below
        labels: set[str] = set()
        expected, method = source.count(entry.selector, window, stats, series, labels)
        # the columns are the labels of the series with samples that day: /api/v1/series
        # lists more (whole blocks on Prometheus, UTC index days on VictoriaMetrics)
        schema = replace(schema, tag_keys=tuple(sorted(labels)))
        rows = 0
        if series:
            batches = source.iter_batches(
                entry.selector, window, schema, series, stats, counts, expected
            )
            rows = _write_file(staging, fmt, source, window, schema, batches, expected)
        sc = SourceCount(expected, method)
        staging.manifest["source_count"] = sc.as_dict()
        staging.manifest["dropped_outside_window"] = counts.dropped_outside_window
        report_extra["source_count"] = expected
        report_extra["dropped_outside_window"] = counts.dropped_outside_window
        if counts.stale_markers:  # VictoriaMetrics' staleness markers, which are not samples
            staging.manifest["stale_markers_left_out"] = counts.stale_markers
            report_extra["stale_markers_left_out"] = counts.stale_markers
        # the servers' range ends differ: a server taken for another kind counts otherwise
        how = "detected" if source.conn.flavor == "auto" else "named by the flavor setting"
        check_source_count(
            str(key),
            rows,
            sc,
            past=is_past(window.end),
            url=source.conn.safe_url,
            advice=f"the server was taken for {source.server().describe()} ({how}): if it is "
            "another kind, name it (--flavor, the connection's flavor extra); if its range "
            "selectors end otherwise, say so (--range-ends, the range_ends extra)",
        )

    manifest = _manifest(source, entry, window, EXTENSIONS[fmt])
    return archive_one_day(
        archive,
        key,
        write,
        manifest=manifest,
        stats=stats,
        tz=source.tz,
        report_extra=report_extra,
        day_zone=source.conn.time_zone,
    )


def _write_file(
    staging: Staging,
    fmt: str,
    source: PrometheusSource,
    window: Window,
    schema: SeriesSchema,
    batches: Iterable[Columns],
    expected: int,
) -> int:
    """The day's file from ``batches`` (their source asks for the next windows while one is
    written); its rows."""
    ext = EXTENSIONS[fmt]
    block_ms = source.windows.min_s * 1000
    with staging.open(ext) as fh:
        writer: CsvDayWriter | ParquetDayWriter
        if fmt == "parquet":
            span = row_group_ms(window.duration_ms, expected, block_ms)
            writer = ParquetDayWriter(fh, block_ms, window.start_ms, span)
        else:
            # rows in blocks of the window floor: every window completes its blocks
            writer = CsvDayWriter(fh, source.tz, block_ms, window.start_ms)
        writer.open(schema)
        try:
            for cols in batches:  # the next windows are asked for while one is written
                writer.write(cols)
        except BaseException:
            with contextlib.suppress(Exception):
                writer.close()
            raise
        res = writer.close()
    staging.done(ext, res)
    return res.rows


# -- the source's own counts of archived days ---------------------------------------------


def archived_entry(archive: Archive, parts: Sequence[str], day: dt.date) -> CatalogEntry:
    """The catalog entry an archived day was made from: its manifest's ``selector`` (a
    ``NAME = SELECTOR`` unit counts what it archived), else the unit's name."""
    doc = archive.read_manifest(DayKey(SOURCE, tuple(parts), day)) or {}
    selector = doc.get("selector")
    name = parts[0]
    return CatalogEntry(name, selector if isinstance(selector, str) and selector else name)


def archived_format(archive: Archive, parts: Sequence[str], day: dt.date, default: str) -> str:
    """The output format of an archived day (its manifest's ``format``), else ``default``."""
    doc = archive.read_manifest(DayKey(SOURCE, tuple(parts), day)) or {}
    by_ext = {ext: fmt for fmt, ext in EXTENSIONS.items()}
    return by_ext.get(str(doc.get("format")), default)


def day_counter(
    source: PrometheusSource, archive: Archive
) -> Callable[[tuple[str, ...], dt.date], SourceCount]:
    """(parts, day) -> the server's count of the archived day: ``count_over_time`` of the
    selector the manifest records, over the day in the zone it records (counts only: one
    query per metric-day, split only if the server refuses it)."""

    def count(parts: tuple[str, ...], d: dt.date) -> SourceCount:
        doc = archive.read_manifest(DayKey(SOURCE, parts, d)) or {}
        entry = archived_entry(archive, parts, d)
        tz = zone(str(doc.get("time_zone") or source.conn.time_zone))
        n, method = source.count(entry.selector, day_window(d, tz), RequestStats(), tz=tz)
        return SourceCount(n, method)

    return count


def prometheus_recount(
    source: PrometheusSource, units: Iterable[Sequence[str]], archive: Archive, fmt: str = "csv"
) -> Recount:
    """The reconcile role (``PrometheusTasks.recount``, the DAG's ``reconcile_recent_days``
    task, ``DXT_PROMETHEUS_RECONCILE_DAYS``, default 3): ``count_over_time`` of each unit's
    day over the selector and zone its manifest records. A grown day is archived again from
    that selector and in the format its manifest records (``fmt`` when it records none); the
    archive only gains rows, the file it replaces is kept in ``.versions/``."""

    def fetch_again(parts: tuple[str, ...], d: dt.date) -> DayReport:
        entry = archived_entry(archive, parts, d)
        return archive_prometheus_day(
            source, entry, d, archive, fmt=archived_format(archive, parts, d, fmt)
        )

    count = day_counter(source, archive)
    return Recount(archive, SOURCE, [tuple(p) for p in units], count, fetch_again)


def archived_units(archive: Archive) -> list[tuple[str, ...]]:
    """The units an archive holds (its ``prometheus/<name>/`` folders, local or on S3)."""
    return [(n,) for n in archive.subdirectories(SOURCE)]
