"""Examon on KairosDB (CINECA's Marconi100): daily gzip CSV or Parquet per plugin/metric."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings, series_format_setting
from dxt_core.config import Setting

SETTINGS = (
    *common_settings("examon", start_date="2020-03-09", pool="examon", reconcile=True),
    Setting("examon_catalog", str, "", "metric,plugin CSV (default: the shipped M100 catalog)"),
    Setting("examon_options", str, "", "TOML with the cluster name and per-plugin options"),
    series_format_setting("examon"),
)


BACKEND = Backend(
    name="examon",
    title="Examon / KairosDB",
    aliases=("kairosdb",),
    task_id="archive_metric_day",
    settings=SETTINGS,
)
