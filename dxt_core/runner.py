"""Many (parts, day) units from the command line, the way every backend's CLI runs them.

* A unit whose manifest says archived (or empty) and whose file still has the manifest's size
  is skipped, as dxt_examon resumed from its follow files; ``--refetch`` runs it again, and
  ``--replace`` also lets a rerun that reads fewer rows than the archive replace it (the
  replaced file is kept in ``.versions/``).
* Units run in a thread pool; a failure of one unit, whatever it is, becomes that unit's
  ``FAILED`` line with a one-line cause and the others go on.
* The run ends with a summary line and exit status 0 (all done), 1 (some failed), or
  :data:`UNAVAILABLE_EXIT` (4) when every unit failed because the server could not be
  reached (connection error, timeout, 5xx after the retries), the same for every backend.
* A failure that would fail every unit the same way (the server refused the credentials,
  the archive's days are cut in another zone: :func:`run_wide`) stops the run: no unit
  starts after it, and the exit status is 2 with the error said once.
* Ctrl-C (SIGINT) once: no new unit starts; the units in flight get :data:`GRACE_S` seconds
  to finish, those still running then are abandoned (their staging is never committed: an
  atomic commit puts a file under its final name whole or not at all); the summary counts
  every unit (done, failed, interrupted: not started or abandoned) and the exit status is
  130. Ctrl-C twice: the same summary at once, the units in flight abandoned, except those
  whose commit began (waited for, up to :data:`COMMIT_WAIT_S` or one more signal, and
  counted as done): an abandoned unit never commits (:mod:`dxt_core.commitgate`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

from dxt_core import commitgate, masking
from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import NOT_OVER, STRAYS_REMOVED, DayReport, caveats, plural
from dxt_core.budget import holding_answers, release_answers
from dxt_core.errors import ConfigError, DxtError, SourceUnavailable, run_wide
from dxt_core.http import RetryPolicy
from dxt_core.windows import check_day_order, parse_day, zone


@dataclass(frozen=True)
class Unit:
    """One unit of a CLI run: its archive key and the call that archives it."""

    key: DayKey
    run: Callable[[], DayReport]
    name: str = ""
    #: manifest fields a complete day must hold as given (a unit whose definition, say its
    #: selector, changed since the day was archived is not skipped as complete: its run says)
    expects: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        return self.name or "/".join(self.key.parts)


class SafeStream:
    """A text stream whose failed writes (a reader gone: ``| head``, a terminal hung up, a
    full disk) are noted in :attr:`failed` instead of raised, so that a run's handling of
    Ctrl-C, its commits and its exit status never depend on its output being read."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream.stream if isinstance(stream, SafeStream) else stream
        self.failed: OSError | ValueError | None = None

    def write(self, text: str) -> int:
        if self.failed is None and self.stream is not None:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as exc:  # ValueError: the stream was closed
                self.failed = exc
        return len(text)

    def flush(self) -> None:
        if self.failed is None and self.stream is not None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as exc:
                self.failed = exc

    def isatty(self) -> bool:
        try:
            return self.stream is not None and self.stream.isatty()
        except (OSError, ValueError):
            return False


def say(text: str) -> None:
    """A unit's own line on standard output, from its worker thread: a reader gone does not
    fail a unit whose day is committed (its line is lost with the reader)."""
    with suppress(OSError, ValueError):
        print(text, flush=True)


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, enabled: bool | None = None):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()

    def step(self, ok: bool, label: str) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"{rate:.1f}/s failed={self.failed} {label[:40]:<40}"
        )
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def one_line(exc: BaseException) -> str:
    """A failure as one line: our own errors as they are, others with their type."""
    if isinstance(exc, DxtError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.filename:
        text = f"{type(exc).__name__}: {exc.strerror or exc} ({exc.filename})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(masking.scrub(text).split())  # ours are masked; another's may quote one


def is_complete(archive: Archive, key: DayKey, expects: Sequence[tuple[str, Any]] = ()) -> bool:
    """True when ``key`` is archived (size matches its manifest) or recorded empty, no
    unreadable window (``holes``, see dxt_core.reconcile) waits to be retried, the day was
    over when it was archived (:func:`dxt_core.manifests.not_over_mark`), and its manifest
    holds ``expects`` (a field it lacks, written before it was recorded, is taken as held)."""
    try:
        return bool(archive.complete_days(key.source, key.parts, [key.day], expects))
    except DxtError:
        return False


def incomplete(archive: Archive, units: Sequence[Unit]) -> list[Unit]:
    """``units`` less the complete ones (:func:`is_complete`), in their order, each unit's
    days asked at once (on S3: one listing and one index read per unit, not a listing and
    two reads per day)."""
    days: dict[tuple[str, tuple[str, ...], tuple[tuple[str, Any], ...]], list[dt.date]] = {}
    for u in units:
        days.setdefault((u.key.source, u.key.parts, tuple(u.expects)), []).append(u.key.day)
    done: set[tuple[str, tuple[str, ...], dt.date]] = set()
    for (source, parts, expects), asked in days.items():
        with contextlib.suppress(DxtError):  # unreadable: every day of the unit is run
            complete = archive.complete_days(source, parts, asked, expects)
            done |= {(source, parts, d) for d in complete}
    return [u for u in units if (u.key.source, u.key.parts, u.key.day) not in done]


def add_arguments(parser: Any, unit: str = "metric-days") -> None:
    """``--refetch`` and ``--replace``, the same in every backend's ``extract``."""
    parser.add_argument(
        "--refetch",
        action="store_true",
        help=f"fetch {unit} again even when the archive holds them complete",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="refetch, and let a source with fewer rows than the archive replace the archived "
        "file (kept in .versions/); without it such a day keeps the archive and fails",
    )


def add_day_arguments(parser: Any) -> None:
    """``--start-day`` (required) and ``--end-day``: the days an ``extract`` archives."""
    parser.add_argument("--start-day", required=True, help="first day, YYYY-MM-DD")
    parser.add_argument("--end-day", help="last day, YYYY-MM-DD (default: the start day)")


def day_range(args: Any, time_zone: str | None = None) -> tuple[dt.date, dt.date]:
    """The days :func:`add_day_arguments` took: the start day, and the end day (the start day
    when not given). A day that has not begun in ``time_zone`` (the archive's days' zone),
    or without one anywhere on Earth, is refused: it would be archived as empty."""
    first = parse_day(args.start_day)
    last = parse_day(args.end_day) if args.end_day else first
    check_day_order(first, last)
    if time_zone is not None:
        latest = dt.datetime.now(zone(time_zone)).date()
        where = f"in {time_zone}, the zone its days are cut in"
    else:  # a day begins somewhere on Earth at most 14 hours before it does in UTC
        latest = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=14)).date()
        where = "at the earliest zone"
    for flag, day in (("--start-day", first), ("--end-day", last)):
        if day > latest:
            raise ConfigError(
                f"{flag} {day}: that day has not begun yet (today is {latest} {where}): "
                "nothing to archive; give a day that has begun"
            )
    return first, last


def add_window_arguments(
    parser: Any,
    *,
    workers: int,
    window_s: int,
    min_window_help: str,
    target_points: int,
    points: str = "points",
    points_help: str = "",
    window_help: str = "first query window, seconds",
) -> None:
    """``--workers``, ``--retries`` and the query window options of an ``extract`` that asks
    for a day in windows of about ``target_points`` points (``points``: what it counts;
    ``points_help``: the option's help, when it says more)."""
    help_workers = f"parallel metric-days (default {workers})"
    parser.add_argument("--workers", type=int, default=workers, help=help_workers)
    parser.add_argument("--retries", type=int, default=4, help="retries of transient errors")
    parser.add_argument("--window-s", type=int, default=window_s, help=window_help)
    parser.add_argument("--min-window-s", type=int, default=300, help=min_window_help)
    help_points = points_help or f"{points} per query"
    parser.add_argument("--target-points", type=int, default=target_points, help=help_points)


def window_options(args: Any) -> dict[str, Any]:
    """The options :func:`add_window_arguments` took, as the keyword arguments of a backend's
    window policy (``initial_s``, ``target_points``, ``min_s``)."""
    if args.min_window_s < 1:
        raise ConfigError(f"--min-window-s {args.min_window_s}: give 1 second or more")
    if args.window_s < args.min_window_s:
        raise ConfigError(
            f"--window-s {args.window_s} is below --min-window-s {args.min_window_s}: give a "
            "first window at least as long as the smallest one"
        )
    if args.target_points < 1:
        raise ConfigError(f"--target-points {args.target_points}: give 1 or more")
    return {
        "initial_s": args.window_s,
        "target_points": args.target_points,
        "min_s": args.min_window_s,
    }


def retry_policy(args: Any) -> RetryPolicy:
    """The retry policy of ``--retries``: that many retries after the first attempt."""
    if args.retries < 0:
        raise ConfigError(f"--retries {args.retries}: give 0 (no retry) or more")
    return RetryPolicy(attempts=args.retries + 1)


def run_extract(units: Sequence[Unit], archive: Archive, args: Any) -> int:
    """:func:`run_units` as an ``extract`` asks: its ``--workers``, ``--refetch`` (and
    ``--replace``, through the archive), ``--quiet`` and ``--verbose``. A directory root
    that exists must be a directory (it is made when it does not exist)."""
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give 1 or more (metric-days at once)")
    if not archive.remote and archive.root.exists() and not archive.root.is_dir():
        raise ConfigError(f"archive root {archive.root} is not a directory: check --archive")
    return run_units(
        units,
        archive,
        workers=args.workers,
        refetch=args.refetch,
        quiet=args.quiet,
        verbose=args.verbose,
    )


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Ask glibc's malloc for at most ``arenas`` arenas, unless ``MALLOC_ARENA_MAX`` is set.

    glibc gives threads their own arenas (up to 8 per core) and keeps freed memory in each:
    the fetching, writing and compressing threads of a few metric-days at once then hold
    10-20 MB more than their data (the 20-metric catalog day: 92-100 MB peak by default,
    77-85 MB with two arenas, four runs each; docs/performance.md). Elsewhere than glibc this
    does nothing.
    """
    import os

    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):  # not glibc
        return
    mallopt(-8, arenas)  # M_ARENA_MAX


#: Seconds the units in flight get to finish after the first Ctrl-C.
GRACE_S = 5.0
#: Exit status of an interrupted run (128 + SIGINT, as a shell reports it).
INTERRUPTED_EXIT = 130
#: Exit status when the server could not be reached at all (every backend, every command).
UNAVAILABLE_EXIT = 4


class Interrupt:
    """Counts the SIGINTs of a run (first: stop starting; second: abort)."""

    def __init__(self) -> None:
        self.count = 0
        self.first_at: float | None = None
        self.changed = threading.Event()
        #: what the first one was: "Ctrl-C", or the signal's name (SIGTERM, SIGHUP)
        self.what = "Ctrl-C"

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.first_at is None:
            self.first_at = time.monotonic()
            if signum != signal.SIGINT:
                self.what = signal.Signals(signum).name
        self.changed.set()


#: The signals a command takes as Ctrl-C: ``kill``, a service manager's stop, a timeout,
#: a closed terminal (``dxt`` commands; a notebook's kernel keeps its own).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigint_counted(interrupt: Interrupt, also: Sequence[signal.Signals] = ()) -> Iterator[None]:
    """Route SIGINT (and the signals ``also``) to ``interrupt`` for the block (only the main
    thread can).

    A signal of ``also`` is taken only where the process already takes it as Ctrl-C (the
    ``dxt`` command does, :func:`dxt_core.cli.main`): one left to its default stays so (a
    notebook's kernel ends on SIGTERM, whatever the library is doing), and an ignored one
    too (nohup). An ignored SIGINT stays ignored as well: a shell starts a script's
    background job (``dxt extract ... &``) so, and the Ctrl-C that stops the script is not
    meant for it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [s for s in also if signal.getsignal(s) not in (signal.SIG_IGN, signal.SIG_DFL)]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        taken.insert(0, signal.SIGINT)
    previous = {s: signal.signal(s, interrupt) for s in taken}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_unit(u: Unit, gate: commitgate.Gate) -> DayReport:
    """One unit in a worker thread, which keeps no answer charged once it is done; its
    commit goes through the run's gate."""
    with holding_answers(), gate.entered_by(u):
        return u.run()


@dataclass
class _Outcome:
    """What a run did: the units archived, failed, and left by an interrupt."""

    reports: list[DayReport] = field(default_factory=list)
    failures: list[tuple[Unit, str]] = field(default_factory=list)
    unavailable: int = 0  # failures because the server could not be reached
    abandoned: list[Unit] = field(default_factory=list)
    #: the units running when the run stopped waiting for them
    in_flight: dict[Future[DayReport], Unit] = field(default_factory=dict)
    #: the run's commits (closed when it abandons its units in flight)
    gate: commitgate.Gate = field(default_factory=commitgate.Gate)
    #: a commit of an abandoned unit was still under way when the run ended
    unsettled: bool = False
    not_started: int = 0
    interrupted: bool = False
    #: the first failure that fails every unit the same way (see :func:`run_wide`), or the
    #: server not reached for :data:`UNREACHABLE_AFTER` units in a row (``unreachable``)
    stopped_by: str | None = None
    unreachable: bool = False
    unreachable_in_a_row: int = 0


def run_units(
    units: Sequence[Unit],
    archive: Archive,
    *,
    workers: int = 4,
    refetch: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    grace_s: float = GRACE_S,
) -> int:
    """Run ``units`` (skipping complete ones unless ``refetch``); print FAILED lines and a
    summary; return the exit status (see the module docstring for Ctrl-C)."""
    refetch = refetch or archive.replace
    todo = list(units) if refetch else incomplete(archive, units)
    if todo:
        limit_malloc_arenas()
    # What the run says must not change what it does: a reader gone or a terminal hung up
    # (a write that fails) is noted, and the run goes on to its own end and exit status.
    out = cast(TextIO, SafeStream(out or sys.stdout))
    err = cast(TextIO, SafeStream(err or sys.stderr))
    progress = Progress(len(todo), stream=err, enabled=None if not quiet else False)
    # The units' fetches may wait for the answer budget: this thread's answers (the
    # catalog's) are out of it before it waits for them.
    release_answers()
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    outcome = _drive(todo, pool, max(1, workers), progress, grace_s, verbose, err)
    _print_summary(outcome, len(units) - len(todo), archive, out, err)
    if outcome.stopped_by is not None and not outcome.interrupted:
        pool.shutdown(wait=True)
        fix = (
            "check the URL and that the server is up, then rerun the same command"
            if outcome.unreachable
            else "fix it and rerun the same command"
        )
        print(
            f"dxt: error: {outcome.stopped_by}\nstopped: every other metric-day would fail the "
            f"same way ({plural(outcome.not_started, 'metric-day')} not started); {fix}",
            file=err,
        )
        return UNAVAILABLE_EXIT if outcome.unreachable else 2
    if not outcome.interrupted:
        pool.shutdown(wait=True)
        if workers > 1 and len(todo) > 1:  # days of one unit committed side by side
            from dxt_core.scan import refresh_index

            refresh_index(archive, (u.key for u in todo))
        failures = outcome.failures
        if failures and outcome.unavailable == len(failures) and not outcome.reports:
            print(
                "the server could not be reached for any metric-day: check the URL and that "
                f"it is up (exit status {UNAVAILABLE_EXIT})",
                file=err,
            )
            return UNAVAILABLE_EXIT
        return 1 if failures else 0
    if outcome.abandoned:
        # Threads cannot be stopped, and the interpreter would wait for them at exit: leave
        # now. An abandoned unit's staging is never committed (see the module docstring).
        out.flush()
        err.flush()
        os._exit(INTERRUPTED_EXIT)
    pool.shutdown(wait=True)
    return INTERRUPTED_EXIT


def _drive(
    todo: Sequence[Unit],
    pool: ThreadPoolExecutor,
    workers: int,
    progress: Progress,
    grace_s: float,
    verbose: bool,
    err: TextIO,
) -> _Outcome:
    """Run ``todo`` on ``pool``, at most ``workers`` at once, until all are done or Ctrl-C
    stops the run (see the module docstring)."""
    outcome = _Outcome()
    interrupt = Interrupt()
    pending = list(reversed(todo))  # popped from the end: the given order
    running: dict[Future[DayReport], Unit] = {}
    announced = 0
    with sigint_counted(interrupt, STOP_SIGNALS):
        while pending or running:
            # Only as many units as workers are submitted: after Ctrl-C none is left queued
            # in the pool to start behind our back.
            while (
                pending
                and not interrupt.count
                and outcome.stopped_by is None
                and len(running) < workers
            ):
                u = pending.pop()
                running[pool.submit(_run_unit, u, outcome.gate)] = u
            if interrupt.count > announced:
                announced = interrupt.count
                if interrupt.count == 1:
                    print(
                        f"\ninterrupted ({interrupt.what}): starting no more; "
                        f"{plural(len(running), 'metric-day')} in flight "
                        f"{'gets' if len(running) == 1 else 'get'} {grace_s:.0f} s to "
                        f"finish ({interrupt.what} again to abort now)",
                        file=err,
                        flush=True,
                    )
            if interrupt.count >= 2 or (outcome.stopped_by is not None and not running):
                break
            if interrupt.first_at is not None and (
                not running or time.monotonic() - interrupt.first_at >= grace_s
            ):
                break
            done, _ = wait(list(running), timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                _collect(fut, running.pop(fut), outcome, progress, verbose, err)
        outcome.in_flight = dict(running)
        if running:  # still counting signals: a further one ends the wait below
            _settle(outcome, interrupt, progress, verbose, err)
    outcome.not_started = len(pending)
    outcome.interrupted = interrupt.count > 0
    return outcome


#: Units failing in a row because the server could not be reached (each after its retries),
#: after which a run stops: a refill against a server that is down, or a stale URL, failed
#: every metric-day one by one (a year's refill: about 2 hours before it said so).
UNREACHABLE_AFTER = 5

#: How long an interrupted run waits for the commits under way of the units it abandons.
COMMIT_WAIT_S = 10.0


def _settle(
    outcome: _Outcome, interrupt: Interrupt, progress: Progress, verbose: bool, err: TextIO
) -> None:
    """The units still in flight when the run stopped waiting: none of them may begin a
    commit any more (:mod:`dxt_core.commitgate`); those that began one are waited for (up to
    :data:`COMMIT_WAIT_S`, or until one more signal) and count as done, the rest are
    abandoned, not archived."""
    gate, signals = outcome.gate, interrupt.count
    gate.close()
    deadline = time.monotonic() + COMMIT_WAIT_S
    while interrupt.count == signals and time.monotonic() < deadline:
        began = [f for f, u in outcome.in_flight.items() if u in gate.committed and not f.done()]
        if not began:
            break
        wait(began, timeout=0.1)
    for fut, u in outcome.in_flight.items():
        if fut.done() and not isinstance(fut.exception(), commitgate.Abandoned):
            _collect(fut, u, outcome, progress, verbose, err)
        else:
            outcome.abandoned.append(u)
            # its commit began: it may yet end (a stalled upload, one more signal)
            outcome.unsettled |= u in gate.committed


def _collect(
    fut: Future[DayReport],
    u: Unit,
    outcome: _Outcome,
    progress: Progress,
    verbose: bool,
    err: TextIO,
) -> None:
    """The result of one finished unit, into ``outcome``."""
    try:
        outcome.reports.append(fut.result())
        outcome.unreachable_in_a_row = 0
        progress.step(True, u.label)
    except Exception as exc:  # one unit's failure must not stop the others
        outcome.failures.append((u, one_line(exc)))
        down = isinstance(exc, SourceUnavailable)
        outcome.unavailable += down
        outcome.unreachable_in_a_row = outcome.unreachable_in_a_row + 1 if down else 0
        if outcome.stopped_by is None and run_wide(exc):
            outcome.stopped_by = one_line(exc)
        elif outcome.stopped_by is None and outcome.unreachable_in_a_row >= UNREACHABLE_AFTER:
            # the next ones would fail the same way, each after its retries
            outcome.stopped_by = (
                f"the server could not be reached for {UNREACHABLE_AFTER} metric-days in a row "
                f"(the last: {one_line(exc)})"
            )
            outcome.unreachable = True
        progress.step(False, u.label)
        if verbose and not isinstance(exc, DxtError):
            trace = "".join(traceback.format_exception(exc))
            print(masking.scrub(trace), file=err, end="")


#: Units named on the line of the units that failed with a run-wide error.
_NAMED = 8


def _print_summary(
    outcome: _Outcome, skipped: int, archive: Archive, out: TextIO, err: TextIO
) -> None:
    """The summary line (every unit counted), then a line per failed or abandoned unit."""
    reports, failures, abandoned = outcome.reports, outcome.failures, outcome.abandoned
    rows = sum(r.rows for r in reports)
    size = sum(r.bytes for r in reports)
    empty = sum(1 for r in reports if r.status == "empty")
    not_over = sum(1 for r in reports if NOT_OVER in r.extra)
    early = (
        f", {not_over} of the archived and empty days not over yet (what the source holds "
        "so far, fetched again by the next run)"
        if not_over
        else ""
    )
    skip = f", {skipped} already archived (skipped; --refetch to redo)" if skipped else ""
    said = [caveats(r.extra) for r in reports]
    replaced = sum(1 for c in said if c.get("replaced"))
    # archived bytes these commits replaced (a grown day, --replace): said with the days
    rep = (
        f"; {replaced} of them replaced an archived day, its old files kept in .versions/"
        if replaced
        else ""
    )
    cleaned = sum(1 for c in said if c.get(STRAYS_REMOVED))
    if cleaned:  # data files no manifest named (coverage --verify names them): kept, removed
        rep += (
            f"; {cleaned} of them removed data files their manifest did not name, kept in "
            ".versions/"
        )
    # refetched, and read what the archive held: nothing changed (archived or empty days)
    unchanged = sum(1 for r in reports if r.extra.get("unchanged") and r.status != "empty")
    if unchanged:
        rep += f"; {unchanged} of them unchanged (archived so already)"
    restored = sum(1 for r in reports if r.extra.get("restored"))
    if restored:
        rep += f"; {restored} of them restored (their files were missing or damaged)"
    same_empty = sum(1 for r in reports if r.extra.get("unchanged") and r.status == "empty")
    empties = f"{empty} empty" + (f" ({same_empty} unchanged)" if same_empty else "")
    stopped = (
        f", {outcome.not_started + len(abandoned)} interrupted ({outcome.not_started} not "
        f"started, {len(abandoned)} abandoned in flight)"
        if outcome.interrupted
        else f", {outcome.not_started} not started (stopped at a run-wide error)"
        if outcome.stopped_by is not None
        else ""
    )
    print(
        f"archived {plural(len(reports) - empty, 'metric-day')} ({rows} rows, {size} "
        f"bytes{rep}), {empties}{early}, {len(failures)} failed{stopped}{skip}, into "
        f"{archive.url}",
        file=out,
    )
    # The units in flight when a run-wide error came failed with it too: their lines would
    # repeat the error, which the run says once after the summary.
    wide = outcome.stopped_by if not outcome.interrupted else None
    same = [u for u, msg in failures if msg == wide]
    for u, msg in sorted(failures, key=lambda f: (f[0].key.day, f[0].label)):
        if msg != wide:
            print(f"FAILED {u.label} {u.key.day}: {msg}", file=err)
    if same:
        named = ", ".join(f"{u.label} {u.key.day}" for u in same[:_NAMED])
        more = f" and {len(same) - _NAMED} more" if len(same) > _NAMED else ""
        print(f"FAILED {named}{more}: the run-wide error below", file=err)
    for u in abandoned:
        print(f"INTERRUPTED {u.label} {u.key.day}: abandoned in flight, not archived", file=err)
    if outcome.unsettled:
        print(
            "a commit was still under way when the run stopped waiting: one of the days above "
            "may be archived after all; dxt coverage says which",
            file=err,
        )
