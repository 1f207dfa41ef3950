"""Airflow hook and task bodies of the ``dxt_kwollect`` DAG (thin adapters over dxt_core)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from dxt_core.airflow import runs
from dxt_core.airflow.hooks import KwollectHook
from dxt_core.airflow.runs import day_of, replace_of_context
from dxt_core.archive import Archive
from dxt_core.backends.kwollect.connection import (
    load_archive_config,
)
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow")


def units(conn_id: str, max_map_length: int | None = None) -> list[dict[str, Any]]:
    """The (site, metric) units that feed ``expand``, clusters resolved to nodes."""
    config = load_archive_config()
    with KwollectHook(conn_id).get_conn() as client:
        found = config.units(client)
    if max_map_length is not None and len(found) > max_map_length:
        raise ConfigError(
            f"{len(found)} (site, metric) units exceed Airflow's [core] max_map_length "
            f"({max_map_length}); raise AIRFLOW__CORE__MAX_MAP_LENGTH or archive fewer metrics"
        )
    log.info("%d (site, metric) units from %s", len(found), config.source)
    return found


def day_end(context: Any, settle_s: int) -> dt.datetime:
    """End of the run's day in the configured time zone, plus ``settle_s`` seconds."""
    return runs.day_end(day_of(context), load_archive_config().time_zone, settle_s)


def archive_unit_day(unit: dict[str, Any], context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (site, metric, day); returns the report (pushed as XCom) and adds the
    day's event to the site's asset."""
    from dxt_core.airflow.assets import emit_day_event, relative_path
    from dxt_core.backends.kwollect.archive_day import archive_kwollect_day

    config = load_archive_config()
    day = day_of(context)
    archive = Archive(archive_root(), replace=replace_of_context(context))
    with KwollectHook(conn_id).get_conn() as client:
        log.info(
            "archiving %s/%s for %s (%s) from %s into %s",
            unit["site"],
            unit["metric"],
            day,
            config.time_zone,
            client.safe_url,
            archive.url,
        )
        report = archive_kwollect_day(
            client, unit["site"], unit["metric"], unit["nodes"], day, archive, config.time_zone
        )
    doc = report.as_dict()
    emit_day_event(
        context,
        "kwollect",
        unit["site"],
        f"{unit['site']}/{unit['metric']}",
        doc,
        relative_path(report.path, archive.root),
    )
    return doc
