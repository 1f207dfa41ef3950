"""collectd-in-Elasticsearch exports: one window to files (CLI), one (family, day) to the
archive (Airflow). Pages flow once from the source into every requested writer.

source (PIT/scroll pages, or a saved pytokio JSON) -> a JsonlGzipWriter and/or a
TokioHdf5Writer (the record-to-bytes interface, dxt_core.writers.base) -> atomic files (+
manifest in the archive).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
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
from dxt_core.backends.collectd_es.tasks import OUTPUT_FORMATS, check_formats
from dxt_core.backends.collectd_es.tokio_hdf5 import TimeGrid, TokioHdf5Writer
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.fsio import atomic_file, sweep_killed
from dxt_core.http import RequestStats
from dxt_core.reconcile import SourceCount, check_source_count, is_past
from dxt_core.writers.base import RecordWriter, WriteResult
from dxt_core.writers.jsonl_gzip import JsonlGzipWriter

log = masking.logger("dxt_core.backends.collectd_es.archive_day")

SOURCE_NAME = "collectd_es"
EXTENSIONS = {"jsonl": "jsonl.gz", "hdf5": "hdf5"}


class PageProvider(Protocol):
    """Pages of one family over a window. ``full``: whole hits (JSON Lines) rather than
    the fields the HDF5 conversion reads; ``timestep``: the HDF5 row width (s)."""

    @property
    def where(self) -> str:
        """Where the documents come from, for messages."""

    def __call__(
        self, family: str, start: dt.datetime, end: dt.datetime, full: bool, timestep: int
    ) -> Iterator[Page]: ...


class EmptyExport(DxtError):
    """The window holds no document at all: nothing was written."""


@dataclass
class _EsPages:
    source: CollectdEsSource
    stats: ExportStats

    @property
    def where(self) -> str:
        conn = self.source.conn
        return f"{conn.safe_url} index {conn.index} (host prefix {conn.host_prefix!r})"

    def __call__(
        self, family: str, start: dt.datetime, end: dt.datetime, full: bool, timestep: int
    ) -> Iterator[Page]:
        # slices cut the window on the HDF5 time grid: a cell's documents stay in one slice
        if full:  # the JSON Lines output keeps whole hits, as dicts
            return self.source.iter_pages(family, start, end, stats=self.stats, align_s=timestep)
        # the columns need no @timestamp: sort[0] carries it (fewer bytes to decode)
        return self.source.iter_pages(
            family,
            start,
            end,
            fields=COLUMN_SOURCE_FIELDS,
            stats=self.stats,
            columnar=True,
            align_s=timestep,
        )

    def count(self, family: str, start: dt.datetime, end: dt.datetime) -> SourceCount:
        """The server's own count of the window (``_count``, see CollectdEsSource.count),
        its request counted among the export's."""
        return self.source.count(family, start, end, self.stats)


def es_pages(source: CollectdEsSource, stats: ExportStats) -> PageProvider:
    return _EsPages(source, stats)


@dataclass
class _SavedPages:
    pages: list[Page] | str | Path
    host_prefix: str
    name: str

    @property
    def where(self) -> str:
        return f"{self.name} (host prefix {self.host_prefix!r})"

    def __call__(
        self, family: str, start: dt.datetime, end: dt.datetime, full: bool, timestep: int
    ) -> Iterator[Page]:
        pages = self.pages
        source = iter_saved_pages(pages) if isinstance(pages, str | Path) else pages
        return select_saved_hits(source, family, start, end, self.host_prefix, where=self.name)


def saved_pages(pages: list[Page] | str | Path, host_prefix: str, where: str) -> PageProvider:
    """Saved hits as a page source: a list of pages, or a file read one page at a time
    (once per family asked for), so memory holds a page, not the file."""
    return _SavedPages(pages, host_prefix, where)


@dataclass
class ExportReport:
    """What one export wrote."""

    families: list[str]
    start: dt.datetime
    end: dt.datetime
    hits: int = 0
    jsonl: WriteResult | None = None
    hdf5: WriteResult | None = None
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


#: The fields of a line of the JSON Lines output.
HIT_FIELDS = ("_index", "_id", "_source")


def _hit_line(h: Mapping[str, Any]) -> dict[str, Any]:
    return {"_index": h.get("_index"), "_id": h.get("_id"), "_source": h["_source"]}


def _hit_ms(h: Mapping[str, Any]) -> int | None:
    srt = h.get("sort")
    return srt[0] if srt else None


def hits_writer(out: BinaryIO) -> JsonlGzipWriter:
    """Raw hits as gzip JSON Lines, one ``{"_index", "_id", "_source"}`` a line: the "native
    json" output of pytokio's ``archive_collectdes``; the span from ``sort[0]``."""
    return JsonlGzipWriter(out, shape=_hit_line, when=_hit_ms)


@dataclass
class Outputs:
    """The writers of one export: gzip JSON Lines and/or TOKIO HDF5, each on a file of the
    caller's."""

    jsonl: JsonlGzipWriter | None = None
    hdf5: TokioHdf5Writer | None = None


def check_timestep(
    timestep: int, start: dt.datetime, end: dt.datetime, what: str, option: str = "--timestep"
) -> None:
    """Refuse an HDF5 row width that does not cut ``[start, end)`` into whole rows.

    Such a timestep would make the file's last row run past ``end`` (its ``end`` attribute
    after the window's), and the very same command would then be refused on the file it
    wrote (its window end is not on the file's grid): the row layout a user expects is
    whole rows from start to end, so the mismatch is refused before anything is read or
    written. ``option`` names the setting in the message (``--timestep``, or the DAG's
    variable); ``what`` the range (the window, the new file's range, the UTC day).
    """
    given = f"{option}{' ' if option.startswith('-') else '='}{timestep!r}"
    if isinstance(timestep, bool) or not isinstance(timestep, int) or timestep < 1:
        raise ConfigError(
            f"{given}: the HDF5 row width is a whole number of seconds, at "
            "least 1 (pytokio used 10)"
        )
    grid = TimeGrid.of(start, end, timestep)  # whole seconds, end after start
    span = grid.end - grid.start
    if span % timestep == 0:
        return
    # the nearest steps that divide the span (no divisor of it is above it)
    below = next(d for d in range(min(timestep, span), 0, -1) if span % d == 0)
    top = min(10 * timestep, span)
    above = next((d for d in range(timestep + 1, top + 1) if span % d == 0), None)
    choices = f"{below}" + (f" or {above}" if above is not None else "")
    raise ConfigError(
        f"{given} does not divide {what} [{start.isoformat()}, "
        f"{end.isoformat()}) ({span} s): its last row would end "
        f"{grid.rows * timestep - span} s after the end, and the file could not be written "
        f"again by the same command; use a timestep that divides {span} s (e.g. {choices}), "
        f"or a range a whole number of {timestep} s steps long"
    )


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
    allow_empty: bool = False,
    updated: dt.datetime | None = None,
) -> ExportReport:
    """Export ``families`` over ``[start, end)`` into the requested files (atomically).

    ``updated`` is the HDF5 datasets' ``updated`` attribute (default: now, as pytokio
    writes it). An existing HDF5 file is updated (its other rows and columns kept) unless
    ``replace_hdf5``.

    A window without any document raises :class:`EmptyExport` and writes nothing, unless
    ``allow_empty`` (then the files are written, empty). An OS error while writing (full
    disk, read-only directory) is an :class:`ArchiveError` naming the file.
    """
    fams = [check_family(f) for f in families]
    if not fams:
        raise ConfigError(f"no family chosen: pick from {', '.join(FAMILIES)}")
    if jsonl_path is None and hdf5_path is None:
        raise ConfigError("nothing to write: give a JSON Lines and/or an HDF5 output path")
    if hdf5_path is not None:  # before anything is read or written
        check_timestep(timestep, start, end, "the window")
        creates = replace_hdf5 or not hdf5_path.exists()
        if creates and (init_start is not None or init_end is not None):
            check_timestep(
                timestep,
                init_start or start,
                init_end or end,
                "the new file's range (--init-start/--init-end)",
            )
    for out in (p for p in (jsonl_path, hdf5_path) if p is not None):
        if swept := sweep_killed(out):  # what killed exports of this host left
            log.warning(
                "%s: removed %d temporary file(s) that killed writers of it left", out, swept
            )
    try:
        with contextlib.ExitStack() as files:
            outs = Outputs()
            if jsonl_path is not None:
                outs.jsonl = hits_writer(files.enter_context(atomic_file(jsonl_path, owned=True)))
            if hdf5_path is not None:
                init = None
                if init_start is not None or init_end is not None:
                    init = TimeGrid.of(init_start or start, init_end or end, timestep)
                outs.hdf5 = TokioHdf5Writer(
                    files.enter_context(atomic_file(hdf5_path, owned=True)),
                    fams,
                    num_nodes=num_nodes,
                    devices_per_server=ssds_per_node,
                    init=init,
                    existing=None if replace_hdf5 or not hdf5_path.exists() else hdf5_path,
                    updated=updated,
                    name=hdf5_path,
                )
            return write_outputs(provider, fams, start, end, outs, timestep, allow_empty)
    except OSError as exc:
        paths = " and ".join(str(p) for p in (jsonl_path, hdf5_path) if p is not None)
        raise ArchiveError(
            f"writing {paths}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename else "")
            + "; free space or fix the directory, then rerun (no partial file is left)"
        ) from exc


def write_outputs(
    provider: PageProvider,
    fams: Sequence[str],
    start: dt.datetime,
    end: dt.datetime,
    outs: Outputs,
    timestep: int,
    allow_empty: bool,
) -> ExportReport:
    """Every page of ``fams`` over ``[start, end)`` through the writers of ``outs``: the
    pages flow once from the source into every requested file."""
    t0 = time.perf_counter()
    report = ExportReport(list(fams), start, end)
    writers: list[RecordWriter[Any, Any]] = [w for w in (outs.jsonl, outs.hdf5) if w is not None]
    if outs.jsonl is not None:
        outs.jsonl.header(HIT_FIELDS)
    if outs.hdf5 is not None:
        outs.hdf5.header(TimeGrid.of(start, end, timestep))
    try:
        for fam in fams:
            for page in provider(fam, start, end, outs.jsonl is not None, timestep):
                report.hits += len(page)
                for w in writers:
                    w.rows(page)
        if report.hits == 0 and not allow_empty:
            raise EmptyExport(
                f"no {'/'.join(fams)} document in [{start.isoformat()}, {end.isoformat()}) "
                f"in {provider.where}: nothing written. Check the window (times without an "
                "offset are read in --tz, UTC by default; pytokio read them as the machine's "
                "local time: --tz local), the index and the host prefix; --allow-empty writes "
                "the empty file anyway"
            )
    except BaseException:
        for w in writers:
            w.abort()
        raise
    if outs.jsonl is not None:
        report.jsonl = outs.jsonl.close()
    if outs.hdf5 is not None:
        report.hdf5 = outs.hdf5.close()
        build = outs.hdf5.stats
        report.build = build.as_dict()
        if build.out_of_range or build.ignored:
            log.warning(
                "%s: %d documents out of range, %d ignored (first problems: %s)",
                outs.hdf5.name,
                build.out_of_range,
                build.ignored,
                "; ".join(build.problems[:3]) or "none",
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

    Reruns rewrite the day from scratch (the HDF5 file is recreated, not appended to, and
    its ``updated`` attribute is the day's end), so a rerun over unchanged data gives the
    same JSON Lines bytes and the same HDF5 values.
    """
    check_family(family)
    chosen = check_formats(formats, "formats")
    fmts = [f for f in OUTPUT_FORMATS if f in chosen]
    unit = _FamilyDay(provider, family, day, archive, stats)
    if "hdf5" in fmts:
        check_timestep(timestep, unit.start, unit.end, "the UTC day", "DXT_COLLECTD_ES_TIMESTEP")
    manifest: dict[str, Any] = {
        **(source_info or {}),
        "family": family,
        "window": {"start": unit.start.isoformat(), "end": unit.end.isoformat()},
        "formats": fmts,
        "timestep": timestep,
        "num_nodes": num_nodes,
        "ssds_per_node": ssds_per_node,
    }

    def write(staging: Staging) -> None:
        with contextlib.ExitStack() as files:
            outs = Outputs()
            if "jsonl" in fmts:
                jsonl = files.enter_context(staging.open("jsonl.gz", label="jsonl"))
                outs.jsonl = hits_writer(jsonl)
            if "hdf5" in fmts:
                outs.hdf5 = TokioHdf5Writer(
                    files.enter_context(staging.open("hdf5", label="hdf5")),
                    [family],
                    num_nodes=num_nodes,
                    devices_per_server=ssds_per_node,
                    updated=unit.end,  # a rerun of the day writes the same bytes
                    name=archive.data_path(unit.key, "hdf5"),
                )
            report = write_outputs(provider, [family], unit.start, unit.end, outs, timestep, True)
        unit.record(staging, report)

    # the export's request counts, as every backend's report and manifest give them (filled
    # by ``unit.record`` once the pages are read); none for saved pages (no request)
    return archive_one_day(
        archive,
        unit.key,
        write,
        manifest=manifest,
        stats=unit.requests if stats is not None else None,
        report_extra={"family": family},
    )


class _FamilyDay:
    """One (family, UTC day): its key and window, and what its export is recorded as."""

    def __init__(
        self,
        provider: PageProvider,
        family: str,
        day: dt.date,
        archive: Archive,
        stats: ExportStats | None,
    ) -> None:
        self.provider, self.family, self.day, self.stats = provider, family, day, stats
        self.key = DayKey(SOURCE_NAME, (family,), day)
        self.start, self.end = day_window_utc(day)
        #: the report's request statistics: the export's (``stats``), set by :meth:`record`
        self.requests = RequestStats()

    def record(self, staging: Staging, report: ExportReport) -> None:
        """The export's files, counts and the source's count in the staged day."""
        staging.rows = report.hits
        self._check_source_count(staging, report.hits)
        if report.hits == 0:
            log.warning(
                "collectd_es/%s %s: NO DOCUMENT in [%s, %s) in %s (recorded as empty); if "
                "the day should hold data, check the connection's index and host prefix",
                self.family,
                self.day,
                self.start.isoformat(),
                self.end.isoformat(),
                self.provider.where,
            )
        staging.list_files = True
        staging.manifest["seconds"] = round(report.seconds, 3)
        if self.stats is not None:
            staging.manifest["export"] = self.stats.as_dict()
            made = self.stats.request_stats()
            r = self.requests
            r.requests, r.retries, r.splits = made.requests, made.retries, made.splits
            r.bytes_received = made.bytes_received
        for ext, res in (("jsonl.gz", report.jsonl), ("hdf5", report.hdf5)):
            if res is not None:
                staging.done(ext, res)
        log.info("collectd_es/%s %s: %s", self.family, self.day, report.summary())

    def _check_source_count(self, staging: Staging, hits: int) -> None:
        """The server's own count in the manifest; a past day must match what was read.
        Saved pages (a file, not a server) have no count to ask."""
        counter = getattr(self.provider, "count", None)
        if counter is None:
            return
        sc: SourceCount = counter(self.family, self.start, self.end)
        staging.manifest["source_count"] = sc.as_dict()
        where = self.provider.where
        check_source_count(str(self.key), hits, sc, past=is_past(self.end), url=where)
