"""dxt_collectd_es: the DAG of the collectd-es backend, one task per unit and day.

Its documentation (the DAG's Docs tab) comes from the installed dxt-archive:
dag_doc of dxt_core.backends.collectd_es.tasks.
Written by ``dxt dags write``; write it again after an upgrade.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("collectd_es")
