"""dxt_core: the library behind dxt-archive. It never imports Airflow.

Data flows one way: catalog -> time windows -> source -> record stream -> writer ->
atomic commit into the archive with a manifest.
"""

from dxt_core._version import __version__
from dxt_core.archive import Archive, CoverageRow, DayKey, coverage
from dxt_core.archive_day import DayReport
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import (
    CatalogEntry,
    ExamonOptions,
    PluginOptions,
    load_catalog,
)
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.errors import (
    ArchiveError,
    CatalogError,
    ConfigError,
    DxtError,
    QueryRejected,
    SourceError,
    SourceUnavailable,
    WindowTooLarge,
)
from dxt_core.http import RetryPolicy
from dxt_core.windows import Window, day_window

__all__ = [
    "Archive",
    "ArchiveError",
    "CatalogEntry",
    "CatalogError",
    "ConfigError",
    "CoverageRow",
    "DayKey",
    "DayReport",
    "DxtError",
    "ExamonConnection",
    "ExamonOptions",
    "KairosDBSource",
    "Kwollect",
    "PluginOptions",
    "QueryRejected",
    "RetryPolicy",
    "SourceError",
    "SourceUnavailable",
    "Window",
    "WindowPolicy",
    "WindowTooLarge",
    "__version__",
    "archive_examon_day",
    "coverage",
    "day_window",
    "load_catalog",
]


def __getattr__(name: str) -> object:
    # Kwollect is imported on first use: DAG files and the Examon path do not pay for it.
    if name == "Kwollect":
        from dxt_core.backends.kwollect.archive_day import Kwollect

        return Kwollect
    raise AttributeError(f"module 'dxt_core' has no attribute {name!r}")
