"""The ``dxt`` command: extract without Airflow, check coverage, run simulators and the demo."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from dxt_core._version import __version__
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.cli import add_parser as add_collectd_es_parser
from dxt_core.backends.examon.archive_day import (
    FORMATS,
    examon_parts,
)
from dxt_core.backends.examon.catalog import load_catalog
from dxt_core.backends.examon.cli import add_extract_parser as add_examon_parser
from dxt_core.errors import ConfigError, DxtError
from dxt_core.index import add_index_parser, coverage_rows
from dxt_core.windows import days, parse_day

log = logging.getLogger("dxt_core.cli")


def cmd_coverage(args: argparse.Namespace) -> int:
    archive = Archive(args.archive)
    entries = load_catalog(args.catalog)
    first, last = parse_day(args.start_day), parse_day(args.end_day)
    day_list = list(days(first, last))
    rows = coverage_rows(  # from the manifest index when the archive has one
        archive,
        "examon",
        [examon_parts(e, args.format) for e in entries],
        day_list,
        verify=args.verify,
    )
    counts: dict[str, int] = {"archived": 0, "empty": 0, "missing": 0, "corrupt": 0}
    for r in rows:
        counts[r.status] += 1
    if args.json:
        print(
            json.dumps(
                {
                    "counts": counts,
                    "rows": [
                        {
                            "plugin": r.parts[0].removeprefix("plugin="),
                            "metric": r.parts[1].removeprefix("metric="),
                            "day": r.day.isoformat(),
                            "status": r.status,
                            "detail": r.detail,
                        }
                        for r in rows
                    ],
                },
                indent=2,
            )
        )
    else:
        _print_coverage_table(rows, day_list, args.show_all)
        print(
            f"\n{len(entries)} metrics x {len(day_list)} days: "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
        )
    bad_days = sorted({r.day for r in rows if r.status in ("missing", "corrupt")})
    if bad_days and not args.json:
        print("\nTo refill the missing metric-days with Airflow:")
        for a, b in _ranges(bad_days):
            print(
                f"  airflow backfill create --dag-id {args.dag_id} --from-date {a} "
                f"--to-date {b} --reprocess-behavior failed"
            )
        print(
            "Days whose runs already succeeded (files deleted or corrupt since) need a clear; "
            "it reruns that day's metric tasks, which rewrite identical files:"
        )
        for a, b in _ranges(bad_days):
            print(f"  airflow tasks clear {args.dag_id} -t archive_metric_day -s {a} -e {b} -y")
    return 0 if not bad_days else 3


def _ranges(day_list: Sequence[dt.date]) -> list[tuple[dt.date, dt.date]]:
    out: list[tuple[dt.date, dt.date]] = []
    for d in day_list:
        if out and (d - out[-1][1]).days == 1:
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out


_MARK = {"archived": "#", "empty": "o", "missing": ".", "corrupt": "X"}


def _print_coverage_table(rows: Sequence[Any], day_list: Sequence[dt.date], show_all: bool) -> None:
    by_unit: dict[tuple[str, ...], list[str]] = {}
    for r in rows:
        by_unit.setdefault(r.parts, []).append(r.status)
    print(f"legend: # archived  o empty  . missing  X corrupt   days {day_list[0]}..{day_list[-1]}")
    for parts, statuses in by_unit.items():
        if not show_all and all(s in ("archived", "empty") for s in statuses):
            continue
        marks = "".join(_MARK[s] for s in statuses)
        print(f"{'/'.join(parts):<60} {marks}")
    for r in rows:
        if r.status == "corrupt":
            print(f"corrupt: {'/'.join(r.parts)} {r.day}: {r.detail}")


def cmd_simulate(args: argparse.Namespace, rest: list[str]) -> int:
    if args.backend == "examon":
        from dxt_core.backends.examon.simulator import main as sim_main

        return sim_main(rest)
    if args.backend == "kwollect":
        from dxt_core.backends.kwollect.simulator import main as kwollect_sim_main

        return kwollect_sim_main(rest)
    raise ConfigError(f"unknown simulator {args.backend!r}")


def cmd_demo(args: argparse.Namespace) -> int:
    from dxt_core.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dxt",
        description="dxt-archive: archive HPC monitoring telemetry into plain, compressed, "
        "verifiable files.",
    )
    p.add_argument("--version", action="version", version=f"dxt-archive {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log each request")
    sub = p.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("extract", help="extract telemetry into the archive (no Airflow)")
    exs = ex.add_subparsers(dest="backend", required=True)
    add_examon_parser(exs)
    from dxt_core.backends.kwollect.cli import add_extract_parser as add_kwollect_parser

    add_kwollect_parser(exs)
    add_collectd_es_parser(exs)

    c = sub.add_parser(
        "coverage",
        help="archived / empty / missing metric-days, and how to refill them",
        description="Report, per metric and day, archived / empty / missing / corrupt, from "
        "the archive's manifest index when it has one (checked against the directories), "
        "else from the manifests. --verify reads every manifest and checks every file's "
        "sha256. Exit status 3 when anything is missing or corrupt.",
    )
    c.add_argument("--archive", required=True, help="archive root directory")
    c.add_argument("--catalog", help="catalog CSV (default: shipped M100 catalog)")
    c.add_argument("--start-day", required=True)
    c.add_argument("--end-day", required=True)
    c.add_argument("--verify", action="store_true", help="also check every file's sha256")
    c.add_argument("--format", choices=FORMATS, default="csv", help="archive format (csv)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--all", dest="show_all", action="store_true", help="list complete metrics too")
    c.add_argument("--dag-id", default="dxt_examon", help="DAG named in the refill commands")
    c.set_defaults(func=cmd_coverage)

    add_index_parser(sub)

    s = sub.add_parser(
        "simulate",
        help="run a backend simulator (for demos and tests)",
        description="Run a simulator; options after the backend name go to it "
        "(dxt simulate examon --help).",
    )
    s.add_argument("backend", choices=["examon", "kwollect"])
    s.set_defaults(func=None)

    d = sub.add_parser(
        "demo",
        help="simulator + Airflow (SQLite) + backfill of the last days, then the UI",
        description="Start the Examon simulator and Airflow (standalone, SQLite, "
        "LocalExecutor), backfill the last few days for a small slice of the catalog, print "
        "what was archived and where the UI is, and keep running until Ctrl-C.",
    )
    d.add_argument("--dir", default=".dxt-demo", help="work directory (default %(default)s)")
    d.add_argument("--days", type=int, default=3, help="days to backfill (default 3)")
    d.add_argument("--metrics-per-plugin", type=int, default=2, help="catalog slice size")
    d.add_argument("--port", type=int, default=8080, help="Airflow UI port (default 8080)")
    d.add_argument("--exit", action="store_true", help="stop after printing the summary")
    d.add_argument("--timeout", type=float, default=900, help="seconds to wait for the backfill")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
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
        return rc
    except DxtError as exc:
        print(f"dxt: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
