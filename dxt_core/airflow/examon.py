"""Task bodies of the ``dxt_examon`` DAG. Each task turns its context into one dxt_core call."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from dxt_core.airflow import dag_settings, runs
from dxt_core.airflow.runs import day_of, replace_of_context
from dxt_core.archive import Archive
from dxt_core.backends.examon.archive_day import FORMATS, archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions, load_catalog
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow")


def units(conn_id: str, max_map_length: int | None = None) -> list[dict[str, str]]:
    """The units of the ``catalog`` task: the catalog's (metric, plugin) entries."""
    return catalog_entries(max_map_length)


def catalog_entries(max_map_length: int | None = None) -> list[dict[str, str]]:
    """The catalog as the list that feeds ``expand``; checks Airflow's map length limit."""
    path = dag_settings("examon")["catalog"] or None
    entries = load_catalog(path)
    if max_map_length is not None and len(entries) > max_map_length:
        raise ConfigError(
            f"the catalog {path or '(shipped M100 catalog)'} has {len(entries)} metrics, more "
            f"than Airflow's [core] max_map_length of {max_map_length}: set "
            f"AIRFLOW__CORE__MAX_MAP_LENGTH={_round_up(len(entries))} on the scheduler, API "
            "server and workers, or split the catalog"
        )
    log.info("catalog %s: %d metrics", path or "(shipped M100 catalog)", len(entries))
    return [{"metric": e.metric, "plugin": e.plugin} for e in entries]


def _round_up(n: int) -> int:
    size = 1024
    while size < n:
        size *= 2
    return size


def examon_options() -> ExamonOptions:
    path = dag_settings("examon")["options"]
    return ExamonOptions.from_toml(path) if path else ExamonOptions()


def day_end(context: Any, conn_id: str, settle_s: int) -> dt.datetime:
    """End of the run's day in the connection's time zone, plus ``settle_s`` seconds."""
    from dxt_core.airflow.hooks import ExamonHook

    conn = ExamonHook(conn_id).connection()
    return runs.day_end(day_of(context), conn.time_zone, settle_s)


def output_format(context: Any) -> str:
    """The run's ``format`` param, else the ``format`` setting (``DXT_EXAMON_FORMAT``)."""
    params = context.get("params") or {}
    fmt = params.get("format") or dag_settings("examon")["format"]
    if fmt not in FORMATS:
        raise ConfigError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return str(fmt)


def archive_metric_day(entry: dict[str, str], context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (metric, day); returns the report (pushed as XCom) and adds the day's
    event to the plugin's asset."""
    from dxt_core.airflow.assets import emit_day_event, relative_path
    from dxt_core.airflow.hooks import ExamonHook

    catalog_entry = CatalogEntry(metric=entry["metric"], plugin=entry["plugin"])
    archive = Archive(archive_root(), replace=replace_of_context(context))
    with ExamonHook(conn_id).get_conn(options=examon_options()) as source:
        day = day_of(context)
        log.info(
            "archiving %s for %s (%s) from %s into %s",
            catalog_entry.key,
            day,
            source.conn.time_zone,
            source.conn.safe_url,
            archive.root,
        )
        fmt = output_format(context)
        report = archive_examon_day(source, catalog_entry, day, archive, fmt=fmt)
    doc = report.as_dict()
    emit_day_event(
        context,
        "examon",
        entry["plugin"],
        f"{entry['plugin']}/{entry['metric']}",
        doc,
        relative_path(report.path, archive.root),
    )
    return doc


def reconcile_recent_days(context: Any, conn_id: str) -> dict[str, Any]:
    """Issue 19: reconcile the days before the run's day against KairosDB's counts (counts
    only) and refetch those that grew (late data). ``DXT_EXAMON_RECONCILE_DAYS`` days,
    default 3, 0 turns it off. Returns the report (XCom) with a one-line ``note``."""
    import os

    from dxt_core.airflow.hooks import ExamonHook
    from dxt_core.backends.examon.archive_day import reconcile_examon_recent
    from dxt_core.reconcile import reconcile_days

    n_days = reconcile_days(os.environ, "examon")
    archive = Archive(archive_root())
    entries = load_catalog(dag_settings("examon")["catalog"] or None)
    with ExamonHook(conn_id).get_conn(options=examon_options()) as source:
        report = reconcile_examon_recent(
            source, entries, day_of(context), archive, n_days, fmt=output_format(context)
        )
    log.info("%s", report.note())
    return report.as_dict()
