"""dxt_publish under Airflow: the DAG parses and is scheduled on the archive assets' aliases;
``airflow dags test`` publishes the months it is given (directory and S3 roots); and under
the real scheduler (``airflow standalone``) the archive task's events of a month's last day
make a run that publishes that month, and a later event of the same month is a no-op that
says so."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dxt_core import procs
from tests.airflow.conftest import AIRFLOW, airflow, base_env, fresh_home, run_dagbag_script
from tests.conftest import SimulatorProcess, free_port
from tests.integration.s3.conftest import bucket, s3_env, s3_server  # noqa: F401

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
dag = bag.dags["dxt_publish"]
cond = dag.timetable.asset_condition
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
                  "tasks": sorted(dag.task_dict), "params": sorted(dag.params),
                  "timetable": type(dag.timetable).__name__,
                  "condition": type(cond).__name__,
                  "aliases": sorted(o.name for o in cond.objects)}}))
"""


def extract(sim_url: str, catalog: Path, first: str, last: str, root: str, env=None) -> None:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", sim_url),
            *("--jobs-url", sim_url, "--catalog", str(catalog)),
            *("--start-day", first, "--end-day", last, "--archive", root, "-q"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr


def test_dxt_publish_parses_and_publishes_two_months(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nps0_input_power,ipmi_pub\njob_info_marconi100,job_table\n")
    archive = tmp_path / "archive"
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "4"])
    try:
        extract(sim.url, catalog, "2020-03-31", "2020-04-01", str(archive))
    finally:
        sim.stop()
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), archive, "http://x:1", None)
    doc = run_dagbag_script(env, PARSE)
    assert doc["errors"] == {} and doc["tasks"] == ["publish_months"]
    assert doc["params"] == [
        "backend",
        "cite",
        "from_month",
        "keep_identities",
        "licence",
        "licence_url",
        "out",
        "require_complete",
        "source",
        "to_month",
    ]
    # scheduled on the archive tasks' aliases, any of them
    assert doc["timetable"] == "AssetTriggeredTimetable" and doc["condition"] == "AssetAny"
    assert doc["aliases"] == [
        "dxt-archive/collectd_es",
        "dxt-archive/examon",
        "dxt-archive/kwollect",
        "dxt-archive/prometheus",
    ]
    key = tmp_path / "key"
    key.write_bytes(b"a-site-secret-of-32-bytes-......")
    env.update({"DXT_PUBLISH_DIR": str(tmp_path / "pub"), "DXT_PUBLISH_KEY_FILE": str(key)})
    # March and April hold two days each: not complete, so a run that requires whole
    # months fails and publishes nothing
    conf = json.dumps({"from_month": "2020-03", "to_month": "2020-04"})
    refused = airflow(env, "dags", "test", "dxt_publish", "2020-05-01", "-c", conf, check=False)
    assert refused.returncode != 0
    assert "2020-03..2020-04 is not complete" in refused.stdout + refused.stderr
    assert not (tmp_path / "pub").exists()
    # a licence whose URL is not known fails the run at once, before any month
    conf = json.dumps({"from_month": "2020-03", "require_complete": False, "licence": "CC-BY-40"})
    refused = airflow(env, "dags", "test", "dxt_publish", "2020-05-01", "-c", conf, check=False)
    assert refused.returncode != 0
    assert "did you mean CC-BY-4.0" in refused.stdout + refused.stderr
    assert not (tmp_path / "pub").exists()
    conf = json.dumps({"from_month": "2020-03", "to_month": "2020-04", "require_complete": False})
    env["DXT_PUBLISH_SOURCE"] = "the test facility's monitoring"
    env["DXT_PUBLISH_LICENCE"] = "CC0-1.0"
    env["DXT_PUBLISH_CITE"] = "Test facility (2020), doi:10.0000/test"
    airflow(env, "dags", "test", "dxt_publish", "2020-05-02", "-c", conf)
    ds = tmp_path / "pub" / "examon" / "2020-03_2020-04"
    readme = (ds / "README.md").read_text()
    assert "- Source: the test facility's monitoring\n" in readme and sim.url not in readme
    assert "doi:10.0000/test" in readme
    package = json.loads((ds / "datapackage.json").read_text())
    assert package["licenses"] == [
        {"name": "CC0-1.0", "path": "https://creativecommons.org/publicdomain/zero/1.0/"}
    ]
    assert (ds / "year_month=20-03/plugin=ipmi_pub/metric=ps0_input_power/a_0.parquet").is_file()
    assert (
        ds / "year_month=20-04/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    ).is_file()
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=ds).returncode == 0


def test_dxt_publish_with_s3_archive_and_output(
    migrated_home,
    tmp_path,
    bucket,  # noqa: F811
    s3_server,  # noqa: F811
    s3_env,  # noqa: F811
):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2"])
    try:
        extract(sim.url, catalog, "2020-03-30", "2020-03-31", f"s3://{bucket}/arch")
    finally:
        sim.stop()
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "x", "http://x:1", None)
    env.update(s3_env)
    env["DXT_ARCHIVE_ROOT"] = f"s3://{bucket}/arch"
    env["DXT_PUBLISH_DIR"] = f"s3://{bucket}/pub"
    conf = json.dumps({"from_month": "2020-03", "require_complete": False})
    airflow(env, "dags", "test", "dxt_publish", "2020-04-01", "-c", conf, timeout=400)
    c = s3_server.client()
    keys = [
        o["Key"]
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="pub/")
        for o in page.get("Contents", [])
    ]
    prefix = "pub/examon/2020-03_2020-03/"
    assert f"{prefix}year_month=20-03/plugin=ipmi_pub/metric=ambient/a_0.parquet" in keys
    assert f"{prefix}SHA256SUMS" in keys and f"{prefix}datapackage.json" in keys
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()


class Standalone:
    """airflow standalone (scheduler, dag-processor, API server, triggerer) on SQLite."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
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
            time.sleep(3)
        raise AssertionError(f"timed out waiting for {what}; last: {last}")

    def publish_results(self) -> list[tuple[dict, dict]]:
        """Finished dxt_publish runs and their task's XCom."""
        out = []
        for run in self.get("dags/dxt_publish/dagRuns?limit=50")["dag_runs"]:
            if run["state"] not in ("success", "failed"):
                continue
            x = self.get(
                f"dags/dxt_publish/dagRuns/{run['dag_run_id']}/taskInstances/publish_months/"
                "xcomEntries/return_value?deserialize=true"
            )
            out.append((run, x["value"]))
        return out

    def stop(self) -> None:
        procs.stop(self.proc, 60)
        self.log.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a standalone Airflow and four DAG runs on a shared 2-core machine
def test_the_last_day_of_a_month_makes_the_run_that_publishes_it(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2"])
    archive = tmp_path / "archive"
    stack = None
    try:
        extract(sim.url, catalog, "2021-02-01", "2021-02-27", str(archive))  # all but the last
        port = free_port()
        env = base_env(fresh_home(migrated_home, tmp_path / "h"), archive, sim.url, catalog)
        env.update(
            {
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "DXT_EXAMON_CATCHUP": "false",
                "DXT_PUBLISH_DIR": str(tmp_path / "pub"),
            }
        )
        stack = Standalone(env, port, tmp_path / "standalone.log")
        for dag_id in ("dxt_examon", "dxt_publish"):
            stack.wait(lambda d=dag_id: stack.get(f"dags/{d}")["dag_id"], 300, dag_id)
        airflow(env, "dags", "unpause", "dxt_publish")
        airflow(env, "dags", "unpause", "dxt_examon")

        def month(key: str, state: str):
            return [
                (run, x)
                for run, x in stack.publish_results()
                if (x or {}).get("examon", {}).get(key, {}).get("state") == state
            ]

        # unpaused without catchup, dxt_examon archives yesterday: its event makes a run that
        # finds this month not complete and says so. (Waited for first: an event that comes
        # while the scheduler creates a run for another event of the same asset is consumed
        # by the next run only, Airflow 3.3's scheduler: its month would wait for that run.)
        today = time.gmtime(time.time() - 86_400)
        current = f"{today.tm_year:04d}-{today.tm_mon:02d}_{today.tm_year:04d}-{today.tm_mon:02d}"
        ((_, waiting),) = stack.wait(lambda: month(current, "incomplete"), 900, "this month")
        assert waiting["examon"][current]["unit_days_missing"] > 0
        assert not (tmp_path / "pub" / "examon" / current).exists()
        airflow(env, "dags", "trigger", "dxt_examon", "-c", json.dumps({"day": "2021-02-28"}))

        def february(state: str):
            return month("2021-02_2021-02", state)

        ((run, result),) = stack.wait(lambda: february("published"), 900, "February published")
        assert run["run_type"] == "asset_triggered" and run["state"] == "success"
        done = result["examon"]["2021-02_2021-02"]
        assert done["rows"] == 28 * 2 * 4320 and done["files"] == 1
        ds = tmp_path / "pub/examon/2021-02_2021-02"
        assert (ds / "year_month=21-02/plugin=ipmi_pub/metric=ambient/a_0.parquet").is_file()
        assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=ds).returncode == 0
        before = {p: p.stat().st_mtime_ns for p in ds.rglob("*") if p.is_file()}
        # the same day archived again reads the same data: no asset event (the day is
        # unchanged), so no publish run; a publish of February asked for by hand finds it
        # published from the same days and writes nothing
        airflow(env, "dags", "trigger", "dxt_examon", "-c", json.dumps({"day": "2021-02-28"}))
        conf = {"backend": "examon", "from_month": "2021-02"}
        airflow(env, "dags", "trigger", "dxt_publish", "-c", json.dumps(conf))
        ((_, again),) = stack.wait(lambda: february("unchanged"), 900, "the no-op run")
        assert "unchanged" in again["examon"]["2021-02_2021-02"]["summary"]
        assert {p: p.stat().st_mtime_ns for p in ds.rglob("*") if p.is_file()} == before
    finally:
        if stack is not None:
            stack.stop()
        sim.stop()
