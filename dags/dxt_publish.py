"""dxt_publish: publish each month of the archive once it is complete.

Its documentation (the DAG's Docs tab) comes from the installed dxt-archive:
DAG_DOC of dxt_core.airflow.publish.
Written by ``dxt dags write``; write it again after an upgrade.
"""

from __future__ import annotations

from dxt_core.airflow.publish import publish_dag

publish_dag()
