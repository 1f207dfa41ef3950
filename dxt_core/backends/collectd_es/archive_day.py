"""collectd-in-Elasticsearch exports: one window to files (CLI), one (family, day) to the
archive (Airflow). Pages flow once from the source into every requested writer.

source (PIT/scroll pages, or a saved pytokio JSON) -> GzipJsonlHitsWriter and/or
TokioTimeSeriesBuilder -> atomic files (+ manifest in the archive).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dxt_core.archive import Archive, DayKey, atomic_file
from dxt_core.archive_day import DayReport, Staging, archive_one_day
from dxt_core.backends.collectd_es.columnar_hits import COLUMN_SOURCE_FIELDS
from dxt_core.backends.collectd_es.source import (
    FAMILIES,
    CollectdEsSource,
    ExportStats,
    Page,
    check_family,
    iter_saved_pages,
    select_saved_hits,
)
from dxt_core.backends.collectd_es.tokio_hdf5 import (
    HdfWriteResult,
    TimeGrid,
    TokioTimeSeriesBuilder,
    write_tokio_hdf5,
)
from dxt_core.errors import ConfigError
from dxt_core.writers.base import WriteResult
from dxt_core.writers.jsonl_gzip import GzipJsonlHitsWriter

log = logging.getLogger("dxt_core.backends.collectd_es.archive_day")

SOURCE_NAME = "collectd_es"
OUTPUT_FORMATS: tuple[str, ...] = ("jsonl", "hdf5")
EXTENSIONS = {"jsonl": "jsonl.gz", "hdf5": "hdf5"}

#: (family, start, end, full_source) -> pages
PageProvider = Callable[[str, dt.datetime, dt.datetime, bool], Iterator[Page]]


def es_pages(source: CollectdEsSource, stats: ExportStats) -> PageProvider:
    def provide(family: str, start: dt.datetime, end: dt.datetime, full: bool) -> Iterator[Page]:
        if full:  # the JSON Lines output keeps whole hits, as dicts
            return source.iter_pages(family, start, end, stats=stats)
        # the columns need no @timestamp: sort[0] carries it (fewer bytes to decode)
        return source.iter_pages(
            family, start, end, fields=COLUMN_SOURCE_FIELDS, stats=stats, columnar=True
        )

    return provide


def saved_pages(pages: list[Page] | str | Path, host_prefix: str, where: str) -> PageProvider:
    """Saved hits as a page source: a list of pages, or a file read one page at a time
    (once per family asked for), so memory holds a page, not the file."""

    def provide(family: str, start: dt.datetime, end: dt.datetime, full: bool) -> Iterator[Page]:
        source = iter_saved_pages(pages) if isinstance(pages, str | Path) else pages
        return select_saved_hits(source, family, start, end, host_prefix, where=where)

    return provide


@dataclass
class ExportReport:
    """What one export wrote."""

    families: list[str]
    start: dt.datetime
    end: dt.datetime
    hits: int = 0
    jsonl: WriteResult | None = None
    hdf5: HdfWriteResult | None = None
    build: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        parts = [
            f"{','.join(self.families)} [{self.start.isoformat()}, {self.end.isoformat()}): "
            f"{self.hits} documents in {self.seconds:.2f} s"
        ]
        if self.jsonl is not None:
            parts.append(f"jsonl {self.jsonl.rows} lines {self.jsonl.bytes} bytes")
        if self.hdf5 is not None:
            b = self.build
            parts.append(
                f"hdf5 {self.hdf5.bytes} bytes ({b.get('inserted')} inserted, "
                f"{b.get('out_of_range')} out of range, {b.get('ignored')} ignored)"
            )
        return "; ".join(parts)


def export_window(
    provider: PageProvider,
    families: Sequence[str],
    start: dt.datetime,
    end: dt.datetime,
    *,
    jsonl_path: Path | None = None,
    hdf5_path: Path | None = None,
    timestep: int = 10,
    num_nodes: int = 288,
    ssds_per_node: int = 4,
    init_start: dt.datetime | None = None,
    init_end: dt.datetime | None = None,
    replace_hdf5: bool = False,
) -> ExportReport:
    """Export ``families`` over ``[start, end)`` into the requested files (atomically)."""
    fams = [check_family(f) for f in families]
    if not fams:
        raise ConfigError(f"no family chosen: pick from {', '.join(FAMILIES)}")
    if jsonl_path is None and hdf5_path is None:
        raise ConfigError("nothing to write: give a JSON Lines and/or an HDF5 output path")
    t0 = time.perf_counter()
    report = ExportReport(fams, start, end)
    builder = None
    if hdf5_path is not None:
        builder = TokioTimeSeriesBuilder(
            fams, TimeGrid.of(start, end, timestep), num_nodes, ssds_per_node
        )
    full = jsonl_path is not None

    def feed(on_page: Callable[[Page], None]) -> None:
        for fam in fams:
            for page in provider(fam, start, end, full):
                report.hits += len(page)
                on_page(page)
                if builder is not None:
                    builder.add_page(page)

    if jsonl_path is not None:
        with atomic_file(jsonl_path) as fh:
            writer = GzipJsonlHitsWriter(fh)
            feed(writer.write_page)
            report.jsonl = writer.close()
    else:
        feed(lambda page: None)
    if builder is not None and hdf5_path is not None:
        init = None
        if init_start is not None or init_end is not None:
            init = TimeGrid.of(init_start or start, init_end or end, timestep)
        report.hdf5 = write_tokio_hdf5(hdf5_path, builder, init=init, replace=replace_hdf5)
        report.build = builder.stats.as_dict()
        if builder.stats.out_of_range or builder.stats.ignored:
            log.warning(
                "%s: %d documents out of range, %d ignored (first problems: %s)",
                hdf5_path,
                builder.stats.out_of_range,
                builder.stats.ignored,
                "; ".join(builder.stats.problems[:3]) or "none",
            )
    report.seconds = time.perf_counter() - t0
    return report


def day_window_utc(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


def archive_collectd_es_day(
    provider: PageProvider,
    family: str,
    day: dt.date,
    archive: Archive,
    *,
    formats: Sequence[str] = OUTPUT_FORMATS,
    source_info: dict[str, Any] | None = None,
    stats: ExportStats | None = None,
    timestep: int = 10,
    num_nodes: int = 288,
    ssds_per_node: int = 4,
) -> DayReport:
    """Archive one (family, UTC day) into ``collectd_es/<family>/<day>.{jsonl.gz,hdf5}``.

    Reruns rewrite the day from scratch (the HDF5 file is recreated, not appended to), so
    a rerun over unchanged data gives the same JSON Lines bytes and the same HDF5 values.
    """
    check_family(family)
    fmts = [f for f in OUTPUT_FORMATS if f in formats]
    unknown = set(formats) - set(OUTPUT_FORMATS)
    if unknown or not fmts:
        raise ConfigError(
            f"unknown output format(s) {sorted(unknown) or formats}: use jsonl and/or hdf5"
        )
    key = DayKey(SOURCE_NAME, (family,), day)
    start, end = day_window_utc(day)
    manifest: dict[str, Any] = {
        **(source_info or {}),
        "family": family,
        "window": {"start": start.isoformat(), "end": end.isoformat()},
        "formats": fmts,
        "timestep": timestep,
        "num_nodes": num_nodes,
        "ssds_per_node": ssds_per_node,
    }

    def write(staging: Staging) -> None:
        jsonl = staging.path(EXTENSIONS["jsonl"], label="jsonl") if "jsonl" in fmts else None
        hdf5 = staging.path(EXTENSIONS["hdf5"], label="hdf5") if "hdf5" in fmts else None
        report = export_window(
            provider,
            [family],
            start,
            end,
            jsonl_path=jsonl,
            hdf5_path=hdf5,
            timestep=timestep,
            num_nodes=num_nodes,
            ssds_per_node=ssds_per_node,
            replace_hdf5=True,
        )
        staging.rows = report.hits
        staging.list_files = True
        staging.manifest["seconds"] = round(report.seconds, 3)
        if stats is not None:
            staging.manifest["export"] = stats.as_dict()
        if report.jsonl is not None:
            staging.done(EXTENSIONS["jsonl"], report.jsonl)
        if report.hdf5 is not None:
            h = report.hdf5
            build = {k: v for k, v in report.build.items() if k != "documents"}
            staging.done(
                EXTENSIONS["hdf5"],
                WriteResult(
                    rows=h.rows,
                    bytes=h.bytes,
                    sha256=h.sha256,
                    extra={"columns": h.columns, **build},
                ),
            )
        log.info("collectd_es/%s %s: %s", family, day, report.summary())

    return archive_one_day(archive, key, write, manifest=manifest, report_extra={"family": family})
