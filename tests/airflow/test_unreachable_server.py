"""A server that stays unreachable fails the task under a real Airflow with an error that says
the task is retried on its own (the ``dxt`` command's own error does not name Airflow:
tests/unit/core/test_exit_status.py)."""

from __future__ import annotations

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home

pytestmark = pytest.mark.airflow


def test_an_unreachable_server_fails_the_task_saying_airflow_retries_it(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    archive = tmp_path / "archive"
    # nothing listens on port 1 of the loopback: every connection is refused at once
    env = base_env(fresh_home(migrated_home, tmp_path / "home"), archive, "http://127.0.0.1:1",
                   catalog)  # fmt: skip
    env["DXT_EXAMON_START_DATE"] = "2024-05-01"
    out = airflow(
        env, "dags", "test", "dxt_examon", "2024-05-05T12:00:00+00:00", check=False, timeout=300
    )
    log = out.stdout + out.stderr
    assert "Connection refused" in log, log[-3000:]
    assert "run it again once the server answers" in log, log[-3000:]
    assert "(an Airflow task is retried on its own)" in log, log[-3000:]
    # said with what failed, before the URL the error names
    assert "(an Airflow task is retried on its own) | from http" in log, log[-3000:]
    assert not list(archive.rglob("*.csv.gz"))
