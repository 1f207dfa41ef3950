"""Refused credentials fail an archive task at once, without its retries, under a real
Airflow 3.3: every retry of every mapped task would be refused the same way, and so many
failed logins can lock the account."""

from __future__ import annotations

import json

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.airflow


def test_refused_credentials_fail_the_task_without_retries(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(
        ["--catalog", str(catalog), "--nodes", "1", "--interval", "3600", "--user", "alice",
         "--password", "s3cret"]
    )  # fmt: skip
    try:
        archive = tmp_path / "archive"
        env = base_env(fresh_home(migrated_home, tmp_path / "home"), archive, sim.url, catalog)
        conn = json.loads(env["AIRFLOW_CONN_EXAMON_DEFAULT"])
        env["AIRFLOW_CONN_EXAMON_DEFAULT"] = json.dumps(
            {**conn, "login": "alice", "password": "wrong-Pa55"}
        )
        env["DXT_EXAMON_START_DATE"] = "2024-05-01"
        env["DXT_EXAMON_RETRIES"] = "2"
        out = airflow(
            env, "dags", "test", "dxt_examon", "2024-05-05T12:00:00+00:00", check=False,
            timeout=300,
        )  # fmt: skip
        log = out.stdout + out.stderr
        assert "authentication failed" in log, log[-3000:]
        assert "(not retried: every retry would fail the same way)" in log, log[-3000:]
        assert "wrong-Pa55" not in log
        assert not list(archive.rglob("*.csv.gz"))
    finally:
        sim.stop()
