"""dxt_kwollect: the DAG of the kwollect backend, one task per unit and day.

Its documentation (the DAG's Docs tab) comes from the installed dxt-archive:
dag_doc of dxt_core.backends.kwollect.tasks.
Written by ``dxt dags write``; write it again after an upgrade.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("kwollect")
