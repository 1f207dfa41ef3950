"""dxt_publish: publish a month of the Examon archive as a dataset once it is complete.

Each monthly run publishes the month it covers (``dxt publish examon`` in a task) into
``$DXT_PUBLISH_DIR/<from>_<to>/``: M100 ExaData's layout, checksums, datapackage.json,
croissant.json, a datacard and tar records (docs/publish.md). The task fails and retries
(hourly, for a day) while the month has metric-days neither archived nor empty. People in
the job table are pseudonymised with the key in ``DXT_PUBLISH_KEY_FILE``; without it the
task refuses unless the ``keep_identities`` Param is set. Trigger with ``from_month`` /
``to_month`` to publish other months.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Param, dag, get_current_context, task

MONTH = {"type": ["null", "string"], "pattern": "^[0-9]{4}-[0-9]{2}$"}


@dag(
    dag_id="dxt_publish",
    schedule="@monthly",
    start_date=datetime(2020, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["dxt", "examon", "publish"],
    doc_md=__doc__,
    params={
        "from_month": Param(None, **MONTH, description="first month, YYYY-MM (default: the run's)"),
        "to_month": Param(None, **MONTH, description="last month, YYYY-MM (default: from_month)"),
        "keep_identities": Param(False, type="boolean", description="publish people's names"),
        "require_complete": Param(True, type="boolean", description="wait for whole months"),
        "out": Param(None, type=["null", "string"], description="default: $DXT_PUBLISH_DIR"),
    },
)
def dxt_publish() -> None:
    @task(retries=24, retry_delay=timedelta(hours=1), multiple_outputs=False)
    def publish_months() -> dict[str, object]:
        from dxt_core.airflow.publish import publish_months as run

        result: dict[str, object] = run(get_current_context())
        return result

    publish_months()


dxt_publish()
