"""The one shape of every dxt DAG: wait for the day's end, list the units, one mapped task per
(unit, day) that archives it, built from the backend's declaration.

A DAG file is one call, ``backend_dag("<name>", doc_md=__doc__)``. The backend's
:class:`~dxt_core.backends.Backend` gives the DAG id, the archive task's id and the settings;
its :class:`~dxt_core.backends.roles.BackendTasks` gives what differs (how units are found,
the map index, the tags, extra Params, the pool or not). This module builds the rest the same
way for every backend:

* a daily schedule whose run of logical date D archives day D (``CronDataIntervalTimetable``
  on UTC midnights), ``catchup`` and the start day from the backend's settings;
* ``wait_for_day_end``, deferred to the triggerer until the day is over plus a settle delay;
* the ``day`` and ``replace`` Params of a manual trigger;
* the archive task: the backend's pool, retries, an ``execution_timeout``, the report pushed
  as one XCom (``multiple_outputs=False``: a ``-> dict`` task would push each key
  separately, a dozen extra API calls per task), and the asset alias it emits events to;
* for a backend with the reconcile role (``BackendTasks.recount``), a
  ``reconcile_recent_days`` task after the wait: the previous ``DXT_<NAME>_RECONCILE_DAYS``
  days counted at the source, the grown ones refetched, what it found in the run's note.

Parse-time work stays small: settings are read from the environment, the backend's tasks
module imports nothing heavy, sources and writers are imported inside the tasks.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, dag, get_current_context, task
from airflow.timetables.interval import CronDataIntervalTimetable

from dxt_core import backends as registry
from dxt_core.airflow import dag_settings
from dxt_core.airflow.assets import source_alias
from dxt_core.airflow.runs import day_param, replace_param
from dxt_core.airflow.wait import WaitForDayEnd
from dxt_core.backends import Backend

UTC = pendulum.timezone("UTC")


def _param(spec: dict[str, Any]) -> Any:
    kwargs = dict(spec)
    return Param(kwargs.pop("default", None), **kwargs)


def backend_dag(backend: str, *, doc_md: str | None = None) -> DAG:
    """Build the DAG of ``backend`` (``Backend.dag_id``, e.g. ``dxt_examon``).

    Args:
        backend: the registry name (``examon``); its settings give the schedule, pool,
            retries, timeout and connection id.
        doc_md: the DAG's documentation; default the backend's (``dag_doc`` of its tasks
            role).
    """
    b = registry.get(backend)
    tasks = b.dag_tasks()
    name = b.name
    s = dag_settings(name)
    conn_id = str(s["conn_id"])
    extra_params = {k: _param(v) for k, v in tasks.params().items()}
    start = pendulum.instance(datetime.fromisoformat(str(s["start_date"])), tz=UTC)

    @dag(
        dag_id=b.dag_id or f"dxt_{name}",
        # Logical date D (UTC midnight) <-> archive day D, so CLI dates mean archive days.
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone=UTC),
        start_date=start,
        catchup=bool(s["catchup"]),
        max_active_runs=int(s["max_active_runs"]),
        # start_date in default_args too: 'airflow dags trigger -l' then refuses a logical
        # date before it (airflow/api/common/trigger_dag.py reads only default_args) instead
        # of making a run without tasks
        default_args={
            "start_date": start,
            "retries": int(s["retries"]),
            "retry_delay": timedelta(minutes=2),
        },
        tags=["dxt", *tasks.tags],
        doc_md=doc_md if doc_md is not None else (tasks.dag_doc or None),
        params={"day": day_param(), **extra_params, "replace": replace_param()},
    )
    def build() -> None:
        wait = WaitForDayEnd(
            task_id="wait_for_day_end",
            source=name,
            conn_id=conn_id,
            settle_s=int(s["settle_seconds"]),
        )
        archive_unit = _archive_task(b, s, conn_id)
        if tasks.reconciles():
            wait >> _reconcile_task(b, s, conn_id)
        if tasks.units_task_id is None:
            wait >> archive_unit.expand(unit=tasks.configured_units())
            return
        found = _units_task(tasks.units_task_id, name, conn_id)
        wait >> found
        archive_unit.expand(unit=found)

    built: DAG = build()
    return built


#: A backend's DAG settings (:func:`dxt_core.airflow.dag_settings`).
Settings = dict[str, Any]


def _pool(b: Backend, s: Settings) -> str:
    return str(s["pool"]) if b.dag_tasks().pooled else "default_pool"


def _archive_task(b: Backend, s: Settings, conn_id: str) -> Any:
    """The mapped task that archives one unit-day (not yet expanded)."""
    name, tasks = b.name, b.dag_tasks()

    @task(
        task_id=b.task_id or "archive_unit_day",
        pool=_pool(b, s),
        multiple_outputs=False,
        map_index_template=tasks.map_index_template,
        outlets=[source_alias(name)],
        execution_timeout=timedelta(minutes=int(s["task_timeout_minutes"])),
    )
    def archive_unit(unit: Any) -> dict[str, object]:
        from dxt_core.airflow.tasks import archive_unit as run

        result: dict[str, object] = run(name, unit, get_current_context(), conn_id)
        return result

    return archive_unit


def _reconcile_task(b: Backend, s: Settings, conn_id: str) -> Any:
    """The task that checks the recent days against the source's counts."""
    name = b.name

    @task(
        task_id="reconcile_recent_days",
        pool=_pool(b, s),
        multiple_outputs=False,
        execution_timeout=timedelta(minutes=int(s["task_timeout_minutes"])),
    )
    def reconcile_recent_days() -> dict[str, object]:
        from dxt_core.airflow.tasks import reconcile_recent as run

        result: dict[str, object] = run(name, get_current_context(), conn_id)
        return result

    return reconcile_recent_days()


def _units_task(task_id: str, name: str, conn_id: str) -> Any:
    """The task that lists the units of the run (its output is mapped over)."""

    @task(task_id=task_id)
    def list_units() -> list[Any]:
        from airflow.configuration import conf

        from dxt_core.airflow.tasks import list_units as run

        return run(name, conn_id, conf.getint("core", "max_map_length"))

    return list_units()
