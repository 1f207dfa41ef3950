"""Coverage: the state of every (unit, day) of a source, one row each, with why.

:func:`coverage` is the one entry point (``dxt coverage``, the demo's summary, the tests). It
answers from where the archive keeps its answers fastest:

* an S3 archive: a listing and an index object per unit
  (:meth:`dxt_core.store.s3.S3Archive.coverage_rows`);
* a directory archive with a manifest index: the index checked against one directory listing
  per unit, and each data file's size (:func:`dxt_core.scan.scan_states`);
* otherwise, or with ``verify`` (the sha256 of every data file), every manifest read
  (:meth:`dxt_core.archive.Archive.status`).

All three give the same rows for the same archive, with the same details: a corrupt day's
names its file relative to the unit's directory (``data file <day>.csv.gz has 9 bytes, ...``),
never by an absolute path, whichever way it was found.

:func:`iter_coverage` gives the rows one at a time (``dxt coverage --json`` streams them: its
memory does not grow with the rows); :func:`coverage` gives them as a list.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ParamSpec

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.errors import ConfigError
from dxt_core.manifests import Status, kept_detail

log = masking.logger("dxt_core.coverage")

P = ParamSpec("P")

if TYPE_CHECKING:
    from dxt_core.index import ManifestIndex
    from dxt_core.scan import StateGrid


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One (unit, day): its status and, for corrupt days and days with holes, why."""

    parts: tuple[str, ...]
    day: dt.date
    status: Status
    detail: str = ""
    kept: bool = False  # a rerun read fewer rows than the archive holds; the archive was kept


@dataclass(frozen=True, slots=True)
class Verified:
    """How far a ``verify`` pass has got: metric-days checked, of how many, how many of
    them corrupt, the seconds since it began, and whether it stopped before the last (an
    error, Ctrl-C, or a consumer that took no more rows)."""

    done: int
    total: int
    corrupt: int
    seconds: float
    stopped: bool = False


#: Metric-days a ``verify`` pass checks at once (file reads and sha256 run without the GIL).
VERIFY_WORKERS = 4


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """How a ``verify`` pass runs: ``workers`` metric-days checked at once (files read and
    hashed, or S3 objects fetched and hashed), and ``progress`` called after each (on the
    consumer's thread)."""

    workers: int = VERIFY_WORKERS
    progress: Callable[[Verified], None] | None = None


WORKERS_HELP = (
    "with --verify: metric-days read and hashed at once, from files or S3 objects "
    "(default %(default)s; on S3 at most 16, the S3 client's connections)"
)


def iter_coverage(
    archive: Archive,
    source: str,
    units: Iterable[Sequence[str]],
    days: Iterable[dt.date],
    verify: bool = False,
    options: VerifyOptions | None = None,
) -> Iterator[CoverageRow]:
    """Status of every (unit, day) of ``source``: archived, empty, missing or corrupt (kept
    days are archived with ``kept`` set), units first, then days, in the order given, the rows
    made as they are taken (:func:`coverage`: the same as a list). ``verify`` also checks
    every data file's sha256 (reads every manifest and file). Without
    ``verify`` the index and the directories (or the S3 listings) are read, and a problem with
    them raised, by this call, the rows' objects made only as the iterator is consumed. With
    ``verify`` everything is read as the rows are taken (a problem is raised by the iterator),
    the metric-days checked as ``options`` say (:class:`VerifyOptions`)."""
    unit_list = [tuple(u) for u in units]
    day_list = list(days)
    if archive.remote:
        from dxt_core.store.s3 import S3Archive

        assert isinstance(archive, S3Archive)
        if verify:
            from dxt_core.store.client import POOL_CONNECTIONS

            checks = archive.verify_checks(source, unit_list, day_list)
            total = len(unit_list) * len(day_list)
            opts = options or VerifyOptions()
            opts = replace(opts, workers=min(opts.workers, POOL_CONNECTIONS))
            return _verified(checks, total, opts, _remote_row)
        return iter(archive.coverage_rows(source, unit_list, day_list))
    from dxt_core.index import ManifestIndex

    if not verify and day_list:
        with ManifestIndex(archive.root) as idx:
            if idx.exists():
                return _from_index(archive, source, unit_list, day_list, idx)
        if len(unit_list) * len(day_list) >= SAY_NO_INDEX_FROM and archive.root.is_dir():
            log.warning(
                "no manifest index in %s: each of the %d metric-days' manifests is read "
                "(minutes on a large archive); 'dxt index rebuild --archive %s' makes this "
                "fast",
                archive.root,
                len(unit_list) * len(day_list),
                archive.root,
            )
    if verify:
        checks = archive.verify_checks(source, unit_list, day_list)
        total = len(unit_list) * len(day_list)
        return _verified(checks, total, options or VerifyOptions(), partial(_row, archive))
    return _from_manifests(archive, source, unit_list, day_list)


#: From this many metric-days, a coverage without the manifest index says so (a review at
#: three years of the Marconi100 catalog: 48 s a year, with nothing said).
SAY_NO_INDEX_FROM = 10_000


def _listed(rows: Callable[P, Iterator[CoverageRow]]) -> Callable[P, list[CoverageRow]]:
    """``rows`` with its arguments (one signature to keep), giving its rows as a list."""

    def coverage(*args: P.args, **kwargs: P.kwargs) -> list[CoverageRow]:
        """The rows of :func:`iter_coverage`, with its arguments, as a list."""
        return list(rows(*args, **kwargs))

    return coverage


coverage = _listed(iter_coverage)


def _from_manifests(
    archive: Archive,
    source: str,
    units: Sequence[tuple[str, ...]],
    days: Sequence[dt.date],
) -> Iterator[CoverageRow]:
    for parts in units:
        for day in days:
            key = DayKey(source, parts, day)
            yield _row(archive, key, *archive.status(key))


def _row(archive: Archive, key: DayKey, status: Status, detail: str) -> CoverageRow:
    kept = status == "archived" and detail.startswith("kept:")
    if status == "corrupt":
        from dxt_core.scan import relative_detail

        detail = relative_detail(archive, key, detail)
    return CoverageRow(key.parts, key.day, status, detail, kept)


def _remote_row(key: DayKey, status: Status, detail: str) -> CoverageRow:
    kept = status == "archived" and detail.startswith("kept:")
    return CoverageRow(key.parts, key.day, status, detail, kept)


#: One metric-day's check, to run on any thread: (status, detail) with every file hashed.
Check = Callable[[], tuple[Status, str]]


def _verified(
    checks: Iterator[tuple[DayKey, Check]],
    total: int,
    options: VerifyOptions,
    row_of: Callable[[DayKey, Status, str], CoverageRow],
) -> Iterator[CoverageRow]:
    """The ``total`` metric-days' checks run ``options.workers`` at once on threads, the
    rows in the order of ``checks``; at most four times as many checked ahead of the
    consumer. ``checks`` is consumed on the consumer's thread (an S3 archive lists a unit
    there before its days are checked)."""
    workers, progress = max(1, options.workers), options.progress
    began = time.monotonic()
    done, corrupt = 0, 0
    ahead: deque[tuple[DayKey, Future[tuple[Status, str]]]] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="dxt-verify")

    def taken() -> CoverageRow:
        nonlocal done, corrupt
        key, checked = ahead.popleft()
        row = row_of(key, *checked.result())
        done, corrupt = done + 1, corrupt + (row.status == "corrupt")
        if progress is not None:
            progress(Verified(done, total, corrupt, time.monotonic() - began))
        return row

    try:
        for key, check in checks:
            ahead.append((key, pool.submit(check)))
            while len(ahead) >= 4 * workers or (ahead and ahead[0][1].done()):
                yield taken()
        while ahead:
            yield taken()
    except BaseException:
        if progress is not None and done < total:
            progress(Verified(done, total, corrupt, time.monotonic() - began, stopped=True))
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _from_index(
    archive: Archive,
    source: str,
    units: Sequence[tuple[str, ...]],
    days: Sequence[dt.date],
    idx: ManifestIndex,
) -> Iterator[CoverageRow]:
    """The rows from the index: read here (``idx`` may be closed once this returns), the
    rows made one at a time by the iterator returned."""
    from dxt_core.scan import scan_states

    grid = scan_states(archive, source, units, days, check_sizes=True, index=idx)
    details = idx.day_details(source, min(days), max(days))
    return _grid_rows(archive, source, units, days, grid, details)


def _grid_rows(
    archive: Archive,
    source: str,
    units: Sequence[tuple[str, ...]],
    days: Sequence[dt.date],
    grid: StateGrid,
    day_details: dict[tuple[str, str], str],
) -> Iterator[CoverageRow]:
    from dxt_core.index import unit_of

    for u, parts in enumerate(units):
        for d, day in enumerate(days):
            state = grid.state(u, d)
            detail = grid.details.get((u, d), "")
            if state == "kept":
                kept = archive.read_kept(DayKey(source, parts, day)) or {}
                yield CoverageRow(parts, day, "archived", kept_detail(kept), True)
            else:
                if state in ("archived", "empty") and not detail:
                    detail = day_details.get((unit_of(parts), day.isoformat()), "")
                yield CoverageRow(parts, day, state, detail)


def progress_lines(
    write: Callable[[str], None], every_s: float = 10.0
) -> Callable[[Verified], None]:
    """A ``progress`` for :func:`iter_coverage` that writes a line every ``every_s`` seconds
    (how many metric-days are checked, how many corrupt, how long the rest should take), one
    when the last is checked, and one when the pass stops before it."""
    last = [0.0]

    def show(v: Verified) -> None:
        if v.stopped:
            write(
                f"verification stopped after {v.done:,} of {v.total:,} metric-days checked "
                f"({v.corrupt:,} corrupt), {v.seconds:.1f} s"
            )
        elif v.done == v.total:
            write(
                f"verified {v.done:,} metric-days (manifests, and the files of those "
                f"archived) in {v.seconds:.1f} s: {v.corrupt:,} corrupt"
            )
        elif v.seconds - last[0] >= every_s:
            last[0] = v.seconds
            left = (v.total - v.done) * v.seconds / v.done
            write(
                f"verifying: {v.done:,} of {v.total:,} metric-days checked "
                f"({v.corrupt:,} corrupt), about {_duration(left)} left"
            )

    return show


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 2:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def verify_options(args: Any) -> VerifyOptions:
    """``dxt coverage``'s ``--workers`` (checked) and, with ``--verify``, its progress
    lines on stderr."""
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give 1 or more (metric-days at once)")
    return VerifyOptions(int(args.workers), progress_lines(stderr_notice) if args.verify else None)


def stderr_notice(message: str) -> None:
    """``message`` on stderr as ``dxt: <message>``; nothing when stderr is closed (Python
    then has none, and ``print`` would write to stdout, into a ``--json`` document)."""
    if sys.stderr is not None:
        print(f"dxt: {message}", file=sys.stderr)
