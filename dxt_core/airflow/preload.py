"""The modules every dxt task imports, imported once in a Celery worker's main process (see
:mod:`dxt_core.airflow.celery`): the generic task bodies, and what each registered backend's
archive call uses (``BackendTasks.preload``). Importing this module opens no connection and
reads no setting."""

from __future__ import annotations

import dxt_core.airflow.assets
import dxt_core.airflow.dags
import dxt_core.airflow.hooks
import dxt_core.airflow.tasks
import dxt_core.http  # noqa: F401
from dxt_core.backends import backends

for _backend in backends():
    if _backend.tasks is not None:
        _backend.dag_tasks().preload()

LOADED = True
