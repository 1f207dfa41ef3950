"""The archive-one-day template that every backend follows, and its one report type.

    begin(key) -> the backend writes its files into staging -> commit the files and an
    "archived" manifest, or record an "empty" manifest -> DayReport

A backend supplies only what differs: the key (source, parts, day), the manifest fields that
describe its query, and a ``write`` function that fills the staging area. Files are written
under temporary names and renamed into place only when the whole day has been written, and
the manifest comes last, so a crash never leaves a partial file under a final name nor a
manifest describing a file that is not there. The staging and the commit are the archive's
(:class:`dxt_core.archive.DayWrite`): the day is locked while it is written, and a run that
reads fewer rows than the archive holds keeps the archived day (``SourceShrank``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.budget import holding_answers
from dxt_core.commit_rules import is_replacement
from dxt_core.daywrite import DayWrite
from dxt_core.http import RequestStats
from dxt_core.manifests import NOT_OVER as NOT_OVER
from dxt_core.provenance import MADE_BY, made_by
from dxt_core.writers.base import WriteResult

STRAYS_REMOVED = "strays_removed"  # caveats(): data files no manifest named, kept and removed

log = masking.logger("dxt_core.archive_day")

DayStatus = Literal["archived", "empty"]


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 metric-day``, ``2 metric-days``."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def caveats(report: Mapping[str, Any]) -> dict[str, Any]:
    """What makes a day other than plainly archived or empty, from its report's fields (a
    :class:`DayReport`'s ``extra``, or its ``as_dict()``): ``holes`` (unreadable windows
    left), ``replaced`` (how many archived files it replaced, kept in .versions/),
    ``strays_removed`` (how many data files no manifest named it kept there and removed),
    ``day_not_over`` (archived before the day ended)."""
    out: dict[str, Any] = {}
    for key in ("holes", "replaced", NOT_OVER):
        value = report.get(key)
        if key == "replaced" and isinstance(value, list):
            strays = sum(1 for r in value if isinstance(r, dict) and not is_replacement(r))
            value = len(value) - strays
            out.update({STRAYS_REMOVED: strays} if strays else {})
        if value:
            out[key] = len(value) if isinstance(value, list) else value
    return out


@dataclass
class DayReport:
    """What archiving one (parts, day) unit did; printed by the CLI, the XCom of a task.

    ``extra`` holds a backend's own report fields (e.g. the collectd family and files).
    """

    key: DayKey
    status: DayStatus
    rows: int
    bytes: int
    path: Path | None
    manifest: Path
    seconds: float
    stats: RequestStats = field(default_factory=RequestStats)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        what = "/".join((self.key.source, *self.key.parts))
        s = self.stats
        return (
            f"{what} {self.key.day}: {self.status}{self._caveats()}, "
            f"{plural(self.rows, 'row')}, {plural(self.bytes, 'byte')}, "
            f"{self.seconds:.2f} s, {plural(s.requests, 'request')}, "
            f"{plural(s.retries, 'retry', 'retries')}, {plural(s.splits, 'split')}"
        )

    def _caveats(self) -> str:
        c = caveats(self.extra)
        said = [
            *([f"with {plural(int(c['holes']), 'hole')}"] if "holes" in c else []),
            *([f"replacing {plural(c['replaced'], 'archived file')}"] if "replaced" in c else []),
            *(
                [f"removing {plural(c[STRAYS_REMOVED], 'data file')} no manifest named"]
                if STRAYS_REMOVED in c
                else []
            ),
            *(["before the day ended"] if NOT_OVER in c else []),
            *(["unchanged: archived so already"] if self.extra.get("unchanged") else []),
            *(["restored: its file was missing or damaged"] if self.extra.get("restored") else []),
        ]
        return f" ({', '.join(said)})" if said else ""

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
            **self.extra,
        }


@dataclass
class StagedFile:
    """One data file written into staging: its extension, temporary path and totals."""

    extension: str
    tmp: Path
    final: Path
    result: WriteResult | None = None
    #: The name of the file's format in the manifest's ``files`` list.
    label: str = ""


class Staging:
    """Where a backend writes one day's files before they are committed.

    ``open(ext)`` gives a binary file under a hidden staging name beside its final name
    (see :class:`dxt_core.archive.DayWrite`); the backend writes and records what it wrote
    with ``done(ext, result)``. Nothing reaches a final name until :func:`archive_one_day`
    commits, and the commit applies the archive's never-shrink rule.
    """

    def __init__(self, archive: Archive, key: DayKey, day: DayWrite | None = None) -> None:
        self.archive = archive
        self.key = key
        self.day = day if day is not None else archive.begin(key)
        self.files: dict[str, StagedFile] = {}
        #: The day's row count when it is not the main file's (collectd counts documents).
        self.rows: int | None = None
        #: Manifest fields the backend learnt while writing.
        self.manifest: dict[str, Any] = {}
        #: List every file under ``files`` even when there is one.
        self.list_files = False

    @contextlib.contextmanager
    def open(
        self, extension: str, buffer_size: int = 1 << 20, label: str = ""
    ) -> Iterator[BinaryIO]:
        final = self.archive.data_path(self.key, extension)
        with self.day.open(extension, buffer_size) as fh:
            self.files[extension] = StagedFile(
                extension, self.day.staging_path(extension), final, label=label or extension
            )
            yield fh

    def path(self, extension: str, label: str = "") -> Path:
        """A staging path, not yet created, for a writer that opens the file itself."""
        final = self.archive.data_path(self.key, extension)
        tmp = self.day.staging_path(extension)
        self.files[extension] = StagedFile(extension, tmp, final, label=label or extension)
        return tmp

    def done(self, extension: str, result: WriteResult) -> None:
        self.files[extension].result = result

    def discard(self) -> None:
        for f in self.files.values():
            self.day.discard(f.extension)


def _timestamp(ms: int | None, tz: dt.tzinfo | None) -> str | None:
    if ms is None or tz is None:
        return None
    from dxt_core.windows import from_ms

    return from_ms(ms, tz).isoformat()


def archive_one_day(
    archive: Archive,
    key: DayKey,
    write: Callable[[Staging], None],
    *,
    manifest: dict[str, Any],
    stats: RequestStats | None = None,
    tz: dt.tzinfo | None = None,
    report_extra: dict[str, Any] | None = None,
    day_zone: str | None = None,
) -> DayReport:
    """Archive one unit: ``write`` fills the staging area, then commit or record "empty".

    ``manifest`` holds the backend's fields (source URL, query window, ...); the request
    statistics and the file totals are added here. With several files, the first one written
    is the day's main file and every file is listed under ``files``. ``tz`` renders the
    first and last timestamps of writers that report them in epoch milliseconds.
    ``day_zone`` names the zone the day is cut in: checked against the zone recorded at the
    archive's root (:meth:`Archive.check_day_zone`) and written to the manifest's
    ``day_definition``.
    """
    t0 = time.perf_counter()
    definition = archive.check_day_zone(key, day_zone) if day_zone is not None else None
    manifest.update(_not_over(key, day_zone, tz))
    manifest.setdefault(MADE_BY, made_by())  # who wrote it (dxt_core.provenance)
    # The unit's answers stay charged to the answer budget until it is done with them;
    # leaving without a commit aborts: the day is untouched.
    with holding_answers(), archive.begin(key) as day:
        staging = Staging(archive, key, day)
        write(staging)
        # ``manifest`` as ``write`` left it (backends add what they learnt while writing)
        doc = {**manifest, "day_definition": definition} if definition else manifest
        return _commit(archive, key, staging, t0, doc, stats, tz, report_extra)


def _not_over(key: DayKey, day_zone: str | None, tz: dt.tzinfo | None) -> dict[str, Any]:
    """``{NOT_OVER: <the day's end>}`` when the day has not ended yet (in its zone: the
    backend's ``day_zone``, else ``tz``, else UTC), else nothing. Such a day holds what the
    source had so far: it is not complete (:func:`dxt_core.runner.is_complete`), so the next
    ``extract`` fetches it again, and its report says so."""
    from zoneinfo import ZoneInfo

    from dxt_core.windows import day_window

    z: str | ZoneInfo = day_zone or (tz if isinstance(tz, ZoneInfo) else "UTC")
    end = day_window(key.day, z).end
    if end <= dt.datetime.now(dt.UTC):
        return {}
    log.warning(
        "%s: the day is not over (it ends %s): archiving what the source holds so far; the "
        "next run fetches it again",
        key,
        end.isoformat(),
    )
    return {NOT_OVER: {"ends": end.isoformat(), "zone": str(z)}}


def _commit(
    archive: Archive,
    key: DayKey,
    staging: Staging,
    t0: float,
    manifest: dict[str, Any],
    stats: RequestStats | None,
    tz: dt.tzinfo | None,
    report_extra: dict[str, Any] | None,
) -> DayReport:
    day = staging.day
    seconds = time.perf_counter() - t0
    base = {**manifest, **staging.manifest}
    if stats is not None:
        stats.seconds = seconds
        base["requests"] = stats.as_dict()
        if stats.url_used:  # a redirect: the URL the data actually came from
            base["source_url_used"] = stats.url_used
    else:
        stats = RequestStats(seconds=seconds)
    written = [f for f in staging.files.values() if f.result is not None and f.result.rows > 0]
    extra = dict(report_extra or {})
    if NOT_OVER in base:
        extra[NOT_OVER] = base[NOT_OVER]
    if archive.remote:  # where the day is (the report's path is its local staging path)
        extra["url"] = archive.url_of(archive.manifest_path(key))
    if staging.rows == 0 or not written:
        for f in staging.files.values():
            day.remove(f.extension)
        path = day.commit({**base, "status": "empty", "file": None, "rows": 0, "bytes": 0})
        if day.unchanged:
            extra["unchanged"] = True
        report = DayReport(key, "empty", 0, 0, None, path, seconds, stats, extra)
        log.info("%s -> empty (manifest only)", report.summary())
        return report
    for f in staging.files.values():
        if f not in written:
            day.discard(f.extension)
    main = written[0]
    res = main.result
    assert res is not None
    rows = res.rows if staging.rows is None else staging.rows
    doc: dict[str, Any] = {
        **base,
        "status": "archived",
        "file": main.final.name,
        "rows": rows,
        "bytes": res.bytes,
        "sha256": res.sha256,
    }
    if res.columns:
        doc["columns"] = res.columns
    if tz is not None:
        doc["first_timestamp"] = _timestamp(res.first_ms, tz)
        doc["last_timestamp"] = _timestamp(res.last_ms, tz)
    doc.update(res.extra)
    if len(written) > 1 or staging.list_files:
        doc["files"] = [
            {
                "file": f.final.name,
                "format": f.label,
                "rows": f.result.rows,
                "bytes": f.result.bytes,
                "sha256": f.result.sha256,
                **({"columns": f.result.columns} if f.result.columns else {}),
                **f.result.extra,
            }
            for f in written
            if f.result is not None
        ]
    # The commit renames the staged files into place, or keeps the archived day and raises
    # SourceShrank when this run read fewer rows (see dxt_core.archive).
    path = day.commit(doc)
    if day.replaced:  # the archived bytes this commit replaced, kept in .versions/
        extra["replaced"] = day.replaced
    # the same bytes again: over intact files (unchanged), over a missing one (restored)
    extra.update({k: True for k in ("unchanged", "restored") if getattr(day, k, False)})
    report = DayReport(key, "archived", rows, res.bytes, main.final, path, seconds, stats, extra)
    log.info("%s -> %s", report.summary(), archive.url_of(main.final))
    return report
