"""``dxt extract promrange`` and what ``dxt coverage promrange`` checks."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.runner import Unit, run_units
from dxt_core.runner import add_arguments as add_run_arguments
from dxt_core.windows import days, parse_day
from tests.toy_backend.promrange.archive_day import archive_promrange_day
from tests.toy_backend.promrange.connection import SPEC
from tests.toy_backend.promrange.source import PromRangeSource


def _metrics(args: argparse.Namespace) -> list[str]:
    return [m.strip() for m in (args.metrics or "").split(",") if m.strip()]


def cmd_extract(args: argparse.Namespace) -> int:
    conn = SPEC.from_cli(args)
    archive = Archive(args.archive, replace=args.replace)
    first = parse_day(args.start_day)
    last = parse_day(args.end_day) if args.end_day else first

    def unit(metric: str, day: dt.date) -> Unit:
        def run() -> DayReport:
            with PromRangeSource(conn) as source:
                return archive_promrange_day(source, metric, day, archive)

        return Unit(DayKey("promrange", (metric,), day), run)

    units = [unit(m, d) for d in days(first, last) for m in _metrics(args)]
    return run_units(units, archive, refetch=args.refetch, quiet=True)


def add_extract_parser(sub: Any) -> None:
    e = sub.add_parser("promrange", help="Prometheus range queries (example backend)")
    SPEC.add_cli_arguments(e, url_help="Prometheus URL")
    e.add_argument("--metrics", required=True, help="comma-separated metric names")
    e.add_argument("--start-day", required=True)
    e.add_argument("--end-day")
    e.add_argument("--archive", required=True)
    add_run_arguments(e)
    e.set_defaults(func=cmd_extract)


def coverage_units(args: argparse.Namespace) -> list[tuple[str, ...]]:
    return [(m,) for m in _metrics(args)]


def describe_parts(parts: tuple[str, ...]) -> dict[str, str]:
    return {"metric": parts[0]}


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics", help="(promrange) comma-separated metrics")
