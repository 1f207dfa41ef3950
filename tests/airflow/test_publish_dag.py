"""dxt_publish under Airflow: the DAG parses, and `airflow dags test` publishes two months of a
simulator archive made by `dxt extract examon`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home, run_dagbag_script
from tests.conftest import SimulatorProcess

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
dag = bag.dags["dxt_publish"]
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
                  "tasks": sorted(dag.task_dict), "params": sorted(dag.params)}}))
"""


def test_dxt_publish_parses_and_publishes_two_months(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nps0_input_power,ipmi_pub\njob_info_marconi100,job_table\n")
    archive = tmp_path / "archive"
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "4"])
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dxt_core.cli",
                "extract",
                "examon",
                "--url",
                sim.url,
                "--jobs-url",
                sim.url,
                "--catalog",
                str(catalog),
                "--start-day",
                "2020-03-31",
                "--end-day",
                "2020-04-01",
                "--archive",
                str(archive),
                "-q",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
    finally:
        sim.stop()
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), archive, "http://x:1", None)
    doc = run_dagbag_script(env, PARSE)
    assert doc["errors"] == {} and doc["tasks"] == ["publish_months"]
    assert doc["params"] == [
        "backend",
        "from_month",
        "keep_identities",
        "out",
        "require_complete",
        "to_month",
    ]
    key = tmp_path / "key"
    key.write_bytes(b"a-site-secret-of-32-bytes-......")
    env.update({"DXT_PUBLISH_DIR": str(tmp_path / "pub"), "DXT_PUBLISH_KEY_FILE": str(key)})
    conf = json.dumps({"from_month": "2020-03", "to_month": "2020-04", "require_complete": False})
    airflow(env, "dags", "test", "dxt_publish", "2020-05-01", "-c", conf)
    ds = tmp_path / "pub" / "examon" / "2020-03_2020-04"
    assert (ds / "year_month=20-03/plugin=ipmi_pub/metric=ps0_input_power/a_0.parquet").is_file()
    assert (
        ds / "year_month=20-04/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    ).is_file()
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=ds).returncode == 0
