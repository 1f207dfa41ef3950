"""The ``dxt_collectd_es`` DAG without Airflow: one unit per family (known at parse time),
UTC days, gzip JSON Lines and/or TOKIO HDF5 by the run's ``formats`` Param."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dxt_core.backends.roles import BackendTasks, Unit, log_archiving
from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    from dxt_core.archive import Archive
    from dxt_core.archive_day import DayReport
    from dxt_core.backends.collectd_es.connection import CollectdEsConnection
    from dxt_core.reconcile import Recount

#: The output formats, in the order an export writes them: the one list that the ``formats``
#: setting and Param, ``dxt extract collectd-es --format`` and the export itself
#: (:mod:`~dxt_core.backends.collectd_es.archive_day`) check against. Here, not in the export
#: module (which imports the HDF5 writer), because the DAG's parse reads it.
OUTPUT_FORMATS: tuple[str, ...] = ("jsonl", "hdf5")
ENV_FORMATS = "DXT_COLLECTD_ES_FORMATS"
ENV_FAMILIES = "DXT_COLLECTD_ES_FAMILIES"
#: How a list setting gives several values, said in its errors.
_COMMA_SEPARATED = " (comma-separated)"


def _known(
    values: Iterable[Any], known: tuple[str, ...], where: str, hint: str = _COMMA_SEPARATED
) -> list[str]:
    """``values`` without blank ones, when there is one at least and each is one of
    ``known``; else an error naming ``where`` they came from (by default a list setting's
    variable: ``hint`` says how it lists several), the unknown values and the choices."""
    given = [v for v in (str(v).strip() for v in values) if v]
    unknown = [v for v in given if v not in known]
    if unknown or not given:
        problem = f"unknown {', '.join(map(repr, unknown))}" if unknown else "none given"
        raise ConfigError(
            f"{where}={','.join(given)!r}: {problem}; choose from {', '.join(known)}{hint}"
        )
    return given


def check_formats(values: Iterable[Any], where: str) -> list[str]:
    """``values``, in their order, when each is one of :data:`OUTPUT_FORMATS` (one at least);
    else an error naming ``where`` they came from, the unknown ones and the formats."""
    return _known(values, OUTPUT_FORMATS, where, hint="")


#: The DAG's documentation (its Docs tab), whatever file builds it (``dxt dags write``).
DAG_DOC = """\
dxt_collectd_es: archive collectd-in-Elasticsearch telemetry, one task per (family, day).

The run of logical date D archives the UTC day D of each family (disk, cpu, memory) into
``$DXT_ARCHIVE_ROOT/collectd_es/<family>/<D>.jsonl.gz`` (raw hits) and ``<D>.hdf5``
(TOKIO Time Series, pytokio's layout) with a manifest beside them. Connection
``elasticsearch_default``; see docs/collectd_es.md.

* Backfill: ``airflow backfill create --dag-id dxt_collectd_es --from-date D1 --to-date D2``.
* Reruns rewrite the day from scratch (same result over unchanged data).
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (family, day) adds an event to the asset ``dxt-archive/collectd_es/<family>``.
* ``reconcile_recent_days`` asks ``_count`` for the previous ``DXT_COLLECTD_ES_RECONCILE_DAYS``
  days (default 3; 0: off) and exports again the days that grew; the old files are kept in
  ``.versions/``; the run's note says what it found.
"""


class CollectdEsTasks(BackendTasks["CollectdEsConnection"]):
    backend = "collectd_es"
    dag_doc = DAG_DOC
    group = "family"
    units_task_id = None  # the families are settings: mapped at parse time
    map_index_template = "{{ task.op_kwargs['unit'] }}"
    pooled = False
    tags = ("collectd", "elasticsearch")
    counts = True  # _count with the export's query

    def params(self) -> dict[str, dict[str, Any]]:
        return {
            "formats": {
                "default": self._formats_setting(),
                "type": "array",
                "items": {"type": "string", "enum": list(OUTPUT_FORMATS)},
                "title": "Output formats",
                "description": "raw hits as gzip JSON Lines and/or TOKIO Time Series HDF5",
            }
        }

    def configured_units(self) -> list[Unit]:
        from dxt_core.backends.collectd_es.query import FAMILIES

        return _known(self.settings()["families"], FAMILIES, ENV_FAMILIES)

    def unit_name(self, unit: Unit) -> str:
        return str(unit)

    def asset_group(self, unit: Unit) -> str:
        return str(unit)

    def configured_parts(self) -> list[tuple[str, ...]]:
        return [(str(f),) for f in self.configured_units()]

    def _formats_setting(self) -> list[str]:
        return _known(self.settings()["formats"], OUTPUT_FORMATS, ENV_FORMATS)

    def output_formats(self, params: Mapping[str, Any]) -> list[str]:
        """The run's ``formats`` param, else the ``formats`` setting
        (``DXT_COLLECTD_ES_FORMATS``)."""
        chosen = params.get("formats")
        if chosen:
            values = chosen if isinstance(chosen, list) else [chosen]
            return check_formats(values, "the run's 'formats' param")
        return self._formats_setting()

    def archive(
        self,
        unit: Unit,
        day: dt.date,
        archive: Archive,
        conn: CollectdEsConnection,
        params: Mapping[str, Any],
    ) -> DayReport:
        from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
        from dxt_core.backends.collectd_es.source import CollectdEsSource, ExportStats

        s = self.settings()
        family = str(unit)
        formats = self.output_formats(params)
        stats = ExportStats()
        with CollectdEsSource(conn, slices=s["slices"], page_size=s["page_size"]) as source:
            log_archiving(family, day, None, conn.safe_url, archive.url)
            return archive_collectd_es_day(
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

    @contextmanager
    def recount(
        self, archive: Archive, conn: CollectdEsConnection, params: Mapping[str, Any]
    ) -> Iterator[Recount]:
        """``_count`` of each family's past UTC days (the export's query, ``_shards``
        checked); a grown day is exported again in the run's formats."""
        from dxt_core.backends.collectd_es.archive_day import day_window_utc
        from dxt_core.backends.collectd_es.source import CollectdEsSource
        from dxt_core.reconcile import Recount, SourceCount

        def fetch_again(p: tuple[str, ...], d: dt.date) -> DayReport:
            return self.archive(p[0], d, archive, conn, params)

        parts = [(str(f),) for f in self.configured_units()]
        with CollectdEsSource(conn) as source:

            def count(p: tuple[str, ...], d: dt.date) -> SourceCount:
                start, end = day_window_utc(d)
                return source.count(p[0], start, end)

            yield Recount(archive, "collectd_es", parts, count, fetch_again)


TASKS = CollectdEsTasks()
