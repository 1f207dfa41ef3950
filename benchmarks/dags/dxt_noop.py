"""Benchmark twin of dxt_examon: the same DAG shape as ``dxt_core.airflow.dags.
daily_archive_dag`` builds it (the ``wait_for_day_end`` operator, the catalog task, one mapped
task per metric in the same pool, with the same map index names, asset alias outlet,
execution timeout, retries, schedule, start date, catchup, ``max_active_runs`` and Params,
from the same settings), with an archive task that does nothing: no fetch, no file, no asset
event."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings
from dxt_core.airflow.assets import source_alias
from dxt_core.airflow.runs import day_param, replace_param
from dxt_core.airflow.wait import WaitForDayEnd

UTC = pendulum.timezone("UTC")
S = dag_settings("examon")


@dag(
    dag_id="dxt_noop",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime.fromisoformat(str(S["start_date"])), tz=UTC),
    catchup=bool(S["catchup"]),
    max_active_runs=int(S["max_active_runs"]),
    default_args={"retries": int(S["retries"]), "retry_delay": timedelta(minutes=2)},
    tags=["benchmark"],
    params={"day": day_param(), "replace": replace_param()},
)
def dxt_noop() -> None:
    wait = WaitForDayEnd(
        task_id="wait_for_day_end",
        source="examon",
        conn_id=str(S["conn_id"]),
        settle_s=int(S["settle_seconds"]),
    )

    @task(task_id="catalog")
    def list_units() -> list[Any]:
        from airflow.configuration import conf

        from dxt_core.airflow.tasks import list_units as units

        found: list[Any] = units("examon", str(S["conn_id"]), conf.getint("core", "max_map_length"))
        return found

    @task(
        task_id="archive_metric_day",
        pool=str(S["pool"]),
        multiple_outputs=False,  # as dxt_examon: one XCom per task
        map_index_template="{{ task.op_kwargs['unit']['plugin'] }}/"
        "{{ task.op_kwargs['unit']['metric'] }}",
        outlets=[source_alias("examon")],
        execution_timeout=timedelta(minutes=int(S["task_timeout_minutes"])),
    )
    def archive_unit(unit: Any) -> dict[str, object]:
        return {}

    found = list_units()
    wait >> found
    archive_unit.expand(unit=found)


dxt_noop()
