"""Prometheus and VictoriaMetrics: the raw stored samples of each metric, one file per day."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings, reconcile_setting
from dxt_core.config import Setting

SETTINGS = (
    *common_settings(
        "prometheus",
        start_date="2024-01-01",
        pool="default_pool",
        conn_id="prometheus_default",
        max_active_runs=4,
    ),
    reconcile_setting("prometheus"),
    Setting(
        "prometheus_catalog",
        str,
        "",
        "catalog file: one metric name or NAME=SELECTOR a line (default: every metric listed)",
    ),
    Setting("prometheus_metrics", str, "", "comma-separated metric names (wins over the file)"),
    Setting("prometheus_format", str, "csv", "csv (gzip CSV) or parquet"),
)


BACKEND = Backend(
    name="prometheus",
    title="Prometheus / VictoriaMetrics",
    package="dxt_core.backends.prometheus",
    aliases=("victoriametrics",),
    dag_id="dxt_prometheus",
    task_id="archive_metric_day",
    settings=SETTINGS,
    tasks=".tasks:TASKS",
    publish=".publish:PUBLISH",
)
