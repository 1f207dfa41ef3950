"""dxt_kwollect: archive Grid'5000 Kwollect metrics, one task per (site, metric) and day.

The run of logical date D archives day D (midnight to midnight in ``DXT_KWOLLECT_TIME_ZONE``,
Europe/Paris by default) of the configured nodes or clusters into
``$DXT_ARCHIVE_ROOT/kwollect/<site>/<metric>/<D>.jsonl.gz`` with a manifest beside it.
Configure with ``DXT_KWOLLECT_NODES`` / ``DXT_KWOLLECT_CLUSTERS`` / ``DXT_KWOLLECT_METRICS`` or
a file in ``DXT_KWOLLECT_CONFIG``; the API comes from the connection ``kwollect_default``.

* Backfill: ``airflow backfill create --dag-id dxt_kwollect --from-date D1 --to-date D2``.
* Retry one failed (site, metric, day): clear its task instance, or refill it from the
  "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (site, metric, day) adds an event to the asset ``dxt-archive/kwollect/<site>``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pendulum
from airflow.sdk import dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings
from dxt_core.airflow.assets import source_alias
from dxt_core.airflow.runs import day_param, replace_param
from dxt_core.airflow.wait import WaitForDayEnd

UTC = pendulum.timezone("UTC")
S = dag_settings("kwollect")
START_DAY = S["start_date"]
POOL = S["pool"]
CONN_ID = S["conn_id"]
CATCHUP = S["catchup"]
RETRIES = S["retries"]
SETTLE_S = S["settle_seconds"]


@dag(
    dag_id="dxt_kwollect",
    # Logical date D (UTC midnight) <-> archive day D, as in dxt_examon.
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime.fromisoformat(START_DAY), tz=UTC),
    catchup=CATCHUP,
    max_active_runs=S["max_active_runs"],
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["dxt", "kwollect", "grid5000"],
    doc_md=__doc__,
    # Kwollect days are written as gzip JSON Lines only: no format to choose.
    params={"day": day_param(), "replace": replace_param()},
)
def dxt_kwollect() -> None:
    wait = WaitForDayEnd(task_id="wait_for_day_end", source="kwollect", settle_s=SETTLE_S)

    @task
    def units() -> list[dict[str, object]]:
        from airflow.configuration import conf

        from dxt_core.airflow.kwollect import units as find_units

        return find_units(CONN_ID, conf.getint("core", "max_map_length"))

    @task(
        pool=POOL,
        multiple_outputs=False,  # the report as one XCom, not one per key
        map_index_template="{{ task.op_kwargs['unit']['site'] }}/"
        "{{ task.op_kwargs['unit']['metric'] }}",
        outlets=[source_alias("kwollect")],
    )
    def archive_site_metric_day(unit: dict[str, object]) -> dict[str, object]:
        from dxt_core.airflow.kwollect import archive_unit_day

        return archive_unit_day(unit, get_current_context(), CONN_ID)

    found = units()
    wait >> found
    archive_site_metric_day.expand(unit=found)


dxt_kwollect()
