"""The task bodies every dxt DAG runs, for any backend of the registry.

Each turns the task context into calls on the backend's
:class:`~dxt_core.backends.roles.BackendTasks`: the units task lists the units, the archive
task archives one unit-day and adds its event to the unit's asset group. The backend never
sees Airflow: it gets its connection object (built by :mod:`dxt_core.airflow.hooks` from the
Airflow connection), the day, the archive and the run's Params.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from dxt_core import backends as registry
from dxt_core import masking
from dxt_core.airflow import runs
from dxt_core.airflow.assets import emit_day_event, relative_path
from dxt_core.airflow.hooks import hook_for
from dxt_core.airflow.runs import day_of, replace_of_context, utc_date
from dxt_core.archive import Archive
from dxt_core.backends.roles import Unit
from dxt_core.budget import holding_answers, tune_malloc
from dxt_core.config import archive_root
from dxt_core.errors import SourceError, run_wide

log = masking.logger("dxt_core.airflow")


@contextlib.contextmanager
def not_retried_if_run_wide() -> Iterator[None]:
    """An error that fails every unit the same way (:func:`~dxt_core.errors.run_wide`: refused
    credentials, another day zone, an s3:// root without boto3) fails the task for good: a
    retry fails the same way (and a retry of every mapped task with refused credentials could
    lock the account)."""
    try:
        yield
    except Exception as exc:
        if run_wide(exc):
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(
                f"{exc} (not retried: every retry would fail the same way)"
            ) from exc
        raise


#: What a task's error adds when the server stayed unreachable through every retry (the
#: ``dxt`` command says "run it again"; a task does not need to be).
RETRIED_ON_ITS_OWN = "(an Airflow task is retried on its own)"


@contextlib.contextmanager
def said_retried_on_its_own() -> Iterator[None]:
    """A retryable source error (:class:`~dxt_core.errors.SourceUnavailable`: the server
    unreachable or overloaded through every retry) says that Airflow retries the task."""
    try:
        yield
    except SourceError as exc:
        if exc.retryable and not run_wide(exc) and exc.args and isinstance(exc.args[0], str):
            said, sep, where = exc.args[0].partition(" | from ")  # before the URL it names
            exc.args = (f"{said} {RETRIED_ON_ITS_OWN}{sep}{where}", *exc.args[1:])
        raise


def list_units(backend: str, conn_id: str, max_map_length: int | None) -> list[Unit]:
    """The units of one run, in map index order (the units task's return value)."""
    tasks = registry.get(backend).dag_tasks()
    with said_retried_on_its_own():
        return tasks.units(lambda: hook_for(backend, conn_id).connection(), max_map_length)


def day_end(
    backend: str, context: Mapping[str, Any], conn_id: str | None, settle_s: int
) -> dt.datetime:
    """When the run's archive day may be archived: its end in the backend's zone + settle."""
    tasks = registry.get(backend).dag_tasks()
    with said_retried_on_its_own():
        zone = tasks.time_zone(lambda: hook_for(backend, conn_id).connection())
    return runs.day_end(day_of(context), zone, settle_s)


def archive_unit(
    backend: str, unit: Unit, context: Mapping[str, Any], conn_id: str
) -> dict[str, Any]:
    """Archive one unit-day; returns the report (pushed as one XCom) and adds the day's
    event to the unit's asset group."""
    tasks = registry.get(backend).dag_tasks()
    with not_retried_if_run_wide():  # an s3:// root without boto3, too
        archive = Archive(archive_root(), replace=replace_of_context(context))
    conn = hook_for(backend, conn_id).connection()
    params = context.get("params") or {}
    tune_malloc()  # this task process is a dxt run
    with said_retried_on_its_own(), not_retried_if_run_wide(), holding_answers():
        # the unit's answers are charged until it is done with them
        report = tasks.archive(unit, day_of(context), archive, conn, params)
    doc = report.as_dict()
    if doc.get("unchanged"):  # a rerun that read what was archived: the asset did not change
        log.info("%s: no asset event (the day is unchanged)", report.summary().split(":")[0])
        return doc
    emit_day_event(
        context,
        tasks.backend,
        tasks.asset_group(unit),
        tasks.unit_name(unit),
        doc,
        relative_path(report.path, archive.root),
    )
    return doc


def reconcile_recent(backend: str, context: Mapping[str, Any], conn_id: str) -> dict[str, Any]:
    """The ``reconcile_recent_days`` task of a backend with the reconcile role: the previous
    ``DXT_<NAME>_RECONCILE_DAYS`` days (default 3; 0: off) counted at the source, the grown
    ones refetched. Returns the report (XCom) with a one-line ``note``, which the plugin adds
    to the run's note when the run ends (``dxt_core.airflow.plugin``)."""
    from dxt_core.reconcile import reconcile_days

    tasks = registry.get(backend).dag_tasks()
    n_days = reconcile_days(backend, tasks.settings())
    day = day_of(context)
    # days before the DAG's start date are never scheduled: not "missing", not asked
    start = getattr(context.get("dag"), "start_date", None)
    wanted = n_days
    if start is not None:
        n_days = max(0, min(n_days, (day - utc_date(start)).days))
    with not_retried_if_run_wide():
        archive = Archive(archive_root())
    conn = hook_for(backend, conn_id).connection()
    params = context.get("params") or {}
    with said_retried_on_its_own():
        report = tasks.reconcile(day, n_days, archive, conn, params)
    report.before_start = wanted - n_days
    doc = report.as_dict()
    log.info("%s", doc["note"])
    failed = report.failure()
    if failed is not None:
        # the report stays the task's XCom (the run note says what was found and done),
        # and the task fails: Airflow shows it, retries it, and a clear runs it again
        context["ti"].xcom_push(key="return_value", value=doc)
        raise SourceError(f"reconcile: {failed}")
    return doc
