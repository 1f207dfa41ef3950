"""The archive on S3 against local disk: ``python -m benchmarks.s3_archive [--size tiny|full]``.

One Examon metric-day (full: 200 nodes x 4,320 samples = 864,000 points; tiny: 4 nodes),
or ``--days N`` of them in one process (boto3's import and client are made once),
archived by ``dxt extract examon`` as a process, into a local directory and into a
``moto_server`` S3 process on loopback, in the same run, after a warm-up that fills the
simulator's cache. Each target runs ``--repeat`` times (first into an empty archive, so every
run writes and uploads: a fresh prefix each time). Prints wall time and peak RSS of the
``dxt`` process (``wait4``), the S3 / local time ratio, and JSON (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from dxt_core import procs
from dxt_core.simulate import spawn_simulator

NODES = {"tiny": 4, "full": 200}
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_moto() -> tuple[subprocess.Popen[bytes], str]:
    exe = Path(sys.executable).with_name("moto_server")
    port = _free_port()
    proc = procs.start(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return proc, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                procs.stop(proc, 0)
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.1)


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = ""
    if proc.stderr:
        err = proc.stderr.read().decode()
        proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def workload(size: str = "tiny", repeat: int = 2, days: int = 1, refetch: bool = False) -> dict:
    """Local and S3 runs of the same metric-day(s), alternated, in the same run. ``refetch``
    passes ``--refetch`` to both (no up-front status request per day, as an Airflow task
    runs: on S3 the first request, and boto3's import, then come at the commit)."""
    work = Path(tempfile.mkdtemp(prefix="dxt-bench-s3-"))
    catalog = work / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim, sim_url = spawn_simulator(
        "examon", ["--catalog", str(catalog), "--nodes", str(NODES[size]), "--interval", "20"]
    )
    moto, s3_url = _start_moto()
    creds = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_url,
        "DXT_S3_STAGING": str(work / "staging"),
    }
    env = {**os.environ, **creds, "PYTHONPATH": str(ROOT)}
    load_before = os.getloadavg()
    try:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=s3_url,
            aws_access_key_id="bench",
            aws_secret_access_key="bench-secret",
            region_name="us-east-1",
        ).create_bucket(Bucket="dxt-bench")

        def cmd(root: str) -> list[str]:
            return [
                *(sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", sim_url),
                *("--metric", "ambient", "--plugin", "ipmi_pub", "--start-day", "2020-03-09"),
                *("--end-day", str(dt.date(2020, 3, 8) + dt.timedelta(days=days))),
                *("--archive", root, "--workers", "1", "-q"),
                *(["--refetch"] if refetch else []),
            ]

        _run(cmd(str(work / "warmup")), env)  # fills the simulator's cache
        results: dict[str, list[tuple[float, float]]] = {"local": [], "s3": []}
        for i in range(repeat):
            results["local"].append(_run(cmd(str(work / f"local{i}")), env))
            results["s3"].append(_run(cmd(f"s3://dxt-bench/run{i}"), env))
        size_bytes = next((work / "local0").rglob("*.csv.gz")).stat().st_size
    finally:
        procs.stop(sim)
        procs.stop(moto)
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        target: {
            "seconds_median": round(statistics.median(s for s, _ in runs), 3),
            "peak_rss_mib_max": round(max(r for _, r in runs), 1),
            "runs": [{"seconds": round(s, 3), "peak_rss_mib": round(r, 1)} for s, r in runs],
        }
        for target, runs in results.items()
    }
    ratio = summary["s3"]["seconds_median"] / summary["local"]["seconds_median"]
    return {
        "workload": "s3_archive",
        "size": size,
        "points": NODES[size] * 4320,
        "days": days,
        "refetch": refetch,
        "file_bytes": size_bytes,
        "repeat": repeat,
        **summary,
        "s3_over_local": round(ratio, 3),
        # the machine is shared: the load average (1, 5, 15 min) around the measurement
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def print_result(report: dict) -> None:
    print(f"{'target':8} {'seconds (median)':>17} {'peak RSS MiB':>13}")
    for target in ("local", "s3"):
        s = report[target]
        print(f"{target:8} {s['seconds_median']:17.2f} {s['peak_rss_mib_max']:13.1f}")
    print(
        f"{report['days']} metric-day(s) of {report['points']:,} points"
        f"{' (--refetch)' if report['refetch'] else ''}, "
        f"{report['file_bytes']:,} bytes gzip CSV each; S3 / local wall time "
        f"{report['s3_over_local']:.2f}x; load average {report['loadavg_before']} -> "
        f"{report['loadavg_after']} on {report['cpus']} CPUs"
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--size", choices=sorted(NODES), default="tiny")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--days", type=int, default=1, help="metric-days per process (the client made once)"
    )
    ap.add_argument(
        "--refetch",
        action="store_true",
        help="pass --refetch to both targets (no up-front status request: an Airflow task's way)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    report = workload(args.size, args.repeat, args.days, args.refetch)
    print_result(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
