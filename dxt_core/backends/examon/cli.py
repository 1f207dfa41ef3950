"""``dxt extract examon``: archive Examon metric-days without Airflow."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shlex
import sys
from collections.abc import Iterator, Mapping

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.backends.examon.archive_day import (
    FORMATS,
    archive_examon_day,
    day_counter,
    examon_parts,
)
from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions, load_catalog, select
from dxt_core.backends.examon.connection import SPEC, ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.backends.roles import add_series_extract_arguments
from dxt_core.errors import ConfigError, DxtError
from dxt_core.paths import check_unit_name
from dxt_core.reconcile import Counter
from dxt_core.runner import Unit, day_range, retry_policy, run_extract, window_options
from dxt_core.urls import redact_url, without_credentials
from dxt_core.windows import DEFAULT_TIME_ZONE, days, parse_day
from dxt_core.writers.parquet import require_pyarrow


def _given(args: argparse.Namespace, *flags: str) -> str:
    """Those of ``flags`` the command line gave (``--name``: ``args.name``), joined by "and"."""
    return " and ".join(f for f in flags if getattr(args, f.removeprefix("--")) is not None)


def _entries(args: argparse.Namespace) -> list[CatalogEntry]:
    if args.metric or args.plugin:
        catalog = _given(args, "--catalog", "--plugins", "--limit")
        if catalog:  # they choose metrics of a catalog: not to be ignored in silence
            raise ConfigError(
                f"--metric and --plugin name one metric instead of a catalog: drop {catalog}, "
                f"or drop {_given(args, '--metric', '--plugin')} to archive the catalog"
            )
        if not (args.metric and args.plugin):
            raise ConfigError("--metric and --plugin go together (or use --catalog CSV)")
        for value, option in ((args.metric, "--metric"), (args.plugin, "--plugin")):
            problem = check_unit_name(value, option)
            if problem:
                raise ConfigError(problem)
        return [CatalogEntry(args.metric, args.plugin)]
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit {args.limit}: give 1 or more (the first N catalog metrics)")
    entries = load_catalog(args.catalog)
    if getattr(args, "plugin_options", None):
        unused = ExamonOptions.from_toml(args.plugin_options).unused_plugins(entries)
        if unused:
            print(f"WARNING: {unused}", file=sys.stderr)
    plugins = args.plugins.split(",") if args.plugins else None
    chosen = select(entries, plugins=plugins, limit=args.limit)
    if not chosen:
        raise ConfigError(
            f"no metric of the catalog belongs to --plugins {args.plugins}: the catalog's "
            f"plugins are {', '.join(sorted({e.plugin for e in entries}))}"
        )
    return chosen


def cmd_extract_examon(args: argparse.Namespace) -> int:
    conn: ExamonConnection = SPEC.from_cli(args)
    options = ExamonOptions.from_toml(args.plugin_options) if args.plugin_options else None
    entries = _entries(args)
    first, last = day_range(args, conn.time_zone)
    archive = Archive(args.archive, replace=args.replace)
    archive.refuse_other_day_zone("examon", conn.time_zone)
    if not args.format and layout_format(archive, args.archive) == "parquet":
        # days in CSV beside a Parquet archive would split it in two layouts
        print(
            "examon/ holds the Parquet layout (plugin=<plugin>/): archiving in Parquet "
            "(--format csv for the CSV layout beside it)",
            file=sys.stderr,
        )
        args.format = "parquet"
    args.format = args.format or "csv"
    if args.format == "parquet":  # once, before any request (not per metric-day)
        require_pyarrow("Parquet output")
    windows = WindowPolicy(**window_options(args))

    # One source for the run, shared by the worker threads (as Kwollect's client is): its
    # connections are kept alive from one metric-day to the next (one TLS handshake per
    # connection, not per metric-day), and the metric names are listed once.
    with KairosDBSource(conn, options=options, retry=retry_policy(args), windows=windows) as src:

        def unit(entry: CatalogEntry, day: dt.date) -> Unit:
            def run() -> DayReport:
                return archive_examon_day(src, entry, day, archive, fmt=args.format)

            return Unit(DayKey("examon", examon_parts(entry, args.format), day), run, entry.key)

        units = [unit(e, d) for d in days(first, last) for e in entries]
        return run_extract(units, archive, args)


def coverage_units(args: argparse.Namespace) -> list[tuple[str, ...]]:
    """The (plugin, metric) units of the catalog, in the archive's layout for ``--format``.

    Without ``--catalog`` the shipped catalog is checked; when the archive holds fewer of its
    metrics, that is said on stderr (a refill would fetch every metric of it)."""
    fmt = coverage_format(args)
    units: list[tuple[str, ...]] = [examon_parts(e, fmt) for e in load_catalog(args.catalog)]
    if not args.catalog:
        archive = Archive(args.archive)
        held = sum(1 for p in {u[0] for u in units} for _ in archive.subdirectories("examon", p))
        if held < len(units):
            print(
                f"note: no --catalog: checking the shipped M100 catalog ({len(units)} "
                f"metrics), of which the archive holds {held}; give --catalog with the "
                "metrics you archive (the refill commands below fetch every catalog metric)",
                file=sys.stderr,
            )
    return units


def layout_format(archive: Archive, where: str) -> str:
    """The layout of the archive's ``examon/`` folders (``plugin=<p>``: Parquet; ``<p>``, or
    none yet: CSV).

    Raises:
        ConfigError: it holds both (``where``: the archive as given).
    """
    hive = {n.startswith("plugin=") for n in archive.subdirectories("examon")}
    if hive == {True, False}:
        raise ConfigError(
            f"{redact_url(where)}: examon/ holds both the CSV layout (<plugin>/) "
            "and the Parquet one (plugin=<plugin>/): give --format csv or --format parquet"
        )
    return "parquet" if hive == {True} else "csv"


def coverage_format(args: argparse.Namespace) -> str:
    """``--format``, else the layout of the archive's ``examon/`` folders, set on ``args``
    for the refill and refetch commands."""
    if not args.format:
        args.format = layout_format(Archive(args.archive), args.archive)
    return str(args.format)


def refill_options(
    args: argparse.Namespace,
    manifest: dict[str, object] | None,
    units: Mapping[tuple[str, ...], dt.date | None] | None = None,
) -> str:
    """The ``dxt extract examon`` options that refill this archive: the server and zone of
    its manifests (``source_url``, without credentials; the zone its days are cut in, when
    not the default), the cluster filtered on, the jobs service asked and the plugin options
    file read that the manifests of the units to refill record (else coverage's
    ``--cluster``, ``--jobs-url``, ``--plugin-options``), and the catalog given to coverage."""
    # the URL given to coverage, else the manifests'; the connection options given to it
    # (--user, --grafana-proxy, --no-verify-tls, ...); the cluster and jobs URL below
    recorded = (manifest or {}).get("source_url")
    skip = ("time_zone", "cluster", "jobs_url")
    opts = shlex.join(SPEC.cli_words(args, skip=skip, recorded_url=recorded))
    tz = manifest.get("time_zone") if manifest else None
    if isinstance(tz, str) and tz and tz != DEFAULT_TIME_ZONE:
        opts += f" --tz {tz}"
    for flag, values in _recorded_options(args, manifest, units).items():
        if len(values) == 1:
            opts += f" {flag} {shlex.quote(values.pop())}"
        elif values:  # units made with different ones: one command cannot refill them all
            opts += f" {flag} {flag.removeprefix('--').replace('-', '_').upper()}"
            said = ", ".join(sorted(v or "(none: the defaults)" for v in values))
            print(
                f"dxt: the archive's days were made with {flag} {said}: "
                f"refill each unit with its own {flag} (its manifests record it)",
                file=sys.stderr,
            )
    if args.catalog:
        opts += f" --catalog {shlex.quote(args.catalog)}"
    if args.format != "csv":
        opts += f" --format {args.format}"
    return opts


#: Manifest fields (``cluster``, ``jobs_url``, ``plugin_options``) that chose a day's data,
#: with the option that asks for the same and the destination of coverage's own option.
_RECORDED = {
    "cluster": ("--cluster", "conn_cluster"),
    "jobs_url": ("--jobs-url", "conn_jobs_url"),
    "plugin_options": ("--plugin-options", "plugin_options"),
}
#: At most this many manifests are read for them.
_RECORDED_READS = 200


def _recorded_options(
    args: argparse.Namespace,
    manifest: dict[str, object] | None,
    units: Mapping[tuple[str, ...], dt.date | None] | None,
) -> dict[str, set[str]]:
    """Per option of :data:`_RECORDED`: coverage's own value when given, else the values that
    ``manifest`` and the manifests of ``units`` (a day of each; at most
    :data:`_RECORDED_READS`) record."""
    docs = [manifest or {}]
    if units:
        archive = Archive(args.archive)
        for parts, day in list(units.items())[:_RECORDED_READS]:
            with contextlib.suppress(DxtError):  # else its latest day's (all missing here)
                doc = archive.read_manifest(DayKey("examon", parts, day)) if day else None
                docs.append(doc or archive.latest_manifest("examon", parts) or {})
    url = (manifest or {}).get("source_url")
    defaults = _defaults(args, url if isinstance(url, str) else None)
    found: dict[str, set[str]] = {}
    for name, (flag, dest) in _RECORDED.items():
        given = getattr(args, dest, None)
        values = {given} if given else {d[name] for d in docs if isinstance(d.get(name), str)}
        strs = {without_credentials(str(v)) for v in values}  # a --jobs-url's, given
        # the default alone needs no option; beside another value it must be said
        found[flag] = set() if not given and strs == {defaults[name]} else strs
    return found


def _defaults(args: argparse.Namespace, url: str | None) -> dict[str, str | None]:
    """What ``dxt extract examon`` uses when not given ``--cluster`` or ``--jobs-url`` (the
    plugin options given to coverage, else the shipped ones; the URL's host on port 5000):
    a recorded value equal to it needs no option."""
    given = getattr(args, "plugin_options", None)
    options = ExamonOptions.from_toml(given) if given else None
    jobs = None
    with contextlib.suppress(DxtError):
        jobs = ExamonConnection(url).default_jobs_url() if url else None
    return {
        "cluster": (options or ExamonOptions()).cluster,
        "jobs_url": jobs,
        "plugin_options": "",  # the shipped defaults, as the manifests record them
    }


def describe_parts(parts: tuple[str, ...]) -> dict[str, str]:
    return {
        "plugin": parts[0].removeprefix("plugin="),
        "metric": parts[1].removeprefix("metric="),
    }


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", help="(examon) catalog CSV (default: shipped M100 catalog)")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="(examon) csv or parquet (default: the layout the archive holds)",
    )


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``dxt coverage examon --reconcile`` needs to ask KairosDB for counts."""
    SPEC.add_cli_arguments(parser, url_help="(--reconcile) the source's URL")
    parser.add_argument("--plugin-options", help="(examon) TOML file with per-plugin options")


@contextlib.contextmanager
def reconcile_counter(args: argparse.Namespace) -> Iterator[Counter]:
    """A function (parts, day) -> the source's count, over one KairosDB client."""
    conn: ExamonConnection = SPEC.from_cli(args)
    options = ExamonOptions.from_toml(args.plugin_options) if args.plugin_options else None
    by_parts: dict[tuple[str, ...], CatalogEntry] = {
        examon_parts(e, coverage_format(args)): e for e in load_catalog(args.catalog)
    }
    with KairosDBSource(conn, options=options) as src:
        # the catalog's counts of a day are asked together (a few requests per day)
        yield day_counter(src, list(by_parts.values()), by_parts, Archive(args.archive))


def refetch_command(args: argparse.Namespace, parts: tuple[str, ...], first: str, last: str) -> str:
    """The ``dxt extract`` command that refetches one unit over ``first..last``, in the zone
    its manifest records (when readable)."""
    d = describe_parts(parts)
    try:
        doc = Archive(args.archive).read_manifest(DayKey("examon", parts, parse_day(first)))
    except DxtError:
        doc = None
    tz = (doc or {}).get("time_zone")
    # the cluster and jobs service the day was made with, unless coverage was given its own
    url = getattr(args, "url", None)
    defaults = _defaults(args, url if isinstance(url, str) else None)
    recorded = {
        dest: doc[name]
        for name, (_, dest) in _RECORDED.items()
        if doc
        and isinstance(doc.get(name), str)
        and doc[name] != defaults[name]
        and not getattr(args, dest, None)
    }
    args = argparse.Namespace(**{**vars(args), **recorded})
    words = ["dxt", "extract", "examon"]
    if isinstance(tz, str) and tz:
        # the day's zone is the manifest's, whatever --tz this command was given
        words += [*SPEC.cli_words(args, skip=("time_zone",)), "--tz", tz]
    else:
        words += SPEC.cli_words(args)
    if getattr(args, "plugin_options", None):
        words += ["--plugin-options", args.plugin_options]
    words += ["--archive", args.archive]
    words += ["--metric", d["metric"], "--plugin", d["plugin"], "--format", coverage_format(args)]
    words += ["--start-day", first, "--end-day", last, "--refetch"]
    return shlex.join(words)


def add_extract_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "examon",
        help="Examon / KairosDB",
        description="Archive Examon metrics per (metric, day) into "
        "ARCHIVE/examon/<plugin>/<metric>/<YYYY-MM-DD>.csv.gz with manifests.",
    )
    SPEC.add_cli_arguments(e, url_help="KairosDB URL (or Grafana URL with --grafana-proxy)")
    e.add_argument("--plugin-options", help="TOML file with per-plugin options")
    g = e.add_argument_group("what to extract")
    g.add_argument("--catalog", help="catalog CSV metric,plugin (default: shipped M100 catalog)")
    g.add_argument("--plugins", help="only these plugins (comma-separated)")
    g.add_argument("--limit", type=int, help="only the first N catalog metrics")
    g.add_argument(
        "--metric",
        help="one metric (with --plugin) instead of a catalog: not with --catalog, --plugins "
        "or --limit",
    )
    g.add_argument("--plugin", help="the plugin of --metric")
    add_series_extract_arguments(
        e,
        format_help="csv: <plugin>/<metric>/<day>.csv.gz; parquet: Hive partitions "
        "plugin=<p>/metric=<m>/<day>.parquet, zstd (default: the layout the archive holds, "
        "else csv)",
        workers=4,
        window_s=900,
        min_window_help="smallest split window and row block, seconds (default 300)",
        target_points=100_000,
    )
    e.set_defaults(func=cmd_extract_examon)
