"""Prometheus-style range queries (``/api/v1/query_range``): the walk-through backend of
docs/adding-a-backend.md. One CSV file per (metric, UTC day)."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

SETTINGS = (
    *common_settings("promrange", start_date="2024-01-01", max_active_runs=2),
    Setting("promrange_metrics", list, ["up"], "metrics the DAG archives"),
)


# The roles are this package's modules of their names (connection, tasks, cli, simulator):
# nothing to declare, and reading BACKEND imports none of them.
BACKEND = Backend(
    name="promrange",  # the archive's top folder (ROOT/promrange/...), the registry key
    title="Prometheus range queries (example)",
    package=__name__,  # out of tree: the roles' package is this one
    task_id="archive_metric_day",  # the mapped archive task
    settings=SETTINGS,
)
