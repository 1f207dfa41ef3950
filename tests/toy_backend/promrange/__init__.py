"""Prometheus-style range queries (``/api/v1/query_range``): the walk-through backend of
docs/adding-a-backend.md. One CSV file per (metric, UTC day)."""

from dxt_core.backends import Backend
from dxt_core.config import Setting

BACKEND = Backend(
    name="promrange",
    title="Prometheus range queries (example)",
    package="tests.toy_backend.promrange",
    dag_id="dxt_promrange",
    task_id="archive_metric_day",
    settings=(Setting("promrange_step", int, 60, "seconds between evaluated points"),),
)
