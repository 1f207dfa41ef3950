"""Who wrote a manifest: an Airflow task (its DAG, run and logical date) or the ``dxt`` command.

Recorded as the manifest's ``made_by`` field so that ``dxt coverage`` can print the refill
command that fits how the archive was made. Airflow exports the running task's context to
the task process's environment (``AIRFLOW_CTX_*``, airflow/sdk/execution_time/task_runner.py)
before the task runs; anything else (``dxt extract``, a notebook) is "dxt".
"""

from __future__ import annotations

import os
from typing import Any

MADE_BY = "made_by"


def made_by() -> dict[str, Any]:
    """The ``made_by`` field of a manifest written now, in this process."""
    dag_id = os.environ.get("AIRFLOW_CTX_DAG_ID")
    run_id = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if dag_id and run_id:
        doc: dict[str, Any] = {"tool": "airflow", "dag_id": dag_id, "run_id": run_id}
        logical = os.environ.get("AIRFLOW_CTX_LOGICAL_DATE")
        if logical:
            doc["logical_date"] = logical
        return doc
    return {"tool": "dxt"}
