"""Prometheus-style range queries (``/api/v1/query_range``): the walk-through backend of
docs/adding-a-backend.md. One CSV file per (metric, UTC day)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

if TYPE_CHECKING:
    from tests.toy_backend.promrange.tasks import PromRangeTasks

SETTINGS = (
    *common_settings(
        "promrange",
        start_date="2024-01-01",
        pool="default_pool",
        conn_id="promrange_default",
        max_active_runs=2,
    ),
    Setting("promrange_metrics", list, ["up"], "metrics the DAG archives"),
)


def _tasks() -> PromRangeTasks:
    from tests.toy_backend.promrange.tasks import TASKS

    return TASKS


BACKEND = Backend(
    name="promrange",
    title="Prometheus range queries (example)",
    package="tests.toy_backend.promrange",
    dag_id="dxt_promrange",
    task_id="archive_metric_day",
    settings=SETTINGS,
    tasks=_tasks,
)
