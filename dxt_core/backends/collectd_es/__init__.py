"""collectd in Elasticsearch (NERSC's pytokio archive_collectdes): JSON Lines and TOKIO HDF5."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

SETTINGS = (
    *common_settings(
        "collectd_es",
        start_date="2017-12-13",
        conn_id="elasticsearch_default",
        max_active_runs=2,
        reconcile=True,
    ),
    Setting("collectd_es_families", list, ["disk", "cpu", "memory"], "families to archive"),
    Setting("collectd_es_formats", list, ["jsonl", "hdf5"], "jsonl and/or hdf5"),
    Setting("collectd_es_slices", int, 2, "parallel slices per export", minimum=1),
    Setting("collectd_es_page_size", int, 5000, "hits per request", minimum=1),
    Setting("collectd_es_timestep", int, 10, "HDF5 row width, seconds", minimum=1),
    Setting("collectd_es_num_nodes", int, 288, "HDF5 servers", minimum=1),
    Setting("collectd_es_ssds_per_node", int, 4, "HDF5 SSDs per server", minimum=1),
)


BACKEND = Backend(
    name="collectd_es",
    title="collectd in Elasticsearch (pytokio archive_collectdes)",
    cli_name="collectd-es",
    task_id="archive_family_day",
    settings=SETTINGS,
)
