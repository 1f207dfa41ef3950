"""dxt_promrange: archive Prometheus range queries, one task per (metric, UTC day), into
``$DXT_ARCHIVE_ROOT/promrange/<metric>/<D>.csv.gz``. Connection ``promrange_default``;
metrics from ``DXT_PROMRANGE_METRICS``. Put this file in Airflow's dags folder."""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("promrange", doc_md=__doc__)
