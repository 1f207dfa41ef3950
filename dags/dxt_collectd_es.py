"""dxt_collectd_es: archive collectd-in-Elasticsearch telemetry, one task per (family, day).

The run of logical date D archives the UTC day D of each family (disk, cpu, memory) into
``$DXT_ARCHIVE_ROOT/collectd_es/<family>/<D>.jsonl.gz`` (raw hits) and ``<D>.hdf5``
(TOKIO Time Series, pytokio's layout) with a manifest beside them. Connection
``elasticsearch_default``; see docs/collectd_es.md.

* Backfill: ``airflow backfill create --dag-id dxt_collectd_es --from-date D1 --to-date D2``.
* Reruns rewrite the day from scratch (same result over unchanged data).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pendulum
from airflow.sdk import dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings

UTC = pendulum.timezone("UTC")
S = dag_settings("collectd_es")
START_DAY = S["start_date"]
CONN_ID = S["conn_id"]
CATCHUP = S["catchup"]
SETTLE_S = S["settle_seconds"]
FAMILIES = S["families"]


@dag(
    dag_id="dxt_collectd_es",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime.fromisoformat(START_DAY), tz=UTC),
    catchup=CATCHUP,
    max_active_runs=S["max_active_runs"],
    default_args={
        "retries": S["retries"],
        "retry_delay": timedelta(minutes=2),
    },
    tags=["dxt", "collectd", "elasticsearch"],
    doc_md=__doc__,
)
def dxt_collectd_es() -> None:
    @task.sensor(poke_interval=300, timeout=3 * 86400, mode="reschedule")
    def wait_for_day_end() -> bool:
        from dxt_core.airflow.collectd_es import day_is_over

        return day_is_over(get_current_context(), SETTLE_S)

    # the report as one XCom, not one per key
    @task(multiple_outputs=False, map_index_template="{{ task.op_kwargs['family'] }}")
    def archive_family_day(family: str) -> dict[str, object]:
        from dxt_core.airflow.collectd_es import archive_family_day as run

        return run(family, get_current_context(), CONN_ID)

    wait_for_day_end() >> archive_family_day.expand(family=FAMILIES)


dxt_collectd_es()
