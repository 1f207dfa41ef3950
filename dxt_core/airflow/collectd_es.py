"""Airflow side of collectd in Elasticsearch: the hook and the ``dxt_collectd_es`` task bodies.

Connection ``elasticsearch_default`` (any connection type; the ``collectd_es`` type adds
form hints): host (name or URL), port (9200), schema (http/https), login, password; extras
``index`` (``cori-collectd-*``), ``host_prefix`` (``bb``), ``verify_certs``, ``timeout``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

from airflow.sdk import BaseHook

from dxt_core.airflow.assets import emit_day_event
from dxt_core.airflow.runs import day_of_context
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import (
    OUTPUT_FORMATS,
    SOURCE_NAME,
    archive_collectd_es_day,
    day_window_utc,
    es_pages,
)
from dxt_core.backends.collectd_es.source import (
    CollectdEsConnection,
    CollectdEsSource,
    ExportStats,
    connection_from_fields,
)
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow")


class CollectdEsHook(BaseHook):
    """Elasticsearch holding collectd documents, from an Airflow connection."""

    conn_name_attr = "elasticsearch_conn_id"
    default_conn_name = "elasticsearch_default"
    conn_type = "collectd_es"
    hook_name = "collectd in Elasticsearch (dxt-archive)"

    def __init__(self, elasticsearch_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.elasticsearch_conn_id = elasticsearch_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Scheme (http or https)"},
            "placeholders": {
                "host": "es.example.org",
                "port": "9200",
                "schema": "https",
                "extra": '{"index": "cori-collectd-*", "host_prefix": "bb", '
                '"verify_certs": true, "timeout": 60}',
            },
        }

    def connection(self) -> CollectdEsConnection:
        c = self.get_connection(self.elasticsearch_conn_id)
        return connection_from_fields(
            conn_id=self.elasticsearch_conn_id,
            host=c.host,
            port=c.port,
            schema=c.schema,
            login=c.login,
            password=c.password,
            extra=c.extra_dejson,
        )

    def get_conn(self, **kwargs: Any) -> CollectdEsSource:
        return CollectdEsSource(self.connection(), **kwargs)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc


def day_of(context: Any) -> dt.date:
    """The archive day of a run: its ``day`` param, else its logical date (see ``runs``)."""
    return day_of_context(context, "dxt_collectd_es")


def day_end(context: Any, settle_s: int) -> dt.datetime:
    """End of the run's UTC day, plus ``settle_s`` seconds."""
    return day_window_utc(day_of(context))[1] + dt.timedelta(seconds=settle_s)


def output_formats(context: Any) -> list[str]:
    """The run's ``formats`` param, else ``DXT_COLLECTD_ES_FORMATS`` (jsonl,hdf5)."""
    params = context.get("params") or {}
    chosen = params.get("formats")
    if chosen:
        formats = [str(f).strip() for f in chosen] if isinstance(chosen, list) else [str(chosen)]
        where = "the 'formats' param"
    else:
        raw = os.environ.get("DXT_COLLECTD_ES_FORMATS", "jsonl,hdf5")
        formats = [f.strip() for f in raw.split(",")]
        where = "DXT_COLLECTD_ES_FORMATS"
    formats = [f for f in formats if f]
    if not formats or set(formats) - set(OUTPUT_FORMATS):
        raise ConfigError(f"{where}: use jsonl and/or hdf5, not {formats}")
    return formats


def archive_family_day(family: str, context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (family, day); returns a short report (pushed as XCom)."""
    formats = output_formats(context)
    archive = Archive(archive_root())
    day = day_of(context)
    stats = ExportStats()
    hook = CollectdEsHook(conn_id)
    with hook.get_conn(
        slices=_env_int("DXT_COLLECTD_ES_SLICES", 2),
        page_size=_env_int("DXT_COLLECTD_ES_PAGE_SIZE", 5000),
    ) as source:
        conn = source.conn
        log.info("archiving %s for %s from %s into %s", family, day, conn.safe_url, archive.root)
        doc = archive_collectd_es_day(
            es_pages(source, stats),
            family,
            day,
            archive,
            formats=formats,
            source_info={
                "source_url": conn.safe_url,
                "index": conn.index,
                "host_prefix": conn.host_prefix,
            },
            stats=stats,
            timestep=_env_int("DXT_COLLECTD_ES_TIMESTEP", 10),
            num_nodes=_env_int("DXT_COLLECTD_ES_NUM_NODES", 288),
            ssds_per_node=_env_int("DXT_COLLECTD_ES_SSDS_PER_NODE", 4),
        )
    files = doc.get("files", [])
    report = {
        "family": family,
        "day": day.isoformat(),
        "status": doc["status"],
        "rows": doc["rows"],
        "files": [f["file"] for f in files],
    }
    main = f"{SOURCE_NAME}/{family}/{files[0]['file']}" if files else None
    emit_day_event(
        context,
        SOURCE_NAME,
        family,
        family,
        {**report, "bytes": sum(int(f.get("bytes") or 0) for f in files)},
        main,
    )
    return report
