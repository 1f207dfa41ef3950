"""Prometheus and VictoriaMetrics: the raw stored samples of each metric, one file per day."""

from __future__ import annotations

from dxt_core.backends import series_backend
from dxt_core.config import Setting

BACKEND = series_backend(
    "prometheus",
    "Prometheus / VictoriaMetrics",
    Setting(
        "prometheus_catalog",
        str,
        "",
        "catalog file: one metric name or NAME=SELECTOR a line (default: every metric listed)",
    ),
    Setting("prometheus_metrics", str, "", "comma-separated metric names (wins over the file)"),
    alias="victoriametrics",
    start_date="2024-01-01",
)
SETTINGS = BACKEND.settings
