"""The ``dxt`` command: extract without Airflow, check coverage, run simulators and the demo."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dxt_core import backends as registry
from dxt_core import coverage as cov
from dxt_core import scan
from dxt_core._version import __version__
from dxt_core.archive import Archive
from dxt_core.errors import ConfigError, DxtError, SourceUnavailable
from dxt_core.jsonrows import print_json_rows
from dxt_core.manifests import MANIFEST_SUFFIX, manifest_zone
from dxt_core.runner import INTERRUPTED_EXIT, UNAVAILABLE_EXIT
from dxt_core.urls import redact_url
from dxt_core.windows import day_window, days, parse_day

log = logging.getLogger("dxt_core.cli")


def _check_root(archive: Archive) -> None:
    """Raise ConfigError unless a directory archive's root is a directory."""
    if archive.remote:
        return
    root = archive.root
    if not root.exists():
        raise ConfigError(f"archive root {root} does not exist: check --archive")
    if not root.is_dir():
        raise ConfigError(f"archive root {root} is not a directory: check --archive")


def check_archive_holds(archive: Archive, source: str, units: Sequence[Sequence[str]]) -> None:
    """Raise ConfigError unless ``archive`` holds something of ``source`` for ``units``.

    Without this, a mistyped --archive path reads as "everything missing" and the refill
    commands would ask to fetch it all again.
    """
    _check_root(archive)
    if not archive.holds(source):
        where, lacks = (
            (archive.url, f"object under {archive.url}/{source}/")
            if archive.remote
            else (str(archive.root), f"*{MANIFEST_SUFFIX} under {archive.root / source}")
        )
        raise ConfigError(
            f"archive root {where} holds no {source} archive (no {lacks}): check --archive"
        )
    if archive.remote:
        return
    root = archive.root
    top = root / source
    if not any(root.joinpath(source, *parts).is_dir() for parts in units):
        example = f" (e.g. {root.joinpath(source, *units[0])})" if units else ""
        raise ConfigError(
            f"none of the {len(units)} units asked for has a directory under {top}{example}: "
            "check the options that choose them (--catalog, --format, --sites, --metrics, "
            "--families)"
        )


def coverage_backend(args: argparse.Namespace, archive: Archive) -> registry.Backend:
    """The backend ``dxt coverage`` reports on: the one named, else the one registered
    backend the archive holds data of.

    Raises:
        ConfigError: none named and the archive holds data of none, or of several (the
            message names them and how to choose).
    """
    if args.backend:
        return registry.get(args.backend)
    _check_root(archive)
    every = registry.backends()
    held = [b for b in every if archive.holds(b.name)]
    if len(held) == 1:
        return held[0]
    if held:
        names = ", ".join(b.command for b in held)
        raise ConfigError(
            f"archive root {archive.url} holds archives of {len(held)} backends ({names}): "
            f"name one, e.g. 'dxt coverage {held[0].command} --archive {archive.url} ...'"
        )
    names = ", ".join(b.command for b in every)
    raise ConfigError(
        f"archive root {archive.url} holds no archive of any backend ({names}: no "
        f"*{MANIFEST_SUFFIX} under any of their directories): check --archive"
    )


def cmd_coverage(args: argparse.Namespace) -> int:
    archive = Archive(args.archive)
    backend = coverage_backend(args, archive)
    cli = backend.cli_role()
    units = cli.coverage_units(args)
    first, last = parse_day(args.start_day), parse_day(args.end_day)
    day_list = list(days(first, last))
    check_archive_holds(archive, backend.name, units)
    # an index repair (units changed outside dxt) and a --verify pass say how they go
    scan.repair_notice = cov.stderr_notice
    check = cov.verify_options(args)
    # from the manifest index when the archive has one (--verify reads every manifest)
    if getattr(args, "reconcile", False):
        return _cmd_reconcile(args, backend, archive, units, day_list)
    counts: dict[str, int] = {"archived": 0, "empty": 0, "missing": 0, "corrupt": 0}
    if args.json:
        # streamed: the rows are made, counted and written one at a time (memory does not
        # grow with them), the counts after them
        found = cov.iter_coverage(archive, backend.name, units, day_list, args.verify, check)

        def json_rows() -> Iterator[dict[str, Any]]:
            for r in found:
                counts[r.status] += 1
                yield {
                    **cli.describe_parts(r.parts),
                    "day": r.day.isoformat(),
                    "status": r.status,
                    "kept": r.kept,
                    "detail": r.detail,
                }

        print_json_rows(json_rows(), lambda: counts)
        return 3 if counts["missing"] or counts["corrupt"] else 0
    rows = list(cov.iter_coverage(archive, backend.name, units, day_list, args.verify, check))
    for r in rows:
        counts[r.status] += 1
    _print_coverage_table(rows, day_list, args.show_all)
    print(
        f"\n{len(units)} units x {len(day_list)} days: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    bad_days = sorted({r.day for r in rows if r.status in ("missing", "corrupt")})
    if bad_days:
        print_refill_commands(args, backend, archive, rows, bad_days)
    return 0 if not bad_days else 3


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
            days = f"--from-date {a} --to-date {b}"
            return f"airflow backfill create --dag-id {dag_id} {days} --reprocess-behavior failed"

        made.print_refill("airflow", bad_days, backfill)
        _print_per_range(
            "Days whose runs already succeeded (files deleted or corrupt since) need a clear; "
            "it reruns that day's metric tasks, which rewrite identical files:",
            bad_days,
            lambda a, b: f"airflow tasks clear {dag_id} -t {backend.task_id} -s {a} -e {b} -y",
        )
        runs = sorted(made.runs.items())
        for (day, run_id), logical in runs[:MAX_COMMAND_LINES]:
            print(
                f"  airflow tasks clear {dag_id} -t {backend.task_id} -s {logical} -e {logical} "
                f"-y   # {day} was archived by run {run_id} (its 'day' param)"
            )
        if len(runs) > MAX_COMMAND_LINES:
            rest = sorted({str(logical)[:10] for _, logical in runs[MAX_COMMAND_LINES:]})
            print(
                f"  ... and {len(runs) - MAX_COMMAND_LINES} more days archived by runs of "
                f"other logical dates; the same clear for the logical dates {_spans(rest)}"
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

#: How ``--json`` output is searched for the rows of one status (one row a line).
_JSON_GREP = 'dxt coverage ... --json | grep \'"status": "{status}"\''


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
    _print_unit_commands(args, cli, corrupt, "corrupt")


def _print_unit_commands(
    args: argparse.Namespace, cli: Any, rows: Sequence[Any], what: str
) -> None:
    """``cli.refetch_command`` for each unit of ``rows`` (of a ``what`` status) and run of its
    days, at most :data:`MAX_COMMAND_LINES`; then how many more, for how many units and days,
    and where their rows are (the command of each follows from its unit and days)."""
    by_unit: dict[tuple[str, ...], list[dt.date]] = {}
    for r in rows:
        by_unit.setdefault(r.parts, []).append(r.day)
    todo = [
        (parts, a, b)
        for parts, day_list in sorted(by_unit.items())
        for a, b in _ranges(sorted(set(day_list)))
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
            f"name each unit and day: {_JSON_GREP.format(status=what)}"
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
        _print_per_range(f"\nTo refill {what}{made_so}", day_list, command, skips_done)


#: A refill tool's header (what it refills, with what) and what its one command over all the
#: days skips (:func:`_print_per_range`).
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
        (over if day_window(day, day_zone or _LAST_ZONE).end <= now else later).append(day)
    return over, later


def _print_not_over(later: Sequence[dt.date], day_zone: str | None) -> None:
    """Say which missing or corrupt days the refill commands leave out, not being over."""
    where = (
        f"in {day_zone}"
        if day_zone
        else "everywhere on Earth (no manifest says the archive's zone; taken as UTC-12)"
    )
    spans = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in _ranges(later))
    print(
        f"\n{len(later)} missing or corrupt day(s) not over yet {where}, left out of the "
        f"refill commands: {spans}; refill them once they have ended"
    )


def _print_per_range(
    header: str,
    day_list: Sequence[dt.date],
    command: Callable[[dt.date, dt.date], str],
    skips_done: str = "",
) -> None:
    """``header``, then ``command(first, last)`` for each range of consecutive days, at most
    :data:`MAX_COMMAND_LINES`. The rest: one command over all of them when the command
    ``skips_done`` (says what it skips), else their ranges on one line."""
    print(header)
    ranges = _ranges(day_list)
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
            + _spans([a if a == b else f"{a}..{b}" for a, b in rest])
        )


def _spans(names: Sequence[object]) -> str:
    """``names`` joined, at most :data:`MAX_COMMAND_LINES` of them, then how many more."""
    shown = ", ".join(str(n) for n in names[:MAX_COMMAND_LINES])
    more = len(names) - MAX_COMMAND_LINES
    return shown + (f" and {more} more" if more > 0 else "")


def _cmd_reconcile(
    args: argparse.Namespace,
    backend: Any,
    archive: Archive,
    units: Sequence[tuple[str, ...]],
    day_list: Sequence[dt.date],
) -> int:
    """``dxt coverage --reconcile``: the source's counts against the manifests (counts only,
    never the data). Exit 4 when the source has more than the archive (late data: the
    refill commands are printed), 3 when a count failed, else 0."""
    from dxt_core.reconcile import COMPARED, reconcile

    cli: Any = backend.cli_role()
    if not hasattr(cli, "reconcile_counter"):
        raise ConfigError(f"{backend.command} cannot count at the source yet: no --reconcile")
    with cli.reconcile_counter(args) as counter:
        rows = reconcile(archive, backend.name, units, day_list, counter)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    more = [r for r in rows if r.state == "more"]
    if args.json:
        print_json_rows((r.as_dict() for r in rows), lambda: counts)
    else:
        label = {
            "more": "MORE at the source (late data: refetch)",
            "fewer": "fewer at the source (retention; archive kept: K)",
            "error": "count FAILED",
            "missing": "not archived (not counted)",
            "equal": "equal",
        }
        for r in rows:
            if (r.state == "equal" or r.state == "missing") and not r.detail:
                continue  # the days not archived are summed up below, after the others
            both = (
                f": archive {r.archive_count:,}, source {r.source_count:,}"
                if r.archive_count is not None and r.source_count is not None
                else ""
            )
            why = f" ({r.detail})" if r.detail else ""
            print(f"{label.get(r.state, r.state)}: {'/'.join(r.parts)} {r.day}{both}{why}")
        _print_not_archived(args, backend, [r for r in rows if r.state == "missing"])
        print(
            f"\nreconciled {len(units)} units x {len(day_list)} days against the source's "
            "counts: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        )
        method = next((r.method for r in rows if r.method), "")
        if method:
            print(f"counted with: {method}")
        compared = [r for r in rows if r.state in COMPARED]
        if compared:
            recorded = sum(r.recorded for r in compared)
            print(
                f"recorded {recorded} of {len(compared)} comparisons in the archive's check "
                "records (dxt publish's datacard reports them)"
                + ("" if recorded == len(compared) else "; the others say why above")
            )
    if more and not args.json:
        dag_id = args.dag_id or backend.dag_id
        print(
            "\nTo refetch the metric-days that grew (a grown day is replaced; the old file is "
            "kept in .versions/):"
        )
        _print_unit_commands(args, cli, more, "more")
        _print_per_range(
            "or with Airflow (clears the days' metric tasks; they rerun and refetch):",
            sorted({r.day for r in more}),
            lambda a, b: f"airflow tasks clear {dag_id} -t {backend.task_id} -s {a} -e {b} -y",
        )
    if more:
        return 4
    return 3 if counts.get("error") else 0


def _print_not_archived(args: argparse.Namespace, backend: Any, missing: Sequence[Any]) -> None:
    """The reconcile's days not archived, summed up: the units grouped by the days they lack
    (at most :data:`MAX_COMMAND_LINES` groups), and the ``dxt coverage`` that refills them."""
    if not missing:
        return
    by_unit: dict[tuple[str, ...], list[dt.date]] = {}
    for r in missing:
        by_unit.setdefault(r.parts, []).append(r.day)
    groups: dict[tuple[tuple[dt.date, dt.date], ...], list[tuple[str, ...]]] = {}
    for parts, unit_days in by_unit.items():
        groups.setdefault(tuple(_ranges(sorted(unit_days))), []).append(parts)
    first, last = min(r.day for r in missing), max(r.day for r in missing)
    print(
        f"not archived (not counted): {len(missing):,} metric-days of {len(by_unit)} unit(s), "
        f"{first}..{last}; 'dxt coverage {backend.command} --archive "
        f"{shlex.quote(redact_url(args.archive))} --start-day {first} --end-day {last}' "
        "shows them and prints the commands that refill them:"
    )
    ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))
    for spans, units in ordered[:MAX_COMMAND_LINES]:
        who = (
            "/".join(units[0])
            if len(units) == 1
            else f"{len(units)} units (e.g. {'/'.join(min(units))})"
        )
        print(f"  {who}: " + _spans([a if a == b else f"{a}..{b}" for a, b in spans]))
    rest = ordered[MAX_COMMAND_LINES:]
    if rest:
        days_left = sum(len(by_unit[p]) for _, units in rest for p in units)
        print(
            f"  ... and {sum(len(u) for _, u in rest)} more unit(s) lacking other days "
            f"({days_left:,} metric-days): {_JSON_GREP.format(status='missing')}"
        )


def _ranges(day_list: Sequence[dt.date]) -> list[tuple[dt.date, dt.date]]:
    out: list[tuple[dt.date, dt.date]] = []
    for d in day_list:
        if out and (d - out[-1][1]).days == 1:
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out


_MARK = {"archived": "#", "empty": "o", "missing": ".", "corrupt": "X", "kept": "K", "holes": "h"}


def _print_coverage_table(rows: Sequence[Any], day_list: Sequence[dt.date], show_all: bool) -> None:
    by_unit: dict[tuple[str, ...], list[str]] = {}
    for r in rows:
        holes = r.status == "archived" and r.detail.startswith("holes:")
        by_unit.setdefault(r.parts, []).append("kept" if r.kept else "holes" if holes else r.status)
    print(
        "legend: # archived  h archived with holes (unreadable points, retried)  o empty  "
        ". missing  X corrupt  K kept (the source has fewer rows; the archive was kept)   "
        f"days {day_list[0]}..{day_list[-1]}"
    )
    for parts, statuses in by_unit.items():
        if not show_all and all(s in ("archived", "empty") for s in statuses):
            continue
        marks = "".join(_MARK[s] for s in statuses)
        print(f"{'/'.join(parts):<60} {marks}")
    shown = 0
    rest: dict[str, int] = {}
    for r in rows:
        if r.status == "corrupt" or r.kept or r.detail.startswith("holes:"):
            what = "kept" if r.kept else "corrupt" if r.status == "corrupt" else "holes"
            if shown < MAX_COMMAND_LINES:
                print(f"{what}: {'/'.join(r.parts)} {r.day}: {r.detail}")
                shown += 1
            else:
                rest[what] = rest.get(what, 0) + 1
    if rest:
        statuses = ["corrupt" if w == "corrupt" else "archived" for w in rest]
        where = " or ".join(_JSON_GREP.format(status=s) for s in dict.fromkeys(statuses))
        print(
            f"... and {sum(rest.values())} more days with a detail ("
            + ", ".join(f"{n} {w}" for w, n in sorted(rest.items()))
            + f"); every row with its detail: {where}"
        )


def cmd_index_rebuild(args: argparse.Namespace) -> int:
    archive = Archive(args.archive)
    if archive.remote:  # an S3 archive: one index object per unit, from a listing
        from dxt_core.store.s3 import S3Archive

        assert isinstance(archive, S3Archive)
        t0 = time.perf_counter()
        n, bad = archive.rebuild_index()
        print(
            f"{archive.url}/.dxt/index/: {n} manifests, {bad} unreadable, "
            f"{time.perf_counter() - t0:.1f} s"
        )
        return 0
    from dxt_core.index import index_path, rebuild

    report = rebuild(args.archive)
    per_source = ", ".join(f"{n} {s}" for s, n in sorted(report.sources.items()))
    print(
        f"{index_path(Archive(args.archive).root)}: {report.manifests} manifests"
        f"{' (' + per_source + ')' if per_source else ''}, {report.corrupt} unreadable, "
        f"{report.seconds:.1f} s"
    )
    return 0


def add_index_parser(sub: Any) -> None:
    """``dxt index rebuild --archive ROOT``."""
    from dxt_core.index import INDEX_NAME

    ix = sub.add_parser(
        "index",
        help="the manifest index that coverage reads (rebuild it from the manifests)",
        description=f"The archive's manifest index (<archive>/{INDEX_NAME}) is updated by "
        "every commit and read by 'dxt coverage' and the Airflow coverage view. 'rebuild' "
        "recreates it from the manifests (after copying an archive, or if an update failed).",
    )
    actions = ix.add_subparsers(dest="action", required=True)
    rb = actions.add_parser("rebuild", help="recreate the index from every manifest")
    rb.add_argument(
        "--archive", required=True, help="archive root: a directory or s3://bucket/prefix"
    )
    rb.set_defaults(func=cmd_index_rebuild)


def cmd_simulate(args: argparse.Namespace, rest: list[str]) -> int:
    backend = registry.get(args.backend)
    if not backend.has_simulator():
        raise ConfigError(f"{backend.command} has no simulator")
    return backend.simulator_role().main(rest)


def add_coverage_parser(sub: Any, backend_options: bool = True) -> None:
    """``dxt coverage [BACKEND] --archive ROOT --start-day D --end-day D ...``, with every
    backend's own options (``backend_options``)."""
    c = sub.add_parser(
        "coverage",
        help="archived / empty / missing metric-days, and how to refill them",
        description="Report, per metric and day, archived / empty / missing / corrupt (and "
        "kept), from the archive's manifest index when it has one (checked against the "
        "directories), else from the manifests; --verify reads every manifest. Exit status "
        "3 when anything is missing or corrupt, 2 when the archive root does not exist or "
        "holds nothing of that source (with no source named: data of none, or of several).",
    )
    names = [b.command for b in registry.backends()]
    c.add_argument(
        "backend",
        nargs="?",
        help=f"which source: {', '.join(names)} (default: the one whose data the archive "
        "holds; an archive of several needs it named)",
    )
    c.add_argument(
        "--archive", required=True, help="archive root: a directory or s3://bucket/prefix"
    )
    c.add_argument("--start-day", required=True)
    c.add_argument("--end-day", required=True)
    c.add_argument("--verify", action="store_true", help="also check every file's sha256")
    c.add_argument("--workers", type=int, default=cov.VERIFY_WORKERS, help=cov.WORKERS_HELP)
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--all", dest="show_all", action="store_true", help="list complete units too")
    c.add_argument("--dag-id", help="DAG named in the refill commands (default: the backend's)")
    c.add_argument(
        "--reconcile",
        action="store_true",
        help="ask the source (--url ...) for its count of every archived metric-day, counts "
        "only, never the data: equal, more at the source (late data: exit 4, with the "
        "commands that refetch), fewer (retention: the archive is kept, shown K)",
    )
    # Backends share an option when they mean the same by it (--metrics, --password): the
    # first one's action is kept, and its help names each backend's own words when they
    # differ (a password's variable, a default).
    helps: dict[str, list[tuple[str, str]]] = {}
    for backend in registry.backends() if backend_options else []:
        shared = argparse.ArgumentParser(add_help=False)
        cli = backend.cli_role()
        cli.add_coverage_arguments(shared)
        if hasattr(cli, "add_reconcile_arguments"):  # optional: --reconcile's options
            cli.add_reconcile_arguments(shared)
        for action in shared._actions:
            if not action.option_strings:
                continue
            first = action.option_strings[0]
            if not any(s in c._option_string_actions for s in action.option_strings):
                c._add_action(action)
            helps.setdefault(first, []).append((backend.command, action.help or ""))
    for first, said in helps.items():
        texts = {h for _, h in said}
        if len(texts) > 1:
            # each backend's words, without the "(backend)" they start with when alone
            c._option_string_actions[first].help = "; ".join(
                f"{b}: {re.sub(r'^[(][^)]*[)] *', '', h)}" for b, h in said if h
            )
    c.set_defaults(func=cmd_coverage)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``dxt`` parser; with ``only``, just that backend's ``extract`` (fast start)."""
    p = argparse.ArgumentParser(
        prog="dxt",
        description="dxt-archive: archive HPC monitoring telemetry into plain, compressed, "
        "verifiable files.",
        epilog="exit status, the same for every backend: 0 done; 1 some units failed; 2 bad "
        "input or configuration; 3 (coverage) missing or corrupt days; 4 the server could not "
        "be reached (coverage --reconcile: late data, more at the source; a count that "
        "failed is 3); 130 interrupted (Ctrl-C).",
    )
    p.add_argument("--version", action="version", version=f"dxt-archive {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log each request")
    sub = p.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("extract", help="extract telemetry into the archive (no Airflow)")
    exs = ex.add_subparsers(dest="backend", required=True)
    for backend in registry.backends():
        if only is None or only in (backend.name, backend.command, *backend.aliases):
            backend.cli_role().add_extract_parser(exs)

    add_coverage_parser(sub, backend_options=only is None)

    if only is None:
        add_index_parser(sub)
        from dxt_core.publish.cli import add_publish_parser

        add_publish_parser(sub)

    s = sub.add_parser(
        "simulate",
        help="run a backend simulator (for demos and tests)",
        description="Run a simulator; options after the backend name go to it "
        "(dxt simulate BACKEND --help).",
    )
    s.add_argument("backend", choices=[b.command for b in registry.backends() if b.has_simulator()])
    s.set_defaults(func=None)

    if only is None:
        from dxt_core.demo import add_demo_parser

        add_demo_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `dxt extract BACKEND ...` imports that backend's modules only.
    known = {n for b in registry.backends() for n in (b.name, b.command, *b.aliases)}
    only = argv[1] if len(argv) >= 2 and argv[0] == "extract" and argv[1] in known else None
    parser = build_parser(only)
    if len(argv) >= 2 and argv[0] == "simulate" and argv[1] not in ("-h", "--help"):
        args = parser.parse_args(argv[:2])
        return cmd_simulate(args, argv[2:])
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        rc: int = args.func(args)
        sys.stdout.flush()  # a reader gone (BrokenPipeError) is seen here, not at exit
        return rc
    except SourceUnavailable as exc:  # the server is down or unreachable: one status for all
        print(f"dxt: error: {exc}", file=sys.stderr)
        return UNAVAILABLE_EXIT
    except DxtError as exc:
        print(f"dxt: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``dxt coverage ... | head``): nothing more to say to it; the
        # interpreter's flush at exit must not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except KeyboardInterrupt as exc:
        # an archive run handles Ctrl-C itself and says what it did; any other command stops
        # here: its files are written under temporary names and renamed when whole, so what
        # it had not finished is not under a final name (a rerun completes it)
        said = f": {exc}" if str(exc) else ""
        print(f"dxt: interrupted (Ctrl-C) before the command finished{said}", file=sys.stderr)
        return INTERRUPTED_EXIT


if __name__ == "__main__":
    raise SystemExit(main())
