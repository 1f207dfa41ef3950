"""Airflow hook and task bodies of the ``dxt_kwollect`` DAG (thin adapters over dxt_core)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import BaseHook

from dxt_core.airflow.runs import day_of_context
from dxt_core.archive import Archive
from dxt_core.backends.kwollect.connection import (
    KwollectConnection,
    kwollect_connection_from_fields,
    load_archive_config,
)
from dxt_core.backends.kwollect.source import KwollectClient
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError
from dxt_core.windows import day_window

log = logging.getLogger("dxt_core.airflow")


class KwollectHook(BaseHook):
    """The Grid'5000 API (reference + Kwollect metrics) from an Airflow connection.

    Host (a name or a full URL such as ``https://api.grid5000.fr/stable``), port, schema
    (http/https, or the path), login/password for HTTP Basic; extras ``api_url``, ``timeout``,
    ``verify_tls``, ``max_points``, ``max_nodes``.
    """

    conn_name_attr = "kwollect_conn_id"
    default_conn_name = "kwollect_default"
    conn_type = "kwollect"
    hook_name = "Kwollect (Grid'5000)"

    def __init__(self, kwollect_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kwollect_conn_id = kwollect_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"host": "API URL or host", "login": "Grid'5000 login"},
            "placeholders": {
                "host": "https://api.grid5000.fr/stable",
                "extra": '{"timeout": 330, "max_points": 25000}',
            },
        }

    def connection(self) -> KwollectConnection:
        c = self.get_connection(self.kwollect_conn_id)
        return kwollect_connection_from_fields(
            conn_id=self.kwollect_conn_id,
            host=c.host,
            port=c.port,
            schema=c.schema,
            login=c.login,
            password=c.password,
            extra=c.extra_dejson,
        )

    def get_conn(self) -> KwollectClient:
        return self.connection().client()


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


def day_of(context: Any) -> dt.date:
    """The archive day of a run: its ``day`` param, else its logical date (see ``runs``)."""
    return day_of_context(context, "dxt_kwollect")


def day_end(context: Any, settle_s: int) -> dt.datetime:
    """End of the run's day in the configured time zone, plus ``settle_s`` seconds."""
    config = load_archive_config()
    return day_window(day_of(context), config.time_zone).end + dt.timedelta(seconds=settle_s)


def archive_unit_day(unit: dict[str, Any], context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (site, metric, day); returns the report (pushed as XCom) and adds the
    day's event to the site's asset."""
    from dxt_core.airflow.assets import emit_day_event, relative_path
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
