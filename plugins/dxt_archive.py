"""Registers the dxt-archive plugin (archive coverage view, run notes) from the plugins folder.

Installing the package registers the same plugin through its ``airflow.plugins`` entry point;
Airflow would then refuse a second registration ("already registered"), so this file only
exposes the plugin when the installed distribution does not carry that entry point (a
``dxt_core`` on the path without the entry point, e.g. an older install or a PYTHONPATH
checkout).
"""

from __future__ import annotations

from importlib.metadata import entry_points

if not any(ep.name == "dxt_archive" for ep in entry_points(group="airflow.plugins")):
    from dxt_core.airflow.plugin import DxtArchivePlugin

    __all__ = ["DxtArchivePlugin"]
