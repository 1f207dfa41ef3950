"""Kwollect workload: back up one day of wattmetre data (1 s) of 50 nodes on each of two sites.

Every backup runs in its own process (``python -m benchmarks.kwollect run ...``) so its peak
RSS is its own. Three measurements against one simulator with a per-site delay per request:

* ``two_sites``: both sites, the whole day (the headline figures);
* ``one_site``: one site alone, the whole day (two sites in parallel should take about as long);
* ``two_sites_quarter``: both sites, a quarter of the day (peak memory should not grow with
  the data: compare with ``two_sites``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import peak_rss_mb
from dxt_core import procs
from dxt_core.simulate import spawn_simulator

DAY = dt.datetime(2024, 11, 26, tzinfo=dt.UTC)
METRIC = "wattmetre_power_watt"
# size: (nodes per site, hours, per-site delay per request in seconds)
SIZES = {"tiny": (3, 1.0, 0.05), "full": (50, 24.0, 0.5)}


def run_backup(url: str, sites: list[str], nodes: int, hours: float, out: Path) -> dict:
    """One backup in this process; returns points, seconds, peak RSS and bytes."""
    from dxt_core.backends.kwollect.experiment import Kwollect

    clusters = {"lyon": "nova", "nancy": "gros"}
    names = [f"{clusters[s]}-{i}.{s}.grid5000.fr" for s in sites for i in range(1, nodes + 1)]
    k = Kwollect(names, api_url=url)
    k.start(DAY).stop(DAY + dt.timedelta(hours=hours) - dt.timedelta(microseconds=1))
    t0 = time.perf_counter()
    manifest = json.loads(k.backup(out, metrics=METRIC).read_text())
    seconds = time.perf_counter() - t0
    return {
        "points": manifest["rows"],
        "seconds": round(seconds, 3),
        "points_per_s": round(manifest["rows"] / seconds),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "output_bytes": manifest["bytes"],
        "requests": manifest["requests"]["requests"],
    }


def _subprocess(url: str, sites: list[str], nodes: int, hours: float, out: Path) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.kwollect",
            "run",
            url,
            ",".join(sites),
            str(nodes),
            str(hours),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"kwollect backup failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kwollect_workload(size: str) -> dict:
    nodes, hours, delay = SIZES[size]
    sim, url = spawn_simulator(
        "kwollect",
        ["--nodes", str(nodes), "--site-delay", f"lyon={delay}", "--site-delay", f"nancy={delay}"],
    )
    try:
        with tempfile.TemporaryDirectory(prefix="dxt-bench-kwollect-") as tmp:
            work = Path(tmp)
            runs = {
                "two_sites": _subprocess(url, ["lyon", "nancy"], nodes, hours, work / "a"),
                "one_site": _subprocess(url, ["lyon"], nodes, hours, work / "b"),
                "two_sites_quarter": _subprocess(
                    url, ["lyon", "nancy"], nodes, hours / 4, work / "c"
                ),
            }
    finally:
        procs.stop(sim)
    two, one, quarter = runs["two_sites"], runs["one_site"], runs["two_sites_quarter"]
    return {
        "workload": "kwollect",
        "nodes_per_site": nodes,
        "hours": hours,
        "site_delay_s": delay,
        "runs": runs,
        "ratios": {
            "two_sites_vs_one_site_wall": round(two["seconds"] / one["seconds"], 2),
            "rss_full_vs_quarter": round(two["peak_rss_mb"] / quarter["peak_rss_mb"], 2),
            "points_full_vs_quarter": round(two["points"] / max(quarter["points"], 1), 2),
        },
    }


def print_result(res: dict) -> None:
    print(
        f"\nkwollect: {res['nodes_per_site']} nodes per site, wattmetre 1 s, "
        f"{res['hours']:g} h, {res['site_delay_s']} s per-site delay per request"
    )
    print(
        f"  {'run':<18} {'points':>10} {'seconds':>8} {'points/s':>10} {'peak RSS MB':>11} "
        f"{'output bytes':>13} {'requests':>8}"
    )
    for name, r in res["runs"].items():
        print(
            f"  {name:<18} {r['points']:>10} {r['seconds']:>8.2f} {r['points_per_s']:>10} "
            f"{r['peak_rss_mb']:>11.1f} {r['output_bytes']:>13} {r['requests']:>8}"
        )
    print("  ratios: " + ", ".join(f"{k}={v}" for k, v in res["ratios"].items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kwollect")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one backup (used by the workload)")
    r.add_argument("url")
    r.add_argument("sites")
    r.add_argument("nodes", type=int)
    r.add_argument("hours", type=float)
    r.add_argument("out")
    w = sub.add_parser("workload", help="the whole workload")
    w.add_argument("--size", choices=sorted(SIZES), default="full")
    a = p.parse_args(argv)
    if a.cmd == "run":
        print(json.dumps(run_backup(a.url, a.sites.split(","), a.nodes, a.hours, Path(a.out))))
    else:
        print_result(kwollect_workload(a.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
