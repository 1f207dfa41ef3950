"""Kwollect on Grid'5000: energy and node metrics, experiment backups and daily archives."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings
from dxt_core.config import Setting

SETTINGS = (
    *common_settings("kwollect", start_date="2024-11-01", reconcile=True),
    Setting("kwollect_config", str, "", "JSON or TOML file: time_zone, metrics, nodes, clusters"),
    Setting("kwollect_nodes", str, "", "comma-separated nodes (wins over the file)"),
    Setting("kwollect_clusters", str, "", "comma-separated site/cluster pairs"),
    Setting("kwollect_metrics", str, "", "comma-separated metrics (default: power metrics)"),
    Setting("kwollect_time_zone", str, "", "zone of the archive's days (default Europe/Paris)"),
)


BACKEND = Backend(
    name="kwollect",
    title="Kwollect (Grid'5000 metrics)",
    task_id="archive_site_metric_day",
    settings=SETTINGS,
)
