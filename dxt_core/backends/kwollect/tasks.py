"""The ``dxt_kwollect`` DAG without Airflow: one unit per (site, metric) with the site's nodes
(clusters resolved through the API), days in ``DXT_KWOLLECT_TIME_ZONE``, gzip JSON Lines."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dxt_core import masking
from dxt_core.backends.roles import BackendTasks, Unit, check_map_length, log_archiving

if TYPE_CHECKING:
    from dxt_core.archive import Archive
    from dxt_core.archive_day import DayReport
    from dxt_core.backends.kwollect.connection import KwollectConnection
    from dxt_core.reconcile import Recount

log = masking.logger("dxt_core.airflow")


#: The DAG's documentation (its Docs tab), whatever file builds it (``dxt dags write``).
DAG_DOC = """dxt_kwollect: archive Grid'5000 Kwollect metrics, one task per (site, metric) and day.

The run of logical date D archives day D (midnight to midnight in ``DXT_KWOLLECT_TIME_ZONE``,
Europe/Paris by default) of the configured nodes or clusters into
``$DXT_ARCHIVE_ROOT/kwollect/<site>/<metric>/<D>.jsonl.gz`` with a manifest beside it.
Configure with ``DXT_KWOLLECT_NODES`` / ``DXT_KWOLLECT_CLUSTERS`` / ``DXT_KWOLLECT_METRICS`` or
a file in ``DXT_KWOLLECT_CONFIG``; the API comes from the connection ``kwollect_default``.

* Backfill: ``airflow backfill create --dag-id dxt_kwollect --from-date D1 --to-date D2``.
* Retry one failed (site, metric, day): clear its task instance, or refill it from the
  "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (site, metric, day) adds an event to the asset ``dxt-archive/kwollect/<site>``.
* ``reconcile_recent_days`` recounts the previous ``DXT_KWOLLECT_RECONCILE_DAYS`` days (default
  3; 0: off; Kwollect has no count API: the points are asked for and counted, not kept) and
  refetches the days that grew; the old file is kept in ``.versions/``; the run's note says
  what it found.
"""


class KwollectTasks(BackendTasks["KwollectConnection"]):
    backend = "kwollect"
    dag_doc = DAG_DOC
    group = "site"
    units_task_id = "units"
    map_index_template = (
        "{{ task.op_kwargs['unit']['site'] }}/{{ task.op_kwargs['unit']['metric'] }}"
    )
    tags = ("kwollect", "grid5000")
    counts = True  # no count API: the points of the archive's own requests, counted

    def configured_units(self) -> list[Unit]:
        # Clusters are resolved to nodes by the API: only units() knows the units.
        return []

    def units(
        self, connect: Callable[[], KwollectConnection], max_map_length: int | None
    ) -> list[Unit]:
        """The (site, metric) units that feed ``expand``, clusters resolved to nodes."""
        from dxt_core.backends.kwollect.connection import load_archive_config

        config = load_archive_config()
        with connect().client() as client:
            found = config.units(client)
        check_map_length(len(found), max_map_length, "(site, metric) units")
        log.info("%d (site, metric) units from %s", len(found), config.source)
        return list(found)

    def unit_name(self, unit: Unit) -> str:
        return f"{unit['site']}/{unit['metric']}"

    def asset_group(self, unit: Unit) -> str:
        return str(unit["site"])

    def configured_parts(self) -> list[tuple[str, ...]]:
        from dxt_core.backends.kwollect.connection import load_archive_config

        config = load_archive_config()
        sites = sorted({n.site for n in config.nodes} | {s for s, _ in config.clusters})
        return [(site, metric) for site in sites for metric in config.metrics]

    def time_zone(self, connect: Callable[[], KwollectConnection]) -> str:
        from dxt_core.backends.kwollect.connection import load_archive_config

        return load_archive_config().time_zone

    def archive(
        self,
        unit: Unit,
        day: dt.date,
        archive: Archive,
        conn: KwollectConnection,
        params: Mapping[str, Any],
    ) -> DayReport:
        from dxt_core.backends.kwollect.archive_day import archive_kwollect_day
        from dxt_core.backends.kwollect.connection import load_archive_config

        config = load_archive_config()
        with conn.client() as client:
            what = f"{unit['site']}/{unit['metric']}"
            log_archiving(what, day, config.time_zone, client.safe_url, archive.url)
            return archive_kwollect_day(
                client, unit["site"], unit["metric"], unit["nodes"], day, archive, config.time_zone
            )

    @contextmanager
    def recount(
        self, archive: Archive, conn: KwollectConnection, params: Mapping[str, Any]
    ) -> Iterator[Recount]:
        """Kwollect has no count API: each past day's points are asked for and counted (not
        kept), over the nodes and zone its manifest names, and a grown day is refetched with
        them."""
        from dxt_core.archive import DayKey
        from dxt_core.backends.kwollect.archive_day import archive_kwollect_day
        from dxt_core.backends.kwollect.connection import load_archive_config
        from dxt_core.backends.kwollect.source import parse_nodes
        from dxt_core.reconcile import Recount, SourceCount
        from dxt_core.windows import day_window, zone

        config = load_archive_config()
        with conn.client() as client:
            units: dict[tuple[str, ...], Any] = {
                (u["site"], u["metric"]): u for u in config.units(client)
            }

            def archived(parts: tuple[str, ...], d: dt.date) -> tuple[list[Any], str]:
                doc = archive.read_manifest(DayKey("kwollect", parts, d)) or {}
                nodes = list(doc.get("nodes") or units[parts]["nodes"])
                return nodes, str(doc.get("time_zone") or config.time_zone)

            def count(parts: tuple[str, ...], d: dt.date) -> SourceCount:
                nodes, tz = archived(parts, d)
                window = day_window(d, zone(tz))
                stop = window.end - dt.timedelta(microseconds=1)  # the archive's own request
                return client.count_points(
                    parts[0], parse_nodes(nodes, parts[0]), parts[1], window.start, stop
                )

            def fetch_again(parts: tuple[str, ...], d: dt.date) -> DayReport:
                nodes, tz = archived(parts, d)
                return archive_kwollect_day(client, parts[0], parts[1], nodes, d, archive, tz)

            yield Recount(archive, "kwollect", list(units), count, fetch_again)


TASKS = KwollectTasks()
