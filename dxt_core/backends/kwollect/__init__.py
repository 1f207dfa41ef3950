"""Kwollect on Grid'5000: energy and node metrics, experiment backups and daily archives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dxt_core.backends import Backend, common_settings, reconcile_setting
from dxt_core.config import Setting

if TYPE_CHECKING:
    from dxt_core.backends.kwollect.tasks import KwollectTasks
    from dxt_core.backends.roles import CliRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

SETTINGS = (
    *common_settings(
        "kwollect",
        start_date="2024-11-01",
        pool="default_pool",
        conn_id="kwollect_default",
        max_active_runs=4,
    ),
    reconcile_setting("kwollect"),
    Setting("kwollect_config", str, "", "JSON or TOML file: time_zone, metrics, nodes, clusters"),
    Setting("kwollect_nodes", str, "", "comma-separated nodes (wins over the file)"),
    Setting("kwollect_clusters", str, "", "comma-separated site/cluster pairs"),
    Setting("kwollect_metrics", str, "", "comma-separated metrics (default: power metrics)"),
    Setting("kwollect_time_zone", str, "", "zone of the archive's days (default Europe/Paris)"),
)


def _tasks() -> KwollectTasks:
    from dxt_core.backends.kwollect.tasks import TASKS

    return TASKS


def _connection() -> ConnectionSpec[Any]:
    from dxt_core.backends.kwollect.connection import SPEC

    return SPEC


def _cli() -> CliRole:
    from dxt_core.backends.kwollect import cli

    return cli


def _simulator() -> SimulatorRole:
    from dxt_core.backends.kwollect import simulator

    return simulator


BACKEND = Backend(
    name="kwollect",
    title="Kwollect (Grid'5000 metrics)",
    package="dxt_core.backends.kwollect",
    dag_id="dxt_kwollect",
    task_id="archive_site_metric_day",
    settings=SETTINGS,
    connection=_connection,
    tasks=_tasks,
    cli=_cli,
    simulator=_simulator,
    publish=lambda: __import__("dxt_core.backends.kwollect.publish", fromlist=["_"]).PUBLISH,
)
