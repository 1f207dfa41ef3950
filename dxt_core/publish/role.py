"""A base for publish roles (:class:`~dxt_core.backends.roles.PublishRole`): Hive-partitioned
paths ``year_month=YY-MM/<k1>=<v1>/.../a_0.parquet``, units found as directories, the days
read from series Parquet or gzip CSV day files. A backend's role subclasses it and sets its
names; one whose day files are something else overrides :meth:`read_day` (and
:meth:`day_file` when a manifest names several files).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dxt_core.errors import ArchiveError
from dxt_core.publish.archive_scan import (
    DayFile,
    UnitMonth,
    first_file,
    partition_units,
    read_checks,
    scan_unit_month,
    unit_dirs,
    year_month,
)
from dxt_core.publish.readers import read_series_csv, read_series_parquet
from dxt_core.publish.tree import ArchiveTree

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

#: Every published file's name inside its partition directory (M100 ExaData's).
DATA_FILE = "a_0.parquet"
#: The first partition key of every published path.
MONTH_KEY = "year_month"


def folder_keys(role: PublishRole) -> frozenset[str]:
    """The partition keys no published column may be named as (:func:`published_names`):
    ``year_month`` and the role's keys but those its files repeat (``folder_columns``)."""
    return frozenset({MONTH_KEY, *role.keys}.difference(role.folder_columns))


class PartitionedPublish:
    """Defaults of a publish role; set the class attributes below in a subclass (``backend``,
    ``keys``, ``title``, ``source`` at least). The names that follow a convention are
    properties made from ``backend`` and ``keys``: a subclass overrides one with a class
    attribute of the same name where it says otherwise."""

    backend: ClassVar[str] = ""
    keys: ClassVar[tuple[str, ...]] = ()
    folder_columns: ClassVar[tuple[str, ...]] = ()
    #: names no tag column of the archive's day files has (``exported_<tag>`` instead),
    #: besides timestamp, value and name: the backend's ``SeriesSchema.reserved``
    archive_reserved: ClassVar[tuple[str, ...]] = ()
    series_order: ClassVar[tuple[str, ...]] = ("node",)
    time_unit: ClassVar[str] = "ms"
    title: ClassVar[str] = ""
    source: ClassVar[str] = ""
    columns_note: ClassVar[str] = (
        "Metric files: `timestamp`, `value` (typed per metric, see below), `name`, then one "
        "dictionary-encoded string column per tag."
    )

    @property
    def dataset_name(self) -> str:
        """``<backend>-dataset``."""
        return f"{self.backend}-dataset"

    @property
    def description(self) -> str:
        """The title."""
        return self.title

    @property
    def layout_summary(self) -> str:
        """``one Parquet file per <key>, <key> and month``."""
        return f"one Parquet file per {', '.join(self.keys)} and month"

    @property
    def layout(self) -> tuple[str, ...]:
        """The one path pattern of :meth:`data_path`: ``year_month=YY-MM/<key>=<<key>>/...``."""
        parts = "/".join(f"{k}=<{k}>" for k in self.keys)
        return (f"{MONTH_KEY}=YY-MM/{parts}/{DATA_FILE}",)

    @property
    def example_glob(self) -> str:
        """Every metric file: ``year_month=*/<key>=*/.../a_0.parquet``."""
        parts = "/".join(f"{k}=*" for k in self.keys)
        return f"{MONTH_KEY}=*/{parts}/{DATA_FILE}"

    def units(self, tree: ArchiveTree) -> list[tuple[str, ...]]:
        return partition_units(tree, self.backend, self.keys)

    def scan(self, tree: ArchiveTree, unit: tuple[str, ...], year: int, month: int) -> UnitMonth:
        dirs = unit_dirs(self.backend, self.keys, unit)
        um = scan_unit_month(tree, dirs, unit, year, month, self.day_file)
        read_checks(tree, self.backend, um)
        return um

    def day_file(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        return first_file(manifest)

    def read_day(self, day: DayFile, path: Path) -> Iterator[Any]:
        if day.fmt == "parquet":
            return read_series_parquet(path, reserved=self.archive_reserved)
        if day.fmt == "csv":
            return read_series_csv(
                path, self.time_unit, self.title or self.backend, self.archive_reserved
            )
        raise ArchiveError(f"{path}: a {day.fmt} file, which {self.backend} does not publish")

    def data_path(self, um: UnitMonth) -> str:
        parts = "/".join(f"{k}={v}" for k, v in zip(self.keys, um.parts, strict=True))
        return f"{MONTH_KEY}={year_month(um.year, um.month)}/{parts}/{DATA_FILE}"
