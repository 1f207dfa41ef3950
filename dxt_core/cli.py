"""The ``dxt`` command: extract without Airflow, check coverage, run simulators and the demo."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from dxt_core import backends as registry
from dxt_core import budget, jsonrows, masking, scan, stdio
from dxt_core import coverage as cov
from dxt_core._version import __version__
from dxt_core.archive import Archive
from dxt_core.coverage_checks import (
    UNIT_OPTIONS,
    check_archive_holds,
    check_backend_options,
    check_given_zone,
    check_root,
)
from dxt_core.coverage_table import mark, not_over, table_lines
from dxt_core.errors import ConfigError, DxtError, SourceUnavailable
from dxt_core.manifests import MANIFEST_SUFFIX, not_over_ends
from dxt_core.refill_commands import (
    JSON_GREP,
    MAX_COMMAND_LINES,
    RECONCILE_GREP,
    airflow_clear,
    day_ranges,
    name_spans,
    print_per_range,
    print_refill_commands,
    print_unit_commands,
)
from dxt_core.runner import INTERRUPTED_EXIT, STOP_SIGNALS, UNAVAILABLE_EXIT
from dxt_core.urls import redact_text, redact_url
from dxt_core.windows import check_day_order, days, parse_day

log = masking.logger("dxt_core.cli")


def coverage_backend(args: argparse.Namespace, archive: Archive) -> registry.Backend:
    """The backend ``dxt coverage`` reports on: the one named, else the one registered
    backend the archive holds data of.

    Raises:
        ConfigError: none named and the archive holds data of none, or of several (the
            message names them and how to choose).
    """
    if args.backend:
        return registry.get(args.backend)
    check_root(archive)
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
    first, last = parse_day(args.start_day), parse_day(args.end_day)
    check_day_order(first, last)  # before the archive is read (an index repair)
    archive = Archive(args.archive)
    backend = coverage_backend(args, archive)
    check_backend_options(args, backend)
    check_given_zone(args, archive, backend.name)
    cli = backend.cli_role()
    units = cli.coverage_units(args)
    day_list = list(days(first, last))
    owners: dict[str, set[str]] = getattr(args, "option_owners", None) or {}
    mine = [o for o in UNIT_OPTIONS if backend.command in owners.get(o, ())] or UNIT_OPTIONS
    check_archive_holds(archive, backend.name, units, mine)
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

        refill = [False]

        def json_rows() -> Iterator[dict[str, Any]]:
            for r in found:
                counts[r.status] += 1
                refill[0] = refill[0] or _needs_refill(r)
                yield {
                    **cli.describe_parts(r.parts),
                    "day": r.day.isoformat(),
                    "status": r.status,
                    "kept": r.kept,
                    "detail": r.detail,
                }

        jsonrows.print_json_rows(json_rows(), lambda: counts)
        return 3 if refill[0] else 0
    rows = list(cov.iter_coverage(archive, backend.name, units, day_list, args.verify, check))
    for r in rows:
        counts[r.status] += 1
    _print_coverage_table(rows, day_list, args.show_all)
    partial = sum(1 for r in rows if not_over(r))
    print(
        f"\n{len(units)} units x {len(day_list)} days: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + (
            f" ({partial} of the archived and empty ones archived before their day ended: "
            "what the source held then)"
            if partial
            else ""
        )
    )
    bad_days = sorted({r.day for r in rows if _needs_refill(r)})
    if bad_days:
        print_refill_commands(args, backend, archive, rows, bad_days)
    return 0 if not bad_days else 3


def _cmd_reconcile(
    args: argparse.Namespace,
    backend: Any,
    archive: Archive,
    units: Sequence[tuple[str, ...]],
    day_list: Sequence[dt.date],
) -> int:
    """``dxt coverage --reconcile``: the source's counts against the manifests (counts only,
    never the data). Exit 4 when the source has more than the archive (late data: the
    refill commands are printed; the failed counts, if any, are said too), 3 when a count
    failed, else 0."""
    from dxt_core.reconcile import reconcile

    cli: Any = backend.cli_role()
    if not hasattr(cli, "reconcile_counter"):
        raise ConfigError(f"{backend.command} cannot count at the source yet: no --reconcile")
    try:
        with cli.reconcile_counter(args) as counter:
            rows = reconcile(archive, backend.name, units, day_list, counter)
    except (KeyboardInterrupt, SourceUnavailable) as exc:
        done: list[Any] = getattr(exc, "reconciled", [])
        if args.json:  # the rows compared so far, in a whole document that says it stopped
            stopped = exc

            def then_stop() -> Iterator[dict[str, Any]]:
                yield from (r.as_dict() for r in done)
                raise stopped

            jsonrows.print_json_rows(then_stop(), dict)
        elif isinstance(exc, SourceUnavailable) and done:  # what was found before it stopped
            found = {r.state: 0 for r in done}
            for r in done:
                found[r.state] += 1
            total = len(units) * len(day_list)
            cut = " (it stopped there)" if len(done) < total else ""
            size = f"{len(done)} of the {total} metric-days{cut}"
            _print_reconciled(args, backend, done, found, size)
        raise
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    more = [r for r in rows if r.state == "more"]
    if args.json:
        jsonrows.print_json_rows((r.as_dict() for r in rows), lambda: counts)
    else:
        size = f"{len(units)} units x {len(day_list)} days"
        _print_reconciled(args, backend, rows, counts, size)
    if more and not args.json:
        dag_id = args.dag_id or backend.dag_id
        print(
            "\nTo refetch the metric-days that grew (a grown day is replaced; the old file is "
            "kept in .versions/):"
        )
        print_unit_commands(args, cli, more, "more")
        print_per_range(
            "or with Airflow (clears the days' metric tasks; they rerun and refetch):",
            sorted({r.day for r in more}),
            lambda a, b: airflow_clear(dag_id, backend.task_id, a, b),
        )
    if more:
        if counts.get("error") and not args.json:
            print(
                f"\nexit status 4 (more at the source), and {counts['error']} count(s) FAILED "
                "(listed above): reconcile those days again (a DAMAGED day: refetch it)"
            )
        return 4
    return 3 if counts.get("error") else 0


def _print_reconciled(
    args: argparse.Namespace,
    backend: Any,
    rows: Sequence[Any],
    counts: dict[str, int],
    size: str,
) -> None:
    """The text of a reconcile: a line per day that is not plainly equal, the days not
    archived summed up, the counts, the method and what was recorded."""
    from dxt_core.reconcile import COMPARED, DAMAGED_DETAIL

    label = {
        "more": "MORE at the source (late data: refetch)",
        "fewer": "fewer at the source (retention; archive kept: K)",
        "error": "count FAILED",
        "missing": "not archived (not counted)",
        "not over": "not over (archived before its day ended; not counted)",
        "equal": "equal",
    }
    shown: dict[str, int] = {}
    for r in rows:
        if (r.state == "equal" or r.state == "missing") and not r.detail:
            continue  # the days not archived are summed up below, after the others
        shown[r.state] = shown.get(r.state, 0) + 1
        if shown[r.state] > MAX_COMMAND_LINES:
            continue  # counted, and said below with where to find them
        what = label.get(r.state, r.state)
        if r.state == "error" and r.detail.startswith(DAMAGED_DETAIL):
            what = "DAMAGED in the archive (not compared: refetch it)"
        both = (
            f": archive {r.archive_count:,}, source {r.source_count:,}"
            if r.archive_count is not None and r.source_count is not None
            else ""
        )
        why = f" ({r.detail})" if r.detail else ""
        print(f"{what}: {'/'.join(r.parts)} {r.day}{both}{why}")
    for state, n in shown.items():
        if n > MAX_COMMAND_LINES:
            print(
                f"  ... and {n - MAX_COMMAND_LINES:,} more {label.get(state, state)} days: "
                + RECONCILE_GREP.format(status=state)
            )
    _print_not_archived(args, backend, [r for r in rows if r.state == "missing"])
    print(
        f"\nreconciled {size} against the source's counts: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    )
    methods = list(dict.fromkeys(r.method for r in rows if r.method))
    if methods:  # a job table is counted otherwise; a selector, a DST day's length differ
        n = len(methods) - 1
        others = f" (and {n} other way{'s' if n > 1 else ''}: --json gives each day's)" if n else ""
        print(f"counted with: {methods[0]}{others}")
    compared = [r for r in rows if r.state in COMPARED]
    if compared:
        recorded = sum(r.recorded for r in compared)
        print(
            f"recorded {recorded} of {len(compared)} comparisons in the archive's check "
            "records (dxt publish's datacard reports them)"
            + ("" if recorded == len(compared) else "; the others say why above")
        )


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
        groups.setdefault(tuple(day_ranges(sorted(unit_days))), []).append(parts)
    first, last = min(r.day for r in missing), max(r.day for r in missing)
    print(
        f"not archived (not counted): {len(missing):,} metric-days of {len(by_unit)} unit(s), "
        f"{first}..{last}; '{_coverage_again(args, backend, first, last)}' "
        "shows them and prints the commands that refill them:"
    )
    ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))
    for spans, units in ordered[:MAX_COMMAND_LINES]:
        who = (
            "/".join(units[0])
            if len(units) == 1
            else f"{len(units)} units (e.g. {'/'.join(min(units))})"
        )
        print(f"  {who}: " + name_spans([a if a == b else f"{a}..{b}" for a, b in spans]))
    rest = ordered[MAX_COMMAND_LINES:]
    if rest:
        days_left = sum(len(by_unit[p]) for _, units in rest for p in units)
        print(
            f"  ... and {sum(len(u) for _, u in rest)} more unit(s) lacking other days "
            f"({days_left:,} metric-days): {JSON_GREP.format(status='missing')}"
        )


#: Options of ``dxt coverage --reconcile`` that its plain coverage does not take again: the
#: reconcile itself and its output, the days (replaced), the connection (never quoted).
_RECONCILE_ONLY = {"--reconcile", "--json", "-v", "--verbose"}
_WITH_VALUE = {"--start-day", "--end-day", "--user", "--password"}


def _abbreviates(typed: str, options: set[str]) -> str:
    """The option of ``options`` that ``typed`` names, in full or as a prefix ("" if none)."""
    if typed in options:
        return typed
    if not typed.startswith("--") or len(typed) < 3:
        return ""
    hits = [o for o in options if o.startswith(typed)]
    return hits[0] if len(hits) == 1 else ""


def _shown_word(word: str) -> str:
    """A word of a command as typed, to print: a URL (``--url``'s, ``--jobs-url=...``)
    without credentials or query, as the refill commands show it."""
    name, eq, value = word.partition("=")
    if eq and name.startswith("--") and "://" in value:
        return f"{name}={redact_url(value)}"
    return redact_url(word) if "://" in word and not word.startswith("-") else word


def _coverage_again(args: argparse.Namespace, backend: Any, first: dt.date, last: dt.date) -> str:
    """The ``dxt coverage`` of the days ``first..last`` with the options that chose the
    units as given (``--catalog``, ``--sites``, ...), without the reconcile's own."""
    given: list[str] = getattr(args, "given", None) or [
        "coverage",
        backend.command,
        "--archive",
        str(args.archive),
    ]
    kept: list[str] = []
    skip = False
    for word in given:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        # as typed: argparse took a unique prefix (--pass for --password), so a prefix of
        # one of these options is that option
        dropped = _abbreviates(name, _RECONCILE_ONLY | _WITH_VALUE)
        if dropped:
            skip = dropped in _WITH_VALUE and "=" not in word
            continue
        kept.append(_shown_word(word))
    return redact_text(
        "dxt " + shlex.join([*kept, "--start-day", str(first), "--end-day", str(last)])
    )


def _needs_refill(r: Any) -> bool:
    """Whether row ``r``'s day needs a refill: missing, corrupt, or archived before it
    ended, and ended since (one still running is fetched again by the next run)."""
    if r.status in ("missing", "corrupt"):
        return True
    ends = not_over_ends(r.detail) if r.status in ("archived", "empty") else None
    return ends is not None and ends <= dt.datetime.now(dt.UTC)


def _print_coverage_table(rows: Sequence[Any], day_list: Sequence[dt.date], show_all: bool) -> None:
    for line in table_lines(rows, day_list, show_all):
        print(line)
    shown = 0
    rest: dict[str, int] = {}
    for r in rows:
        what = mark(r)
        if what in ("kept", "corrupt", "holes", "not over"):
            if shown < MAX_COMMAND_LINES:
                print(f"{what}: {'/'.join(r.parts)} {r.day}: {r.detail}")
                shown += 1
            else:
                rest[what] = rest.get(what, 0) + 1
    if rest:
        statuses = [
            s
            for w in rest
            for s in {"corrupt": ["corrupt"], "not over": ["archived", "empty"]}.get(
                w, ["archived"]
            )
        ]
        where = " or ".join(JSON_GREP.format(status=s) for s in dict.fromkeys(statuses))
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
        _print_unreadable(archive.unreadable, bad)
        return 0
    from dxt_core.index import index_path, rebuild

    report = rebuild(args.archive)
    per_source = ", ".join(f"{n} {s}" for s, n in sorted(report.sources.items()))
    print(
        f"{index_path(Archive(args.archive).root)}: {report.manifests} manifests"
        f"{' (' + per_source + ')' if per_source else ''}, {report.corrupt} unreadable, "
        f"{report.seconds:.1f} s"
        + (
            f"; removed {report.leftovers} temporary index(es) that killed rebuilds left"
            if report.leftovers
            else ""
        )
    )
    _print_unreadable(report.unreadable, report.corrupt)
    return 0


def _print_unreadable(named: Sequence[str], count: int) -> None:
    """The unreadable manifests an index rebuild named (the first ones), and where they show:
    on stderr, as the other commands' diagnostics (the summary, on stdout, counts them)."""
    for line in named:
        print(f"  unreadable: {line}", file=sys.stderr)
    if count > len(named):
        print(f"  ... and {count - len(named)} more", file=sys.stderr)
    if count:
        print(
            "Their days show as corrupt (X) in 'dxt coverage', which prints the commands that "
            "refetch them.",
            file=sys.stderr,
        )


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
    c.add_argument(
        "--verify",
        action="store_true",
        help=(
            "also check every file's sha256, and look for data files of a day that its "
            "manifest does not name"
        ),
    )
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
    owners: dict[str, set[str]] = {}  # option string -> the backends that declare it
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
            for o in action.option_strings:
                owners.setdefault(o, set()).add(backend.command)
    for first, said in helps.items():
        texts = {h for _, h in said}
        if len(texts) > 1:
            # each backend's words, without the "(backend)" they start with when alone
            c._option_string_actions[first].help = "; ".join(
                f"{b}: {re.sub(r'^[(][^)]*[)] *', '', h)}" for b, h in said if h
            )
    c.set_defaults(
        func=cmd_coverage, option_owners=owners, option_strings=[*c._option_string_actions]
    )


#: In a usage error, the value given with ``--option=`` (a mistyped or ambiguous
#: ``--pass=...``) and the word after an option naming a password, token, secret or key.
_TYPED_VALUE = re.compile(r"(--[\w-]+=)[^\s,']+")
_TYPED_SECRET = re.compile(r"(?i)(--[\w-]*(?:pass|token|secret|key)[\w-]* )(?!-)[^\s,']+")


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors repeat no value typed for a mistyped password
    option (``unrecognized arguments: --passwd <the password>``)."""

    def error(self, message: str) -> NoReturn:
        masked = _TYPED_SECRET.sub(
            rf"\1{masking.MASK}", _TYPED_VALUE.sub(rf"\1{masking.MASK}", message)
        )
        super().error(masking.scrub(masked))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``dxt`` parser; with ``only``, just that backend's ``extract`` (fast start)."""
    p = _Parser(
        prog="dxt",
        description="dxt-archive: archive HPC monitoring telemetry into plain, compressed, "
        "verifiable files.",
        epilog="exit status, the same for every backend: 0 done; 1 some units failed; 2 bad "
        "input or configuration, or standard output that could not be written (> /dev/full); "
        "3 (coverage) missing or corrupt days; 4 the server could not be reached (at all, or "
        "for 5 metric-days in a row of an extract or 5 counts in a row of coverage "
        "--reconcile, which then stop; "
        "--reconcile also exits 4 for late data, more at the source; a count that failed is 3, "
        "unless another day grew); 130 interrupted (Ctrl-C, SIGTERM or SIGHUP); 141 standard "
        "output's reader went away (| head). A command still writing its results (coverage) "
        "stops at such an output error with 141 or 2; one that had finished (an extract run "
        "always does) keeps its own status unless it was 0.",
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
        from dxt_core.dagfiles import add_dags_parser
        from dxt_core.demo import add_demo_parser

        add_dags_parser(sub)
        add_demo_parser(sub)
    _verbose_after_the_command(p)
    return p


def _verbose_after_the_command(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` taken after the command too (``dxt extract examon ... -v``), on every
    subcommand but ``simulate`` (whose options are the simulator's): the same flag, given
    either place. Its default is not set there (SUPPRESS): a subcommand's default would
    overwrite the ``-v`` given before it."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, child in action.choices.items():
            if name == "simulate" or "--verbose" in child._option_string_actions:
                continue  # an alias's parser is the same object: done once
            child.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="log each request (as dxt -v)",
            )
            _verbose_after_the_command(child)


class _LogFormat(logging.Formatter):
    """Log times in ISO 8601 with the offset (``2026-12-07T10:30:13.201+09:00``): the
    messages quote UTC and archive-zone times, and a bare local time read beside them was
    easy to take for one of those."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        when = dt.datetime.fromtimestamp(record.created).astimezone()
        return when.isoformat(timespec="milliseconds")

    def format(self, record: logging.LogRecord) -> str:
        # the whole line masked, its traceback and other libraries' records (httpx's request
        # lines under -v) included: dxt_core's loggers mask only their own messages
        return masking.scrub(super().format(record))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    budget.tune_malloc()
    stdout, stderr = sys.stdout, sys.stderr
    with contextlib.ExitStack() as nowhere:
        # closed by the caller (``>&-``, ``2>&-``): what the command says goes nowhere
        if sys.stderr is None:
            sys.stderr = nowhere.enter_context(open(os.devnull, "w"))
        sys.stdout = stdio.Stdout(stdout or nowhere.enter_context(open(os.devnull, "w")))
        try:
            return _main(argv)
        finally:
            sys.stdout, sys.stderr = stdout, stderr


def _main(argv: list[str]) -> int:  # a dxt process: large freed answers leave it at once
    try:
        # `dxt extract BACKEND ...` imports that backend's modules only.
        known = {n for b in registry.backends() for n in (b.name, b.command, *b.aliases)}
        only = argv[1] if len(argv) >= 2 and argv[0] == "extract" and argv[1] in known else None
        parser = build_parser(only)
    except DxtError as exc:  # the registry's settings (DXT_EXTRA_BACKENDS) are wrong
        print(f"dxt: error: {exc}", file=sys.stderr)
        return 2
    if len(argv) >= 2 and argv[0] == "simulate" and argv[1] not in ("-h", "--help"):
        args = parser.parse_args(argv[:2])
        return cmd_simulate(args, argv[2:])
    args = parser.parse_args(argv)
    log_to = logging.StreamHandler()
    log_to.setFormatter(_LogFormat("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[log_to])
    args.given = argv  # the command as typed (the commands it prints repeat its options)
    # as Ctrl-C: each command says what it did (the demo has its own); an ignored signal
    # stays so (nohup); restored when the command returns (main() called as a function)
    taken: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # SIGINT as it was too: a command may ignore it while it prints its summary
        taken[signal.SIGINT] = signal.getsignal(signal.SIGINT)
        for stop in STOP_SIGNALS:
            if signal.getsignal(stop) is signal.SIG_DFL:
                taken[stop] = signal.signal(stop, _stopped_by)
    try:
        return _run(args)
    finally:
        for number, handler in taken.items():
            if handler is not None:  # None: not set from Python, left as it is
                signal.signal(number, handler)


def _run(args: argparse.Namespace) -> int:
    """The command of ``args``, its errors said as one line each with their exit status
    (with ``--json``, in a document on stdout too when it had not begun one)."""
    jsonrows.new_command()
    try:
        rc: int = args.func(args)
    except SourceUnavailable as exc:  # the server is down or unreachable: one status for all
        return _failed(args, str(exc), UNAVAILABLE_EXIT)
    except DxtError as exc:
        return _failed(args, str(exc), 2)
    except BrokenPipeError:
        # the reader went away (``dxt coverage ... | head``): nothing more to say to it; the
        # interpreter's flush at exit must not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except OSError as exc:
        if getattr(sys.stdout, "failed", None) is exc:
            return stdio.output_lost(exc, None)
        # a file or folder the command needs (permissions, a full disk, a missing file a
        # setting names) that no narrower check caught: said in one line, not a traceback;
        # files are written under temporary names, so nothing partial is under a final name
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        return _failed(args, f"{exc.strerror or exc}{': ' + where if where else ''}", 2)
    except KeyboardInterrupt as exc:
        # an archive run handles Ctrl-C itself and says what it did; any other command stops
        # here: its files are written under temporary names and renamed when whole, so what
        # it had not finished is not under a final name (a rerun completes it)
        how = exc.args[0] if isinstance(exc, Stopped) else "Ctrl-C"
        told = [*([] if isinstance(exc, Stopped) or not str(exc) else [str(exc)])]
        said = "".join(f": {x}" for x in [*told, *getattr(exc, "__notes__", [])])
        print(f"dxt: interrupted ({how}) before the command finished{said}", file=sys.stderr)
        if getattr(args, "json", False):
            jsonrows.failed_before_rows(f"interrupted ({how})")
        return INTERRUPTED_EXIT
    return stdio.flushed(rc)


def _failed(args: argparse.Namespace, said: str, rc: int) -> int:
    print(f"dxt: error: {said}", file=sys.stderr)
    if getattr(args, "json", False):
        jsonrows.failed_before_rows(said)
    return rc


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: a command stops as it does on Ctrl-C (an archive run takes them as
    its first Ctrl-C, :data:`dxt_core.runner.STOP_SIGNALS`)."""


def _stopped_by(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


if __name__ == "__main__":
    raise SystemExit(main())
