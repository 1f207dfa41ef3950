"""Prometheus-style range queries (``/api/v1/query_range``): the walk-through backend of
docs/adding-a-backend.md. One CSV file per (metric, UTC day)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

if TYPE_CHECKING:
    from dxt_core.backends.roles import BackendTasks, CliRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

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


# Each role is a function that imports its module when called: reading BACKEND stays cheap.
def _connection() -> ConnectionSpec[Any]:
    from tests.toy_backend.promrange.connection import SPEC

    return SPEC


def _tasks() -> BackendTasks[Any]:
    from tests.toy_backend.promrange.tasks import TASKS

    return TASKS


def _cli() -> CliRole:
    from tests.toy_backend.promrange import cli

    return cli


def _simulator() -> SimulatorRole:
    from tests.toy_backend.promrange import simulator

    return simulator


BACKEND = Backend(
    name="promrange",
    title="Prometheus range queries (example)",
    package="tests.toy_backend.promrange",
    dag_id="dxt_promrange",
    task_id="archive_metric_day",
    settings=SETTINGS,
    connection=_connection,
    tasks=_tasks,
    cli=_cli,
    simulator=_simulator,
)
