"""Examon on KairosDB (CINECA's Marconi100): daily gzip CSV or Parquet per plugin/metric."""

from __future__ import annotations

from dxt_core.backends import series_backend
from dxt_core.config import Setting

BACKEND = series_backend(
    "examon",
    "Examon / KairosDB",
    Setting("examon_catalog", str, "", "metric,plugin CSV (default: the shipped M100 catalog)"),
    Setting("examon_options", str, "", "TOML with the cluster name and per-plugin options"),
    alias="kairosdb",
    start_date="2020-03-09",
    pool="examon",
)
SETTINGS = BACKEND.settings
