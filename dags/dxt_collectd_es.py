"""dxt_collectd_es: archive collectd-in-Elasticsearch telemetry, one task per (family, day).

The run of logical date D archives the UTC day D of each family (disk, cpu, memory) into
``$DXT_ARCHIVE_ROOT/collectd_es/<family>/<D>.jsonl.gz`` (raw hits) and ``<D>.hdf5``
(TOKIO Time Series, pytokio's layout) with a manifest beside them. Connection
``elasticsearch_default``; see docs/collectd_es.md.

* Backfill: ``airflow backfill create --dag-id dxt_collectd_es --from-date D1 --to-date D2``.
* Reruns rewrite the day from scratch (same result over unchanged data).
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (family, day) adds an event to the asset ``dxt-archive/collectd_es/<family>``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings
from dxt_core.airflow.assets import source_alias
from dxt_core.airflow.runs import day_param, replace_param
from dxt_core.airflow.wait import WaitForDayEnd

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
    params={
        "day": day_param(),
        "formats": Param(
            list(S["formats"]),
            type="array",
            items={"type": "string", "enum": ["jsonl", "hdf5"]},
            title="Output formats",
            description="raw hits as gzip JSON Lines and/or TOKIO Time Series HDF5",
        ),
        "replace": replace_param(),
    },
)
def dxt_collectd_es() -> None:
    wait = WaitForDayEnd(task_id="wait_for_day_end", source="collectd_es", settle_s=SETTLE_S)

    # the report as one XCom, not one per key
    @task(
        multiple_outputs=False,
        map_index_template="{{ task.op_kwargs['family'] }}",
        outlets=[source_alias("collectd_es")],
    )
    def archive_family_day(family: str) -> dict[str, object]:
        from dxt_core.airflow.collectd_es import archive_family_day as run

        return run(family, get_current_context(), CONN_ID)

    wait >> archive_family_day.expand(family=FAMILIES)


dxt_collectd_es()
