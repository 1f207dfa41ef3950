"""Airflow side of collectd in Elasticsearch: the hook and the ``dxt_collectd_es`` task bodies.

Connection ``elasticsearch_default`` (any connection type; the ``collectd_es`` type adds
form hints): host (name or URL), port (9200), schema (http/https), login, password; extras
``index`` (``cori-collectd-*``), ``host_prefix`` (``bb``), ``verify_certs``, ``timeout``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from dxt_core.airflow import dag_settings, runs
from dxt_core.airflow.assets import emit_day_event, relative_path
from dxt_core.airflow.hooks import CollectdEsHook
from dxt_core.airflow.runs import day_of, replace_of_context
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import (
    OUTPUT_FORMATS,
    SOURCE_NAME,
    archive_collectd_es_day,
    es_pages,
)
from dxt_core.backends.collectd_es.source import (
    ExportStats,
)
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow")


def day_end(context: Any, settle_s: int) -> dt.datetime:
    """End of the run's UTC day, plus ``settle_s`` seconds."""
    return runs.day_end(day_of(context), "UTC", settle_s)


def output_formats(context: Any) -> list[str]:
    """The run's ``formats`` param, else the ``formats`` setting (``DXT_COLLECTD_ES_FORMATS``)."""
    params = context.get("params") or {}
    chosen = params.get("formats")
    if chosen:
        formats = [str(f).strip() for f in chosen] if isinstance(chosen, list) else [str(chosen)]
        where = "the 'formats' param"
    else:
        formats = [str(f).strip() for f in dag_settings("collectd_es")["formats"]]
        where = "DXT_COLLECTD_ES_FORMATS"
    formats = [f for f in formats if f]
    if not formats or set(formats) - set(OUTPUT_FORMATS):
        raise ConfigError(f"{where}: use jsonl and/or hdf5, not {formats}")
    return formats


def archive_family_day(family: str, context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (family, day); returns a short report (pushed as XCom) and adds the
    day's event to the family's asset."""
    s = dag_settings("collectd_es")
    formats = output_formats(context)
    archive = Archive(archive_root(), replace=replace_of_context(context))
    day = day_of(context)
    stats = ExportStats()
    hook = CollectdEsHook(conn_id)
    with hook.get_conn(
        slices=s["slices"],
        page_size=s["page_size"],
    ) as source:
        conn = source.conn
        log.info("archiving %s for %s from %s into %s", family, day, conn.safe_url, archive.url)
        report = archive_collectd_es_day(
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
            timestep=s["timestep"],
            num_nodes=s["num_nodes"],
            ssds_per_node=s["ssds_per_node"],
        )
    doc = report.as_dict()
    emit_day_event(
        context, SOURCE_NAME, family, family, doc, relative_path(report.path, archive.root)
    )
    return doc
