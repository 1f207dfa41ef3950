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
        unknown = _UNKNOWN in values
        values.discard(_UNKNOWN)
        if len(values) == 1 and not unknown:
            opts += f" {flag} {shlex.quote(values.pop())}"
        elif values or unknown:  # one command cannot refill them all, or cannot know how
            opts += f" {flag} {_placeholder(flag)}"
            said = ", ".join(sorted(v or "(none: the defaults)" for v in values))
            if unknown:
                _say_unknown(flag, f"; the others were made with {flag} {said}" if said else "")
            else:
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
#: What a manifest written before they were recorded (before 2026-12-07) says of one that
#: applies to its unit: nothing, so no command may assume the default.
_UNKNOWN = "\0unknown"
#: The options :func:`_say_unknown` has explained (once a process).
_said_unknown: set[str] = set()


def _placeholder(flag: str) -> str:
    """The word a printed command holds where the user must give ``flag``'s value."""
    return flag.removeprefix("--").replace("-", "_").upper()


def _say_unknown(flag: str, others: str = "") -> None:
    if flag in _said_unknown:
        return
    _said_unknown.add(flag)
    print(
        f"dxt: manifests of these days were written by a dxt older than 2026-12-07, which did "
        f"not record the {flag} their data was chosen with{others}: give coverage the {flag} "
        f"the days were made with ({_placeholder(flag)} in the command below), or a refill "
        "with another one archives other series under the same day",
        file=sys.stderr,
    )


def _say_older_options() -> None:
    if "--plugin-options" in _said_unknown:
        return
    _said_unknown.add("--plugin-options")
    print(
        "dxt: manifests of these days were written by a dxt older than 2026-12-07, which did "
        "not record the --plugin-options file they were made with: taken as the shipped "
        "options; give coverage --plugin-options FILE if they were made with one",
        file=sys.stderr,
    )


def _doc_value(doc: Mapping[str, object], name: str, options: ExamonOptions) -> str | None:
    """What ``doc`` records of :data:`_RECORDED` field ``name``: its value; :data:`_UNKNOWN`
    when the manifest is older than the fields (no ``plugin_options``) and the field
    chose which series or records it holds (the cluster of a cluster-tagged plugin, the
    jobs service of a job table); else None (nothing to ask for; an older manifest's
    options file, which :func:`_say_older_options` says is taken as the shipped one)."""
    value = doc.get(name)
    if isinstance(value, str):
        return value
    if not doc or "plugin_options" in doc:  # recorded: nothing applied
        return None
    plugin = doc.get("plugin")
    opts = options.for_plugin(plugin if isinstance(plugin, str) else "")
    applies = {"cluster": opts.cluster_tag, "jobs_url": opts.job_table or "job_table" in doc}
    return _UNKNOWN if applies.get(name) else None


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
    options = _given_options(args)
    if not getattr(args, "plugin_options", None) and any(
        d and "plugin_options" not in d for d in docs
    ):
        _say_older_options()
    found: dict[str, set[str]] = {}
    for name, (flag, dest) in _RECORDED.items():
        given = getattr(args, dest, None)
        recorded = (_doc_value(d, name, options) for d in docs)
        values = {given} if given else {v for v in recorded if v is not None}
        # a --jobs-url's credentials, given
        strs = {v if v == _UNKNOWN else without_credentials(str(v)) for v in values}
        # the default alone needs no option; beside another value it must be said
        found[flag] = set() if not given and strs == {defaults[name]} else strs
    return found


def _given_options(args: argparse.Namespace) -> ExamonOptions:
    """Coverage's ``--plugin-options``, else the shipped ones."""
    given = getattr(args, "plugin_options", None)
    return ExamonOptions.from_toml(given) if given else ExamonOptions()


def _defaults(args: argparse.Namespace, url: str | None) -> dict[str, str | None]:
    """What ``dxt extract examon`` uses when not given ``--cluster`` or ``--jobs-url`` (the
    plugin options given to coverage, else the shipped ones; the URL's host on port 5000):
    a recorded value equal to it needs no option."""
    jobs = None
    with contextlib.suppress(DxtError):
        jobs = ExamonConnection(url).default_jobs_url() if url else None
    return {
        "cluster": _given_options(args).cluster,
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
    """A function (parts, day) -> the source's count, over one KairosDB client: with the
    cluster, jobs service and plugin options the catalog's days were archived with (their
    manifests record them), unless coverage was given its own. Counts taken with other
    ones would compare other series with the archive (a day of another cluster counted 0
    and marked kept)."""
    by_parts: dict[tuple[str, ...], CatalogEntry] = {
        examon_parts(e, coverage_format(args)): e for e in load_catalog(args.catalog)
    }
    args = _as_recorded(args, by_parts)
    conn: ExamonConnection = SPEC.from_cli(args)
    options = ExamonOptions.from_toml(args.plugin_options) if args.plugin_options else None
    with KairosDBSource(conn, options=options) as src:
        # the catalog's counts of a day are asked together (a few requests per day)
        yield day_counter(src, list(by_parts.values()), by_parts, Archive(args.archive))


def _as_recorded(
    args: argparse.Namespace, units: Mapping[tuple[str, ...], CatalogEntry]
) -> argparse.Namespace:
    """``args`` with the cluster, jobs service and plugin options that the manifests of
    ``units`` record, where coverage was not given them. Raises ConfigError when they
    record different ones, or are older than these fields and one applies."""
    found = _recorded_options(args, None, dict.fromkeys(units))
    chosen: dict[str, str] = {}
    for flag, dest in _RECORDED.values():
        values = found[flag]
        if getattr(args, dest, None) or not values:
            continue
        if len(values) > 1 or _UNKNOWN in values:
            made = ", ".join(sorted(v or "(none: the defaults)" for v in values - {_UNKNOWN}))
            why = (
                f"were made with {flag} {made}" if _UNKNOWN not in values else
                f"have manifests older than 2026-12-07 that do not record the {flag} their "
                "data was chosen with" + (f" (the others: {made})" if made else "")
            )  # fmt: skip
            raise ConfigError(
                f"the catalog's days {why}: counts taken with another would compare other "
                f"series with the archive; give --reconcile the {flag} of the days (one "
                "catalog at a time if they differ)"
            )
        chosen[dest] = values.pop()
    return argparse.Namespace(**{**vars(args), **chosen})


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
    options = _given_options(args)
    recorded: dict[str, str] = {}
    for name, (flag, dest) in _RECORDED.items():
        value = _doc_value(doc or {}, name, options)
        if value is None or value == defaults[name] or getattr(args, dest, None):
            continue
        if value == _UNKNOWN:  # an older manifest: the user must say it
            _say_unknown(flag)
            value = _placeholder(flag)
        recorded[dest] = value
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
