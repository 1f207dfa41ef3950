"""One unit of work: archive one (metric or selector, day). The call the CLI (and the DAG)
makes.

catalog entry -> day window -> the day's series and columns -> raw samples window by window
-> gzip CSV or Parquet -> the server's own count checked -> atomic commit + manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.source import PrometheusSource, QueryCounts
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.records import SeriesSchema
from dxt_core.windows import day_window
from dxt_core.writers.base import SeriesWriter
from dxt_core.writers.csv_gzip import GzipCsvWriter
from dxt_core.writers.parquet import ParquetSeriesWriter

FORMATS: tuple[str, ...] = ("csv", "parquet")
SOURCE = "prometheus"


#: Rows per Parquet row group aimed at: the writer buffers one group.
ROW_GROUP_ROWS = 1_000_000


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
    (``count_over_time``, see :meth:`PrometheusSource.count`): a day whose rows differ from
    it fails, naming both numbers, and nothing is committed. Reruns over unchanged data
    write identical bytes.

    Raises:
        QueryRejected: the metric name is unknown to the server (closest names given).
        ArchiveError: rows written differ from the server's count.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    key = DayKey(SOURCE, prometheus_parts(entry), day)
    tz = source.tz
    window = day_window(day, tz)
    stats = RequestStats()
    counts = QueryCounts()
    ext = ParquetSeriesWriter.extension if fmt == "parquet" else GzipCsvWriter.extension
    server = source.server()
    manifest: dict[str, Any] = {
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
    report_extra: dict[str, Any] = {}

    def write(staging: Staging) -> None:
        schema, series = source.schema(entry.selector, window, stats)
        if not series:
            source.check_known(entry.selector, window)
        # counted first: the count sizes the first window (the point budget), and a day
        # whose samples change while it is read fails the comparison below
        expected, method = source.count(entry.selector, window, stats, series)
        rows = _write_file(staging, schema, series, expected) if series else 0
        staging.manifest["source_count"] = {"count": expected, "method": method}
        staging.manifest["dropped_outside_window"] = counts.dropped_outside_window
        report_extra["source_count"] = expected
        report_extra["dropped_outside_window"] = counts.dropped_outside_window
        if rows != expected:
            raise ArchiveError(
                f"{entry.name} {day}: wrote {rows} rows but the server counts {expected} "
                f"samples in the day ({method}); nothing was committed. Samples still "
                "arriving? Rerun after the day has settled"
            )

    def _write_file(
        staging: Staging, schema: SeriesSchema, series: list[dict[str, str]], expected: int
    ) -> int:
        with staging.open(ext) as fh:
            batches = prefetched(
                source.iter_batches(entry.selector, window, schema, series, stats, counts, expected)
            )
            writer: SeriesWriter
            block_ms = source.windows.min_s * 1000
            if fmt == "parquet":
                writer = ParquetSeriesWriter(
                    fh,
                    block_ms=block_ms,
                    origin_ms=window.start_ms,
                    value_type="double",
                    row_group_ms=row_group_ms(window.duration_ms, expected, block_ms),
                )
            else:
                # rows in blocks of the window floor: every window completes its blocks, so
                # the writer holds one window's rows, not half an hour of every series'
                writer = GzipCsvWriter(fh, tz, block_ms=block_ms, origin_ms=window.start_ms)
            writer.open(schema)
            try:
                for batch in batches:
                    writer.write_batch(batch)
            except BaseException:
                with contextlib.suppress(Exception):
                    writer.close()
                raise
            res = writer.close()
        staging.done(ext, res)
        return res.rows

    return archive_one_day(
        archive, key, write, manifest=manifest, stats=stats, tz=tz, report_extra=report_extra
    )
