"""Examon on KairosDB (CINECA's Marconi100): daily gzip CSV or Parquet per plugin/metric."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dxt_core.backends import Backend, common_settings, reconcile_setting
from dxt_core.config import Setting

if TYPE_CHECKING:
    from dxt_core.backends.examon.tasks import ExamonTasks
    from dxt_core.backends.roles import CliRole, PublishRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

SETTINGS = (
    *common_settings(
        "examon",
        start_date="2020-03-09",
        pool="examon",
        conn_id="examon_default",
        max_active_runs=4,
    ),
    reconcile_setting("examon"),
    Setting("examon_catalog", str, "", "metric,plugin CSV (default: the shipped M100 catalog)"),
    Setting("examon_options", str, "", "TOML with the cluster name and per-plugin options"),
    Setting("examon_format", str, "csv", "csv (gzip CSV) or parquet"),
)


def _tasks() -> ExamonTasks:
    from dxt_core.backends.examon.tasks import TASKS

    return TASKS


def _connection() -> ConnectionSpec[Any]:
    from dxt_core.backends.examon.connection import SPEC

    return SPEC


def _cli() -> CliRole:
    from dxt_core.backends.examon import cli

    return cli


def _simulator() -> SimulatorRole:
    from dxt_core.backends.examon import simulator

    return simulator


def _publish() -> PublishRole:
    from dxt_core.backends.examon.publish import PUBLISH

    return PUBLISH


BACKEND = Backend(
    name="examon",
    title="Examon / KairosDB",
    package="dxt_core.backends.examon",
    aliases=("kairosdb",),
    dag_id="dxt_examon",
    task_id="archive_metric_day",
    settings=SETTINGS,
    connection=_connection,
    tasks=_tasks,
    cli=_cli,
    simulator=_simulator,
    publish=_publish,
)
