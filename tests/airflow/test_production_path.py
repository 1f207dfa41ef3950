"""Airflow's production path on this machine: PostgreSQL metadata DB, CeleryExecutor with a
Redis broker, separate scheduler / dag-processor / API server / Celery worker processes.
One daily run of the full Marconi100 catalog (811 mapped metric-days, tiny data).

The Redis broker is a redis-server the test starts for itself (free port, in memory) and the
metadata database one it creates and drops (tests/conftest.py: redis_url, pg_database): nothing
that runs on this machine already is flushed or dropped."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from dxt_core import procs
from tests.airflow.conftest import AIRFLOW, airflow, base_env, free_port
from tests.conftest import PG_HOST, PG_PORT, PG_USER, SimulatorProcess

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.alone]

PG = f"{PG_USER}@{PG_HOST}:{PG_PORT}"


# Its own waits allow 300 s for the DAG and 1,500 s for the run, and stopping the four
# processes up to 4 x 70 s: the suite's 600 s would cut it off mid-run on a loaded machine
# (seen: a timeout inside the final stop, leaving the logs open for the next test to warn of).
@pytest.mark.timeout(2400)
def test_full_catalog_daily_run_on_postgres_and_celery(pg_database, redis_url, tmp_path):
    sim = SimulatorProcess(["--nodes", "1", "--interval", "3600"])
    port = free_port()
    env = base_env(tmp_path / "home", tmp_path / "archive", sim.url, None)
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS")  # SQLite-only arguments
    env.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{PG}/{pg_database}",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": redis_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://{PG}/{pg_database}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "8",
            # as docker-compose.yaml: workers preload dxt's task modules before forking
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "dxt_core.airflow.celery.CELERY_CONFIG",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__CORE__PARALLELISM": "16",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "DXT_EXAMON_CATCHUP": "false",
            "DXT_EXAMON_START_DATE": "2024-04-01",
        }
    )
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "examon", "8", "Examon queries")
    started = []
    logs = []
    try:
        for args in (
            ["api-server", "--port", str(port)],
            ["scheduler"],
            ["dag-processor"],
            ["celery", "worker"],
        ):
            log = (tmp_path / f"{args[0]}.log").open("w")
            logs.append(log)
            started.append(
                procs.start(
                    [AIRFLOW, *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        api = f"http://127.0.0.1:{port}/api/v2"

        def wait(pred, timeout, what):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    got = pred()
                    if got:
                        return got
                except (httpx.HTTPError, KeyError, StopIteration):
                    pass
                assert all(p.poll() is None for p in started), "an Airflow process died"
                time.sleep(3)
            raise AssertionError(f"timed out waiting for {what}")

        wait(lambda: httpx.get(f"{api}/dags/dxt_examon").json()["dag_id"], 300, "the DAG")
        airflow(env, "dags", "unpause", "dxt_examon")
        airflow(
            env,
            "backfill",
            "create",
            "--dag-id",
            "dxt_examon",
            "--from-date",
            "2024-05-01",
            "--to-date",
            "2024-05-01",
        )

        def done():
            runs = httpx.get(f"{api}/dags/dxt_examon/dagRuns").json()["dag_runs"]
            run = next(r for r in runs if r["run_type"] == "backfill")
            return run if run["state"] in ("success", "failed") else None

        t0 = time.monotonic()
        run = wait(done, 1500, "the 811-task run")
        print(f"811 metric-days on CeleryExecutor/PostgreSQL: {time.monotonic() - t0:.0f} s")
        assert run["state"] == "success"
        tis = httpx.get(
            f"{api}/dags/dxt_examon/dagRuns/{run['dag_run_id']}/taskInstances",
            params={"limit": 1000, "task_id": "archive_metric_day"},
        ).json()
        assert tis["total_entries"] == 811
        manifests = list((tmp_path / "archive" / "examon").rglob("2024-05-01.manifest.json"))
        assert len(manifests) == 811
        assert {json.loads(m.read_text())["status"] for m in manifests} <= {"archived", "empty"}
    finally:
        try:
            for p in started:  # a Celery worker may take a minute to drain
                procs.stop(p, 60)
        finally:
            for log in logs:
                log.close()
            sim.stop()
