"""``dxt extract kwollect``: an experiment backup or daily archives, without Airflow."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.backends.kwollect.backup import BackupInterrupted
from dxt_core.backends.kwollect.connection import DEFAULT_TIME_ZONE, SPEC, KwollectArchiveConfig
from dxt_core.backends.kwollect.source import (
    DEFAULT_API_URL,
    DEFAULT_MAX_POINTS,
    MIN_WINDOW_FLOOR_S,
    KwollectClient,
    check_options,
    parse_nodes,
)
from dxt_core.errors import ConfigError, DxtError
from dxt_core.http import RequestStats
from dxt_core.manifests import manifest_zone
from dxt_core.runner import INTERRUPTED_EXIT, Unit, day_range, run_units, say
from dxt_core.runner import add_arguments as add_run_arguments
from dxt_core.urls import redact_url
from dxt_core.windows import day_window, days, parse_day, zone

ENV_PASSWORD = SPEC.password_env


def _split(text: str | None) -> list[str]:
    """A comma-separated option's items, each once (a metric given twice made two units of
    each day: "archived 2 metric-days", one of them twice)."""
    return list(dict.fromkeys(x.strip() for x in (text or "").split(",") if x.strip()))


def _auth(args: argparse.Namespace) -> tuple[str, str] | None:
    if not args.user:
        return None
    _, password = SPEC.credentials(args.user, args.password)
    if password is None:
        raise ConfigError(f"--user {args.user} needs a password: set {ENV_PASSWORD}")
    return (args.user, password)


def cmd_extract_kwollect(args: argparse.Namespace) -> int:
    options = {
        "max_points": args.max_points,
        "timeout_s": args.timeout,
        "min_window_s": args.min_window,
    }
    if args.archive and args.backup:
        raise ConfigError(
            "give --archive DIR (daily archive of sites' metrics) or --backup DIR (one "
            "experiment's nodes and window), not both"
        )
    _refuse_other_mode(args)
    check_options(options, cli=True)  # before any request: each flag and its range
    if args.no_verify_tls:
        options["verify_tls"] = False
    auth = _auth(args)
    where = args.archive or args.backup
    try:
        if args.archive:
            return _archive(args, auth, options)
        return _backup(args, auth, options)
    except BackupInterrupted as exc:
        # Ctrl-C again while this is printed: ignored (the backup has committed what it could)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(exc.summary())
        if exc.abandoned:
            # Threads in a request cannot be stopped, and the interpreter would wait for them
            # at exit: leave now (they write nothing: their staging is gone).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(INTERRUPTED_EXIT)
        return INTERRUPTED_EXIT
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(
            f"interrupted before any metrics were fetched: nothing written to {where}",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT


#: The options of one mode that the other would ignore (a CSV asked of the daily archive
#: gave its gzip JSON Lines, a --start-day given to a backup was not its window).
_MODE_ONLY = {
    "--backup": (("job", "--job"), ("start", "--start"), ("end", "--end"), ("format", "--format")),
    "--archive": (
        ("clusters", "--clusters"),
        ("start_day", "--start-day"),
        ("end_day", "--end-day"),
        ("tz", "--tz"),
        ("refetch", "--refetch"),
        ("quiet", "--quiet"),
    ),
}


def _refuse_other_mode(args: argparse.Namespace) -> None:
    if not (args.archive or args.backup):
        return  # which mode is said below
    mode = "--archive" if args.archive else "--backup"
    other = "--backup" if args.archive else "--archive"
    given = [flag for key, flag in _MODE_ONLY[other] if getattr(args, key) not in (None, False)]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: {'options' if len(given) > 1 else 'an option'} of {other} "
            f"only, which {mode} would ignore; leave {'them' if len(given) > 1 else 'it'} out"
            + (" (the daily archive is gzip JSON Lines)" if "--format" in given else "")
        )


def _archive(
    args: argparse.Namespace, auth: tuple[str, str] | None, options: dict[str, Any]
) -> int:
    """``--archive``: whole days, one unit per (site, metric, day)."""
    from dxt_core.backends.kwollect.archive_day import archive_kwollect_day

    metrics = _split(args.metrics) or None
    if not args.start_day:
        raise ConfigError("--archive needs --start-day (and optionally --end-day)")
    if not _split(args.nodes) and not _split(args.clusters):
        # said here, in the command line's words: the archive settings' own message names
        # the DAG's DXT_KWOLLECT_* variables, which this command does not read
        raise ConfigError(
            "--archive needs the nodes or clusters to archive: give --nodes (comma-separated, "
            "e.g. nova-1.lyon.grid5000.fr or nova-1.lyon) and/or --clusters (site/cluster, "
            "e.g. lyon/nova)"
        )
    clusters = []
    for c in _split(args.clusters):
        site, sep, cluster = c.partition("/")
        if not sep:
            raise ConfigError(f"--clusters {c!r}: write site/cluster, e.g. lyon/nova")
        clusters.append((site, cluster))
    kwargs = {"metrics": tuple(metrics)} if metrics else {}
    config = KwollectArchiveConfig(
        nodes=tuple(parse_nodes(_split(args.nodes))),
        clusters=tuple(clusters),
        time_zone=args.tz or DEFAULT_TIME_ZONE,
        source="command line",
        **kwargs,
    )
    first, last = day_range(args, config.time_zone)
    archive = Archive(args.archive, replace=args.replace)
    archive.refuse_other_day_zone("kwollect", config.time_zone)
    with KwollectClient(args.api_url, auth, **options) as client:
        # a node the reference API does not list: a typo ("empty" days for ever) or a node
        # retired since (its past days may hold data): said once here, and in each manifest
        for problem in client.node_problems(config.nodes):
            print(
                f"warning: {problem} -- the reference API does not list it: check the name "
                "(a retired node's past days may still hold data)",
                file=sys.stderr,
            )

        def unit(u: dict[str, Any], day: dt.date) -> Unit:
            def run() -> DayReport:
                report = archive_kwollect_day(
                    client, u["site"], u["metric"], u["nodes"], day, archive, config.time_zone
                )
                if not args.quiet:
                    say(report.summary() + _dropped(report.stats))
                return report

            return Unit(DayKey("kwollect", (u["site"], u["metric"]), day), run)

        units = [unit(u, d) for u in config.units(client) for d in days(first, last)]
        # one unit at a time: the API is shared, and its answers are large
        return run_units(units, archive, workers=1, refetch=args.refetch, quiet=True)


def _backup(args: argparse.Namespace, auth: tuple[str, str] | None, options: dict[str, Any]) -> int:
    """``--backup``: an experiment's nodes over its times, into one directory."""
    from dxt_core.backends.kwollect.experiment import Kwollect

    metrics = _split(args.metrics) or None
    if not args.backup:
        raise ConfigError("choose --backup DIR (an experiment) or --archive ROOT (daily files)")
    if args.job:
        site, sep, job_id = args.job.partition(":")
        if not sep or not site or not job_id:
            raise ConfigError(f"--job {args.job!r}: write SITE:JOB_ID, e.g. lyon:1234567")
        k = Kwollect.from_job(site, job_id, api_url=args.api_url, auth=auth, **options)
        if args.start:
            job_stop = k.stop_time
            k.start(_time(args.start))  # an epoch, as --help says, or ISO 8601
            if job_stop is not None and not args.end:
                k.stop(job_stop)  # the job's end still ends the backup
    else:
        if not args.nodes or not args.start:
            raise ConfigError("--backup needs --nodes and --start (or --job SITE:ID)")
        k = Kwollect(_split(args.nodes), api_url=args.api_url, auth=auth, **options)
        k.start(_time(args.start))
        # a node the reference API does not list has no data: an empty backup, exit 0
        k.deploy()
    if args.end:
        k.stop(None if args.end.strip().lower() == "now" else _time(args.end))
    manifest = k.backup(
        args.backup, metrics=metrics, format=args.format or "jsonl", replace=args.replace
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # committed: what it holds is said whole
    doc = json.loads(manifest.read_bytes())
    s = k.last_stats
    files = doc.get("files") or []
    with_points = {f["node"] for f in files}
    empty = [n for n in doc.get("nodes") or [] if n not in with_points]
    none = f"; no points for {len(empty)} of {len(doc['nodes'])} nodes: {', '.join(empty)}"
    print(
        f"backup written: {manifest}: {len(files)} file{'' if len(files) == 1 else 's'}, "
        f"{doc.get('rows', 0):,} rows, {doc.get('bytes', 0):,} bytes ({s.requests} requests, "
        f"{s.splits} splits, {s.seconds:.1f} s{_dropped(s)}){none if empty else ''}"
    )
    return 0


def _dropped(stats: RequestStats) -> str:
    n = getattr(stats, "outside_window", 0)
    return f", {n} points outside the window dropped" if n else ""


def _time(text: str) -> object:
    try:
        return float(text)
    except ValueError:
        return text


def add_extract_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    k = sub.add_parser(
        "kwollect",
        help="Kwollect (Grid'5000 metrics)",
        description="Back up an experiment (--backup DIR: one gzip JSON Lines or CSV file per "
        "node and metric, plus manifest.json) or archive whole days (--archive ROOT: "
        "ROOT/kwollect/<site>/<metric>/<YYYY-MM-DD>.jsonl.gz with manifests).",
    )
    k.add_argument("--api-url", default=DEFAULT_API_URL, help="default %(default)s")
    k.add_argument("--user", help="Grid'5000 login (HTTP Basic, from outside Grid'5000)")
    k.add_argument("--password", help=f"password (better: environment {ENV_PASSWORD})")
    k.add_argument(
        "--no-verify-tls", action="store_true", help="do not verify the API's TLS certificate"
    )
    k.add_argument("--nodes", help="comma-separated nodes, e.g. nova-1.lyon.grid5000.fr")
    k.add_argument("--clusters", help="(--archive) comma-separated site/cluster, e.g. lyon/nova")
    k.add_argument("--metrics", help="comma-separated metrics (default: all; archive: power)")
    k.add_argument("--job", help="(--backup) SITE:JOB_ID: nodes and times of an OAR job")
    k.add_argument("--start", help="(--backup) start: ISO 8601 with offset, or epoch")
    k.add_argument(
        "--end",
        help="(--backup) end, inclusive: ISO 8601 with offset, epoch, or 'now' (default: the "
        "job's end; else now, if at most 7 days after --start, or a running --job's start)",
    )
    k.add_argument(
        "--backup",
        help="experiment backup directory; one holding another backup (other nodes, metrics, "
        "format or window) is refused unless --replace is given (the earlier backup is then "
        "kept in its .versions/)",
    )
    k.add_argument(
        "--format", choices=("jsonl", "csv"), help="(--backup) backup format (default jsonl)"
    )
    k.add_argument(
        "--archive", help="archive root (daily files): a directory or s3://bucket/prefix"
    )
    add_run_arguments(k)
    k.add_argument("--start-day", help="(--archive) first day, YYYY-MM-DD")
    k.add_argument("--end-day", help="(--archive) last day (default: the start day)")
    k.add_argument("--tz", help=f"(--archive) zone of days (default {DEFAULT_TIME_ZONE})")
    k.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="(--archive) no line per metric-day: the failures and the run's summary only",
    )
    k.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        help="points per request, 1 or more (default %(default)s)",
    )
    k.add_argument(
        "--timeout",
        type=float,
        default=330.0,
        help="HTTP read timeout, seconds, above 0 (default %(default)s)",
    )
    k.add_argument(
        "--min-window",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="shortest time window a refused request is split down to, "
        f"{MIN_WINDOW_FLOOR_S:g} or more (default %(default)s)",
    )
    k.set_defaults(func=cmd_extract_kwollect)


def coverage_units(args: argparse.Namespace) -> list[tuple[str, ...]]:
    """(site, metric) units: ``--sites`` (default: the sites the archive holds) x
    ``--metrics`` (default: the metrics the archive holds for those sites, else the power
    metrics). The power metrics as the default made coverage call every power metric the
    archive never held "missing", and its refill command archive them."""
    from dxt_core.backends.kwollect.source import POWER_METRICS

    archive = Archive(args.archive)
    sites = _split(args.sites)
    if not sites:
        sites = archive.subdirectories("kwollect")
    held = sorted({m for s in sites for m in archive.subdirectories("kwollect", s)})
    metrics = _split(args.metrics) or held or list(POWER_METRICS)
    return [(s, m) for s in sites for m in metrics]


def describe_parts(parts: tuple[str, ...]) -> dict[str, str]:
    return {"site": parts[0], "metric": parts[1]}


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sites", help="(kwollect) comma-separated sites (default: archived)")
    parser.add_argument(
        "--metrics", help="(kwollect) comma-separated metrics (default: archived, else power)"
    )


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """``--api-url`` for ``dxt coverage kwollect --reconcile`` (``--url`` works too)."""
    parser.add_argument("--api-url", help=f"(kwollect) API URL (default {DEFAULT_API_URL})")
    parser.add_argument("--url", help="(kwollect) the API URL, as --api-url")
    parser.add_argument("--user", help="(kwollect) Grid'5000 login (HTTP Basic)")
    parser.add_argument("--password", help=f"(kwollect) its password (better: {ENV_PASSWORD})")
    parser.add_argument(
        "--no-verify-tls", action="store_true", help="(--reconcile) do not verify TLS"
    )


@contextlib.contextmanager
def reconcile_counter(args: argparse.Namespace) -> Iterator[Any]:
    """(parts, day) -> the API's count of the day, over the nodes and zone of its manifest."""
    from dxt_core.reconcile import SourceCount

    archive = Archive(args.archive)
    url = getattr(args, "api_url", None) or getattr(args, "url", None) or DEFAULT_API_URL
    verify = not getattr(args, "no_verify_tls", False)
    with KwollectClient(url, _auth(args), verify_tls=verify) as client:

        def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
            doc = archive.read_manifest(DayKey("kwollect", parts, day)) or {}
            site, metric = parts
            nodes = parse_nodes(doc.get("nodes") or [], site)
            if not nodes:
                raise ConfigError(f"kwollect/{site}/{metric} {day}: the manifest names no nodes")
            window = day_window(day, zone(str(doc.get("time_zone") or DEFAULT_TIME_ZONE)))
            stop = window.end - dt.timedelta(microseconds=1)
            return client.count_points(site, nodes, metric, window.start, stop)

        yield count


def refetch_command(args: argparse.Namespace, parts: tuple[str, ...], first: str, last: str) -> str:
    """The ``dxt extract kwollect`` command that refetches one (site, metric) over the days."""
    site, metric = parts
    doc = _read(Archive(args.archive), parts, parse_day(first)) or {}
    words = ["dxt", "extract", "kwollect", "--archive", args.archive]
    words += _connection_words(args, [doc])
    words += ["--nodes", ",".join(_node_names(doc, site)) or "NODES"]
    words += ["--metrics", metric, "--tz", _day_zone([doc]) or DEFAULT_TIME_ZONE]
    words += ["--start-day", first, "--end-day", last, "--refetch"]
    return shlex.join(words)


def refill_options(
    args: argparse.Namespace,
    manifest: dict[str, object] | None,
    units: Mapping[tuple[str, ...], dt.date | None] | None = None,
) -> str:
    """The ``dxt extract kwollect`` options that refill ``units`` (the (site, metric) units
    with missing or corrupt days -> a day of it that has a manifest, or None), as their
    manifests say they were archived: the API (``source_url``, stored without credentials,
    unless coverage was given ``--api-url``; its ``--user``, the password left to
    ``DXT_KWOLLECT_PASSWORD``), each site's nodes (clusters are recorded resolved to their
    nodes), the units' metrics and the zone the days are cut in when it is not the default.

    A site whose nodes no manifest read names gets the placeholder ``<SITE>_NODES`` in
    ``--nodes`` (an API URL none names: ``URL``), so that the command cannot archive other
    nodes than the archive's. The command archives every (site, metric) of those sites and
    metrics over its days; the units not in ``units`` have all their days archived there
    and are skipped."""
    archive = Archive(args.archive)
    bad = dict(units or {})
    docs: list[dict[str, Any]] = [manifest] if manifest else []
    # each unit's own nodes: its manifest in the range, else its latest one
    own: dict[tuple[str, ...], tuple[str, ...]] = {}
    for parts, day in sorted(bad.items()):
        doc = (_read(archive, parts, day) if day else None) or archive.latest_manifest(
            "kwollect", parts
        )
        if doc:
            docs.append(doc)
            own[parts] = tuple(_node_names(doc, parts[0]))
    sites = sorted({parts[0] for parts in bad})
    nodes: dict[str, tuple[str, ...]] = {}
    for site in sites:
        sets = {own[p] for p in bad if p[0] == site and own.get(p)}
        if len(sets) > 1:  # one command would archive every metric on every node
            print(
                f"dxt: {site}'s metrics were archived on different nodes ("
                + "; ".join(f"{p[1]}: {','.join(own[p])}" for p in sorted(bad) if own.get(p))
                + "): refill each metric with its own --nodes (its manifests name them)",
                file=sys.stderr,
            )
        elif sets:  # a unit never archived takes the nodes of the site's others
            nodes[site] = sets.pop()
        else:
            names = _site_nodes(args, archive, site, bad, manifest)
            if names:
                nodes[site] = tuple(names)
    words = _connection_words(args, docs)
    if sites:
        words += [
            "--nodes",
            ",".join(n for s in sites for n in nodes.get(s) or [f"{s.upper()}_NODES"]),
        ]
    metrics = sorted({parts[1] for parts in bad}) or _split(getattr(args, "metrics", None))
    if metrics:
        words += ["--metrics", ",".join(metrics)]
    day_zone = _day_zone(docs)
    if day_zone and day_zone != DEFAULT_TIME_ZONE:
        words += ["--tz", day_zone]
    return shlex.join(words)


def _read(archive: Archive, parts: tuple[str, ...], day: dt.date) -> dict[str, Any] | None:
    """The manifest of ``parts`` on ``day``; None when there is none or it cannot be read
    (the coverage report already says which)."""
    try:
        doc = archive.read_manifest(DayKey("kwollect", parts, day))
    except (DxtError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def _node_names(doc: Mapping[str, Any], site: str) -> list[str]:
    """The nodes a manifest names (short names of ``site``), as ``--nodes`` takes them."""
    names = doc.get("nodes")
    if not isinstance(names, list):
        return []
    return [n if "." in n else f"{n}.{site}" for n in names if isinstance(n, str) and n]


def _site_nodes(
    args: argparse.Namespace,
    archive: Archive,
    site: str,
    bad: Mapping[tuple[str, ...], dt.date | None],
    sample: Mapping[str, Any] | None,
) -> list[str]:
    """``site``'s nodes when none of its units to refill has a manifest in the range: from
    the site's complete units (every day of the range has a manifest: its first is read),
    else from the sample manifest when it is of that site."""
    first = parse_day(args.start_day)
    for parts in coverage_units(args):
        if parts[0] == site and parts not in bad:
            names = _node_names(_read(archive, parts, first) or {}, site)
            if names:
                return names
    if sample and sample.get("site") == site:
        return _node_names(sample, site)
    return []


def _connection_words(args: argparse.Namespace, docs: list[dict[str, Any]]) -> list[str]:
    """``--api-url`` (the one given to coverage, else the manifests' ``source_url``, else
    ``URL``), ``--user`` and ``--no-verify-tls`` as given: never a password."""
    recorded = [d["source_url"] for d in docs if isinstance(d.get("source_url"), str)]
    given = getattr(args, "api_url", None) or getattr(args, "url", None)
    url = given or next((u for u in recorded if u), None)
    words = ["--api-url", redact_url(url) if url else "URL"]
    if getattr(args, "user", None):
        words += ["--user", str(args.user)]
    if getattr(args, "no_verify_tls", False):
        words.append("--no-verify-tls")
    return words


def _day_zone(docs: list[dict[str, Any]]) -> str | None:
    """The zone the manifests' days are cut in (the first that names one)."""
    return next((z for z in map(manifest_zone, docs) if z), None)


__all__ = [
    "add_coverage_arguments",
    "add_extract_parser",
    "cmd_extract_kwollect",
    "coverage_units",
    "describe_parts",
    "refetch_command",
    "refill_options",
]
