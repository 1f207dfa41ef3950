"""The one shape of every dxt DAG: wait for the day's end, list the units, one mapped task per
(unit, day) that archives it.

A DAG file names its backend and what differs (how units are found, the archive call, the
map index, extra Params); this module builds the rest the same way for every backend:

* a daily schedule whose run of logical date D archives day D (``CronDataIntervalTimetable``
  on UTC midnights), ``catchup`` and the start day from the backend's settings;
* ``wait_for_day_end``, deferred to the triggerer until the day is over plus a settle delay;
* the ``day`` and ``replace`` Params of a manual trigger;
* the archive task: the backend's pool, retries, an ``execution_timeout``, the report pushed
  as one XCom (``multiple_outputs=False``: a ``-> dict`` task would push each key
  separately, a dozen extra API calls per task), and the asset alias it emits events to.

Parse-time work stays small: settings are read from the environment, heavy imports happen
inside the tasks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core.airflow import dag_settings
from dxt_core.airflow.assets import source_alias
from dxt_core.airflow.runs import day_param, replace_param
from dxt_core.airflow.wait import WaitForDayEnd

UTC = pendulum.timezone("UTC")


def _call(ref: str) -> Callable[..., Any]:
    module, _, name = ref.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def daily_archive_dag(
    backend: str,
    *,
    doc_md: str,
    tags: Sequence[str],
    archive_task_id: str,
    archive: str,
    map_index_template: str,
    units_task_id: str | None = None,
    units: str | None = None,
    fixed_units: Sequence[Any] = (),
    params: dict[str, Any] | None = None,
    wait_uses_connection: bool = False,
    pooled: bool = True,
    reconcile: str | None = None,
) -> DAG:
    """Build the DAG ``dxt_<backend>``.

    Args:
        backend: the registry name (``examon``); its settings give the schedule, pool,
            retries, timeout and connection id.
        archive_task_id, archive: the mapped task's id and ``"module:function"`` it calls
            with ``(unit, context, conn_id)``.
        map_index_template: the mapped instances' names in the UI (``unit`` is the argument).
        units_task_id, units: a task that lists the units, ``"module:function"`` called with
            ``(conn_id, max_map_length)``; or ``fixed_units``, a list known at parse time.
        params: Params of a manual trigger besides ``day`` and ``replace``.
        wait_uses_connection: the day's zone comes from the connection (Examon).
        reconcile: ``"module:function"`` called with ``(context, conn_id)`` by a
            ``reconcile_recent_days`` task after the wait (issue 19: the previous days'
            counts checked at the source, grown days refetched).
    """
    s = dag_settings(backend)
    conn_id = str(s["conn_id"])

    @dag(
        dag_id=f"dxt_{backend}",
        # Logical date D (UTC midnight) <-> archive day D, so CLI dates mean archive days.
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
        start_date=pendulum.instance(datetime.fromisoformat(str(s["start_date"])), tz=UTC),
        catchup=bool(s["catchup"]),
        max_active_runs=int(s["max_active_runs"]),
        default_args={"retries": int(s["retries"]), "retry_delay": timedelta(minutes=2)},
        tags=["dxt", *tags],
        doc_md=doc_md,
        params={"day": day_param(), **(params or {}), "replace": replace_param()},
    )
    def build() -> None:
        wait = WaitForDayEnd(
            task_id="wait_for_day_end",
            source=backend,
            conn_id=conn_id if wait_uses_connection else None,
            settle_s=int(s["settle_seconds"]),
        )

        @task(
            task_id=archive_task_id,
            pool=str(s["pool"]) if pooled else "default_pool",
            multiple_outputs=False,
            map_index_template=map_index_template,
            outlets=[source_alias(backend)],
            execution_timeout=timedelta(minutes=int(s["task_timeout_minutes"])),
        )
        def archive_unit(unit: Any) -> dict[str, object]:
            result: dict[str, object] = _call(archive)(unit, get_current_context(), conn_id)
            return result

        if reconcile is not None:

            @task(
                task_id="reconcile_recent_days", pool=str(s["pool"]) if pooled else "default_pool"
            )
            def reconcile_days() -> dict[str, object]:
                result: dict[str, object] = _call(reconcile)(get_current_context(), conn_id)
                return result

            wait >> reconcile_days()

        if units is None:
            wait >> archive_unit.expand(unit=list(fixed_units))
            return

        @task(task_id=units_task_id or "units")
        def list_units() -> list[Any]:
            from airflow.configuration import conf

            found: list[Any] = _call(units)(conn_id, conf.getint("core", "max_map_length"))
            return found

        found = list_units()
        wait >> found
        archive_unit.expand(unit=found)

    built: DAG = build()
    return built
