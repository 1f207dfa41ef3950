"""The demo's summary names each run's day by the rule the run's note and tasks follow."""

from __future__ import annotations

import pytest

from dxt_core.demo import api_run_day


def test_a_run_is_listed_under_the_day_it_archives():
    # 'airflow dags trigger -l 2026-11-29T12:00:00+00:00' on 12-01: Airflow's data interval
    # is the day before the trigger time; the run archives its logical date's day
    manual = {
        "logical_date": "2026-11-29T12:00:00Z",
        "data_interval_start": "2026-11-30T00:00:00Z",
        "conf": {},
    }
    assert api_run_day(manual) == "2026-11-29"
    chosen = {**manual, "conf": {"day": "2026-11-20"}}
    assert api_run_day(chosen) == "2026-11-20"
    backfill = {
        "logical_date": "2026-11-28T00:00:00Z",
        "data_interval_start": "2026-11-28T00:00:00Z",
    }
    assert api_run_day(backfill) == "2026-11-28"
    assert api_run_day({"logical_date": None, "conf": None}) == "none"


@pytest.mark.slow  # imports Airflow in a child process: 4-10 s here
def test_the_demo_tasks_wait_for_an_api_server_that_starts_after_the_scheduler(tmp_path):
    """The demo's backfill exists before ``airflow standalone`` starts its scheduler, which
    starts before its API server: Airflow's task SDK must keep retrying a refused connection
    long enough (its default of 5 tries can give up after a few seconds). Read back through
    Airflow's own configuration, so a misspelt setting fails here."""
    import subprocess
    import sys

    from dxt_core.demo import airflow_env

    env = airflow_env(tmp_path, tmp_path / "a", tmp_path / "c.csv", "http://127.0.0.1:1", 8080)
    code = (
        "from airflow.configuration import conf; "
        "print(conf.getint('workers', 'execution_api_retries'), "
        "conf.getfloat('workers', 'execution_api_retry_wait_min'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    retries, wait_min = out.stdout.split()
    assert int(retries) >= 10 and float(wait_min) >= 3  # at least 27 s of waiting
