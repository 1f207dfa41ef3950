"""The ``dxt_examon`` DAG without Airflow: one unit per catalog (metric, plugin), days in the
connection's ``time_zone``, gzip CSV or Parquet by the run's ``format`` Param."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dxt_core.backends.roles import (
    SourceSeriesTasks,
    Unit,
    log,
    round_up_pow2,
)
from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    from dxt_core.archive import Archive
    from dxt_core.archive_day import DayReport
    from dxt_core.backends.examon.catalog import ExamonOptions
    from dxt_core.backends.examon.connection import ExamonConnection
    from dxt_core.backends.examon.source import KairosDBSource
    from dxt_core.reconcile import Recount


#: The DAG's documentation (its Docs tab), whatever file builds it (``dxt dags write``).
DAG_DOC = """dxt_examon: archive Examon (KairosDB) telemetry, one task per (metric, day).

The run of logical date D archives day D (midnight to midnight in the connection's
``time_zone``, Europe/Rome by default) of every catalog metric into
``$DXT_ARCHIVE_ROOT/examon/<plugin>/<metric>/<D>.csv.gz`` with a manifest beside it.

* Backfill: ``airflow backfill create --dag-id dxt_examon --from-date D1 --to-date D2``
  (add ``--reprocess-behavior failed`` to redo failed days).
* Retry one failed metric-day: clear its task instance (UI, or ``airflow tasks clear``), or
  refill it from the "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` holds a run until its local day is over (plus a settle delay),
  deferred to the triggerer.
* Each metric-day adds an event to the asset ``dxt-archive/examon/<plugin>``.
* ``reconcile_recent_days`` asks KairosDB for the counts of the previous
  ``DXT_EXAMON_RECONCILE_DAYS`` days (default 3; 0: off) and refetches the days that grew
  (late data); the old file is kept in ``.versions/``; the run's note says what it found.

Parse-time work is a few imports: the catalog is read by the ``catalog`` task.
"""


class ExamonTasks(SourceSeriesTasks["ExamonConnection", "KairosDBSource"]):
    backend = "examon"
    dag_doc = DAG_DOC
    group = "plugin"
    units_task_id = "catalog"
    map_index_template = (
        "{{ task.op_kwargs['unit']['plugin'] }}/{{ task.op_kwargs['unit']['metric'] }}"
    )
    tags = ("examon",)
    counts = True  # KairosDB's count aggregator over the day

    format_description = (
        "gzip CSV (dxt_examon's layout) or Parquet (Hive partitions): the archive's format "
        "(DXT_EXAMON_FORMAT); another is refused, the coverage view reading one layout"
    )

    def configured_units(self) -> list[Unit]:
        return self.catalog_entries()

    def units(
        self, connect: Callable[[], ExamonConnection], max_map_length: int | None
    ) -> list[Unit]:
        """The catalog task: its units, and a warning of plugin options no unit uses."""
        from dxt_core.backends.examon.catalog import CatalogEntry

        found = self.catalog_entries(max_map_length)
        entries = [CatalogEntry(str(u["metric"]), str(u["plugin"])) for u in found]
        unused = self.options().unused_plugins(entries)
        if unused:
            log.warning("%s", unused)
        return found

    def catalog_entries(self, max_map_length: int | None = None) -> list[Unit]:
        """The catalog as the list that feeds ``expand``; checks Airflow's map length limit."""
        from dxt_core.backends.examon.catalog import load_catalog

        path = self.settings()["catalog"] or None
        entries = load_catalog(path)
        if max_map_length is not None and len(entries) > max_map_length:
            raise ConfigError(
                f"the catalog {path or '(shipped M100 catalog)'} has {len(entries)} metrics, "
                f"more than Airflow's [core] max_map_length of {max_map_length}: set "
                f"AIRFLOW__CORE__MAX_MAP_LENGTH={round_up_pow2(len(entries))} on the "
                "scheduler, API server and workers, or split the catalog"
            )
        log.info("catalog %s: %d metrics", path or "(shipped M100 catalog)", len(entries))
        return [{"metric": e.metric, "plugin": e.plugin} for e in entries]

    def unit_name(self, unit: Unit) -> str:
        return f"{unit['plugin']}/{unit['metric']}"

    def asset_group(self, unit: Unit) -> str:
        return str(unit["plugin"])

    def configured_parts(self) -> list[tuple[str, ...]]:
        from dxt_core.backends.examon.archive_day import examon_parts
        from dxt_core.backends.examon.catalog import load_catalog

        s = self.settings()
        return [examon_parts(e, str(s["format"])) for e in load_catalog(s["catalog"] or None)]

    def options(self) -> ExamonOptions:
        from dxt_core.backends.examon.catalog import ExamonOptions

        path = self.settings()["options"]
        return ExamonOptions.from_toml(path) if path else ExamonOptions()

    def open_source(self, conn: ExamonConnection) -> KairosDBSource:
        from dxt_core.backends.examon.source import KairosDBSource

        return KairosDBSource(conn, options=self.options())

    def archive_day(
        self, source: KairosDBSource, unit: Unit, day: dt.date, archive: Archive, fmt: str
    ) -> DayReport:
        from dxt_core.backends.examon.archive_day import archive_examon_day
        from dxt_core.backends.examon.catalog import CatalogEntry

        entry = CatalogEntry(metric=unit["metric"], plugin=unit["plugin"])
        return archive_examon_day(source, entry, day, archive, fmt=fmt)

    @contextmanager
    def recount(
        self, archive: Archive, conn: ExamonConnection, params: Mapping[str, Any]
    ) -> Iterator[Recount]:
        from dxt_core.backends.examon.archive_day import examon_recount
        from dxt_core.backends.examon.catalog import load_catalog

        entries = load_catalog(self.settings()["catalog"] or None)
        with self.open_source(conn) as source:
            yield examon_recount(source, entries, archive, self.output_format(params))

    preload_modules = (".archive_day", ".source")


TASKS = ExamonTasks()
