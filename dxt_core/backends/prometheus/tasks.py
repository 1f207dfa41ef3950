"""The ``dxt_prometheus`` DAG without Airflow: one unit per catalog entry (a metric name or
``NAME = SELECTOR``), or per metric name the server lists when no catalog is set; days in the
connection's ``time_zone``; gzip CSV or Parquet by the run's ``format`` Param."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dxt_core.backends.roles import (
    SourceSeriesTasks,
    Unit,
    check_map_length,
    log,
)
from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    from dxt_core.archive import Archive
    from dxt_core.archive_day import DayReport
    from dxt_core.backends.prometheus.catalog import CatalogEntry
    from dxt_core.backends.prometheus.connection import PrometheusConnection
    from dxt_core.backends.prometheus.source import PrometheusSource
    from dxt_core.reconcile import Recount


#: The DAG's documentation (its Docs tab), whatever file builds it (``dxt dags write``).
DAG_DOC = """\
dxt_prometheus: archive the raw stored samples of Prometheus or VictoriaMetrics, one task
per (metric, day).

The run of logical date D archives day D (midnight to midnight in the connection's
``time_zone``, Europe/Rome by default) into
``$DXT_ARCHIVE_ROOT/prometheus/<metric>/<D>.csv.gz`` (or ``.parquet``) with a manifest beside
it, checked against the server's own ``count_over_time``. The units are
``DXT_PROMETHEUS_METRICS`` or the catalog file ``DXT_PROMETHEUS_CATALOG`` (one metric name or
``NAME = SELECTOR`` a line), else every metric name the server lists; the server comes from
the connection ``prometheus_default`` (flavor detected, or named by its ``flavor`` extra).

* Backfill: ``airflow backfill create --dag-id dxt_prometheus --from-date D1 --to-date D2``.
* Retry one failed (metric, day): clear its task instance, or refill it from the
  "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param; ``format`` chooses CSV or Parquet.
* Each (metric, day) adds an event to the asset ``dxt-archive/prometheus/<metric>``.
"""


class PrometheusTasks(SourceSeriesTasks["PrometheusConnection", "PrometheusSource"]):
    backend = "prometheus"
    dag_doc = DAG_DOC
    group = "metric"
    units_task_id = "units"
    map_index_template = "{{ task.op_kwargs['unit']['metric'] }}"
    tags = ("prometheus", "victoriametrics")
    counts = True  # count_over_time over the exact day, in every manifest

    def entries(self) -> list[CatalogEntry]:
        """The units the settings name: ``DXT_PROMETHEUS_METRICS`` (wins), else the catalog
        file ``DXT_PROMETHEUS_CATALOG``; none when neither is set (the server lists them)."""
        from dxt_core.backends import get
        from dxt_core.backends.prometheus.catalog import from_names, load_catalog

        s = self.settings()
        if str(s["metrics"]).strip():
            return from_names(str(s["metrics"]), get(self.backend).setting("metrics").env)
        if str(s["catalog"]).strip():
            return load_catalog(str(s["catalog"]))
        return []

    def configured_units(self) -> list[Unit]:
        return [{"metric": e.name, "selector": e.selector} for e in self.entries()]

    def units(
        self, connect: Callable[[], PrometheusConnection], max_map_length: int | None
    ) -> list[Unit]:
        """The catalog's units; without one, every metric name the server lists (a catalog
        metric the server does not know fails here, naming the closest names)."""
        found = self.configured_units()
        with self.open_source(connect()) as source:
            if found:
                for u in found:
                    if u["metric"] == u["selector"]:
                        source.check_known(u["selector"])
                what = "catalog units"
            else:
                names = source.metric_names()
                if not names:
                    raise ConfigError(
                        f"{source.conn.safe_url} lists no metric names: set "
                        "DXT_PROMETHEUS_METRICS or DXT_PROMETHEUS_CATALOG"
                    )
                from dxt_core.backends.prometheus.catalog import left_out_note, listed_entries

                entries, left_out = listed_entries(names)
                if left_out:
                    log.warning("%s", left_out_note(left_out, source.conn.safe_url))
                if not entries:
                    raise ConfigError(
                        f"no metric name listed by {source.conn.safe_url} can name a folder"
                    )
                found = [{"metric": e.name, "selector": e.selector} for e in entries]
                what = f"metric names listed by {source.conn.safe_url}"
        check_map_length(len(found), max_map_length, what)
        log.info("%d %s", len(found), what)
        return found

    def unit_name(self, unit: Unit) -> str:
        return str(unit["metric"])

    def asset_group(self, unit: Unit) -> str:
        return str(unit["metric"])

    def configured_parts(self) -> list[tuple[str, ...]]:
        return [(e.name,) for e in self.entries()]

    def open_source(self, conn: PrometheusConnection) -> PrometheusSource:
        from dxt_core.backends.prometheus.source import PrometheusSource

        return PrometheusSource(conn)

    def archive_day(
        self, source: PrometheusSource, unit: Unit, day: dt.date, archive: Archive, fmt: str
    ) -> DayReport:
        from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
        from dxt_core.backends.prometheus.catalog import CatalogEntry

        e = CatalogEntry(str(unit["metric"]), str(unit.get("selector") or unit["metric"]))
        return archive_prometheus_day(source, e, day, archive, fmt=fmt)

    @contextmanager
    def recount(
        self, archive: Archive, conn: PrometheusConnection, params: Mapping[str, Any]
    ) -> Iterator[Recount]:
        """``count_over_time`` of the past days of the units the settings name (else of
        those the archive holds), each over the selector and zone its manifest records; a
        grown day is fetched again in the format it was archived in."""
        from dxt_core.backends.prometheus.archive_day import (
            archived_units,
            prometheus_parts,
            prometheus_recount,
        )

        units = [prometheus_parts(e) for e in self.entries()] or archived_units(archive)
        with self.open_source(conn) as source:
            yield prometheus_recount(source, units, archive, self.output_format(params))

    preload_modules = (".archive_day", ".source")


TASKS = PrometheusTasks()
