"""The demo's summary names each run's day by the rule the run's note and tasks follow."""

from __future__ import annotations

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
