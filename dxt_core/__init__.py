"""dxt_core: the library behind dxt-archive. It never imports Airflow.

Data flows one way: catalog -> time windows -> source -> record stream -> writer ->
atomic commit into the archive with a manifest.
"""

from typing import TYPE_CHECKING, Any

from dxt_core._version import __version__

# Public names, imported on first use: `import dxt_core` (and the `dxt` command) pays only
# for what it touches; `dxt extract examon` never loads the Elasticsearch client.
_LAZY = {
    "Archive": "dxt_core.archive",
    "CoverageRow": "dxt_core.archive",
    "DayKey": "dxt_core.archive",
    "coverage": "dxt_core.archive",
    "DayReport": "dxt_core.archive_day",
    "archive_examon_day": "dxt_core.backends.examon.archive_day",
    "CatalogEntry": "dxt_core.backends.examon.catalog",
    "ExamonOptions": "dxt_core.backends.examon.catalog",
    "PluginOptions": "dxt_core.backends.examon.catalog",
    "load_catalog": "dxt_core.backends.examon.catalog",
    "ExamonConnection": "dxt_core.backends.examon.connection",
    "KairosDBSource": "dxt_core.backends.examon.source",
    "WindowPolicy": "dxt_core.backends.examon.source",
    "Kwollect": "dxt_core.backends.kwollect.experiment",
    "ArchiveError": "dxt_core.errors",
    "CatalogError": "dxt_core.errors",
    "ConfigError": "dxt_core.errors",
    "DxtError": "dxt_core.errors",
    "QueryRejected": "dxt_core.errors",
    "SourceError": "dxt_core.errors",
    "SourceUnavailable": "dxt_core.errors",
    "WindowTooLarge": "dxt_core.errors",
    "RetryPolicy": "dxt_core.http",
    "Window": "dxt_core.windows",
    "day_window": "dxt_core.windows",
}

if TYPE_CHECKING:
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
    from dxt_core.backends.kwollect.experiment import Kwollect
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dxt_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
