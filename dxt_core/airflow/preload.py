"""The modules every dxt task imports, imported once in a Celery worker's main process (see
:mod:`dxt_core.airflow.celery`). Importing this module has no other effect: no connection is
opened and no setting is read."""

from __future__ import annotations

import dxt_core.airflow.assets
import dxt_core.airflow.collectd_es
import dxt_core.airflow.dags
import dxt_core.airflow.examon
import dxt_core.airflow.hooks
import dxt_core.airflow.kwollect
import dxt_core.backends.examon.source
import dxt_core.http  # noqa: F401

LOADED = True
