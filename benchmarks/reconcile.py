"""Workload ``reconcile``: what ``dxt coverage examon --reconcile`` costs beside archiving.

One run, one Examon simulator process serving the M100 catalog (811 metrics at full size, the
first 20 at tiny size): ``dxt extract examon`` archives one day of the catalog, then
``dxt coverage examon --reconcile`` asks the simulator for the same day's counts. Both run
as processes (start to exit, as a user runs them). Measured for each: wall seconds, the
requests the simulator answered and the data points it served (from its ``/_sim/stats``,
reset before each command). The figures that matter: reconcile requests and seconds as a
share of archiving (issue 19 asks at most 5 %), and data points served by the reconcile
(one count value per metric and day: no data).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from dxt_core.simulate import spawn_simulator

ROOT = Path(__file__).resolve().parent.parent
DAY = dt.date(2020, 3, 9)
#: size: (catalog metrics, nodes); None = the whole M100 catalog (811 metrics)
SIZES: dict[str, tuple[int | None, int]] = {"tiny": (20, 2), "modest": (None, 4), "full": (None, 8)}


def _catalog(path: Path, metrics: int | None) -> int:
    from dxt_core.backends.examon.catalog import load_catalog

    entries = load_catalog(None)
    if metrics is not None:
        entries = entries[:metrics]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["metric", "plugin"])
        for e in entries:
            w.writerow([e.metric, e.plugin])
    return len(entries)


def _dxt(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=7200,
        cwd=ROOT,
    )
    return time.perf_counter() - t0, out


def _stats(url: str) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{url}/_sim/stats", timeout=30).json()
    return doc


def workload(size: str) -> dict[str, Any]:
    metrics, nodes = SIZES.get(size, SIZES["tiny"])
    with tempfile.TemporaryDirectory(prefix="dxt-bench-reconcile-") as tmp:
        work = Path(tmp)
        catalog = work / "catalog.csv"
        n = _catalog(catalog, metrics)
        proc, url = spawn_simulator("examon", ["--catalog", str(catalog), "--nodes", str(nodes)])
        try:
            common = ["--url", url, "--jobs-url", url, "--catalog", str(catalog)]
            common += ["--archive", str(work / "archive")]
            day = ["--start-day", DAY.isoformat(), "--end-day", DAY.isoformat()]
            httpx.post(f"{url}/_sim/stats/reset", timeout=30).raise_for_status()
            archive_s, out = _dxt("extract", "examon", *common, *day, "-q")
            if out.returncode != 0:
                raise SystemExit(f"extract failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
            archived = _stats(url)
            httpx.post(f"{url}/_sim/stats/reset", timeout=30).raise_for_status()
            reconcile_s, rec = _dxt("coverage", "examon", "--reconcile", *common, *day)
            if rec.returncode != 0:
                raise SystemExit(f"reconcile failed:\n{rec.stdout[-2000:]}{rec.stderr[-2000:]}")
            reconciled = _stats(url)
        finally:
            proc.terminate()
            proc.wait(30)
    summary = next((line for line in rec.stdout.splitlines() if "reconciled" in line), "")
    return {
        "workload": "reconcile",
        "size": size,
        "metrics": n,
        "nodes": nodes,
        "archive": {
            "seconds": round(archive_s, 2),
            "requests": archived["total"],
            "points_served": archived["points_served"],
        },
        "reconcile": {
            "seconds": round(reconcile_s, 2),
            "requests": reconciled["total"],
            "points_served": reconciled["points_served"],
            "summary": summary,
        },
        "requests_share_pct": round(100 * reconciled["total"] / max(1, archived["total"]), 2),
        "seconds_share_pct": round(100 * reconcile_s / archive_s, 2),
    }


def print_result(res: dict[str, Any]) -> None:
    a, r = res["archive"], res["reconcile"]
    print(
        f"\nreconcile ({res['metrics']} metrics x {res['nodes']} nodes, one day)\n"
        f"  archive   {a['seconds']:>8.2f} s  {a['requests']:>7} requests  "
        f"{a['points_served']:>11,} points served\n"
        f"  reconcile {r['seconds']:>8.2f} s  {r['requests']:>7} requests  "
        f"{r['points_served']:>11,} points served (count values)\n"
        f"  reconcile / archive: {res['requests_share_pct']} % of the requests, "
        f"{res['seconds_share_pct']} % of the seconds\n  {r['summary']}"
    )


if __name__ == "__main__":
    result = workload(sys.argv[1] if len(sys.argv) > 1 else "tiny")
    print_result(result)
    print(json.dumps(result))
