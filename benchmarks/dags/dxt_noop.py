"""Benchmark twin of dxt_examon: the same DAG shape (the reschedule sensor gate, the catalog
task, one mapped task per metric in the same pool, same map index names, same schedule,
start date, catchup, ``max_active_runs`` and retries from the same settings), with tasks that
do nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import pendulum
from airflow.sdk import dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings

UTC = pendulum.timezone("UTC")
S = dag_settings("examon")


@dag(
    dag_id="dxt_noop",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime.fromisoformat(S["start_date"]), tz=UTC),
    catchup=S["catchup"],
    max_active_runs=S["max_active_runs"],
    default_args={"retries": S["retries"], "retry_delay": timedelta(minutes=2)},
    tags=["benchmark"],
)
def dxt_noop() -> None:
    @task.sensor(poke_interval=300, timeout=3 * 86400, mode="reschedule")
    def wait_for_day_end() -> bool:
        return True

    @task
    def catalog() -> list[dict[str, str]]:
        from airflow.configuration import conf

        from dxt_core.airflow.examon import catalog_entries

        return catalog_entries(conf.getint("core", "max_map_length"))

    @task(
        pool=S["pool"],
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
