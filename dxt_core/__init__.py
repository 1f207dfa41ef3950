"""dxt_core: the library behind dxt-archive. It never imports Airflow.

Data flows one way: catalog -> time windows -> source -> record stream -> writer ->
atomic commit into the archive with a manifest.

The names below are the generic ones; each backend's own names (its connection, source,
catalog, day archiver) live in its package, ``dxt_core.backends.<name>``, and are imported
from there.
"""

from typing import TYPE_CHECKING, Any

from dxt_core._version import __version__

# Public names, imported on first use: `import dxt_core` (and the `dxt` command) pays only
# for what it touches.
_LAZY = {
    "Archive": "dxt_core.archive",
    "DayKey": "dxt_core.archive",
    "CoverageRow": "dxt_core.coverage",
    "DayReport": "dxt_core.archive_day",
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
    from dxt_core.archive import Archive, DayKey
    from dxt_core.archive_day import DayReport
    from dxt_core.coverage import CoverageRow
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
    "CatalogError",
    "ConfigError",
    "CoverageRow",
    "DayKey",
    "DayReport",
    "DxtError",
    "QueryRejected",
    "RetryPolicy",
    "SourceError",
    "SourceUnavailable",
    "Window",
    "WindowTooLarge",
    "__version__",
    "day_window",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dxt_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
