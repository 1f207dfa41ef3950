"""Benchmark suite: ``python -m benchmarks [--size tiny|full]`` (``./run bench``).

Each workload runs against the project's simulator over loopback HTTP, every pipeline in its
own process (peak RSS is per process), after one warm-up run that fills the simulator's
response cache. Prints a table and writes JSON (``--out``).

Workloads:
  examon      one Examon metric-day: 200 nodes x 4,320 samples = 864,000 points (full size)
  examon10x   the same day at 2 s sampling: 8,640,000 points
  kwollect    2 Grid'5000 sites x 50 nodes, wattmetre 1 s, one day, via Kwollect.backup
  collectd_es 64 burst buffer devices x one day at 10 s (552,960 documents) in noida-db
              -> TOKIO HDF5 (PIT, scroll, and saved-input pipelines)
  command     `dxt extract examon` as a process (start to exit) against the simulator process
              (realistic data): one 864,000-point metric-day and a 20-metric catalog day,
              beside the seed-style reference process; time to first request, imports
  production  the Examon DAG on PostgreSQL + CeleryExecutor + Redis: `airflow backfill create`
              of METRICS catalog metrics x DAYS days (tiny 20 x 2, full 811 x 7), against the
              same DAG shape with no-op tasks; rates, CPU shares, metadata DB growth
  soak        (= production --faults) the same through a fault-injecting proxy, one Celery
              worker SIGKILLed and restarted; failures, retries, rows lost or duplicated,
              bytes against a fault-free run
  airflow     one daily run of the M100 catalog (811 mapped metric-days, tiny data) under
              airflow standalone, against the same DAG shape with no-op tasks; parse time
  reconcile   `dxt coverage examon --reconcile` against `dxt extract examon` of the same catalog
              day (tiny 20 metrics x 2 nodes, full 811 x 8): requests, seconds, points served
  publish     one metric-month through `dxt publish examon` from the Parquet and the CSV
              archive, beside a plain pyarrow read-and-write (tiny 8 nodes x 2 days, full 980
              nodes x 31 days at 20 s = 127M rows); peak RSS, rows/s per core
  coverage_view  the Airflow coverage view at 811 metrics x 365 days: index rebuild, grid
              endpoint, and the page rendered in Debian's chromium (when installed)
  prometheus  one metric-day of 10,000 series at 15 s (57.6 million samples) from Debian's
              real Prometheus and VictoriaMetrics into gzip CSV and Parquet, beside curl of
              the server's own answer for the day (tiny: 10 series)
  s3_archive  `dxt extract examon` of the 864,000-point metric-day (tiny: 4 nodes) into a
              local directory and into moto_server's S3 on loopback, alternated in the same
              run: wall time, peak RSS, the S3 / local ratio (benchmarks/s3_archive.py)
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dxt_core import procs
from dxt_core.simulate import spawn_simulator

SIZES = {
    # workload: (nodes, interval_s) per size; for airflow: (metrics, None), None = all 811
    "tiny": {"examon": (4, 20), "examon10x": (4, 2), "airflow": (20, None)},
    "full": {"examon": (200, 20), "examon10x": (200, 2), "airflow": (None, None)},
}


def start_simulator(catalog: Path, nodes: int, interval: int) -> tuple[subprocess.Popen[str], str]:
    return spawn_simulator(
        "examon", ["--catalog", str(catalog), "--nodes", str(nodes), "--interval", str(interval)]
    )


def run_pipeline(pipeline: str, url: str, work: Path, extra: list[str]) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.examon_pipelines",
            pipeline,
            "--url",
            url,
            "--out",
            str(work / pipeline),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{pipeline} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def examon_workload(
    name: str, nodes: int, interval: int, repeat: int, with_reference: bool
) -> dict:
    with tempfile.TemporaryDirectory(prefix="dxt-bench-") as tmp:
        work = Path(tmp)
        catalog = work / "catalog.csv"
        catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
        sim, url = start_simulator(catalog, nodes, interval)
        try:
            results: dict[str, list[dict]] = {}
            pipelines = ["ours", "ours_parquet", "floor"] + (
                ["reference"] if with_reference else []
            )
            ours_csv = work / "ours/examon/ipmi_pub/ambient/2020-03-10.csv.gz"
            for pipeline in pipelines:
                extra = ["--csv-gz", str(ours_csv)] if pipeline == "floor" else []
                run_pipeline(pipeline, url, work, extra)  # warm-up (fills the server cache)
                results[pipeline] = [
                    run_pipeline(pipeline, url, work, extra) for _ in range(repeat)
                ]
        finally:
            procs.stop(sim)
    summary: dict[str, dict] = {}
    for pipeline, runs in results.items():
        secs = statistics.median(r["seconds"] for r in runs)
        points = runs[0]["points"]
        summary[pipeline] = {
            "points": points,
            "seconds": round(secs, 3),
            "points_per_s": round(points / secs),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
            "output_bytes": runs[0]["bytes"],
            "runs": runs,
        }
    ours = summary["ours"]
    ratios = {"ours_vs_floor_time": round(ours["seconds"] / summary["floor"]["seconds"], 2)}
    if "reference" in summary:
        ref = summary["reference"]
        ratios["speedup_vs_reference"] = round(ref["seconds"] / ours["seconds"], 1)
        ratios["bytes_vs_reference"] = round(ours["output_bytes"] / ref["output_bytes"], 3)
    return {
        "workload": name,
        "nodes": nodes,
        "interval_s": interval,
        "pipelines": summary,
        "ratios": ratios,
    }


def print_result(res: dict) -> None:
    print(f"\n{res['workload']}: {res['nodes']} nodes x {res['interval_s']} s sampling, one day")
    print(
        f"  {'pipeline':<10} {'points':>10} {'seconds':>8} {'points/s':>11} "
        f"{'peak RSS MB':>11} {'output bytes':>13}"
    )
    for name, s in res["pipelines"].items():
        print(
            f"  {name:<10} {s['points']:>10} {s['seconds']:>8.3f} {s['points_per_s']:>11} "
            f"{s['peak_rss_mb']:>11.1f} {s['output_bytes']:>13}"
        )
    print("  ratios: " + ", ".join(f"{k}={v}" for k, v in res["ratios"].items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument(
        "--workloads", default="examon,examon10x", help="comma-separated (default %(default)s)"
    )
    p.add_argument("--repeat", type=int, default=3, help="measured runs per pipeline")
    p.add_argument(
        "--no-reference-10x",
        action="store_true",
        help="skip the (slow, memory-hungry) reference pipeline at 10x",
    )
    prod = p.add_argument_group("production and soak")
    prod.add_argument("--faults", action="store_true", help="production: run the soak")
    prod.add_argument("--metrics", type=int, help="catalog metrics (default: by --size)")
    prod.add_argument("--days", type=int, help="days to backfill (default: by --size)")
    prod.add_argument("--celery-workers", type=int, default=2, help="default %(default)s")
    prod.add_argument("--concurrency", type=int, default=4, help="per worker (default 4)")
    prod.add_argument("--max-active-runs", type=int, default=4, help="of the backfill (default 4)")
    prod.add_argument(
        "--min-heartbeat-interval",
        type=int,
        help="[workers] min_heartbeat_interval, seconds (default: Airflow's, 5)",
    )
    prod.add_argument(
        "--retry-delay",
        type=int,
        help="task retry delay, seconds, through a cluster policy (default: tiny 5, full the "
        "DAG's 120)",
    )
    prod.add_argument(
        "--heartbeat-timeout",
        type=int,
        help="[scheduler] task_instance_heartbeat_timeout, seconds (default: tiny 30, full 60)",
    )
    prod.add_argument(
        "--no-preload",
        action="store_true",
        help="the workers with Airflow's default Celery configuration, without "
        "dxt_core.airflow.celery's preloading of dxt's task modules",
    )
    p.add_argument("--out", default="benchmarks/results/latest.json")
    a = p.parse_args(argv)
    results = []
    for w in a.workloads.split(","):
        if w not in SIZES[a.size] and w not in (
            "kwollect",
            "collectd_es",
            "coverage_view",
            "command",
            "production",
            "soak",
            "reconcile",
            "publish",
            "prometheus",
            "s3_archive",
        ):
            raise SystemExit(f"unknown workload {w!r}; known: {', '.join(SIZES[a.size])}")
        t0 = time.monotonic()
        if w == "publish":
            from benchmarks.publish import print_result as print_publish
            from benchmarks.publish import workload as publish_workload

            res = publish_workload(a.size)
            results.append(res)
            print_publish(res)
            continue
        if w == "kwollect":
            from benchmarks.kwollect import kwollect_workload
            from benchmarks.kwollect import print_result as print_kwollect

            res = kwollect_workload(a.size)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print_kwollect(res)
            results.append(res)
            continue
        if w == "coverage_view":
            from benchmarks.coverage_view import print_result as print_coverage
            from benchmarks.coverage_view import workload as coverage_workload

            res = coverage_workload(a.size, a.repeat)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print_coverage(res)
            results.append(res)
            continue
        if w in ("production", "soak"):
            from benchmarks.production import print_result as print_production
            from benchmarks.production import workload as production_workload

            res = production_workload(
                a.size,
                faults=a.faults or w == "soak",
                metrics=a.metrics,
                days=a.days,
                workers=a.celery_workers,
                concurrency=a.concurrency,
                max_active_runs=a.max_active_runs,
                min_heartbeat_interval=a.min_heartbeat_interval,
                retry_delay_s=a.retry_delay,
                heartbeat_timeout_s=a.heartbeat_timeout,
                preload=not a.no_preload,
            )
            print_production(res)
            results.append(res)
            continue
        if w == "command":
            from benchmarks.command import print_result as print_command
            from benchmarks.command import workload as command_workload

            res = command_workload(a.size, a.repeat)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print_command(res)
            results.append(res)
            continue
        if w == "prometheus":
            from benchmarks.prometheus import workload as prometheus_workload

            res = prometheus_workload(a.size, a.repeat)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            results.append(res)
            continue
        if w == "s3_archive":
            from benchmarks.s3_archive import print_result as print_s3
            from benchmarks.s3_archive import workload as s3_workload

            res = s3_workload(a.size, a.repeat)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print_s3(res)
            results.append(res)
            continue
        if w == "reconcile":
            from benchmarks.reconcile import print_result as print_reconcile
            from benchmarks.reconcile import workload as reconcile_workload

            res = reconcile_workload(a.size)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print_reconcile(res)
            results.append(res)
            continue
        if w == "collectd_es":
            from benchmarks.collectd_es import workload as collectd_es_workload

            res = collectd_es_workload(a.size, a.repeat)
            res["wall_s"] = round(time.monotonic() - t0, 1)
            results.append(res)
            continue
        nodes, interval = SIZES[a.size][w]
        if w == "airflow":
            from benchmarks.airflow_run import run as airflow_run

            res = {"workload": "airflow", **airflow_run(nodes)}
            res["wall_s"] = round(time.monotonic() - t0, 1)
            print(f"\nairflow: {json.dumps(res, indent=2)}")
            results.append(res)
            continue
        res = examon_workload(
            w,
            nodes,
            interval,
            a.repeat,
            with_reference=not (w == "examon10x" and a.no_reference_10x),
        )
        res["wall_s"] = round(time.monotonic() - t0, 1)
        print_result(res)
        results.append(res)
    if {"examon", "examon10x"} <= {r["workload"] for r in results}:
        one, ten = (next(r for r in results if r["workload"] == w) for w in ("examon", "examon10x"))
        growth = ten["pipelines"]["ours"]["peak_rss_mb"] / one["pipelines"]["ours"]["peak_rss_mb"]
        print(f"\npeak RSS growth of ours, 10x data: {growth:.2f}x")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "size": a.size,
                "machine": platform.platform(),
                "python": platform.python_version(),
                "results": results,
            },
            indent=2,
        )
    )
    print(f"\nresults: {out}")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


if __name__ == "__main__":
    # SIGTERM (a test's timeout, `kill`) ends the run as Ctrl-C does: each benchmark's
    # `finally` stops its servers; procs.stop_tracked stops any left
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        sys.exit(main())
    finally:
        procs.stop_tracked()
