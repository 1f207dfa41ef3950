"""``dxt extract collectd-es``: one window of collectd in Elasticsearch or OpenSearch to JSON
Lines or TOKIO Time Series HDF5 (pytokio's ``archive_collectdes``)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dxt_core.backends.collectd_es.source import (
    DEFAULT_HOST_PREFIX,
    DEFAULT_INDEX,
    ENV_PASSWORD,
    ENV_USER,
    FAMILIES,
    check_family,
)
from dxt_core.backends.collectd_es.tasks import OUTPUT_FORMATS
from dxt_core.errors import ConfigError

#: ``dxt extract collectd-es`` exports one window to one file: it writes no archive day, so
#: ``dxt coverage`` prints the DAG's refill for missing days, never a ``dxt extract`` one.
EXTRACTS_DAYS = False
#: The zone every archive day of this backend is cut in (the DAG's UTC days; their manifests
#: do not name it): ``dxt coverage`` leaves the days not over there out of its refill.
DAY_ZONE = "UTC"


def parse_zone(name: str) -> dt.tzinfo | None:
    """``UTC`` (the default), ``local`` (None: this machine's zone, as pytokio read naive
    times) or an IANA zone name such as ``America/Los_Angeles``."""
    if name.upper() == "UTC":
        return dt.UTC
    if name == "local":
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"--tz {name!r} is not a time zone: use UTC, local (this machine's zone, as "
            "pytokio did) or an IANA name such as America/Los_Angeles"
        ) from exc


def parse_time(text: str, what: str, zone: dt.tzinfo | None = dt.UTC) -> dt.datetime:
    """ISO 8601; without an offset the time is read in ``zone`` (UTC by default; None: the
    machine's local time, with its DST rules, as pytokio's naive times were)."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(
            f"{what} {text!r} is not ISO 8601: write e.g. 2017-12-13T08:00:00 (UTC) or "
            "2017-12-13T09:00:00+01:00"
        ) from exc
    if t.tzinfo is not None:
        return t
    if isinstance(zone, dt.timezone):
        return t.replace(tzinfo=zone)

    def at(fold: int) -> dt.datetime:
        wall = t.replace(fold=fold)
        # None: local time (the C library's rules for that date), as pytokio's naive times
        if zone is None:
            return wall.astimezone()
        return wall.replace(tzinfo=zone).astimezone(dt.UTC).astimezone(zone)

    first, second = at(0), at(1)
    where = "this machine's local time" if zone is None else str(zone)
    if first.replace(tzinfo=None, fold=0) != t and second.replace(tzinfo=None, fold=0) != t:
        raise ConfigError(
            f"{what} {text!r} does not exist in {where} (the clocks skipped it): give the "
            f"time with its offset, e.g. {first.isoformat()}"
        )
    if first.utcoffset() != second.utcoffset():
        raise ConfigError(
            f"{what} {text!r} happens twice in {where} (the clocks went back): give the one "
            f"meant with its offset, {first.isoformat()} or {second.isoformat()}"
        )
    return first


def add_extract_parser(subparsers: Any) -> None:
    from dxt_core.backends.collectd_es import BACKEND

    e = subparsers.add_parser(
        "collectd-es",
        help="collectd in Elasticsearch (pytokio archive_collectdes)",
        description="Export collectd documents (disk, cpu, memory of hosts HOST_PREFIX*) from "
        "Elasticsearch 7.x-9.x or OpenSearch 1.x-3.x, or from a saved pytokio JSON (--input), "
        "over [START, END) into gzip JSON Lines or a TOKIO Time Series HDF5 file. An existing "
        "HDF5 file is updated (atomically) when its range covers the window and its layout "
        "is the writer's. A window without any document is an error (exit status 2) and "
        "writes nothing, unless --allow-empty. Credentials: --user and --password, each else "
        f"the environment's {ENV_USER} and {ENV_PASSWORD} (better for the password).",
    )
    e.add_argument(
        "start", metavar="START", help="window start, ISO 8601 (no offset: in --tz, UTC)"
    )
    e.add_argument("end", metavar="END", help="window end (exclusive), ISO 8601")

    def sized(flag: str, what: str) -> None:
        """An integer option whose default is the declared default of the DAG's setting of
        its name (not the ``DXT_COLLECTD_ES_<NAME>`` variable, which only DAG runs read): a
        command and a DAG run with nothing set export alike."""
        default = BACKEND.setting(flag[2:].replace("-", "_")).default
        e.add_argument(flag, type=int, default=default, help=what)

    e.add_argument(
        "--tz",
        default="UTC",
        help="zone of times without an offset: UTC (default), local (this machine's zone, "
        "as pytokio read them) or an IANA name",
    )
    e.add_argument("--url", help="Elasticsearch or OpenSearch URL, e.g. http://es.example.org:9200")
    e.add_argument("--user", help=f"HTTP Basic user (else environment {ENV_USER})")
    e.add_argument("--password", help=f"HTTP Basic password (better: environment {ENV_PASSWORD})")
    e.add_argument("--index", default=DEFAULT_INDEX, help="index pattern (default %(default)s)")
    e.add_argument("--host-prefix", default=DEFAULT_HOST_PREFIX, help="hostname prefix (bb)")
    e.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help="comma-separated families (default %(default)s)",
    )
    sized("--timestep", "HDF5 row width, s (default %(default)s)")
    sized("--num-nodes", "HDF5 servers (default %(default)s)")
    sized("--ssds-per-node", "HDF5 SSDs per server (%(default)s)")
    e.add_argument("--init-start", help="range of a new HDF5 file (default START)")
    e.add_argument("--init-end", help="end of a new HDF5 file's range (default END)")
    e.add_argument("--format", choices=OUTPUT_FORMATS, default="hdf5", help="output (hdf5)")
    e.add_argument(
        "--input",
        help="saved pytokio JSON (list of pages of hits) or archived JSON Lines (one hit per "
        "line), .gz ok; read one page at a time",
    )
    sized(
        "--slices", "parallel readers, each a @timestamp range of the window (default %(default)s)"
    )
    sized("--page-size", "hits per request (%(default)s)")
    e.add_argument("--keep-alive", default="2m", help="PIT/scroll keep-alive (default 2m)")
    e.add_argument(
        "--no-pit",
        action="store_true",
        help="read with scrolls, not a point in time (otherwise chosen from the server version)",
    )
    e.add_argument("--timeout", type=float, default=60.0, help="request timeout, s")
    e.add_argument(
        "--no-verify-tls",
        "--no-verify-certs",
        dest="no_verify_tls",
        action="store_true",
        help="do not verify TLS certificates (--no-verify-certs: the same, pytokio's name)",
    )
    e.add_argument(
        "--allow-empty",
        action="store_true",
        help="write the (empty) file even when the window holds no document",
    )
    e.add_argument("--out", required=True, help="output file")
    e.set_defaults(func=cmd_extract_collectd_es)


def cmd_extract_collectd_es(args: argparse.Namespace) -> int:
    if not args.timeout > 0:
        raise ConfigError(
            f"--timeout {args.timeout:g}: give the request timeout in seconds, above 0"
        )
    from dxt_core.backends.collectd_es.source import ExportStats

    zone = parse_zone(args.tz)
    start = parse_time(args.start, "START", zone)
    end = parse_time(args.end, "END", zone)
    if end <= start:
        raise ConfigError(f"END {args.end} is not after START {args.start}")
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    out = Path(args.out)
    init_start = parse_time(args.init_start, "--init-start", zone) if args.init_start else None
    init_end = parse_time(args.init_end, "--init-end", zone) if args.init_end else None
    a, b = init_start or start, init_end or end
    if b <= a:
        said_a = f"--init-start {args.init_start}" if init_start else f"START {args.start}"
        said_b = f"--init-end {args.init_end}" if init_end else f"END {args.end}"
        raise ConfigError(f"a new HDF5 file's range is empty: {said_b} is not after {said_a}")
    kwargs: dict[str, Any] = {
        "jsonl_path": out if args.format == "jsonl" else None,
        "hdf5_path": out if args.format == "hdf5" else None,
        "timestep": args.timestep,
        "num_nodes": args.num_nodes,
        "ssds_per_node": args.ssds_per_node,
        "init_start": init_start,
        "init_end": init_end,
        "allow_empty": args.allow_empty,
    }
    stats = ExportStats()
    try:
        report = _export(args, families, start, end, kwargs, stats)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: written whole or not at all
        was = "is as it was" if out.exists() else "was not created"
        exc.add_note(
            f"nothing was written: {out} {was} (it is written whole at the end); "
            f"{stats.requests} searches made; run the same command again"
        )
        raise
    print(f"wrote {out}: {report.summary()}")
    if not args.input:
        s = stats
        print(
            f"export: {s.server}, {s.mode}, {s.slices} slices, {s.requests} searches and "
            f"{s.other_requests} other requests (the server's version, contexts, count), "
            f"{s.resumed} resumed, {s.partial_retries} partial pages asked again, "
            f"{s.outside_window} documents outside the window dropped",
            file=sys.stderr,
        )
    if report.hits == 0:
        print(f"warning: no document in the window; {out} holds no data", file=sys.stderr)
    return 0


def _export(
    args: argparse.Namespace,
    families: list[str],
    start: dt.datetime,
    end: dt.datetime,
    kwargs: dict[str, Any],
    stats: Any,
) -> Any:
    """The export of :func:`cmd_extract_collectd_es`: from the saved hits (``--input``) or
    the server."""
    from dxt_core.backends.collectd_es.archive_day import es_pages, export_window, saved_pages
    from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource

    if args.input:
        provider = saved_pages(Path(args.input), args.host_prefix, args.input)
        return export_window(provider, families, start, end, **kwargs)
    if not args.url:
        raise ConfigError("give --url http://host:9200 (or --input FILE for saved hits)")
    user, password = cli_credentials(args)
    conn = CollectdEsConnection(
        args.url,
        user=user,
        password=password,
        index=args.index,
        host_prefix=args.host_prefix,
        verify_certs=not args.no_verify_tls,
        timeout_s=args.timeout,
    )
    with CollectdEsSource(
        conn,
        page_size=args.page_size,
        slices=args.slices,
        keep_alive=args.keep_alive,
        use_pit=not args.no_pit,
    ) as src:
        return export_window(es_pages(src, stats), families, start, end, **kwargs)


add_parser = add_extract_parser  # the name before the backend registry


def coverage_units(args: argparse.Namespace) -> list[tuple[str, ...]]:
    """One unit per family: ``--families`` (default every family)."""
    families = [f.strip() for f in (args.families or "").split(",") if f.strip()]
    return [(check_family(f),) for f in families or FAMILIES]


def describe_parts(parts: tuple[str, ...]) -> dict[str, str]:
    return {"family": parts[0]}


def add_coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--families", help="(collectd-es) comma-separated families (default all)")


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``dxt coverage collectd-es --reconcile --url ...`` needs to ask ``_count``.

    ``--url``, ``--user``, ``--password``, ``--timeout`` and ``--no-verify-tls`` are shared with the
    other backends' ``--reconcile`` (the first backend to declare one gives its help): the
    same destinations (``user``, ``password``, ``conn_timeout``, ``no_verify_tls``) as
    theirs, declared here too so that this backend does not depend on another's."""
    parser.add_argument("--url", help="(collectd-es) Elasticsearch or OpenSearch URL")
    parser.add_argument("--index", default=DEFAULT_INDEX, help="(collectd-es) index pattern")
    parser.add_argument("--host-prefix", default=DEFAULT_HOST_PREFIX, help="(collectd-es) hosts")
    parser.add_argument("--user", help=f"HTTP Basic user (collectd-es: else {ENV_USER})")
    parser.add_argument(
        "--password", help=f"HTTP Basic password (collectd-es: better, {ENV_PASSWORD})"
    )
    parser.add_argument(
        "--timeout", dest="conn_timeout", type=float, default=None, help="request timeout, s"
    )
    parser.add_argument(
        "--no-verify-tls", action="store_true", help="(--reconcile) do not verify TLS"
    )
    # pytokio's name, as the extract takes it; this backend's own (refused for the others)
    parser.add_argument(
        "--no-verify-certs",
        dest="no_verify_tls",
        action="store_true",
        help="(collectd-es) the same as --no-verify-tls (pytokio's name)",
    )


def cli_credentials(args: argparse.Namespace, said: str = "") -> tuple[str | None, str | None]:
    """``--user`` and ``--password``, each else ``PYTOKIO_ES_USER`` / ``PYTOKIO_ES_PASSWORD``
    (as pytokio and the DAG read them); both or neither (``said`` starts the refusal)."""
    from dxt_core.backends.collectd_es.connection import SPEC

    user, password = SPEC.credentials(
        getattr(args, "user", None) or None, getattr(args, "password", None) or None
    )
    if (user is None) != (password is None):
        given, missing = ("user", "password") if password is None else ("password", "user")
        raise ConfigError(
            f"{said}a {given} without a {missing}: give --user and --password (or "
            f"{ENV_USER} and {ENV_PASSWORD} in the environment), or neither"
        )
    return user, password


#: the request timeout of a count when --timeout is not given (the extract's default)
RECONCILE_TIMEOUT_S = 60.0


def reconcile_connection(args: argparse.Namespace) -> Any:
    """The connection ``--reconcile`` counts through: ``--url``, ``--index``,
    ``--host-prefix``, ``--user``/``--password`` (each else ``PYTOKIO_ES_USER`` /
    ``PYTOKIO_ES_PASSWORD``, as ``dxt extract collectd-es`` and the DAG read them),
    ``--timeout`` and ``--no-verify-tls``."""
    from dxt_core.backends.collectd_es.connection import CollectdEsConnection

    if not args.url:
        raise ConfigError("--reconcile needs the server: --url http://host:9200")
    user, password = cli_credentials(args, "--reconcile: ")
    timeout = getattr(args, "conn_timeout", None)
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"--timeout {timeout:g}: give the request timeout in seconds, above 0")
    return CollectdEsConnection(
        args.url,
        user=user,
        password=password,
        index=args.index,
        host_prefix=args.host_prefix,
        verify_certs=not getattr(args, "no_verify_tls", False),
        timeout_s=RECONCILE_TIMEOUT_S if timeout is None else float(timeout),
    )


@contextlib.contextmanager
def reconcile_counter(args: argparse.Namespace) -> Iterator[Any]:
    """(parts, day) -> the server's ``_count`` of the family's UTC day, through
    :func:`reconcile_connection` (its options, credentials from the environment when not
    given, as ``dxt extract collectd-es`` reads them)."""
    from dxt_core.backends.collectd_es.archive_day import day_window_utc
    from dxt_core.backends.collectd_es.source import CollectdEsSource
    from dxt_core.reconcile import SourceCount

    conn = reconcile_connection(args)
    with CollectdEsSource(conn) as src:

        def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
            start, end = day_window_utc(day)
            return src.count(parts[0], start, end)

        yield count


def refetch_command(args: argparse.Namespace, parts: tuple[str, ...], first: str, last: str) -> str:
    """collectd archive days are written by the DAG only: the Airflow command refills them."""
    return (
        f"# {parts[0]} {first}..{last}: no dxt extract for collectd_es archive days; use Airflow:"
    )
