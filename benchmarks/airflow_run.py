"""Airflow workload: one daily run of the full M100 catalog (811 mapped metric-days, tiny
data) on the embedded default (airflow standalone: SQLite, LocalExecutor), against the same
DAG shape with no-op tasks (benchmarks/dags/dxt_noop.py) in the same Airflow, one after the
other. Also the DAG file's parse time."""

from __future__ import annotations

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
from typing import Any

import httpx

from dxt_core import procs
from dxt_core.simulate import spawn_simulator

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _airflow(env: dict[str, str], *args: str) -> None:
    for _ in range(10):
        out = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True)
        if out.returncode == 0:
            return
        if "database is locked" not in out.stderr:
            raise SystemExit(f"airflow {' '.join(args)} failed:\n{out.stderr[-2000:]}")
        time.sleep(3)


def _mapped_tasks(api: str, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = httpx.get(
            f"{api}/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
            params={"limit": 100, "offset": offset, "task_id": "archive_metric_day"},
        ).json()
        tis = page["task_instances"]
        out += tis
        offset += len(tis)
        if not tis or offset >= page["total_entries"]:
            return out


def parse_time_ms(env: dict[str, str]) -> float:
    code = (
        "import time\nfrom airflow.dag_processing.dagbag import DagBag\n"
        f"DagBag(dag_folder={str(ROOT / 'dags')!r})\nbest = 1e9\n"
        "for _ in range(10):\n    t = time.perf_counter()\n"
        f"    DagBag(dag_folder={str(ROOT / 'dags')!r})\n"
        "    best = min(best, time.perf_counter() - t)\nprint(best * 1000)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def run(
    metrics_limit: int | None = None, order: tuple[str, ...] = ("dxt_noop", "dxt_examon")
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="dxt-bench-airflow-"))
    dags = work / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "dxt_examon.py", dags)
    shutil.copy(ROOT / "benchmarks" / "dags" / "dxt_noop.py", dags)
    catalog = None
    if metrics_limit:
        catalog = work / "catalog.csv"
        lines = (ROOT / "dxt_core/data/M100_metrics.csv").read_text().splitlines()
        catalog.write_text("\n".join(lines[: metrics_limit + 1]) + "\n")
    sim, url = spawn_simulator("examon", ["--nodes", "1", "--interval", "3600"])
    port = _port()
    host, sim_port = url.split("://", 1)[1].rsplit(":", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DXT_"))}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(work / "home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "dxt_core.airflow.sqlite.CONNECT_ARGS",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "16",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW_CONN_EXAMON_DEFAULT": json.dumps(
                {
                    "conn_type": "http",
                    "host": host,
                    "port": int(sim_port),
                    "extra": {"jobs_url": url},
                }
            ),
            "DXT_ARCHIVE_ROOT": str(work / "archive"),
            "DXT_EXAMON_CATCHUP": "false",
            "DXT_EXAMON_START_DATE": "2024-04-01",
            "DXT_EXAMON_SETTLE_SECONDS": "0",
            "DXT_EXAMON_RETRIES": "0",
        }
    )
    if catalog:
        env["DXT_EXAMON_CATALOG"] = str(catalog)
    _airflow(env, "db", "migrate")
    _airflow(env, "pools", "set", "examon", "16", "benchmark")
    api = f"http://127.0.0.1:{port}/api/v2"
    log = (work / "standalone.log").open("w")
    af = procs.start(
        [AIRFLOW, "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    result: dict[str, Any] = {"parse_ms": round(parse_time_ms(env), 2)}
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if all(
                    httpx.get(f"{api}/dags/{d}").status_code == 200
                    for d in ("dxt_examon", "dxt_noop")
                ):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(3)
        for dag_id in order:
            # Unpausing makes the scheduler create the latest daily run (catchup is off):
            # that run is the measured one, alone in this Airflow.
            t0 = time.monotonic()
            _airflow(env, "dags", "unpause", dag_id)
            while True:
                try:
                    runs = httpx.get(f"{api}/dags/{dag_id}/dagRuns").json()["dag_runs"]
                except httpx.HTTPError:
                    runs = []
                if runs and runs[0]["state"] in ("success", "failed"):
                    break
                if time.monotonic() - t0 > 3600:
                    raise SystemExit(f"{dag_id} did not finish in an hour")
                time.sleep(2)
            wall = time.monotonic() - t0
            r = runs[0]
            start = dt.datetime.fromisoformat(r["start_date"])
            end = dt.datetime.fromisoformat(r["end_date"])
            tis = _mapped_tasks(api, dag_id, r["dag_run_id"])
            n = len(tis)
            durations = [float(t["duration"]) for t in tis if t.get("duration") is not None]
            states: dict[str, int] = {}
            for t in tis:
                states[str(t["state"])] = states.get(str(t["state"]), 0) + 1
            result[dag_id] = {
                "state": r["state"],
                "mapped_tasks": n,
                "task_states": states,
                "run_seconds": round((end - start).total_seconds(), 1),
                "wall_seconds": round(wall, 1),
                "per_task_s": round((end - start).total_seconds() / n, 3),
                # Each mapped task's own start-to-end time as Airflow recorded it (process
                # start, DAG file parse, task body, XCom push), without scheduling gaps.
                "task_duration_median_s": round(statistics.median(durations), 3),
                "task_duration_mean_s": round(statistics.fmean(durations), 3),
            }
            _airflow(env, "dags", "pause", dag_id)
    finally:
        procs.stop(af, 60)
        procs.stop(sim)
        log.close()
    failed = [d for d in order if result.get(d, {}).get("state") != "success"]
    ours, noop = result.get("dxt_examon"), result.get("dxt_noop")
    if ours and noop and not failed:
        result["ours_vs_noop"] = round(ours["run_seconds"] / noop["run_seconds"], 2)
    if failed:
        # A failed run's time is not a measurement: say so, keep the logs to read.
        result["invalid"] = f"run of {', '.join(failed)} did not succeed; logs kept in {work}"
        print(result["invalid"], file=sys.stderr)
    elif os.environ.get("DXT_BENCH_KEEP"):
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return result
