"""``dxt extract prometheus``: archive metric-days of Prometheus or VictoriaMetrics."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shlex
import sys
from collections.abc import Iterator, Mapping

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.backends.prometheus.archive_day import (
    SOURCE,
    archive_prometheus_day,
    archived_entry,
    archived_format,
    archived_units,
    day_counter,
    prometheus_parts,
)
from dxt_core.backends.prometheus.catalog import (
    CatalogEntry,
    from_names,
    left_out_note,
    listed_entries,
    load_catalog,
)
from dxt_core.backends.prometheus.connection import SPEC, PrometheusConnection
from dxt_core.backends.prometheus.promql import shown
from dxt_core.backends.prometheus.source import PrometheusSource, WindowPolicy
from dxt_core.backends.roles import add_series_extract_arguments, check_series_extract_options
from dxt_core.errors import ConfigError
from dxt_core.reconcile import Counter
from dxt_core.runner import Unit, day_range, retry_policy, run_extract, say, window_options
from dxt_core.windows import Window, day_window, days, parse_day
from dxt_core.writers.parquet import require_pyarrow


def _entries(
    args: argparse.Namespace, source: PrometheusSource | None = None
) -> list[CatalogEntry]:
    if args.catalog and args.metrics:
        raise ConfigError("give --catalog FILE or --metrics a,b, not both")
    if args.catalog:
        return load_catalog(args.catalog)
    if args.metrics:
        return from_names(args.metrics)
    if source is None:
        raise ConfigError("give --catalog FILE or --metrics a,b")
    first, last = day_range(args)
    names = source.metric_names(_span(args, source))
    if not names:
        raise ConfigError(
            f"{source.conn.safe_url} lists no metric names from {first} to {last}; "
            "give --metrics or --catalog"
        )
    entries, left_out = listed_entries(names)
    if left_out:
        print(f"WARNING: {left_out_note(left_out, source.conn.safe_url)}", file=sys.stderr)
    if not entries:
        raise ConfigError(f"no metric name listed by {source.conn.safe_url} can name a folder")
    return entries


def _refuse_another_selector(archive: Archive, entry: CatalogEntry, day: dt.date) -> None:
    """A unit archived from another selector than this run's (a catalog line changed, or
    ``--metrics NAME`` over a ``NAME = SELECTOR`` unit) was skipped as complete: the day held
    other series than asked, and nothing said so. It fails, naming both."""
    doc = archive.read_manifest(DayKey(SOURCE, prometheus_parts(entry), day)) or {}
    was = doc.get("selector")
    if isinstance(was, str) and was != entry.selector:
        raise ConfigError(
            f"{entry.name} {day} was archived from the selector {shown(was)}; this run asks "
            f"{shown(entry.selector)}: give the new selector another unit name (NAME = "
            "SELECTOR in the catalog), or --refetch to archive it in the old one's place"
        )


def _span(args: argparse.Namespace, source: PrometheusSource) -> Window:
    first, last = day_range(args)
    return Window(day_window(first, source.tz).start, day_window(last, source.tz).end)


def cmd_extract_prometheus(args: argparse.Namespace) -> int:
    args.format = args.format or "csv"
    if args.format == "parquet":  # once, before any request (not per metric-day)
        require_pyarrow("Parquet output")
    conn: PrometheusConnection = SPEC.from_cli(args)
    first, last = day_range(args, conn.time_zone)
    check_series_extract_options(args)  # before the server is asked for names
    archive = Archive(args.archive, replace=args.replace)
    archive.refuse_other_day_zone(SOURCE, conn.time_zone)
    windows = WindowPolicy(**window_options(args))
    with PrometheusSource(conn, retry=retry_policy(args), windows=windows) as src:
        entries = _entries(args, src)
        answers = "gzip answers" if src.compressed else "answers uncompressed"
        print(f"{src.server().describe()} at {conn.safe_url} ({answers}): {len(entries)} units")
        for e in entries:  # a typo fails the run at once, naming the closest names
            src.check_known(e.selector, _span(args, src))

        def unit(entry: CatalogEntry, day: dt.date) -> Unit:
            def run() -> DayReport:
                if not args.refetch and not args.replace:
                    _refuse_another_selector(archive, entry, day)
                report = archive_prometheus_day(src, entry, day, archive, fmt=args.format)
                dropped = report.extra.get("dropped_outside_window", 0)
                stale = report.extra.get("stale_markers_left_out", 0)
                if args.verbose or dropped or stale:
                    note = (
                        f", {dropped} samples of the day before or after left out"
                        if dropped
                        else ""
                    )
                    if stale:
                        note += f", {stale} staleness markers left out (not samples)"
                    say(report.summary() + note)
                return report

            key = DayKey(SOURCE, prometheus_parts(entry), day)
            return Unit(key, run, entry.name, expects=(("selector", entry.selector),))

        units = [unit(e, d) for d in days(first, last) for e in entries]
        return run_extract(units, archive, args)


def coverage_units(args: argparse.Namespace) -> list[tuple[str, ...]]:
    """(metric,) units: ``--catalog`` or ``--metrics``, else the metrics the archive holds
    (its ``prometheus/<metric>/`` folders, in a directory or on S3)."""
    if getattr(args, "catalog", None) or getattr(args, "metrics", None):
        return [prometheus_parts(e) for e in _entries(args)]
    return archived_units(Archive(args.archive))


def refill_options(
    args: argparse.Namespace,
    manifest: dict[str, object] | None,
    units: Mapping[tuple[str, ...], dt.date | None] | None = None,
) -> str:
    """The ``dxt extract prometheus`` options that refill this archive: the server, zone and
    format its manifests record (``source_url`` is stored without credentials) and the units
    given to coverage, else ``units`` (those with missing or corrupt days) by name: without
    them the command would archive what the server lists, which a ``NAME = SELECTOR`` unit,
    or a metric the server no longer lists for the day, is not."""
    # the URL given to coverage, else the manifests' (stored without credentials), with the
    # connection options given to coverage (--user, --auth, --no-verify-tls; no password)
    recorded = (manifest or {}).get("source_url")
    opts = shlex.join(SPEC.cli_words(args, skip=("time_zone",), recorded_url=recorded))
    tz = manifest.get("time_zone") if manifest else None
    if isinstance(tz, str) and tz:
        opts += f" --tz {tz}"
    if getattr(args, "catalog", None):
        opts += f" --catalog {shlex.quote(args.catalog)}"
    elif getattr(args, "metrics", None):
        opts += f" --metrics {shlex.quote(args.metrics)}"
    elif units:
        archive = Archive(args.archive)
        entries = [
            archived_entry(archive, parts, day) if day else CatalogEntry(parts[0], parts[0])
            for parts, day in units.items()
        ]
        if any(not e.is_metric for e in entries):
            opts += " --catalog CATALOG"  # the file that named the selector units
            _say_catalog(entries)
        else:
            opts += f" --metrics {','.join(e.name for e in entries)}"
    if manifest and manifest.get("format") == "parquet":
        opts += " --format parquet"
    return opts


#: The selector units a CATALOG placeholder has been explained for (once each per process).
_said_catalog: set[str] = set()


def _say_catalog(entries: list[CatalogEntry]) -> None:
    """Why a command below says ``--catalog CATALOG``: a ``NAME = SELECTOR`` unit comes from
    a catalog file, which coverage was not given; the lines it needs, as recorded."""
    lines = [f"{e.name} = {e.selector}" for e in entries if not e.is_metric]
    new = [line for line in lines if line not in _said_catalog]
    if not new:
        return
    _said_catalog.update(new)
    print(
        "dxt: CATALOG in the commands below: a catalog file holding "
        + "; ".join(f"the line {line!r}" for line in new)
        + " (the selector the days' manifests record); give coverage --catalog FILE to "
        "have the file named there",
        file=sys.stderr,
    )


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``dxt coverage prometheus --reconcile`` needs to ask the server for counts."""
    SPEC.add_cli_arguments(parser, url_help="(--reconcile) the server's URL")


@contextlib.contextmanager
def reconcile_counter(args: argparse.Namespace) -> Iterator[Counter]:
    """(parts, day) -> the server's ``count_over_time`` of the archived day, over the
    selector and zone its manifest records; one client for the run."""
    conn: PrometheusConnection = SPEC.from_cli(args)
    with PrometheusSource(conn) as src:
        yield day_counter(src, Archive(args.archive))


def refetch_command(args: argparse.Namespace, parts: tuple[str, ...], first: str, last: str) -> str:
    """The ``dxt extract prometheus`` command that refetches one unit over ``first..last``,
    with the zone, format and selector its manifest records."""
    archive = Archive(args.archive)
    day = parse_day(first)
    doc = archive.read_manifest(DayKey(SOURCE, parts, day)) or {}
    entry = archived_entry(archive, parts, day)
    # the day's zone is the manifest's, whatever --tz this command was given
    words = ["dxt", "extract", "prometheus", *SPEC.cli_words(args, skip=("time_zone",))]
    if isinstance(doc.get("time_zone"), str):
        words += ["--tz", str(doc["time_zone"])]
    if entry.is_metric:
        words += ["--metrics", entry.name]
    else:  # a NAME = SELECTOR unit comes from a catalog file
        words += ["--catalog", getattr(args, "catalog", None) or "CATALOG"]
        if not getattr(args, "catalog", None):
            _say_catalog([entry])
    if archived_format(archive, parts, day, "csv") == "parquet":
        words += ["--format", "parquet"]
    words += ["--archive", args.archive, "--start-day", first, "--end-day", last, "--refetch"]
    return shlex.join(words)


def describe_parts(parts: tuple[str, ...]) -> dict[str, str]:
    return {"metric": parts[0]}


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog", help="(prometheus) catalog file: one metric name or NAME = SELECTOR a line"
    )
    parser.add_argument("--metrics", help="(kwollect, prometheus) comma-separated metrics")


def add_extract_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "prometheus",
        aliases=["victoriametrics"],
        help="Prometheus / VictoriaMetrics (raw samples)",
        description="Archive the raw stored samples of Prometheus or VictoriaMetrics per "
        "(metric, day) into ARCHIVE/prometheus/<metric>/<YYYY-MM-DD>.csv.gz (or .parquet) "
        "with manifests; every day is checked against the server's own count_over_time.",
    )
    SPEC.add_cli_arguments(e, url_help="server URL, e.g. http://127.0.0.1:9090")
    g = e.add_argument_group("what to extract")
    g.add_argument("--catalog", help="file: one metric name or NAME = SELECTOR a line")
    g.add_argument("--metrics", help="comma-separated metric names (default: all listed)")
    add_series_extract_arguments(
        e,
        format_help="csv (default) or parquet",
        workers=2,
        window_s=3600,
        min_window_help="smallest time window before a refused query is split by series "
        "(default 300)",
        target_points=500_000,
        window_help="first query window, seconds, for a day the server counts no sample "
        "in (default 3600); a day with samples is cut in windows of about --target-points",
        points="samples",
        points_help="samples in hand at once, aimed at (default 500,000): each query window "
        "aims at this divided by the windows in flight (--in-flight), so the peak memory "
        "does not grow with them",
    )
    e.set_defaults(func=cmd_extract_prometheus)


__all__ = [
    "add_coverage_arguments",
    "add_extract_parser",
    "add_reconcile_arguments",
    "cmd_extract_prometheus",
    "coverage_units",
    "describe_parts",
    "reconcile_counter",
    "refetch_command",
    "refill_options",
]
