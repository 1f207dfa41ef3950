"""collectd in Elasticsearch (NERSC's pytokio archive_collectdes): JSON Lines and TOKIO HDF5."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dxt_core.backends import Backend, common_settings, reconcile_setting
from dxt_core.config import Setting

if TYPE_CHECKING:
    from dxt_core.backends.collectd_es.tasks import CollectdEsTasks
    from dxt_core.backends.roles import CliRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

SETTINGS = (
    *common_settings(
        "collectd_es",
        start_date="2017-12-13",
        pool="default_pool",
        conn_id="elasticsearch_default",
        max_active_runs=2,
    ),
    reconcile_setting("collectd_es"),
    Setting("collectd_es_families", list, ["disk", "cpu", "memory"], "families to archive"),
    Setting("collectd_es_formats", list, ["jsonl", "hdf5"], "jsonl and/or hdf5"),
    Setting("collectd_es_slices", int, 2, "parallel slices per export"),
    Setting("collectd_es_page_size", int, 5000, "hits per request"),
    Setting("collectd_es_timestep", int, 10, "HDF5 row width, seconds"),
    Setting("collectd_es_num_nodes", int, 288, "HDF5 servers"),
    Setting("collectd_es_ssds_per_node", int, 4, "HDF5 SSDs per server"),
)


def _tasks() -> CollectdEsTasks:
    from dxt_core.backends.collectd_es.tasks import TASKS

    return TASKS


def _connection() -> ConnectionSpec[Any]:
    from dxt_core.backends.collectd_es.connection import SPEC

    return SPEC


def _cli() -> CliRole:
    from dxt_core.backends.collectd_es import cli

    return cli


def _simulator() -> SimulatorRole:
    from dxt_core.backends.collectd_es import simulator

    return simulator


BACKEND = Backend(
    name="collectd_es",
    title="collectd in Elasticsearch (pytokio archive_collectdes)",
    package="dxt_core.backends.collectd_es",
    cli_name="collectd-es",
    dag_id="dxt_collectd_es",
    task_id="archive_family_day",
    settings=SETTINGS,
    connection=_connection,
    tasks=_tasks,
    cli=_cli,
    simulator=_simulator,
    publish=lambda: __import__("dxt_core.backends.collectd_es.publish", fromlist=["_"]).PUBLISH,
)
