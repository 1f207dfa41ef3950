"""The Airflow commands dxt prints reach the day they name whatever Airflow's
``[core] default_timezone`` is. A bare date on Airflow's CLI is read in that zone: under
Europe/Rome, ``--from-date 2021-03-28 --to-date 2021-03-28`` planned no run at all and
``tasks clear -s 2021-03-28 -e 2021-03-28`` found nothing (the runs are at midnight UTC)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from dxt_core.refill_commands import airflow_clear, airflow_day
from tests.airflow.conftest import airflow, base_env, fresh_home

pytestmark = pytest.mark.airflow

DAY = dt.date(2021, 3, 28)  # a DST change day in Europe/Rome


@pytest.mark.parametrize("default_timezone", ["Europe/Rome", "America/New_York"])
def test_the_printed_backfill_and_clear_reach_their_day(migrated_home, tmp_path, default_timezone):
    env = base_env(fresh_home(migrated_home, tmp_path / "home"), tmp_path / "a", "http://x:1", None)
    env["AIRFLOW__CORE__DEFAULT_TIMEZONE"] = default_timezone
    env["DXT_EXAMON_START_DATE"] = "2021-03-01"
    airflow(env, "dags", "reserialize")
    day = airflow_day(DAY)
    words = ["backfill", "create", "--dag-id", "dxt_examon", "--from-date", day, "--to-date", day]
    planned = airflow(env, *words, "--dry-run")
    # the table of "Runs to be attempted": one row a logical date
    dates = re.findall(r"^\| (\d{4}-\d\d-\d\d) \d\d:\d\d:\d\d", planned.stdout, re.M)
    assert dates == [DAY.isoformat()], planned.stdout
    airflow(env, *words)
    listing = airflow(env, "dags", "list-runs", "dxt_examon", "-o", "json").stdout
    runs = json.loads(listing[listing.index("[{") :])  # after any line Airflow logs first
    assert [r["logical_date"][:19] for r in runs] == [f"{DAY}T00:00:00"], runs
    clear = airflow_clear("dxt_examon", "catalog", DAY, DAY).split()[1:]  # no -y: it lists
    listed = airflow(env, *clear, check=False, input="n\n")
    assert "about to delete these 1 tasks" in listed.stdout, listed.stdout
    assert f"dxt_examon.catalog {runs[0]['run_id']} " in listed.stdout, listed.stdout
