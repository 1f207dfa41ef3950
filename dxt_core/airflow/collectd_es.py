"""Airflow side of collectd in Elasticsearch: the hook and the ``dxt_collectd_es`` task bodies.

Connection ``elasticsearch_default`` (any connection type; the ``collectd_es`` type adds
form hints): host (name or URL), port (9200), schema (http/https), login, password; extras
``index`` (``cori-collectd-*``), ``host_prefix`` (``bb``), ``verify_certs``, ``timeout``.
"""

from __future__ import annotations

import logging
from typing import Any

from dxt_core.airflow import dag_settings, runs
from dxt_core.airflow.hooks import CollectdEsHook
from dxt_core.airflow.runs import day_of
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import (
    OUTPUT_FORMATS,
    archive_collectd_es_day,
    es_pages,
)
from dxt_core.backends.collectd_es.source import (
    ExportStats,
)
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow")


def day_is_over(context: Any, settle_s: int) -> bool:
    """True once the run's UTC day has ended plus ``settle_s`` seconds."""
    return runs.day_is_over(day_of(context), "UTC", settle_s)


def archive_family_day(family: str, context: Any, conn_id: str) -> dict[str, Any]:
    """Archive one (family, day); returns a short report (pushed as XCom)."""
    s = dag_settings("collectd_es")
    formats = list(s["formats"])
    if not formats or set(formats) - set(OUTPUT_FORMATS):
        raise ConfigError(f"DXT_COLLECTD_ES_FORMATS: use jsonl and/or hdf5, not {formats}")
    archive = Archive(archive_root())
    day = day_of(context)
    stats = ExportStats()
    hook = CollectdEsHook(conn_id)
    with hook.get_conn(
        slices=s["slices"],
        page_size=s["page_size"],
    ) as source:
        conn = source.conn
        log.info("archiving %s for %s from %s into %s", family, day, conn.safe_url, archive.root)
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
    return report.as_dict()
