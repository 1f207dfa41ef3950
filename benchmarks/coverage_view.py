"""Coverage view workload: the grid of 811 metrics x 365 days (296,015 cells), rendered.

Builds an archive of the shipped M100 catalog over a year (one small data file and one
manifest per metric-day, a few days empty, missing or corrupt), indexes it with
``dxt index rebuild``, and gives a migrated Airflow metadata database (SQLite) one run per
day with one task instance per metric (a few failed), inserted in bulk: building them through
the scheduler would take hours. Then measures:

* ``index_rebuild_s``: ``dxt index rebuild`` over the year's manifests;
* ``server_s``: the grid endpoint's work (index + directory listings + task instances);
* ``api_s``: ``GET /dxt-archive/api/grid`` from a running ``airflow api-server``, signed in;
* ``render_s``: in Debian's chromium (when installed), from navigation start to the grid
  drawn, the page being opened as a signed-in user.

``python -m benchmarks --workloads coverage_view [--size tiny]``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from dxt_core import procs

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# size: (metrics, None = the whole shipped catalog; days)
SIZES = {"tiny": (20, 10), "full": (None, 365)}
FIRST_DAY = dt.date(2023, 1, 1)
PASSWORD = "bench-pw"


def _states(u: int, d: int) -> str:
    """A deterministic mix: mostly archived, some empty, missing, corrupt and failed."""
    k = (u * 7919 + d * 104729) % 1000
    if k < 15:
        return "missing_failed"
    if k < 25:
        return "missing"
    if k < 30:
        return "corrupt"
    if k < 60:
        return "empty"
    return "archived"


def build_archive(root: Path, units: list[tuple[str, str]], days: list[dt.date]) -> int:
    """Write data files and manifests directly (no fsync: a fixture, not the code under test)."""
    payload = b"\x1f\x8b" + b"x" * 100
    sha = hashlib.sha256(payload).hexdigest()
    n = 0
    for u, (plugin, metric) in enumerate(units):
        directory = root / "examon" / plugin / metric
        directory.mkdir(parents=True, exist_ok=True)
        for d, day in enumerate(days):
            state = _states(u, d)
            if state.startswith("missing"):
                continue
            name = f"{day.isoformat()}.csv.gz"
            doc: dict[str, Any] = {
                "schema": "dxt-archive/manifest/1",
                "source": "examon",
                "parts": [plugin, metric],
                "day": day.isoformat(),
                "status": "empty" if state == "empty" else "archived",
                "file": None if state == "empty" else name,
                "rows": 0 if state == "empty" else 8640,
                "bytes": 0 if state == "empty" else len(payload),
                "sha256": None if state == "empty" else sha,
                "requests": {"requests": 2, "retries": 0, "splits": 0},
                "seconds": 0.4,
                "written_at": "2024-01-01T00:00:00+00:00",
            }
            if state == "archived":  # a corrupt day's manifest names a file that is not there
                (directory / name).write_bytes(payload)
            (directory / f"{day.isoformat()}.manifest.json").write_bytes(
                json.dumps(doc, indent=2, sort_keys=True).encode()
            )
            n += 1
    return n


FILL_DB = """
import datetime as dt, json, sys, time
from sqlalchemy import insert, select
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session

spec = json.load(open(sys.argv[1]))
units, first, n_days = spec["units"], dt.date.fromisoformat(spec["first"]), spec["days"]
states = spec["states"]
t0 = time.perf_counter()
with create_session() as s:
    for d in range(n_days):
        day = first + dt.timedelta(days=d)
        start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
        failed = any(states[u][d] == "f" for u in range(len(units)))
        s.add(DagRun(dag_id="dxt_examon", run_id=f"scheduled__{day}", run_type="scheduled",
                     logical_date=start, data_interval=(start, start + dt.timedelta(days=1)),
                     run_after=start + dt.timedelta(days=1),
                     state="failed" if failed else "success"))
    s.flush()
    rows = []
    for d in range(n_days):
        day = first + dt.timedelta(days=d)
        for u, name in enumerate(units):
            rows.append({"task_id": "archive_metric_day", "dag_id": "dxt_examon",
                         "run_id": f"scheduled__{day}", "map_index": u, "try_number": 1,
                         "max_tries": 2, "pool": "examon", "pool_slots": 1,
                         "state": "failed" if states[u][d] == "f" else "success",
                         "rendered_map_index": name})
    for i in range(0, len(rows), 20000):
        s.execute(insert(TaskInstance.__table__), rows[i:i + 20000])
seconds = time.perf_counter() - t0
print(json.dumps({"runs": n_days, "task_instances": len(rows), "seconds": seconds}))
"""

SERVER_TIME = """
import datetime as dt, json, sys, time
from airflow.utils.session import create_session
from dxt_core.airflow.ui.grid import build_grid, sources
days = [dt.date.fromisoformat(sys.argv[1]) + dt.timedelta(days=i) for i in range(int(sys.argv[2]))]
times, cpu, doc = [], [], None
for _ in range(int(sys.argv[3])):
    t, c = time.perf_counter(), time.process_time()
    with create_session() as s:
        doc = build_grid(s, sources()["examon"], days)
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
print(json.dumps({"times": times, "cpu": cpu, "parts": doc["seconds"], "counts": doc["counts"],
                  "airflow_counts": doc["airflow_counts"], "units": len(doc["units"])}))
"""


def _run(env: dict[str, str], *args: str, timeout: float = 1800) -> str:
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def render_in_browser(base: str, token: str, first: str, last: str, repeat: int) -> list[float]:
    """Seconds from navigation start to the grid drawn, as a signed-in user (cookie)."""
    from playwright.sync_api import sync_playwright

    url = f"{base}/dxt-archive/coverage?start={first}&end={last}"
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.add_cookies([{"name": "_token", "value": token, "url": base}])
            page = context.new_page()
            for _ in range(repeat + 1):  # the first load warms the server's caches
                page.goto(url)
                page.wait_for_function("(window.dxtCoverage || {}).ready === true", timeout=120_000)
                out.append(page.evaluate("window.dxtCoverage.renderedMs()") / 1000)
        finally:
            browser.close()
    return out[1:]


def workload(size: str, repeat: int = 3) -> dict[str, Any]:
    from dxt_core.backends.examon.catalog import load_catalog

    limit, n_days = SIZES[size]
    entries = load_catalog()
    units = [(e.plugin, e.metric) for e in (entries if limit is None else entries[:limit])]
    days = [FIRST_DAY + dt.timedelta(days=i) for i in range(n_days)]
    work = Path(tempfile.mkdtemp(prefix="dxt-bench-coverage-"))
    try:
        return _workload(work, units, days, repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _workload(
    work: Path, units: list[tuple[str, str]], days: list[dt.date], repeat: int
) -> dict[str, Any]:
    archive, home = work / "archive", work / "airflow"
    home.mkdir()
    catalog = work / "catalog.csv"
    catalog.write_text("metric,plugin\n" + "".join(f"{m},{p}\n" for p, m in units))
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DXT_"))}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "dxt_core.airflow.sqlite.CONNECT_ARGS",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "DXT_ARCHIVE_ROOT": str(archive),
            "DXT_EXAMON_CATALOG": str(catalog),
        }
    )
    t = time.perf_counter()
    manifests = build_archive(archive, units, days)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    dxt = str(Path(sys.executable).parent / "dxt")
    _run(env, dxt, "index", "rebuild", "--archive", str(archive))
    rebuild_s = time.perf_counter() - t
    _run(env, AIRFLOW, "db", "migrate")
    _run(env, AIRFLOW, "dags", "reserialize")
    states = [
        "".join("f" if _states(u, d) == "missing_failed" else "s" for d in range(len(days)))
        for u in range(len(units))
    ]
    names = [f"{p}/{m}" for p, m in units]
    spec = work / "fill.json"  # too large for a command line
    spec.write_text(
        json.dumps(
            {"units": names, "first": days[0].isoformat(), "days": len(days), "states": states}
        )
    )
    filled = json.loads(_run(env, sys.executable, "-c", FILL_DB, str(spec)).splitlines()[-1])
    server = json.loads(
        _run(
            env, sys.executable, "-c", SERVER_TIME, days[0].isoformat(), str(len(days)), str(repeat)
        ).splitlines()[-1]
    )
    log = (work / "api-server.log").open("w")
    api = procs.start(
        [AIRFLOW, "api-server"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {
        "workload": "coverage_view",
        "metrics": len(units),
        "days": len(days),
        "cells": len(units) * len(days),
        "manifests": manifests,
        "task_instances": filled["task_instances"],
        "fixture_build_s": round(build_s, 1),
        "db_fill_s": round(filled["seconds"], 1),
        "index_rebuild_s": round(rebuild_s, 2),
        "server_s": round(statistics.median(server["times"]), 3),
        # CPU time of the same work: what a busy shared machine does not inflate
        "server_cpu_s": round(statistics.median(server["cpu"]), 3),
        "server_parts_s": server["parts"],
        "counts": server["counts"],
        "airflow_counts": server["airflow_counts"],
    }
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if httpx.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or api.poll() is not None:
                raise SystemExit(f"the API server did not start; see {work / 'api-server.log'}")
            time.sleep(2)
        token = httpx.post(
            f"{base}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=60
        ).json()["access_token"]
        url = f"{base}/dxt-archive/api/grid"
        params = {"source": "examon", "start": days[0].isoformat(), "end": days[-1].isoformat()}
        headers = {"Authorization": f"Bearer {token}"}
        times, size = [], 0
        for _ in range(repeat + 1):
            t = time.perf_counter()
            r = httpx.get(url, params=params, headers=headers, timeout=120)
            r.raise_for_status()
            times.append(time.perf_counter() - t)
            size = len(r.content)
        result["api_s"] = round(statistics.median(times[1:]), 3)
        result["api_bytes"] = size
        if os.path.exists(CHROMIUM):
            try:
                renders = render_in_browser(
                    base, token, days[0].isoformat(), days[-1].isoformat(), repeat
                )
                result["render_s"] = round(statistics.median(renders), 3)
                result["render_runs_s"] = [round(x, 3) for x in renders]
            except ImportError:
                result["render_s"] = None
        else:
            result["render_s"] = None
    finally:
        procs.stop(api, 30)
        log.close()
    return result


def print_result(res: dict[str, Any]) -> None:
    print(
        f"\ncoverage_view: {res['metrics']} metrics x {res['days']} days = {res['cells']:,} cells "
        f"({res['manifests']:,} manifests, {res['task_instances']:,} task instances)"
    )
    print(f"  dxt index rebuild        {res['index_rebuild_s']:>8.2f} s")
    print(
        f"  grid, server side        {res['server_s']:>8.3f} s   {res['server_parts_s']} "
        f"(CPU {res['server_cpu_s']:.3f} s)"
    )
    print(f"  GET /api/grid (signed in){res['api_s']:>8.3f} s   {res['api_bytes']:,} bytes")
    render = res.get("render_s")
    print(
        "  rendered in chromium     "
        + (f"{render:>8.3f} s (navigation start to grid drawn)" if render else "   (no chromium)")
    )
