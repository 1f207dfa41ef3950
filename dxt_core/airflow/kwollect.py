"""Airflow hook and task bodies of the ``dxt_kwollect`` DAG (thin adapters over dxt_core)."""

from __future__ import annotations

import logging
from typing import Any

from dxt_core.airflow import runs
from dxt_core.airflow.hooks import KwollectHook
from dxt_core.airflow.runs import day_of
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


def day_is_over(context: Any, settle_s: int) -> bool:
    """True once the run's day (in the configured zone) is over plus ``settle_s`` seconds."""
    return runs.day_is_over(day_of(context), load_archive_config().time_zone, settle_s)


def archive_unit_day(unit: dict[str, Any], context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (site, metric, day); returns the report (pushed as XCom)."""
    from dxt_core.backends.kwollect.archive_day import archive_kwollect_day

    config = load_archive_config()
    day = day_of(context)
    archive = Archive(archive_root())
    with KwollectHook(conn_id).get_conn() as client:
        log.info(
            "archiving %s/%s for %s (%s) from %s into %s",
            unit["site"],
            unit["metric"],
            day,
            config.time_zone,
            client.safe_url,
            archive.root,
        )
        report = archive_kwollect_day(
            client, unit["site"], unit["metric"], unit["nodes"], day, archive, config.time_zone
        )
    return report.as_dict()
