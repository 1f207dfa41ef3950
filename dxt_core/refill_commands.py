"""The commands ``dxt coverage`` prints to refill an archive's missing, corrupt and unfinished
days, as the archive was made (``dxt extract`` or the backend's DAG: each manifest's
``made_by``), over ranges of days, capped at :data:`MAX_COMMAND_LINES` lines a list."""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dxt_core.archive import Archive
from dxt_core.errors import ConfigError, DxtError
from dxt_core.manifests import manifest_zone
from dxt_core.urls import redact_url
from dxt_core.windows import day_window

#: At most this many manifests are read to learn how the archive was made.
_SAMPLE_MANIFESTS = 200


def print_refill_commands(
    args: argparse.Namespace,
    backend: Any,
    archive: Archive,
    rows: Sequence[Any],
    bad_days: Sequence[dt.date],
) -> None:
    """The commands that refill ``bad_days``, as the archive was made: by ``dxt extract``
    or by the backend's DAG (each manifest's ``made_by``, :mod:`dxt_core.provenance`); both
    when the manifests do not say (written before they did). Days not over yet in the zone
    the archive's days are cut in are left out, and said: ``dxt extract`` refuses a day not
    begun and archives one not over as ``day_not_over`` (fetched again by the next run)."""
    made = _how_made(archive, backend, rows)
    unknown = not made.tools or "unknown" in made.tools
    cli = backend.module("cli")
    day_zone = made.zone or getattr(cli, "DAY_ZONE", None)
    bad_days, later = split_days_over(bad_days, day_zone)
    if later:
        _print_not_over(later, day_zone)
        not_over = set(later)
        rows = [r for r in rows if r.day not in not_over]
        if not bad_days:
            return
    # a backend whose ``dxt extract`` writes no archive days (collectd-es: one export a
    # window) is refilled by its DAG only
    if getattr(cli, "EXTRACTS_DAYS", True) and ("dxt" in made.tools or unknown):
        describe = getattr(cli, "refill_options", None)
        opts = describe(args, made.sample, _bad_units(rows)) if describe else "<connection options>"
        where = shlex.quote(redact_url(args.archive))

        def extract(a: dt.date, b: dt.date) -> str:
            days = f"--start-day {a} --end-day {b}"
            return f"dxt extract {backend.command} {opts} {days} --archive {where}"

        made.print_refill("dxt", bad_days, extract)
        _print_refetch_corrupt(_with_recorded_url(args, made), cli, rows)
    if "airflow" in made.tools or unknown or not getattr(cli, "EXTRACTS_DAYS", True):
        dag_id = args.dag_id or backend.dag_id

        def backfill(a: dt.date, b: dt.date) -> str:
            days = f"--from-date {airflow_day(a)} --to-date {airflow_day(b)}"
            return f"airflow backfill create --dag-id {dag_id} {days} --reprocess-behavior failed"

        made.print_refill("airflow", bad_days, backfill)
        print_per_range(
            "Days whose runs already succeeded (files deleted or corrupt since) need a clear. "
            + clear_scope(rows, bad_days)
            + " Airflow lists the task instances and asks before it clears them:",
            bad_days,
            lambda a, b: airflow_clear(dag_id, backend.task_id, a, b),
        )
        runs = sorted(made.runs.items())
        for (day, run_id), logical in runs[:MAX_COMMAND_LINES]:
            print(
                f"  airflow tasks clear {dag_id} -t {backend.task_id} -s {logical} -e {logical}"
                f"   # {day} was archived by run {run_id} (its 'day' param)"
            )
        if len(runs) > MAX_COMMAND_LINES:
            rest = sorted({str(logical)[:10] for _, logical in runs[MAX_COMMAND_LINES:]})
            print(
                f"  ... and {len(runs) - MAX_COMMAND_LINES} more days archived by runs of "
                f"other logical dates; the same clear for the logical dates {name_spans(rest)}"
            )


def _with_recorded_url(args: argparse.Namespace, made: _Made) -> argparse.Namespace:
    """``args`` with the source URL the manifests record (stored without credentials) when
    none was given, so that the refetch commands name the server the refill commands do."""
    if getattr(args, "url", None) or not made.url:
        return args
    return argparse.Namespace(**{**vars(args), "url": made.url})


#: At most this many lines of a kind are printed (commands of one list, corrupt days' details,
#: groups of units not archived); the rest is counted and said where to find.
MAX_COMMAND_LINES = 20

#: How ``--json`` output is searched for the rows of one status (one row a line); a
#: reconcile's rows say their ``state`` (:data:`RECONCILE_GREP`).
JSON_GREP = 'dxt coverage ... --json | grep \'"status": "{status}"\''
RECONCILE_GREP = 'dxt coverage ... --reconcile --json | grep \'"state": "{status}"\''


def _print_refetch_corrupt(args: argparse.Namespace, cli: Any, rows: Sequence[Any]) -> None:
    """Per unit, the commands that refetch its corrupt days: the refill commands skip a day
    whose file still has its manifest's size (a changed byte, found by ``--verify``)."""
    corrupt = [r for r in rows if r.status == "corrupt"]
    if not corrupt or not hasattr(cli, "refetch_command"):
        return
    print(
        "A corrupt day whose file still has its manifest's size is skipped by those commands "
        "as archived; refetch the corrupt days with:"
    )
    print_unit_commands(args, cli, corrupt, "corrupt")


def print_unit_commands(args: argparse.Namespace, cli: Any, rows: Sequence[Any], what: str) -> None:
    """``cli.refetch_command`` for each unit of ``rows`` (of a ``what`` status) and run of its
    days, at most :data:`MAX_COMMAND_LINES`; then how many more, for how many units and days,
    and where their rows are (the command of each follows from its unit and days)."""
    by_unit: dict[tuple[str, ...], list[dt.date]] = {}
    for r in rows:
        by_unit.setdefault(r.parts, []).append(r.day)
    grep = RECONCILE_GREP if rows and hasattr(rows[0], "state") else JSON_GREP
    todo = [
        (parts, a, b)
        for parts, day_list in sorted(by_unit.items())
        for a, b in day_ranges(sorted(set(day_list)))
    ]
    for parts, a, b in todo[:MAX_COMMAND_LINES]:
        print(f"  {cli.refetch_command(args, parts, a.isoformat(), b.isoformat())}")
    rest = todo[MAX_COMMAND_LINES:]
    if rest:
        units = {parts for parts, _, _ in rest}
        day_count = sum((b - a).days + 1 for _, a, b in rest)
        print(
            f"  ... and {len(rest)} more, the same command for each of {len(units)} more "
            f"unit(s) and run of days ({day_count} metric-days, "
            f"{min(a for _, a, _ in rest)}..{max(b for _, _, b in rest)}); the {what} rows "
            f"name each unit and day: {grep.format(status=what)}"
        )


def _bad_units(rows: Sequence[Any]) -> dict[tuple[str, ...], dt.date | None]:
    """The units with missing or corrupt days, each with a day of it that has a manifest
    (None: none in the range), for a backend's ``refill_options``."""
    with_manifest: dict[tuple[str, ...], dt.date] = {}
    for r in rows:
        if r.status != "missing":
            with_manifest.setdefault(r.parts, r.day)
    bad = sorted({r.parts for r in rows if r.status in ("missing", "corrupt")})
    return {parts: with_manifest.get(parts) for parts in bad}


@dataclass
class _Made:
    """What made the archive, as its manifests say (:func:`_how_made`)."""

    #: the tools that wrote them (``dxt``, ``airflow``, ``unknown``)
    tools: set[str] = field(default_factory=set)
    #: a manifest written by ``dxt extract``
    sample: dict[str, Any] | None = None
    #: the Airflow runs of another logical date that archived a corrupt day ((day, run id)
    #: -> logical date)
    runs: dict[tuple[dt.date, str], str] = field(default_factory=dict)
    #: the zone the days are cut in (None: no manifest read says)
    zone: str | None = None
    #: the source URL the manifests record (``source_url``, stored without credentials):
    #: the sample's, else the first read's
    url: str | None = None

    def print_refill(
        self, tool: str, day_list: Sequence[dt.date], command: Callable[[dt.date, dt.date], str]
    ) -> None:
        """The commands that refill ``day_list`` with ``tool`` (:data:`_REFILL_WAYS`), under a
        header that says when ``tool`` is how the archive was made."""
        what, skips_done = _REFILL_WAYS[tool]
        made_so = " (as this archive was made):" if tool in self.tools else ":"
        print_per_range(f"\nTo refill {what}{made_so}", day_list, command, skips_done)


#: A refill tool's header (what it refills, with what) and what its one command over all the
#: days skips (:func:`print_per_range`).
_REFILL_WAYS = {
    "dxt": (
        "the missing and corrupt metric-days with the dxt command",
        "skipping the days archived",
    ),
    "airflow": ("them with Airflow", "rerunning only the days whose runs failed or are missing"),
}


def _how_made(archive: Archive, backend: Any, rows: Sequence[Any]) -> _Made:
    """What made the archive, from the manifests of ``rows`` (at most
    :data:`_SAMPLE_MANIFESTS`, and every corrupt day's)."""
    from dxt_core.archive import DayKey
    from dxt_core.provenance import MADE_BY

    made = _Made()
    read = 0
    for r in rows:
        if r.status == "missing" or (read >= _SAMPLE_MANIFESTS and r.status != "corrupt"):
            continue
        try:
            doc = archive.read_manifest(DayKey(backend.name, r.parts, r.day))
        except (DxtError, OSError):
            continue
        read += 1
        made.zone = made.zone or manifest_zone(doc)
        made_by = doc.get(MADE_BY) if isinstance(doc, dict) else None
        tool = made_by.get("tool") if isinstance(made_by, dict) else None
        made.tools.add(str(tool) if tool else "unknown")
        url = doc.get("source_url") if isinstance(doc, dict) else None
        if isinstance(url, str) and url:
            made.url = made.url or url
        if tool == "dxt" and made.sample is None:
            made.sample = doc
            if isinstance(url, str) and url:
                made.url = url
        if r.status == "corrupt" and tool == "airflow" and isinstance(made_by, dict):
            logical = str(made_by.get("logical_date") or "")
            if logical and logical[:10] != r.day.isoformat():
                made.runs[(r.day, str(made_by.get("run_id")))] = logical
    return made


#: The zone whose days end last (UTC-12; the ``Etc`` names have the sign reversed): a day over
#: there is over everywhere, as a refill takes it when nothing says the archive's zone.
_LAST_ZONE = "Etc/GMT+12"


def split_days_over(
    day_list: Sequence[dt.date], day_zone: str | None, now: dt.datetime | None = None
) -> tuple[list[dt.date], list[dt.date]]:
    """``day_list`` (in order) split into the days that have ended in ``day_zone`` by
    ``now`` and those that have not; with no zone, a day is over once it is over everywhere
    on Earth."""
    now = now or dt.datetime.now(dt.UTC)
    over: list[dt.date] = []
    later: list[dt.date] = []
    for day in day_list:
        try:
            ended = day_window(day, day_zone or _LAST_ZONE).end <= now
        except ConfigError:  # a day the zone skipped (Pacific/Apia 2011-12-30): long past
            ended = True
        (over if ended else later).append(day)
    return over, later


def _print_not_over(later: Sequence[dt.date], day_zone: str | None) -> None:
    """Say which missing or corrupt days the refill commands leave out, not being over."""
    where = (
        f"in {day_zone}"
        if day_zone
        else "everywhere on Earth (no manifest says the archive's zone; taken as UTC-12)"
    )
    spans = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in day_ranges(later))
    print(
        f"\n{len(later)} missing or corrupt day(s) not over yet {where}, left out of the "
        f"refill commands: {spans}; refill them once they have ended"
    )


def airflow_day(d: dt.date) -> str:
    """Day ``d`` as Airflow's CLI must be given it: the logical date of its run, midnight UTC
    (dxt_core.airflow.runs), with the offset written out. A bare date is read in Airflow's
    ``[core] default_timezone``: under Europe/Rome, ``2021-03-28`` is 2021-03-27 23:00 UTC,
    and a backfill or clear of that one day finds no run or the day before."""
    return f"{d.isoformat()}T00:00:00+00:00"


def airflow_clear(dag_id: str, task_id: str, first: dt.date, last: dt.date) -> str:
    """The ``airflow tasks clear`` command that reruns ``task_id`` for ``first``..``last``:
    every mapped instance of it (the CLI cannot choose map indexes), so without ``-y``:
    Airflow lists them and asks."""
    return (
        f"airflow tasks clear {dag_id} -t {task_id} -s {airflow_day(first)} -e {airflow_day(last)}"
    )


def clear_scope(rows: Sequence[Any], days: Sequence[dt.date]) -> str:
    """What a clear of ``days`` reruns, against what needs it: every unit's task of each day
    (``rows``: the coverage's, one a unit and day)."""
    wanted = set(days)
    units = len({r.parts for r in rows})
    bad = sum(1 for r in rows if r.day in wanted and r.status in ("missing", "corrupt"))
    return (
        f"A clear reruns every metric task of each day ({units:,} a day, "
        f"{units * len(wanted):,} in all) where {bad:,} need it; the coverage view's Refill "
        "clears only those mapped tasks."
    )


def print_per_range(
    header: str,
    day_list: Sequence[dt.date],
    command: Callable[[dt.date, dt.date], str],
    skips_done: str = "",
) -> None:
    """``header``, then ``command(first, last)`` for each range of consecutive days, at most
    :data:`MAX_COMMAND_LINES`. The rest: one command over all of them when the command
    ``skips_done`` (says what it skips), else their ranges on one line."""
    print(header)
    ranges = day_ranges(day_list)
    if len(ranges) <= MAX_COMMAND_LINES:
        for a, b in ranges:
            print(f"  {command(a, b)}")
        return
    for a, b in ranges[: MAX_COMMAND_LINES - 1]:
        print(f"  {command(a, b)}")
    rest = ranges[MAX_COMMAND_LINES - 1 :]
    first, last = rest[0][0], rest[-1][1]
    if skips_done:
        print(
            f"  # and {len(rest)} more ranges of days ({first}..{last}); this one covers "
            f"them all, {skips_done}:"
        )
        print(f"  {command(first, last)}")
    else:
        print(
            f"  # and {len(rest)} more ranges of days, the same command for each: "
            + name_spans([a if a == b else f"{a}..{b}" for a, b in rest])
        )


def name_spans(names: Sequence[object]) -> str:
    """``names`` joined, at most :data:`MAX_COMMAND_LINES` of them, then how many more."""
    shown = ", ".join(str(n) for n in names[:MAX_COMMAND_LINES])
    more = len(names) - MAX_COMMAND_LINES
    return shown + (f" and {more} more" if more > 0 else "")


def day_ranges(day_list: Sequence[dt.date]) -> list[tuple[dt.date, dt.date]]:
    out: list[tuple[dt.date, dt.date]] = []
    for d in day_list:
        if out and (d - out[-1][1]).days == 1:
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out
