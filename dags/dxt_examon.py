"""dxt_examon: archive Examon (KairosDB) telemetry, one task per (metric, day).

Each daily run archives the previous local day of every metric in the catalog into
``$DXT_ARCHIVE_ROOT/examon/<plugin>/<metric>/<YYYY-MM-DD>.csv.gz`` with a manifest.
Backfill with ``airflow backfill create --dag-id dxt_examon --from-date D1 --to-date D2``;
retry a failed metric-day by clearing its task instance.

Parse-time work is kept to a few imports: the catalog is read by the ``catalog`` task.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from airflow.sdk import dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

TIME_ZONE = ZoneInfo(os.environ.get("DXT_EXAMON_TIME_ZONE", "Europe/Rome"))
START_DAY = os.environ.get("DXT_EXAMON_START_DATE", "2020-03-09")
POOL = os.environ.get("DXT_EXAMON_POOL", "examon")
CONN_ID = os.environ.get("DXT_EXAMON_CONN_ID", "examon_default")
CATCHUP = os.environ.get("DXT_EXAMON_CATCHUP", "true").lower() in ("1", "true", "yes")
RETRIES = int(os.environ.get("DXT_EXAMON_RETRIES", "2"))


@dag(
    dag_id="dxt_examon",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone=TIME_ZONE),
    start_date=datetime.fromisoformat(START_DAY).replace(tzinfo=TIME_ZONE),
    catchup=CATCHUP,
    max_active_runs=int(os.environ.get("DXT_EXAMON_MAX_ACTIVE_RUNS", "2")),
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["dxt", "examon"],
    doc_md=__doc__,
)
def dxt_examon() -> None:
    @task
    def catalog() -> list[dict[str, str]]:
        from airflow.configuration import conf

        from dxt_core.airflow.examon import catalog_entries

        return catalog_entries(conf.getint("core", "max_map_length"))

    @task(
        pool=POOL,
        map_index_template="{{ task.op_kwargs['entry']['plugin'] }}/"
        "{{ task.op_kwargs['entry']['metric'] }}",
    )
    def archive_metric_day(entry: dict[str, str]) -> dict[str, object]:
        from dxt_core.airflow.examon import archive_metric_day as run

        return run(entry, get_current_context(), CONN_ID)

    archive_metric_day.expand(entry=catalog())


dxt_examon()
