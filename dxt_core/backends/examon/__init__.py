"""Examon on KairosDB (CINECA's Marconi100): daily gzip CSV or Parquet per plugin/metric."""

from __future__ import annotations

from dxt_core.backends import Backend, common_settings, reconcile_setting
from dxt_core.config import Setting

SETTINGS = (
    *common_settings("examon", start_date="2020-03-09", pool="examon"),
    reconcile_setting("examon"),
    Setting("examon_catalog", str, "", "metric,plugin CSV (default: the shipped M100 catalog)"),
    Setting("examon_options", str, "", "TOML with the cluster name and per-plugin options"),
    Setting("examon_format", str, "csv", "csv (gzip CSV) or parquet"),
)


BACKEND = Backend(
    name="examon",
    title="Examon / KairosDB",
    package="dxt_core.backends.examon",
    aliases=("kairosdb",),
    dag_id="dxt_examon",
    task_id="archive_metric_day",
    settings=SETTINGS,
    tasks=".tasks:TASKS",
    publish=".publish:PUBLISH",
)
