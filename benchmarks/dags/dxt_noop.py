"""Benchmark twin of dxt_examon: the same DAG shape (a gate task, the catalog task, one mapped
task per metric in the same pool, same map index names), with tasks that do nothing."""

from __future__ import annotations

import os
from datetime import datetime

import pendulum
from airflow.sdk import dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

UTC = pendulum.timezone("UTC")


@dag(
    dag_id="dxt_noop",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime(2024, 4, 1), tz=UTC),
    catchup=False,
    tags=["benchmark"],
)
def dxt_noop() -> None:
    @task
    def wait_for_day_end() -> bool:
        return True

    @task
    def catalog() -> list[dict[str, str]]:
        from dxt_core.airflow.examon import catalog_entries

        return catalog_entries()

    @task(
        pool=os.environ.get("DXT_EXAMON_POOL", "examon"),
        multiple_outputs=False,  # as dxt_examon: one XCom per task
        map_index_template="{{ task.op_kwargs['entry']['plugin'] }}/"
        "{{ task.op_kwargs['entry']['metric'] }}",
    )
    def archive_metric_day(entry: dict[str, str]) -> dict[str, object]:
        return {}

    entries = catalog()
    wait_for_day_end() >> entries
    archive_metric_day.expand(entry=entries)


dxt_noop()
