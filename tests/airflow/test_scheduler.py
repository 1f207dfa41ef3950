"""The real production loop on SQLite: airflow standalone (scheduler, dag-processor, API
server, LocalExecutor), a backfill of two days, then clearing one failed metric-day."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from dxt_core import procs
from tests.airflow.conftest import AIRFLOW, airflow, base_env, free_port, fresh_home
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.airflow

DAYS = ["2024-05-01", "2024-05-02"]
GOOD = [
    ("ipmi_pub", "ambient"),
    ("nagios_pub", "state"),
    ("slurm_pub", "num_nodes"),
    ("schneider_pub", "PLC_PLC_Q101.Abilita_inverter"),
    ("job_table", "job_info_marconi100"),
]
BROKEN = ("ipmi_pub", "pcie")


class Stack:
    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env, self.port = env, port
        self.api = f"http://127.0.0.1:{port}/api/v2"
        self.log = log.open("w")
        self.proc = procs.start(
            [AIRFLOW, "standalone"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def get(self, path: str) -> dict:
        r = httpx.get(f"{self.api}/{path}", timeout=30)
        r.raise_for_status()
        return r.json()

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except (httpx.HTTPError, KeyError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError("airflow standalone exited early; see its log")
            time.sleep(2)
        raise AssertionError(f"timed out waiting for {what}; last: {last}")

    def runs(self) -> list[dict]:
        return self.get("dags/dxt_examon/dagRuns?limit=50")["dag_runs"]

    def task_instances(self, run_id: str) -> list[dict]:
        return self.get(f"dags/dxt_examon/dagRuns/{run_id}/taskInstances?limit=100")[
            "task_instances"
        ]

    def stop(self) -> None:
        procs.stop(self.proc, 60)
        self.log.close()


def test_backfill_two_days_then_clear_one_failed_metric_day(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\n" + "".join(f"{m},{p}\n" for p, m in [*GOOD, BROKEN]))
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2", "--fail-metric", "pcie"])
    archive = tmp_path / "archive"
    home = fresh_home(migrated_home, tmp_path / "home")
    port = free_port()
    env = base_env(home, archive, sim.url, catalog)
    env.update(
        {
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "DXT_EXAMON_CATCHUP": "false",
            "DXT_EXAMON_START_DATE": "2024-04-01",
        }
    )
    stack = Stack(env, port, tmp_path / "standalone.log")
    try:
        stack.wait(lambda: stack.get("dags/dxt_examon")["dag_id"], 240, "the DAG")
        airflow(env, "dags", "unpause", "dxt_examon")
        airflow(
            env,
            "backfill",
            "create",
            "--dag-id",
            "dxt_examon",
            "--from-date",
            DAYS[0],
            "--to-date",
            DAYS[1],
        )

        def finished():
            runs = [r for r in stack.runs() if r["run_type"] == "backfill"]
            done = [r for r in runs if r["state"] in ("success", "failed")]
            return runs if len(done) == 2 else None

        runs = stack.wait(finished, 600, "two backfill runs")
        assert sorted(r["logical_date"][:10] for r in runs) == DAYS
        assert {r["state"] for r in runs} == {"failed"}  # pcie fails on both days

        # Every good metric-day is archived with its manifest; the broken one is not.
        for day in DAYS:
            for plugin, metric in GOOD:
                m = json.loads(
                    (archive / "examon" / plugin / metric / f"{day}.manifest.json").read_text()
                )
                assert m["status"] == "archived" and m["day"] == day
                assert (archive / "examon" / plugin / metric / m["file"]).stat().st_size == m[
                    "bytes"
                ]
            assert not (archive / "examon/ipmi_pub/pcie" / f"{day}.manifest.json").exists()

        run1 = next(r for r in runs if r["logical_date"].startswith(DAYS[0]))
        tis = stack.task_instances(run1["dag_run_id"])
        mapped = {t["rendered_map_index"]: t for t in tis if t["task_id"] == "archive_metric_day"}
        assert set(mapped) == {f"{p}/{m}" for p, m in [*GOOD, BROKEN]}
        assert mapped["ipmi_pub/pcie"]["state"] == "failed"
        assert all(mapped[f"{p}/{m}"]["state"] == "success" for p, m in GOOD)
        # The task's report is one XCom (return_value), not one XCom per key.
        ambient = mapped["ipmi_pub/ambient"]["map_index"]
        xcoms = stack.get(
            f"dags/dxt_examon/dagRuns/{run1['dag_run_id']}/taskInstances/archive_metric_day/"
            f"xcomEntries?map_index={ambient}"
        )["xcom_entries"]
        assert [x["key"] for x in xcoms] == ["return_value"]
        report = stack.get(
            f"dags/dxt_examon/dagRuns/{run1['dag_run_id']}/taskInstances/archive_metric_day/"
            f"xcomEntries/return_value?map_index={ambient}&deserialize=true"
        )["value"]
        assert report["status"] == "archived" and report["parts"] == ["ipmi_pub", "ambient"]

        def snapshot():
            # only the backfilled days: the scheduler also runs the latest day on its own
            return {
                p: p.stat().st_mtime_ns
                for p in archive.rglob("*")
                if p.is_file() and p.name[:10] in DAYS
            }

        before = snapshot()
        sim.faults(fail_metrics=[])  # the server is fixed; retry only what failed on day 1
        airflow(
            env,
            "tasks",
            "clear",
            "dxt_examon",
            "-t",
            "archive_metric_day",
            "-s",
            DAYS[0],
            "-e",
            DAYS[0],
            "--only-failed",
            "-y",
        )

        def rerun_done():
            r = next(r for r in stack.runs() if r["dag_run_id"] == run1["dag_run_id"])
            return r if r["state"] == "success" else None

        stack.wait(rerun_done, 300, "the cleared metric-day to rerun")
        after = snapshot()
        changed = sorted(str(p.relative_to(archive)) for p in after if before.get(p) != after[p])
        assert changed == [
            f"examon/ipmi_pub/pcie/{DAYS[0]}.csv.gz",
            f"examon/ipmi_pub/pcie/{DAYS[0]}.manifest.json",
        ]
        tis = stack.task_instances(run1["dag_run_id"])
        tries = {
            t["rendered_map_index"]: t["try_number"]
            for t in tis
            if t["task_id"] == "archive_metric_day"
        }
        assert tries["ipmi_pub/pcie"] == 2
        assert all(tries[f"{p}/{m}"] == 1 for p, m in GOOD)
        run2 = next(r for r in stack.runs() if r["logical_date"].startswith(DAYS[1]))
        assert run2["state"] == "failed"  # day 2 was not cleared
    finally:
        stack.stop()
        sim.stop()
