"""Prometheus and VictoriaMetrics: the raw stored samples of each metric, one file per day."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings, series_format_setting
from dxt_core.config import Setting

SETTINGS = (
    *common_settings("prometheus", start_date="2024-01-01", reconcile=True),
    Setting(
        "prometheus_catalog",
        str,
        "",
        "catalog file: one metric name or NAME=SELECTOR a line (default: every metric listed)",
    ),
    Setting("prometheus_metrics", str, "", "comma-separated metric names (wins over the file)"),
    series_format_setting("prometheus"),
)


BACKEND = Backend(
    name="prometheus",
    title="Prometheus / VictoriaMetrics",
    aliases=("victoriametrics",),
    task_id="archive_metric_day",
    settings=SETTINGS,
)
