"""Prometheus and VictoriaMetrics: the raw stored samples of each metric, one file per day."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

if TYPE_CHECKING:
    from dxt_core.backends.roles import BackendTasks, CliRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

SETTINGS = (
    *common_settings(
        "prometheus",
        start_date="2024-01-01",
        pool="default_pool",
        conn_id="prometheus_default",
        max_active_runs=4,
    ),
    Setting(
        "prometheus_catalog",
        str,
        "",
        "catalog file: one metric name or NAME=SELECTOR a line (default: every metric listed)",
    ),
    Setting("prometheus_metrics", str, "", "comma-separated metric names (wins over the file)"),
    Setting("prometheus_format", str, "csv", "csv (gzip CSV) or parquet"),
)


def _connection() -> ConnectionSpec[Any]:
    from dxt_core.backends.prometheus.connection import SPEC

    return SPEC


def _tasks() -> BackendTasks[Any]:
    from dxt_core.backends.prometheus.tasks import TASKS

    return TASKS


def _cli() -> CliRole:
    from dxt_core.backends.prometheus import cli

    return cli


def _simulator() -> SimulatorRole:
    from dxt_core.backends.prometheus import simulator

    return simulator


BACKEND = Backend(
    name="prometheus",
    title="Prometheus / VictoriaMetrics",
    package="dxt_core.backends.prometheus",
    aliases=("victoriametrics",),
    dag_id="dxt_prometheus",
    task_id="archive_metric_day",
    settings=SETTINGS,
    connection=_connection,
    tasks=_tasks,
    cli=_cli,
    simulator=_simulator,
    publish=lambda: __import__("dxt_core.backends.prometheus.publish", fromlist=["_"]).PUBLISH,
)
