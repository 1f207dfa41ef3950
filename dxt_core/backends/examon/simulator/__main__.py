"""``python -m dxt_core.backends.examon.simulator``: run the simulator until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, date, datetime, timedelta

from dxt_core.backends.examon.simulator.faults import Faults
from dxt_core.backends.examon.simulator.model import SimConfig, load_catalog
from dxt_core.backends.examon.simulator.server import ExamonSimulator, JobsPortUnavailable
from dxt_core.errors import ConfigError
from dxt_core.simulate.serving import add_listen_arguments, seconds
from dxt_core.windows import DEFAULT_TIME_ZONE, zone


def _utc_midnight_ms(text: str) -> int:
    try:
        day = date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD, got {text!r}") from exc
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dxt simulate examon",
        description="Serve a deterministic KairosDB 1.2 + Examon jobs API for tests.",
    )
    add_listen_arguments(p, 8083)
    p.add_argument("--catalog", help="metric,plugin CSV (default: the shipped M100 catalog)")
    p.add_argument("--nodes", type=int, default=8, help="compute nodes (default %(default)s)")
    p.add_argument("--interval", type=int, default=20, help="sample period in seconds")
    p.add_argument("--cluster", default="marconi100", help="cluster tag value")
    p.add_argument("--user", help="require HTTP Basic auth with this user")
    p.add_argument("--password", help="password for --user (or env DXT_SIM_PASSWORD)")
    p.add_argument("--delay", type=seconds, default=0.0, help="seconds to wait before answers")
    p.add_argument("--fail-next", type=int, default=0, help="fail the next N requests with 503")
    p.add_argument("--max-points", type=int, help="refuse datapoints answers above N points")
    p.add_argument("--slow-points", type=int, help="delay datapoints answers above N points")
    p.add_argument("--slow-delay", type=seconds, default=0.0, help="seconds, see --slow-points")
    p.add_argument(
        "--fail-metric",
        action="append",
        default=[],
        metavar="METRIC",
        help="datapoints queries for METRIC always fail (repeatable)",
    )
    p.add_argument(
        "--data-start",
        type=_utc_midnight_ms,
        help="YYYY-MM-DD: no data before this UTC midnight",
    )
    p.add_argument(
        "--jobs-port",
        type=_jobs_port,
        default=None,
        metavar="PORT|off",
        help="also serve the Examon jobs API on this port, as the real Examon server does "
        f"(default {EXAMON_SERVER_PORT}, where dxt extract examon looks for it; none with "
        "--port 0; 'off' for none)",
    )
    p.add_argument(
        "--tidy",
        action="store_true",
        help="tidy data for tests: samples exactly on the grid, doubles rounded (default: "
        "realistic, with millisecond jitter and float noise as a real KairosDB serves)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="compute every query answer (default: repeat an identical query's answer from a "
        "cache, so benchmarks time the client, not the simulator)",
    )
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p


#: The port of the real Examon server (ExamonHPC/examon ``docker-compose.yml``,
#: ``example_server.conf``) and of examon-client's ``JobsClient``.
EXAMON_SERVER_PORT = 5000


def _jobs_port(text: str) -> int:
    if text.strip().lower() == "off":
        return -1
    try:
        port = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a port number or 'off', got {text!r}") from exc
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return port


def extract_command(sim: ExamonSimulator, args: argparse.Namespace) -> str:
    """The ``dxt extract examon`` command that archives from this simulator as it runs."""
    parts = ["dxt extract examon", f"--url {sim.url}"]
    if sim.jobs_url is None or not sim.jobs_url.endswith(f":{EXAMON_SERVER_PORT}"):
        parts.append(f"--jobs-url {sim.jobs_url or sim.url}")
    if args.user:
        parts.append(f"--user {args.user}")
        # dxt extract reads the password from DXT_EXAMON_PASSWORD only (never an argument);
        # the simulator's own is not printed
        if args.password is None and os.environ.get("DXT_SIM_PASSWORD") is not None:
            parts.insert(0, 'DXT_EXAMON_PASSWORD="$DXT_SIM_PASSWORD"')
        else:
            parts.insert(0, "DXT_EXAMON_PASSWORD='<the --password given>'")
    if args.catalog:
        parts.append(f"--catalog {args.catalog}")
    yesterday = datetime.now(zone(DEFAULT_TIME_ZONE)).date() - timedelta(days=1)
    parts += [f"--start-day {yesterday.isoformat()}", "--limit 10", "--archive ./archive"]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0 on a clean shutdown, 2 on a configuration error.
    """
    args = _parser().parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DXT_SIM_PASSWORD")
    try:
        config = SimConfig(
            catalog=load_catalog(args.catalog),
            nodes=args.nodes,
            interval_s=args.interval,
            cluster=args.cluster,
            user=args.user,
            password=password if args.user is not None else None,
            faults=Faults(
                delay_s=args.delay,
                fail_next=args.fail_next,
                max_points=args.max_points,
                slow_points=args.slow_points,
                slow_delay_s=args.slow_delay,
                fail_metrics=list(args.fail_metric),
            ),
            data_start_ms=args.data_start,
            realistic=not args.tidy,
        )
        jobs_port = args.jobs_port
        if jobs_port is None:
            jobs_port = EXAMON_SERVER_PORT if args.port != 0 else -1
        try:
            sim = ExamonSimulator(
                config,
                host=args.host,
                port=args.port,
                jobs_port=jobs_port if jobs_port >= 0 else None,
            )
        except JobsPortUnavailable as exc:
            if args.jobs_port is not None:
                raise
            # The default port may be taken: the main port serves the jobs API anyway.
            print(
                f"dxt-simulate-examon: cannot serve the jobs API on port {jobs_port} "
                f"({exc.strerror}); it is served on the main port only",
                file=sys.stderr,
            )
            sim = ExamonSimulator(config, host=args.host, port=args.port)
    except (ConfigError, OSError) as exc:
        print(f"dxt-simulate-examon: {exc}", file=sys.stderr)
        return 2
    sim.verbose = args.verbose
    sim.cache_answers = not args.no_cache

    lines = []
    if sim.jobs_url:
        lines.append(f"dxt-simulate-examon: Examon jobs API also on {sim.jobs_url}")
    lines.append(f"archive from it with: {extract_command(sim, args)}")
    # The first line, printed by the shared serving code, is what launchers wait for
    # (dxt_core.simulate reads the URL from it).
    return sim.run_until_signal("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
