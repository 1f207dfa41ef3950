"""``dxt publish examon``: Examon's part of publishing, in the layout of M100 ExaData
(Borghesi et al., Scientific Data 2023)::

    year_month=YY-MM/plugin=<plugin>/metric=<metric>/a_0.parquet
    year_month=YY-MM/plugin=job_table/metric=<table>/a_0.parquet

The units are the archive's (plugin, metric) directories, CSV (``examon/<p>/<m>/``) or
Parquet (``examon/plugin=<p>/metric=<m>/``); the ``job_table`` plugin holds the Slurm job
tables (one row per job). The rest is generic (:mod:`dxt_core.publish.dataset`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dxt_core.backends.examon.tags import FOLDER_KEYS
from dxt_core.publish.archive_scan import UnitMonth
from dxt_core.publish.role import PartitionedPublish
from dxt_core.publish.tree import ArchiveTree

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

NAME = "examon"
JOB_PLUGIN = "job_table"


class ExamonPublish(PartitionedPublish):
    """The publish role of Examon (checked by mypy against
    :class:`~dxt_core.backends.roles.PublishRole`)."""

    backend = NAME
    keys = ("plugin", "metric")
    # The plugin tag holds the folder's plugin (tags.check_plugin), and is published as
    # ``exported_plugin`` all the same: a file's plain-string column named as a Hive key
    # that pandas infers as a dictionary (pyarrow.parquet's "hive") refuses a read of the
    # dataset's root ("Field plugin has incompatible types"). A tag ``metric`` is archived
    # as ``exported_metric`` (tags.FOLDER_KEYS).
    folder_columns = ()
    archive_reserved = FOLDER_KEYS  # days archived before it hold the tag as ``metric``
    title = "Examon telemetry"
    layout_summary = "one Parquet file per metric and month (M100 ExaData layout)"
    source = "Examon (KairosDB time series and the Examon jobs service)"
    layout = (
        "year_month=YY-MM/plugin=<plugin>/metric=<metric>/a_0.parquet",
        f"year_month=YY-MM/plugin={JOB_PLUGIN}/metric=<table>/a_0.parquet",
    )
    example_glob = "year_month=*/plugin=ipmi_pub/metric=*/a_0.parquet"

    def scan(self, tree: ArchiveTree, unit: tuple[str, ...], year: int, month: int) -> UnitMonth:
        um = super().scan(tree, unit, year, month)
        um.jobs = unit[0] == JOB_PLUGIN
        return um


PUBLISH: PublishRole = ExamonPublish()
