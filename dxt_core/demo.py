"""``dxt demo``: the whole pipeline on one machine, with nothing to configure.

Starts the Examon simulator and Airflow (``airflow standalone``: SQLite, LocalExecutor,
scheduler, dag-processor, API server and UI), backfills the last few days of a small slice of
the Marconi100 catalog through ``airflow backfill create``, then prints what was archived,
where, and how to log in to the UI.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from dxt_core.archive import Archive, coverage
from dxt_core.backends.examon.catalog import load_catalog
from dxt_core.errors import ConfigError, DxtError
from dxt_core.simulate import spawn_examon_simulator
from dxt_core.windows import days


def dags_folder() -> Path:
    """The repository's ``dags/`` folder (the package is installed from a checkout)."""
    candidates = [Path(__file__).resolve().parent.parent / "dags", Path.cwd() / "dags"]
    for c in candidates:
        if (c / "dxt_examon.py").is_file():
            return c
    raise ConfigError(
        "cannot find dags/dxt_examon.py: run 'dxt demo' from the dxt-archive checkout"
    )


def _airflow_bin() -> str:
    exe = Path(sys.executable).parent / "airflow"
    if exe.exists():
        return str(exe)
    found = shutil.which("airflow")
    if not found:
        raise ConfigError("the 'airflow' command is missing: pip install 'dxt-archive[airflow]'")
    return found


def demo_catalog(path: Path, per_plugin: int) -> int:
    """Write a slice of the shipped catalog: the first metrics of each plugin."""
    taken: dict[str, int] = {}
    lines = ["metric,plugin"]
    for e in load_catalog():
        if taken.get(e.plugin, 0) < per_plugin:
            taken[e.plugin] = taken.get(e.plugin, 0) + 1
            lines.append(f"{e.metric},{e.plugin}")
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def start_simulator(
    catalog: Path, log_path: Path, nodes: int = 8
) -> tuple[subprocess.Popen[str], str]:
    """Start ``dxt simulate examon`` on a free port; return the process and its URL."""
    with log_path.open("w") as log:
        return spawn_examon_simulator(["--catalog", str(catalog), "--nodes", str(nodes)], log)


@contextlib.contextmanager
def _terminating(*procs: subprocess.Popen[Any]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM) if _own_group(p) else p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL) if _own_group(p) else p.kill()
                p.wait(30)


def _own_group(p: subprocess.Popen[Any]) -> bool:
    try:
        return os.getpgid(p.pid) == p.pid
    except ProcessLookupError:
        return False


def airflow_env(
    home: Path, archive: Path, catalog: Path, sim_url: str, port: int
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # standalone starts its components as 'airflow ...' found on PATH
            "PATH": f"{Path(_airflow_bin()).parent}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__API__PORT": str(port),
            # A local demo: the UI listens on loopback only and needs no login.
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # SQLite: wait for the writer's lock instead of failing after 5 s
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "dxt_core.airflow.sqlite.CONNECT_ARGS",
            "AIRFLOW_CONN_EXAMON_DEFAULT": json.dumps(
                {
                    "conn_type": "http",
                    "host": sim_url.split("://", 1)[1].rsplit(":", 1)[0],
                    "port": int(sim_url.rsplit(":", 1)[1]),
                    "extra": {
                        "time_zone": "Europe/Rome",
                        "cluster": "marconi100",
                        "jobs_url": sim_url,
                    },
                }
            ),
            "DXT_ARCHIVE_ROOT": str(archive),
            "DXT_EXAMON_CATALOG": str(catalog),
        }
    )
    return env


def _airflow(env: dict[str, str], *args: str, check: bool = True) -> str:
    # SQLite allows one writer: a CLI call can meet "database is locked" while the
    # scheduler writes, so it is retried a few times.
    for _ in range(10):
        out = subprocess.run(
            [_airflow_bin(), *args], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode == 0 or "database is locked" not in out.stderr:
            break
        time.sleep(3)
    if check and out.returncode != 0:
        raise DxtError(f"airflow {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def _api_get(port: int, path: str) -> Any:
    r = httpx.get(f"http://127.0.0.1:{port}/api/v2/{path}", timeout=30)
    r.raise_for_status()
    return r.json()


def _wait_for_dag(port: int, proc: subprocess.Popen[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DxtError("airflow standalone exited; see airflow-standalone.log")
        with contextlib.suppress(httpx.HTTPError):
            if _api_get(port, "dags/dxt_examon").get("dag_id") == "dxt_examon":
                return
            errors = _api_get(port, "importErrors").get("import_errors") or []
            if errors:
                raise DxtError(f"the DAG file has import errors: {errors}")
        time.sleep(3)
    raise DxtError("Airflow did not register the dxt_examon DAG in time")


def wait_for_runs(port: int, days: set[str], timeout: float) -> list[dict[str, Any]]:
    """Poll until the runs of ``days`` (logical dates) are finished; return them."""
    deadline = time.monotonic() + timeout
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            every = _api_get(port, "dags/dxt_examon/dagRuns?limit=100")["dag_runs"]
            runs = [r for r in every if str(r.get("logical_date"))[:10] in days]
        done = [r for r in runs if r.get("state") in ("success", "failed")]
        if len(done) >= len(days):
            return runs
        time.sleep(5)
    raise DxtError(f"backfill not finished after {timeout:.0f} s; runs: {runs}")


def run_demo(args: argparse.Namespace) -> int:
    work = Path(args.dir).resolve()
    home, archive_dir = work / "airflow", work / "archive"
    home.mkdir(parents=True, exist_ok=True)
    archive_dir.mkdir(parents=True, exist_ok=True)
    catalog = work / "catalog.csv"
    n_metrics = demo_catalog(catalog, args.metrics_per_plugin)
    today = dt.datetime.now(dt.UTC).date()
    first, last = today - dt.timedelta(days=args.days), today - dt.timedelta(days=1)

    print(f"[1/5] starting the Examon simulator ({n_metrics} metrics: {catalog})", flush=True)
    sim, url = start_simulator(catalog, work / "simulator.log")
    env = airflow_env(home, archive_dir, catalog, url, args.port)
    env["DXT_EXAMON_START_DATE"] = first.isoformat()
    env["DXT_EXAMON_CATCHUP"] = "false"
    with _terminating(sim):
        print(f"      simulator at {url}", flush=True)
        print(f"[2/5] preparing Airflow in {home} (SQLite, LocalExecutor)", flush=True)
        _airflow(env, "db", "migrate")
        _airflow(env, "pools", "set", "examon", "4", "Concurrent queries to Examon")
        log = (work / "airflow-standalone.log").open("w")
        af = subprocess.Popen(
            [_airflow_bin(), "standalone"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with _terminating(af):
            print("[3/5] starting airflow standalone (scheduler, dag-processor, UI)", flush=True)
            _wait_for_dag(args.port, af, 300)
            _airflow(env, "dags", "unpause", "dxt_examon")
            print(
                f"[4/5] airflow backfill create --dag-id dxt_examon --from-date {first} "
                f"--to-date {last}",
                flush=True,
            )
            _airflow(
                env,
                "backfill",
                "create",
                "--dag-id",
                "dxt_examon",
                "--from-date",
                first.isoformat(),
                "--to-date",
                last.isoformat(),
            )
            wanted = {d.isoformat() for d in days(first, last)}
            runs = wait_for_runs(args.port, wanted, args.timeout)
            print("[5/5] done\n", flush=True)
            _summary(archive_dir, catalog, first, last, runs, args.port, home)
            if args.exit:
                return 0 if all(r.get("state") == "success" for r in runs) else 1
            print("\nAirflow keeps running; press Ctrl-C to stop.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while af.poll() is None:
                    time.sleep(1)
    return 0


def _summary(
    archive_dir: Path,
    catalog: Path,
    first: dt.date,
    last: dt.date,
    runs: list[dict[str, Any]],
    port: int,
    home: Path,
) -> None:
    entries = load_catalog(catalog)
    rows = coverage(
        Archive(archive_dir),
        "examon",
        [(e.plugin, e.metric) for e in entries],
        days(first, last),
        verify=True,
    )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    files = sorted(archive_dir.rglob("*.csv.gz"))
    size = sum(f.stat().st_size for f in files)
    print("runs:")
    for run in sorted(runs, key=lambda r: str(r.get("logical_date"))):
        day = str(run.get("logical_date"))[:10]
        print(f"  {run.get('dag_run_id')} (day {day}): {run.get('state')}")
    print(f"\narchive: {archive_dir}")
    print(
        f"  {len(files)} data files, {size} bytes; metric-days: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    )
    for f in files[:6]:
        print(f"  {f.relative_to(archive_dir)}")
    if len(files) > 6:
        print(f"  ... and {len(files) - 6} more")
    print(f"\nAirflow UI: http://127.0.0.1:{port}  (local demo: no login needed)")
    dxt = Path(sys.executable).parent / "dxt"  # the venv's, which may not be on PATH
    print(
        f"coverage:   {dxt} coverage --archive {archive_dir} --catalog {catalog} "
        f"--start-day {first} --end-day {last}"
    )
    if files:
        print(f"pandas:     pandas.read_csv('{files[0]}', parse_dates=['timestamp'])")
