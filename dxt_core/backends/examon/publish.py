"""``dxt publish examon``: Examon's part of publishing, in the layout of M100 ExaData
(Borghesi et al., Scientific Data 2023)::

    year_month=YY-MM/plugin=<plugin>/metric=<metric>/a_0.parquet
    year_month=YY-MM/plugin=job_table/metric=<table>/a_0.parquet

The units are the archive's (plugin, metric) directories, CSV (``examon/<p>/<m>/``) or
Parquet (``examon/plugin=<p>/metric=<m>/``); the ``job_table`` plugin holds the Slurm job
tables (one row per job). The rest is generic (:mod:`dxt_core.publish.dataset`).
"""

from __future__ import annotations

from pathlib import Path

from dxt_core.publish.archive_scan import UnitMonth, partition_units, scan_unit_month, year_month

NAME = "examon"
JOB_PLUGIN = "job_table"
DATA_FILE = "a_0.parquet"


class ExamonPublish:
    """The publish role of Examon (checked by mypy against
    :class:`~dxt_core.backends.roles.PublishRole`)."""

    backend = NAME
    dataset_name = "examon-dataset"
    title = "Examon telemetry"
    description = "Examon telemetry"
    layout_summary = "one Parquet file per metric and month (M100 ExaData layout)"
    source = "Examon (KairosDB time series and the Examon jobs service)"
    layout = (
        "year_month=YY-MM/plugin=<plugin>/metric=<metric>/a_0.parquet",
        f"year_month=YY-MM/plugin={JOB_PLUGIN}/metric=<table>/a_0.parquet",
    )
    example_glob = "year_month=*/plugin=ipmi_pub/metric=*/a_0.parquet"

    def units(self, root: Path) -> list[tuple[str, str]]:
        return partition_units(root, NAME, "plugin", "metric")

    def scan(self, root: Path, group: str, item: str, year: int, month: int) -> UnitMonth:
        um = scan_unit_month(
            root / NAME / f"plugin={group}" / f"metric={item}",
            root / NAME / group / item,
            group,
            item,
            year,
            month,
        )
        um.jobs = group == JOB_PLUGIN
        return um

    def data_path(self, um: UnitMonth) -> str:
        """``year_month=YY-MM/plugin=<p>/metric=<m>/a_0.parquet`` (M100 ExaData's layout)."""
        return (
            f"year_month={year_month(um.year, um.month)}/plugin={um.plugin}/"
            f"metric={um.metric}/{DATA_FILE}"
        )


PUBLISH = ExamonPublish()
