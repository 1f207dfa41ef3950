"""Workload ``production``: the Examon DAG on Airflow's production path, and the soak.

The production path as this machine runs it: PostgreSQL metadata database (a database of our
own), CeleryExecutor with a Redis broker (a redis-server of our own), and the API server,
scheduler, dag-processor and Celery workers as separate processes. The Examon simulator
(its own process, ``--nodes 1 --interval 3600``: small data per metric-day) is the source.

``production``: ``airflow backfill create`` of ``METRICS`` catalog metrics over ``DAYS``
days, first for ``dxt_noop`` (benchmarks/dags/dxt_noop.py: the same DAG shape, tasks that
do nothing), then for ``dxt_examon``, in the same Airflow. Measured per DAG: wall time,
metric-days per minute, CPU seconds of the scheduler, dag-processor, API server, Celery
workers (with their task processes), PostgreSQL backends of our database, Redis and the
simulator (from /proc), the metadata database's growth (``pg_database_size``) per 10,000
task instances; ours against no-op per task. Every metric-day is checked against the
simulator's own counts (rows lost or duplicated).

``production --faults`` (the soak of issue 12): ``dxt_examon`` only, through the fault proxy
(tests/faults/proxy.py) in front of the simulator, which injects 5xx bursts, connection
resets, slow (trickled) answers and refused windows (KairosDB's "Query exceeded limit")
all along; one Celery worker is killed with SIGKILL (its whole process group) once a third
of the metric-days are done, and restarted. Measured: task instances, failures left at the
end (want 0), task retries, HTTP retries and splits (from the manifests), metric-days lost or
duplicated against the simulator's counts (want 0), and the sha256 of every archived file
against a fault-free run of the same metric-days (``dxt extract examon``, straight to the
simulator), wall time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from benchmarks import services
from benchmarks.services import query
from dxt_core import procs

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DXT = str(Path(sys.executable).parent / "dxt")
TZ = "Europe/Rome"
TASK = "archive_metric_day"
#: size: (catalog metrics, days)
SIZES = {"tiny": (20, 2), "full": (811, 7)}
#: The workers' Celery configuration: Airflow's, plus dxt's task modules imported once in
#: each worker before it forks (dxt_core/airflow/celery.py).
CELERY_CONFIG = "dxt_core.airflow.celery.CELERY_CONFIG"
#: size: (one fault group every N requests, task retry delay s (None: the DAG's 120 s),
#: task_instance_heartbeat_timeout s, refusals in a "refused windows" group). The tiny soak
#: must fit in a test run: a task of the killed worker is failed after the heartbeat
#: timeout, then retried after the delay. With the tiny run's few concurrent tasks, three
#: refusals in a row land on one metric-day, whose window then reaches the 300 s floor and
#: the try fails (as it must): one refusal a group there.
SOAK = {"tiny": (40, 5, 30, 1), "full": (100, None, 60, 3)}
_CLUSTER_PLUGINS = ("ganglia_pub", "ipmi_pub", "nagios_pub", "slurm_pub")


# ------------------------------------------------------------------------------------------
# CPU time from /proc
# ------------------------------------------------------------------------------------------

_CLK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, tuple[int, float, float]]:
    """pid -> (ppid, own CPU seconds, CPU seconds of reaped children)."""
    out: dict[int, tuple[int, float, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        # fields[0] is the state (field 3): ppid is field 4, utime..cstime fields 14-17
        ppid = int(fields[1])
        own = (int(fields[11]) + int(fields[12])) / _CLK
        children = (int(fields[13]) + int(fields[14])) / _CLK
        out[int(entry.name)] = (ppid, own, children)
    return out


def _tree_pids(root: int) -> set[int]:
    stats = _proc_stats()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _tree_cpu(root: int, stats: dict[int, tuple[int, float, float]]) -> float | None:
    """CPU seconds of ``root`` and its descendants, those alive and those reaped by them."""
    if root not in stats:
        return None
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        kids.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        _, own, children = stats[pid]
        total += own + children
        todo.extend(kids.get(pid, ()))
    return total


class CpuMeter:
    """Samples the CPU time of named process trees and of our database's PostgreSQL backends.

    A process that dies keeps its last sampled value (so a killed worker's work counts up to
    the last sample); a PostgreSQL backend that lives less than one sampling period is missed
    (Airflow's components keep pooled connections: few are that short).
    """

    def __init__(self, db: str, period_s: float = 2.0) -> None:
        self.db = db
        self.period_s = period_s
        self.roots: dict[int, str] = {}
        self._first: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def watch(self, pid: int, component: str) -> None:
        with self._lock:
            self.roots[pid] = component

    def start(self) -> CpuMeter:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception as exc:  # a sampling hiccup must not end the benchmark
                print(f"cpu meter: {exc}", file=sys.stderr)

    def sample(self) -> None:
        stats = _proc_stats()
        values: dict[tuple[str, int], float] = {}
        with self._lock:
            roots = dict(self.roots)
        for pid, component in roots.items():
            v = _tree_cpu(pid, stats)
            if v is not None:
                values[(component, pid)] = v
        backends = query(self.db, f"SELECT pid FROM pg_stat_activity WHERE datname = '{self.db}'")
        for (pid_text,) in backends:
            pid = int(pid_text)
            if pid in stats:
                values[("postgres", pid)] = stats[pid][1]
        with self._lock:
            for key, v in values.items():
                # A process first seen now: its CPU so far counts (it started since the last
                # sample, or it is one of the roots, registered before its work began).
                self._first.setdefault(key, 0.0)
                self._last[key] = max(v, self._last.get(key, 0.0))

    def totals(self) -> dict[str, float]:
        """CPU seconds per component since each process was first seen."""
        self.sample()
        out: dict[str, float] = {}
        with self._lock:
            for key, last in self._last.items():
                out[key[0]] = out.get(key[0], 0.0) + last - self._first[key]
        times = os.times()
        out["harness"] = times.user + times.system  # this process: proxy, meter, polling
        return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 1) for k in sorted(after)}


# ------------------------------------------------------------------------------------------
# The simulator's own counts
# ------------------------------------------------------------------------------------------


def _day_bounds(days: list[dt.date]) -> list[int]:
    from dxt_core.windows import day_window

    return [day_window(d, TZ).start_ms for d in days] + [day_window(days[-1], TZ).end_ms]


def expected_rows(sim_url: str, entries: list[tuple[str, str]], days: list[dt.date]) -> dict:
    """Rows each metric-day must have, counted from the simulator's answers: one query per
    metric over all the days (every tag grouped), each point put in its local day. Job tables
    come from the jobs model of the simulator (one job every JOB_PERIOD_S seconds)."""
    from dxt_core.backends.examon.simulator.model import JOB_PERIOD_S

    bounds = _day_bounds(days)
    out: dict[tuple[str, str, str], int] = {}
    with httpx.Client(base_url=sim_url, timeout=120) as client:
        for metric, plugin in entries:
            if plugin == "job_table":
                period = JOB_PERIOD_S * 1000
                for i, d in enumerate(days):
                    lo, hi = bounds[i], bounds[i + 1]
                    out[(plugin, metric, d.isoformat())] = -(-hi // period) - -(-lo // period)
                continue
            flt = {"cluster": ["marconi100"]} if plugin in _CLUSTER_PLUGINS else {}
            body: dict[str, Any] = {
                "start_absolute": bounds[0],
                "end_absolute": bounds[-1] - 1,
                "metrics": [{"name": metric, "tags": flt}],
            }
            tags = client.post("/api/v1/datapoints/query/tags", json=body).json()
            results = tags["queries"][0]["results"]
            keys = sorted(results[0]["tags"]) if results else []
            counts = [0] * len(days)
            if keys:
                body["metrics"][0]["group_by"] = [{"name": "tag", "tags": keys}]
                doc = client.post("/api/v1/datapoints/query", json=body).json()
                for res in doc["queries"][0]["results"]:
                    for ts, _ in res["values"]:
                        counts[bisect_right(bounds, ts) - 1] += 1
            for i, d in enumerate(days):
                out[(plugin, metric, d.isoformat())] = counts[i]
    return out


def read_archive(root: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(plugin, metric, day) -> status, rows, the data file's sha256 (hashed here), retries."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for m in (root / "examon").rglob("*.manifest.json"):
        doc = json.loads(m.read_text())
        key = (doc["plugin"], doc["metric"], doc["day"])
        sha = None
        if doc.get("file"):
            sha = hashlib.sha256((m.parent / doc["file"]).read_bytes()).hexdigest()
        req = doc.get("requests") or {}
        out[key] = {
            "status": doc["status"],
            "rows": int(doc.get("rows") or 0),
            "sha256": sha,
            "manifest_sha256": doc.get("sha256"),
            "requests": int(req.get("requests", 0)),
            "retries": int(req.get("retries", 0)),
            "splits": int(req.get("splits", 0)),
        }
    return out


def check_archive(
    archive: dict[tuple[str, str, str], dict[str, Any]],
    expected: dict[tuple[str, str, str], int],
) -> dict[str, Any]:
    """Metric-days missing, with fewer rows (lost) or more rows (duplicated) than the
    simulator holds, and data files whose bytes differ from their manifest's sha256."""
    missing = sorted("/".join(k) for k in expected if k not in archive)
    lost = [k for k, n in expected.items() if k in archive and archive[k]["rows"] < n]
    dup = [k for k, n in expected.items() if k in archive and archive[k]["rows"] > n]
    bad_sha = [k for k, v in archive.items() if v["sha256"] != v["manifest_sha256"]]
    by_day: dict[str, list[str]] = {}
    for k in sorted(k for k in archive if k in expected):
        by_day.setdefault(k[2], []).append(f"{k[0]}/{k[1]} {archive[k]['sha256']}")
    return {
        "metric_days_expected": len(expected),
        "metric_days_archived": sum(1 for k in expected if k in archive),
        "rows_expected": sum(expected.values()),
        "rows_archived": sum(archive[k]["rows"] for k in expected if k in archive),
        "missing": len(missing),
        "missing_examples": missing[:5],
        "rows_lost": len(lost),
        "rows_duplicated": len(dup),
        "examples": ["/".join(k) for k in (lost + dup)[:5]],
        "file_not_matching_manifest": len(bad_sha),
        "http_requests": sum(v["requests"] for v in archive.values()),
        "http_retries": sum(v["retries"] for v in archive.values()),
        "window_splits": sum(v["splits"] for v in archive.values()),
        # One sha256 per day over "<plugin>/<metric> <sha256 of the data file>" lines:
        # two runs archived identical bytes for a day iff its digests are equal.
        "digest_by_day": {
            d: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
            for d, lines in by_day.items()
        },
    }


# ------------------------------------------------------------------------------------------
# Airflow
# ------------------------------------------------------------------------------------------


MAX_FAIL_TRIES = 10  # answers that pass, for one run outside the measured days


class Airflow:
    """One Airflow deployment on the production path, its processes ours to stop."""

    def __init__(self, work: Path, env: dict[str, str], meter: CpuMeter) -> None:
        self.api = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}/api/v2"
        self.work = work
        self.env = env
        self.meter = meter
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []
        self._fail_errors: dict[str, int] = {}  # run_id -> passing errors met failing it

    def cli(self, *args: str, timeout: float = 600) -> str:
        out = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if out.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{out.stderr[-3000:]}")
        return out.stdout

    def start(self, name: str, *args: str, component: str | None = None) -> None:
        log = (self.work / f"{name}.log").open("ab")
        self._logs.append(log)
        proc = procs.start(
            [AIRFLOW, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped (or killed) as a whole
        )
        self.procs[name] = proc
        self.meter.watch(proc.pid, component or name)

    def fail_runs_outside(self, db: str, dag_id: str, first: dt.date, last: dt.date) -> list[str]:
        """Mark failed (REST API) the unfinished runs of ``dag_id`` whose day is not in
        ``[first, last]``: their tasks stop. (Deleted, such a run would be created again by
        the scheduler at once.)"""
        rows = query(
            db,
            f"SELECT run_id FROM dag_run WHERE dag_id = '{dag_id}' "
            f"AND state NOT IN ('success', 'failed') AND NOT ({_in_range(first, last)})",
        )
        out = []
        for (run_id,) in rows:
            url = f"{self.api}/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"
            try:
                r = httpx.patch(url, json={"state": "failed"}, timeout=60)
                status, text = r.status_code, r.text
            except httpx.TimeoutException as exc:
                status, text = 0, f"no answer ({type(exc).__name__})"
            if status == 200:
                out.append(run_id)
                continue
            # A 500 "Database error" (the scheduler holding the run's row: a clean-clone CI
            # run on 2026-12-05), a 503 or no answer passes: the next poll asks again, since
            # the run is still unfinished. Any other answer, or the same run refused
            # MAX_FAIL_TRIES times, ends the benchmark.
            tries = self._fail_errors[run_id] = self._fail_errors.get(run_id, 0) + 1
            if status not in (0, 500, 502, 503, 504) or tries >= MAX_FAIL_TRIES:
                raise RuntimeError(
                    f"failing run {run_id}: {status} {text[:300]} (try {tries}); "
                    f"the api-server's log is in {self.work}"
                )
            print(
                f"failing run {run_id}: {status} {text[:200]}; "
                f"asking again at the next poll (try {tries} of {MAX_FAIL_TRIES})",
                file=sys.stderr,
            )
        return out

    def kill(self, name: str) -> None:
        """SIGKILL a component's whole process group, as a crashed machine would."""
        procs.stop(self.procs.pop(name), 0)

    def check_alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Airflow process(es) {', '.join(dead)} exited; logs in {self.work}")

    def stop(self) -> None:
        for p in self.procs.values():  # a Celery worker may take a minute to drain
            procs.stop(p, 60)
        for log in self._logs:
            log.close()


def _env(
    work: Path, db: str, redis_url: str, sim_url: str, catalog: Path, first: dt.date, api_port: int
) -> dict[str, str]:
    host, port = sim_url.split("://", 1)[1].rsplit(":", 1)
    # Bytecode caching on, as in a pip-installed deployment (PYTHONDONTWRITEBYTECODE would
    # make every task process compile dxt_core's sources again).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "DXT_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(work / "home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(work / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": services.sqlalchemy_url(db),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": redis_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": services.celery_result_backend(db),
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW_CONN_EXAMON_DEFAULT": json.dumps(
                {
                    "conn_type": "http",
                    "host": host,
                    "port": int(port),
                    "extra": {"time_zone": TZ, "jobs_url": sim_url},
                }
            ),
            "DXT_ARCHIVE_ROOT": str(work / "archive"),
            "DXT_EXAMON_CATALOG": str(catalog),
            # The scheduler creates only the latest run itself; the backfill the rest.
            "DXT_EXAMON_CATCHUP": "false",
            "DXT_EXAMON_START_DATE": first.isoformat(),
            "DXT_EXAMON_SETTLE_SECONDS": "0",
        }
    )
    return env


def _in_range(first: dt.date, last: dt.date, alias: str = "") -> str:
    """SQL: the run's logical date is one of the measured days (the scheduler also creates
    a run for each new day while the DAG is unpaused: those are not measured)."""
    col = f"{alias}logical_date"
    return f"{col} >= '{first.isoformat()}' AND {col} < '{last + dt.timedelta(days=1)}'"


def _dag_runs(db: str, dag_id: str, first: dt.date, last: dt.date) -> dict[str, int]:
    rows = query(
        db,
        f"SELECT state, count(*) FROM dag_run WHERE dag_id = '{dag_id}' "
        f"AND {_in_range(first, last)} GROUP BY 1",
    )
    return {state: int(n) for state, n in rows}


def _ti_sql(dag_id: str, first: dt.date, last: dt.date, task_id: str | None = None) -> str:
    """FROM/WHERE of the task instances of ``dag_id``'s runs of the measured days."""
    sql = (
        "FROM task_instance ti JOIN dag_run r ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id "
        f"WHERE ti.dag_id = '{dag_id}' AND {_in_range(first, last, 'r.')}"
    )
    return sql + (f" AND ti.task_id = '{task_id}'" if task_id else "")


def _ti_states(
    db: str, dag_id: str, first: dt.date, last: dt.date, task_id: str | None = None
) -> dict[str, int]:
    sql = "SELECT coalesce(ti.state, 'none'), count(*) " + _ti_sql(dag_id, first, last, task_id)
    return {state: int(n) for state, n in query(db, sql + " GROUP BY 1")}


def _db_size(db: str) -> dict[str, int]:
    total = int(query(db, f"SELECT pg_database_size('{db}')")[0][0])
    tables = query(
        db,
        "SELECT relname, pg_total_relation_size(relid) FROM pg_statio_user_tables "
        "ORDER BY 2 DESC LIMIT 8",
    )
    return {"database": total, **{f"table:{name}": int(size) for name, size in tables}}


_SUCCEEDED = re.compile(r"^(\S+Z) .*Task execute_workload\[[^\]]+\] succeeded in ([\d.]+)s")


def celery_task_seconds(work: Path, start: dt.datetime, end: dt.datetime) -> dict[str, Any]:
    """Durations of the Celery tasks that ended between ``start`` and ``end``."""
    secs: list[float] = []
    for log in work.glob("worker*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = _SUCCEEDED.match(line)
            if m and start <= dt.datetime.fromisoformat(m[1]) <= end:
                secs.append(float(m[2]))
    if not secs:
        return {"count": 0}
    secs.sort()
    return {
        "count": len(secs),
        "median": round(secs[len(secs) // 2], 2),
        "p90": round(secs[int(len(secs) * 0.9)], 2),
        "max": round(secs[-1], 2),
        "share_over_4s": round(sum(1 for x in secs if x > 4) / len(secs), 3),
    }


def _wait(pred: Callable[[], Any], timeout: float, what: str, af: Airflow, every: float = 3) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        af.check_alive()
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_dag(
    af: Airflow,
    db: str,
    dag_id: str,
    first: dt.date,
    last: dt.date,
    max_active_runs: int,
    during: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """Unpause ``dag_id``, backfill the days, wait until every run has ended; returns what
    was measured.

    Unpaused with catchup off, the scheduler creates a run for the latest interval
    (yesterday) itself, and one for every new day while the DAG stays unpaused: those runs
    are outside the measured days and are marked failed as soon as they appear (listed in
    ``other_runs_failed``), so that they do not compete with the backfill.
    """
    days = (last - first).days + 1
    size0, cpu0 = _db_size(db), af.meter.totals()
    utc0 = dt.datetime.now(dt.UTC)
    other_runs: list[str] = []
    t0 = time.monotonic()
    af.cli("dags", "unpause", dag_id)
    af.cli(
        *("backfill", "create", "--dag-id", dag_id),
        *("--from-date", first.isoformat(), "--to-date", last.isoformat()),
        *("--max-active-runs", str(max_active_runs)),
    )

    def finished() -> bool:
        other_runs.extend(af.fail_runs_outside(db, dag_id, first, last))
        if during is not None:
            during(t0)
        runs = _dag_runs(db, dag_id, first, last)
        return sum(runs.values()) >= days and set(runs) <= {"success", "failed"}

    _wait(finished, 6 * 3600, f"{days} runs of {dag_id}", af, every=2 if during else 5)
    wall = time.monotonic() - t0
    af.cli("dags", "pause", dag_id)
    cpu = _delta(af.meter.totals(), cpu0)
    size1 = _db_size(db)
    tis = _ti_states(db, dag_id, first, last, TASK)
    all_tis = sum(_ti_states(db, dag_id, first, last).values())
    mapped = sum(tis.values())
    tries = query(
        db, "SELECT ti.try_number, count(*) " + _ti_sql(dag_id, first, last, TASK) + " GROUP BY 1"
    )
    history = int(
        query(db, f"SELECT count(*) FROM task_instance_history WHERE dag_id = '{dag_id}'")[0][0]
    )
    other_runs.extend(af.fail_runs_outside(db, dag_id, first, last))
    celery = celery_task_seconds(af.work, utc0, dt.datetime.now(dt.UTC))
    grown = size1["database"] - size0["database"]
    total_cpu = sum(v for k, v in cpu.items() if k != "harness")
    return {
        "dag_id": dag_id,
        "days": days,
        "dag_runs": _dag_runs(db, dag_id, first, last),
        "other_runs_failed": other_runs,
        "mapped_task_instances": mapped,
        "task_instances": all_tis,
        "task_states": tis,
        "try_numbers": {t: int(n) for t, n in tries},
        "task_instance_history_rows": history,
        "wall_s": round(wall, 1),
        "metric_days_per_min": round(mapped / wall * 60, 1),
        "wall_per_task_s": round(wall / max(mapped, 1), 4),
        "cpu_s": cpu,
        "cpu_share": {k: round(v / total_cpu, 3) for k, v in cpu.items() if k != "harness"}
        if total_cpu
        else {},
        "cpu_per_task_s": round(total_cpu / max(mapped, 1), 3),
        # How long a Celery worker slot is held per task (``execute_workload``: the task
        # supervisor, its task process and the report), from the workers' logs.
        "celery_task_s": celery,
        "db_bytes_before": size0,
        "db_bytes_after": size1,
        "db_growth_bytes": grown,
        "db_growth_per_10k_task_instances_mb": round(grown / max(all_tis, 1) * 10_000 / 2**20, 1),
    }


# ------------------------------------------------------------------------------------------
# Faults
# ------------------------------------------------------------------------------------------

DATA = "/api/v1/datapoints/query$"
QUERY_LIMIT = (
    b'{"errors":["Query failed: org.kairosdb.core.exception.DatastoreException: '
    b"org.kairosdb.core.exception.DatastoreException: Query exceeded limit of 100000 data "
    b'points"]}'
)


def fault_groups(refusals: int = 3) -> list[tuple[str, list[Any]]]:
    from tests.faults.proxy import Answer, Reset, Trickle

    return [
        ("5xx_burst", [Answer(503, b"Service Unavailable", match=DATA) for _ in range(4)]),
        (
            "5xx_mixed",
            [
                Answer(502, b"Bad Gateway", match=DATA),
                Answer(500, b'{"errors": ["boom"]}', match=DATA),
                Answer(504, b"Gateway Timeout", match="/tags"),
            ],
        ),
        ("resets", [Reset(match=DATA), Reset(match="/tags"), Reset(match=DATA)]),
        ("slow_answers", [Trickle(0.05, chunk=256, match=DATA) for _ in range(3)]),
        ("refused_windows", [Answer(500, QUERY_LIMIT, match=DATA) for _ in range(refusals)]),
    ]


class FaultInjector:
    """Queues one group of faults every ``every_requests`` requests through the proxy, the
    groups in rotation, until stopped: the density of faults per request stays the same
    whether many tasks or one are fetching (a fixed rate in time would make the last task
    of a run take every fault queued meanwhile)."""

    def __init__(self, proxy: Any, every_requests: int, refusals: int) -> None:
        self.proxy = proxy
        self.every_requests = every_requests
        self.refusals = refusals
        self.injected: dict[str, int] = {}
        self.requests_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> FaultInjector:
        self._thread.start()
        return self

    def _run(self) -> None:
        groups = fault_groups(self.refusals)
        i = 0
        since = 0
        while not self._stop.wait(0.2):
            with self.proxy._lock:  # keep the proxy's request log small
                n = len(self.proxy.seen)
                self.proxy.seen.clear()
            self.requests_seen += n
            since += n
            while since >= self.every_requests:
                since -= self.every_requests
                name, faults = groups[i % len(groups)]
                self.proxy.inject(*faults)
                self.injected[name] = self.injected.get(name, 0) + len(faults)
                i += 1

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(10)
        pending = self.proxy.pending()
        with self.proxy._lock:
            self.requests_seen += len(self.proxy.seen)
        total = sum(self.injected.values())
        return {
            "one_group_every_requests": self.every_requests,
            "refusals_per_group": self.refusals,
            "injected": self.injected,
            "injected_total": total,
            "not_consumed_at_end": pending,
            "requests_through_proxy": self.requests_seen,
            "faulty_answers_share": round((total - pending) / max(self.requests_seen, 1), 3),
        }


# ------------------------------------------------------------------------------------------
# The workload
# ------------------------------------------------------------------------------------------


def _catalog(work: Path, metrics: int) -> tuple[Path, list[tuple[str, str]]]:
    lines = (ROOT / "dxt_core/data/M100_metrics.csv").read_text().splitlines()
    if metrics < len(lines) - 1:
        # a slice with every plugin in it, job table included: round-robin over the plugins
        by_plugin: dict[str, list[str]] = {}
        for line in lines[1:]:
            by_plugin.setdefault(line.split(",")[1], []).append(line)
        chosen: list[str] = []
        while len(chosen) < metrics:
            for rows in by_plugin.values():
                if rows and len(chosen) < metrics:
                    chosen.append(rows.pop(0))
        lines = [lines[0], *chosen]
    path = work / "catalog.csv"
    path.write_text("\n".join(lines) + "\n")
    entries = [(line.split(",")[0], line.split(",")[1]) for line in lines[1:]]
    return path, entries


def workload(
    size: str,
    faults: bool = False,
    metrics: int | None = None,
    days: int | None = None,
    workers: int = 2,
    concurrency: int = 4,
    max_active_runs: int = 4,
    fault_every_requests: int | None = None,
    min_heartbeat_interval: int | None = None,
    retry_delay_s: int | None = None,
    heartbeat_timeout_s: int | None = None,
    preload: bool = True,
) -> dict[str, Any]:
    from dxt_core.simulate import spawn_simulator

    every, delay, timeout, refusals = SOAK[size]
    fault_every_requests = fault_every_requests or every
    retry_delay_s = retry_delay_s if retry_delay_s is not None else delay
    heartbeat_timeout_s = heartbeat_timeout_s or timeout

    n_metrics = metrics or SIZES[size][0]
    n_days = days or SIZES[size][1]
    # Days whose data is final in the simulator: the last one ended more than a day ago, so
    # every job that started in it has ended (a job of the accounting table appears when it
    # ends; the longest run 24 h).
    last = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=2)
    first = last - dt.timedelta(days=n_days - 1)
    day_list = [first + dt.timedelta(days=i) for i in range(n_days)]
    slots = workers * concurrency
    work = Path(tempfile.mkdtemp(prefix="dxt-bench-production-"))
    (work / "dags").mkdir()
    shutil.copy(ROOT / "dags" / "dxt_examon.py", work / "dags")
    if not faults:
        shutil.copy(ROOT / "benchmarks" / "dags" / "dxt_noop.py", work / "dags")
    catalog, entries = _catalog(work, n_metrics)
    result: dict[str, Any] = {
        "workload": "production" + (" --faults" if faults else ""),
        "metrics": n_metrics,
        "days": [first.isoformat(), last.isoformat()],
        "metric_days": n_metrics * n_days,
        "settings": {
            "celery_workers": workers,
            "worker_concurrency": concurrency,
            "examon_pool_slots": slots,
            "parallelism": slots,
            "backfill_max_active_runs": max_active_runs,
            "simulator": "--nodes 1 --interval 3600",
            "workers_min_heartbeat_interval_s": min_heartbeat_interval or "Airflow's default (5)",
            "task_retry_delay_s": retry_delay_s or "the DAG's (120)",
            "task_instance_heartbeat_timeout_s": heartbeat_timeout_s,
            "celery_config_options": CELERY_CONFIG if preload else "Airflow's default",
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
    }
    t_start = time.monotonic()
    sim, sim_url = spawn_simulator(
        "examon", ["--catalog", str(catalog), "--nodes", "1", "--interval", "3600"]
    )
    proxy = None
    try:
        with services.redis_server() as (redis_url, redis_pid), services.pg_database() as db:
            meter = CpuMeter(db)
            meter.watch(sim.pid, "simulator")
            meter.watch(redis_pid, "redis")
            meter.start()
            source_url = sim_url
            if faults:
                sys.path.insert(0, str(ROOT))
                from tests.faults.proxy import FaultProxy

                proxy = FaultProxy(sim_url)
                source_url = proxy.url
            api_port = services.free_port()
            env = _env(work, db, redis_url, source_url, catalog, first, api_port)
            env.update(
                {
                    "AIRFLOW__CORE__PARALLELISM": str(slots),
                    "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
                    # Recovery from a dead worker (the soak kills one): a task whose
                    # process stopped heartbeating is failed (then retried) after 60 s
                    # instead of 300; a task stuck in queued is handed back after 180 s
                    # instead of 600; the broker redelivers an unacknowledged message
                    # after 300 s instead of 24 h (tasks here take seconds).
                    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(heartbeat_timeout_s),
                    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
                    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "30",
                    "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "300",
                }
            )
            if preload:
                # The workers import dxt's task modules once, before forking (docs/deploy.md).
                env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] = CELERY_CONFIG
            if min_heartbeat_interval:
                # The task supervisor notices its task process's exit at the latest after
                # this interval (a race: the sockets close before the process is reaped).
                env["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"] = str(min_heartbeat_interval)
            if retry_delay_s is not None:
                _retry_delay_policy(work / "home", retry_delay_s)
            if n_metrics > 1024:
                env["AIRFLOW__CORE__MAX_MAP_LENGTH"] = "2048"
            af = Airflow(work, env, meter)
            try:
                t0 = time.monotonic()
                af.cli("db", "migrate", timeout=900)
                af.cli("pools", "set", "examon", str(slots), "Examon queries")
                result["setup_s"] = {"db_migrate": round(time.monotonic() - t0, 1)}
                af.start("api-server", "api-server", "--port", str(api_port))
                af.start("scheduler", "scheduler")
                af.start("dag-processor", "dag-processor")
                for i in range(workers):
                    af.start(
                        f"worker{i + 1}",
                        *("celery", "worker", "--celery-hostname", f"w{i + 1}@%h"),
                        *("--concurrency", str(concurrency), "--skip-serve-logs"),
                        component="workers",
                    )
                wanted = ["dxt_examon"] if faults else ["dxt_noop", "dxt_examon"]
                _wait(
                    lambda: all(
                        query(db, f"SELECT 1 FROM dag WHERE dag_id = '{d}'") for d in wanted
                    ),
                    600,
                    "the DAGs to be parsed",
                    af,
                )
                result["setup_s"]["airflow_ready"] = round(time.monotonic() - t0, 1)
                expected = expected_rows(sim_url, entries, day_list)
                if faults:
                    result.update(
                        _soak(
                            af,
                            db,
                            work,
                            sim_url,
                            proxy,
                            catalog,
                            first,
                            last,
                            day_list,
                            expected,
                            max_active_runs,
                            fault_every_requests,
                            refusals,
                        )
                    )
                else:
                    noop = run_dag(af, db, "dxt_noop", first, last, max_active_runs)
                    ours = run_dag(af, db, "dxt_examon", first, last, max_active_runs)
                    ours["archive"] = check_archive(read_archive(work / "archive"), expected)
                    result["dxt_noop"] = noop
                    result["dxt_examon"] = ours
                    result["ours_vs_noop"] = {
                        "wall": round(ours["wall_s"] / noop["wall_s"], 2),
                        "cpu_per_task": round(ours["cpu_per_task_s"] / noop["cpu_per_task_s"], 2),
                        "worker_cpu": round(
                            ours["cpu_s"].get("workers", 0)
                            / max(noop["cpu_s"].get("workers", 0), 1e-9),
                            2,
                        ),
                    }
            finally:
                af.stop()
                meter.stop()
    finally:
        if proxy is not None:
            proxy.stop()
        procs.stop(sim)
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    result["machine"]["loadavg_end"] = os.getloadavg()
    problems = _problems(result)
    if problems:
        result["invalid"] = "; ".join(problems) + f" (logs kept in {work})"
        print(result["invalid"], file=sys.stderr)
    elif os.environ.get("DXT_BENCH_KEEP"):
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _retry_delay_policy(home: Path, seconds: int) -> None:
    """A cluster policy (``airflow_local_settings.task_policy``) giving the benchmark DAGs'
    tasks another retry delay than their 2 minutes: how the tiny soak fits in a test run.
    Airflow puts ``$AIRFLOW_HOME/config`` on sys.path for it."""
    config = home / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "airflow_local_settings.py").write_text(
        "from datetime import timedelta\n\n\n"
        "def task_policy(task):\n"
        '    if task.dag_id in ("dxt_examon", "dxt_noop"):\n'
        f"        task.retry_delay = timedelta(seconds={int(seconds)})\n"
    )


def _problems(result: dict[str, Any]) -> list[str]:
    out = []
    for key in ("dxt_noop", "dxt_examon"):
        run = result.get(key)
        if run is None:
            continue
        if set(run["dag_runs"]) != {"success"}:
            out.append(f"{key}: runs {run['dag_runs']}")
        if set(run["task_states"]) != {"success"}:
            out.append(f"{key}: mapped tasks {run['task_states']}")
        arch = run.get("archive")
        if arch and (arch["missing"] or arch["rows_lost"] or arch["rows_duplicated"]):
            out.append(
                f"{key}: {arch['missing']} metric-days missing, {arch['rows_lost']} with rows "
                f"lost, {arch['rows_duplicated']} with rows duplicated"
            )
        if arch and arch.get("identical_to_fault_free") is False:
            out.append(f"{key}: {arch['files_differing']} files differ from the fault-free run")
    return out


def _soak(
    af: Airflow,
    db: str,
    work: Path,
    sim_url: str,
    proxy: Any,
    catalog: Path,
    first: dt.date,
    last: dt.date,
    day_list: list[dt.date],
    expected: dict[tuple[str, str, str], int],
    max_active_runs: int,
    fault_every_requests: int,
    refusals: int,
) -> dict[str, Any]:
    # The fault-free run: the same metric-days with `dxt extract examon`, straight to the
    # simulator (the same library call as the DAG's task; the bytes must be the same).
    reference = work / "fault-free"
    t0 = time.monotonic()
    out = subprocess.run(
        [
            DXT,
            *("extract", "examon", "--url", sim_url, "--catalog", str(catalog)),
            *("--start-day", first.isoformat(), "--end-day", last.isoformat()),
            *("--jobs-url", sim_url, "--archive", str(reference), "-q", "--tz", TZ),
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("DXT_")},
    )
    if out.returncode != 0:
        raise RuntimeError(f"the fault-free run failed:\n{out.stderr[-3000:]}")
    fault_free = read_archive(reference)
    fault_free_s = round(time.monotonic() - t0, 1)

    injector = FaultInjector(proxy, fault_every_requests, refusals).start()
    total = len(expected)
    kill: dict[str, Any] = {}

    def during(t_start: float) -> None:
        if kill.get("restarted_at_s") is not None:
            return
        done = int(
            query(
                db,
                "SELECT count(*) "
                + _ti_sql("dxt_examon", first, last, TASK)
                + " AND ti.state = 'success'",
            )[0][0]
        )
        if "killed_at_s" not in kill and done >= total // 3:
            # Kill it while it runs tasks: the task processes' pids are in the worker's tree.
            # Polled every 0.2 s here, not at the run loop's 2 s, for up to 60 s, and the kill
            # happens in any case: short tasks (the tiny size) are rarely caught at 2 s, and
            # the runs could end before the next call.
            deadline = time.monotonic() + 60
            while True:
                pids = query(
                    db,
                    "SELECT ti.pid "
                    + _ti_sql("dxt_examon", first, last, TASK)
                    + " AND ti.state = 'running' AND ti.pid IS NOT NULL",
                )
                tree = _tree_pids(af.procs["worker1"].pid)
                on_worker = [int(p) for (p,) in pids if int(p) in tree]
                if on_worker or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            af.kill("worker1")
            kill.update(
                {
                    "killed_at_s": round(time.monotonic() - t_start, 1),
                    "metric_days_done_then": done,
                    "tasks_running_on_it": len(on_worker),
                    "tasks_running_on_all_workers": len(pids),
                    "signal": "SIGKILL to the worker's process group",
                }
            )
        elif "killed_at_s" in kill and time.monotonic() - t_start > kill["killed_at_s"] + 10:
            af.start(
                "worker1",
                *("celery", "worker", "--celery-hostname", "w1@%h"),
                *("--concurrency", af.env["AIRFLOW__CELERY__WORKER_CONCURRENCY"]),
                "--skip-serve-logs",
                component="workers",
            )
            kill["restarted_at_s"] = round(time.monotonic() - t_start, 1)

    try:
        run = run_dag(af, db, "dxt_examon", first, last, max_active_runs, during=during)
    finally:
        fault_report = injector.stop()
    if "killed_at_s" in kill and "restarted_at_s" not in kill:
        kill["restarted_at_s"] = None  # the runs ended within 10 s of the kill
    elif "killed_at_s" not in kill:
        kill["not_killed"] = "the runs ended before a third of the metric-days were done"
    archive = read_archive(work / "archive")
    check = check_archive(archive, expected)
    differing = sorted(
        "/".join(k)
        for k in expected
        if archive.get(k, {}).get("sha256") != fault_free.get(k, {}).get("sha256")
    )
    check["files_compared"] = len(expected)
    check["files_differing"] = len(differing)
    check["differing_examples"] = differing[:5]
    check["identical_to_fault_free"] = not differing
    check["fault_free_digest_by_day"] = check_archive(fault_free, expected)["digest_by_day"]
    run["archive"] = check
    run["faults"] = fault_report
    run["worker_kill"] = kill
    failed = run["task_states"].get("failed", 0)
    retried = sum(n for t, n in run["try_numbers"].items() if int(t) > 1)
    run["summary"] = {
        "task_instances": run["task_instances"],
        "mapped_task_instances": run["mapped_task_instances"],
        "failed_at_end": failed,
        "task_retries (mapped tasks that ran more than once)": retried,
        "http_retries": check["http_retries"],
        "window_splits": check["window_splits"],
        "metric_days_missing": check["missing"],
        "metric_days_rows_lost": check["rows_lost"],
        "metric_days_rows_duplicated": check["rows_duplicated"],
        "files_identical_to_fault_free": f"{len(expected) - len(differing)}/{len(expected)}",
        "wall_s": run["wall_s"],
    }
    return {"fault_free_cli_s": fault_free_s, "dxt_examon": run}


def print_result(res: dict[str, Any]) -> None:
    print(f"\n{res['workload']}: {res['metrics']} metrics x days {res['days']}")
    for key in ("dxt_noop", "dxt_examon"):
        run = res.get(key)
        if not run:
            continue
        print(
            f"  {key}: {run['mapped_task_instances']} metric-days in {run['wall_s']} s "
            f"({run['metric_days_per_min']}/min), runs {run['dag_runs']}, tasks "
            f"{run['task_states']}, CPU {run['cpu_s']}, "
            f"DB +{run['db_growth_bytes'] / 2**20:.1f} MB "
            f"({run['db_growth_per_10k_task_instances_mb']} MB / 10k TIs)"
        )
        if "summary" in run:
            print("  soak: " + json.dumps(run["summary"]))
        if "archive" in run:
            a = run["archive"]
            print(
                f"  archive: {a['metric_days_archived']}/{a['metric_days_expected']} metric-days, "
                f"missing {a['missing']}, rows lost {a['rows_lost']}, duplicated "
                f"{a['rows_duplicated']}"
            )
    if "ours_vs_noop" in res:
        print(f"  ours vs no-op: {res['ours_vs_noop']}")
    if "invalid" in res:
        print(f"  INVALID: {res['invalid']}")
