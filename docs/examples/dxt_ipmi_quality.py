"""Example downstream DAG: check every archived day of the ipmi_pub plugin.

dxt_examon adds one event per metric-day to the asset ``dxt-archive/examon/ipmi_pub``; this
DAG runs after them (Airflow batches the events that arrived since its last run) and reads
each event's extra: source, unit, day, status, rows, bytes and path (relative to the archive
root). Copy it into your dags folder and adapt the check. Tested by tests/browser.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, get_current_context, task

from dxt_core.airflow.assets import archive_asset

IPMI = archive_asset("examon", "ipmi_pub")


@dag(
    dag_id="dxt_ipmi_quality",
    schedule=[IPMI],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["dxt", "example"],
)
def dxt_ipmi_quality() -> None:
    @task
    def check_days() -> list[dict[str, object]]:
        import os
        from pathlib import Path

        root = Path(os.environ["DXT_ARCHIVE_ROOT"])
        seen = []
        for event in get_current_context()["triggering_asset_events"][IPMI]:
            extra = event.extra
            path = extra.get("path")
            ok = path is None or (root / str(path)).stat().st_size == extra.get("bytes")
            seen.append(
                {"unit": extra["unit"], "day": extra["day"], "rows": extra["rows"], "ok": ok}
            )
        return seen

    check_days()


dxt_ipmi_quality()
