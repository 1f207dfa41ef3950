"""dxt_examon: archive Examon (KairosDB) telemetry, one task per (metric, day).

The run of logical date D archives day D (midnight to midnight in the connection's
``time_zone``, Europe/Rome by default) of every catalog metric into
``$DXT_ARCHIVE_ROOT/examon/<plugin>/<metric>/<D>.csv.gz`` with a manifest beside it.

* Backfill: ``airflow backfill create --dag-id dxt_examon --from-date D1 --to-date D2``
  (add ``--reprocess-behavior failed`` to redo failed days).
* Retry one failed metric-day: clear its task instance (UI, or ``airflow tasks clear``), or
  refill it from the "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` holds a run until its local day is over (plus a settle delay),
  deferred to the triggerer.
* Each metric-day adds an event to the asset ``dxt-archive/examon/<plugin>``.

Parse-time work is a few imports: the catalog is read by the ``catalog`` task.
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
S = dag_settings("examon")
START_DAY = S["start_date"]
POOL = S["pool"]
CONN_ID = S["conn_id"]
CATCHUP = S["catchup"]
RETRIES = S["retries"]
SETTLE_S = S["settle_seconds"]


@dag(
    dag_id="dxt_examon",
    # Logical date D (UTC midnight) <-> archive day D, so CLI dates mean archive days.
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
    start_date=pendulum.instance(datetime.fromisoformat(START_DAY), tz=UTC),
    catchup=CATCHUP,
    max_active_runs=S["max_active_runs"],
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["dxt", "examon"],
    doc_md=__doc__,
    params={
        "day": day_param(),
        "format": Param(
            S["format"],
            enum=["csv", "parquet"],
            title="Output format",
            description="gzip CSV (dxt_examon's layout) or Parquet (Hive partitions)",
        ),
        "replace": replace_param(),
    },
)
def dxt_examon() -> None:
    wait = WaitForDayEnd(
        task_id="wait_for_day_end", source="examon", conn_id=CONN_ID, settle_s=SETTLE_S
    )

    @task
    def catalog() -> list[dict[str, str]]:
        from airflow.configuration import conf

        from dxt_core.airflow.examon import catalog_entries

        return catalog_entries(conf.getint("core", "max_map_length"))

    @task(
        pool=POOL,
        # One XCom (the report), not one per key: a dict return type would otherwise
        # make Airflow push each key separately, a dozen extra API calls per task.
        multiple_outputs=False,
        map_index_template="{{ task.op_kwargs['entry']['plugin'] }}/"
        "{{ task.op_kwargs['entry']['metric'] }}",
        outlets=[source_alias("examon")],
    )
    def archive_metric_day(entry: dict[str, str]) -> dict[str, object]:
        from dxt_core.airflow.examon import archive_metric_day as run

        return run(entry, get_current_context(), CONN_ID)

    entries = catalog()
    wait >> entries
    archive_metric_day.expand(entry=entries)


dxt_examon()
