"""``dxt extract examon``: archive Examon metric-days without Airflow."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TextIO

from dxt_core.archive import Archive
from dxt_core.backends.examon.archive_day import FORMATS, DayReport, archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions, load_catalog, select
from dxt_core.backends.examon.connection import JOBS_APIS, ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.errors import ConfigError, DxtError
from dxt_core.http import RetryPolicy
from dxt_core.windows import DEFAULT_TIME_ZONE, days, parse_day


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


def _entries(args: argparse.Namespace) -> list[CatalogEntry]:
    if args.metric or args.plugin:
        if not (args.metric and args.plugin):
            raise ConfigError("--metric and --plugin go together (or use --catalog CSV)")
        return [CatalogEntry(args.metric, args.plugin)]
    entries = load_catalog(args.catalog)
    plugins = args.plugins.split(",") if args.plugins else None
    chosen = select(entries, plugins=plugins, limit=args.limit)
    if not chosen:
        raise ConfigError(f"no catalog metric matches --plugins {args.plugins}")
    return chosen


def cmd_extract_examon(args: argparse.Namespace) -> int:
    password = args.password if args.password is not None else os.environ.get("DXT_EXAMON_PASSWORD")
    conn = ExamonConnection(
        url=args.url,
        user=args.user,
        password=password,
        grafana_proxy=args.grafana_proxy,
        time_zone=args.tz,
        cluster=args.cluster,
        jobs_url=args.jobs_url,
        jobs_api=args.jobs_api,
        timeout_s=args.timeout,
    )
    options = ExamonOptions.from_toml(args.plugin_options) if args.plugin_options else None
    entries = _entries(args)
    first = parse_day(args.start_day)
    last = parse_day(args.end_day) if args.end_day else first
    day_list = list(days(first, last))
    archive = Archive(args.archive)
    windows = WindowPolicy(
        initial_s=args.window_s, target_points=args.target_points, min_s=args.min_window_s
    )
    jobs = [(e, d) for d in day_list for e in entries]
    progress = Progress(len(jobs), enabled=None if not args.quiet else False)
    reports: list[DayReport] = []
    failures: list[tuple[CatalogEntry, dt.date, str]] = []

    def run(entry: CatalogEntry, day: dt.date) -> DayReport:
        with KairosDBSource(
            conn, options=options, retry=RetryPolicy(attempts=args.retries + 1), windows=windows
        ) as src:
            return archive_examon_day(src, entry, day, archive, fmt=args.format)

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = {pool.submit(run, e, d): (e, d) for e, d in jobs}
        for fut in as_completed(futures):
            e, d = futures[fut]
            try:
                reports.append(fut.result())
                progress.step(True, e.key)
            except DxtError as exc:
                failures.append((e, d, str(exc)))
                progress.step(False, e.key)
    rows = sum(r.rows for r in reports)
    size = sum(r.bytes for r in reports)
    empty = sum(1 for r in reports if r.status == "empty")
    print(
        f"archived {len(reports) - empty} metric-days ({rows} rows, {size} bytes), "
        f"{empty} empty, {len(failures)} failed, into {archive.root}"
    )
    for e, d, msg in sorted(failures, key=lambda f: (f[1], f[0].key)):
        print(f"FAILED {e.key} {d}: {msg}", file=sys.stderr)
    return 1 if failures else 0


def add_extract_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "examon",
        help="Examon / KairosDB",
        description="Archive Examon metrics per (metric, day) into "
        "ARCHIVE/examon/<plugin>/<metric>/<YYYY-MM-DD>.csv.gz with manifests.",
    )
    e.add_argument(
        "--url", required=True, help="KairosDB URL (or Grafana URL with --grafana-proxy)"
    )
    e.add_argument("--user", help="HTTP Basic user")
    e.add_argument(
        "--password", help="HTTP Basic password (better: environment DXT_EXAMON_PASSWORD)"
    )
    e.add_argument("--grafana-proxy", action="store_true", help="go through Grafana's proxy")
    e.add_argument("--jobs-url", help="Examon jobs service URL (default: same host, port 5000)")
    e.add_argument(
        "--jobs-api",
        choices=JOBS_APIS,
        default="v1",
        help="handler of the jobs service: v1 (default; what examon-client calls, the query "
        "as a JSON string) or v2 (the query as an object)",
    )
    e.add_argument("--cluster", help="cluster tag value (default marconi100)")
    e.add_argument("--plugin-options", help="TOML file with per-plugin options")
    g = e.add_argument_group("what to extract")
    g.add_argument("--catalog", help="catalog CSV metric,plugin (default: shipped M100 catalog)")
    g.add_argument("--plugins", help="only these plugins (comma-separated)")
    g.add_argument("--limit", type=int, help="only the first N catalog metrics")
    g.add_argument("--metric", help="one metric (with --plugin) instead of a catalog")
    g.add_argument("--plugin", help="the plugin of --metric")
    e.add_argument("--start-day", required=True, help="first day, YYYY-MM-DD")
    e.add_argument("--end-day", help="last day, YYYY-MM-DD (default: the start day)")
    e.add_argument(
        "--tz", default=DEFAULT_TIME_ZONE, help="time zone of days (default %(default)s)"
    )
    e.add_argument("--archive", required=True, help="archive root directory")
    e.add_argument(
        "--format",
        choices=FORMATS,
        default="csv",
        help="csv: <plugin>/<metric>/<day>.csv.gz (default); parquet: Hive partitions "
        "plugin=<p>/metric=<m>/<day>.parquet, zstd",
    )
    e.add_argument("--workers", type=int, default=4, help="parallel metric-days (default 4)")
    e.add_argument("--retries", type=int, default=4, help="retries of transient errors")
    e.add_argument("--timeout", type=float, default=120.0, help="HTTP read timeout, seconds")
    e.add_argument("--window-s", type=int, default=900, help="first query window, seconds")
    e.add_argument(
        "--min-window-s",
        type=int,
        default=300,
        help="smallest split window and row block, seconds (default 300)",
    )
    e.add_argument("--target-points", type=int, default=100_000, help="points per query")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_extract_examon)
