"""The simulator's command line: ``dxt simulate kwollect`` and ``python -m`` of this package."""

from __future__ import annotations

import argparse
import os
import sys

from dxt_core.backends.kwollect.simulator.model import SimJob, SimSettings
from dxt_core.backends.kwollect.simulator.server import KwollectSimulator
from dxt_core.errors import ConfigError
from dxt_core.simulate.serving import add_listen_arguments, seconds


def _parse_job(text: str) -> SimJob:
    try:
        site, uid, nodes, start, stop = text.split(":")
        # STOP empty or 0: a running job (OAR's stop_time is 0 until the job ends)
        stopped = int(float(stop)) if stop.strip() else 0
        return SimJob(site, int(uid), tuple(nodes.split(",")), int(float(start)), stopped or None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"bad --job {text!r}: expected SITE:ID:NODE,NODE:START_EPOCH:STOP_EPOCH "
            "(STOP empty or 0: still running)"
        ) from exc


def _site_delay(text: str) -> tuple[str, float]:
    site, sep, value = text.partition("=")
    try:
        if not (site and sep):
            raise argparse.ArgumentTypeError("")
        return site, seconds(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"bad --site-delay {text!r}: expected SITE=SECONDS, SECONDS a finite number >= 0"
        ) from exc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dxt simulate kwollect",
        description="Serve a deterministic Grid'5000 reference + Kwollect metrics API.",
    )
    add_listen_arguments(p, 8084)
    p.add_argument("--nodes", type=int, default=4, help="nodes per cluster (default 4, >= 3)")
    p.add_argument("--delay", type=seconds, default=0.0, help="seconds before every metrics answer")
    p.add_argument(
        "--site-delay",
        type=_site_delay,
        action="append",
        default=[],
        metavar="SITE=SECONDS",
        help="extra delay of one site's metrics answers (repeatable)",
    )
    p.add_argument("--max-points", type=int, help="'too much data' (HTTP 500) above N points")
    p.add_argument("--timeout-delay", type=seconds, default=0.0, help="seconds before that error")
    p.add_argument("--user", help="require HTTP Basic auth with this user")
    p.add_argument("--password", help="password of --user (or env DXT_SIM_PASSWORD)")
    p.add_argument(
        "--job",
        type=_parse_job,
        action="append",
        default=[],
        help="SITE:ID:NODE,NODE:START_EPOCH:STOP_EPOCH (repeatable; STOP empty or 0: running)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT."""
    args = _parser().parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DXT_SIM_PASSWORD")
    try:
        settings = SimSettings(
            nodes_per_cluster=args.nodes,
            delay_s=args.delay,
            site_delay_s=dict(args.site_delay),
            max_points=args.max_points,
            timeout_delay_s=args.timeout_delay,
            user=args.user,
            password=password if args.user else None,
            jobs=list(args.job),
        )
        sim = KwollectSimulator(settings, host=args.host, port=args.port)
    except (ConfigError, OSError) as exc:
        print(f"dxt-simulate-kwollect: {exc}", file=sys.stderr)
        return 2
    return sim.served.run_until_signal()


if __name__ == "__main__":
    raise SystemExit(main())
