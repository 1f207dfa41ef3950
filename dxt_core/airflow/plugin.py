"""The dxt-archive Airflow plugin: the archive coverage view and the run notes.

Registered by installing the package (entry point ``airflow.plugins`` -> ``dxt_archive``)
and, for a deployment that mounts the repository's ``plugins/`` folder without installing
the package's entry point, by ``plugins/dxt_archive.py``. It brings:

* a FastAPI app served by the API server under ``/dxt-archive`` (the page and its JSON
  endpoints, each behind the auth manager's token: ``dxt_core.airflow.ui.app``);
* two external views: "Archive coverage" in the navigation (Browse) and a tab on each DAG
  (it shows the DAG's source when the DAG is one of the dxt DAGs);
* a listener that writes "Archives <day> ..." as the note of each dxt DAG run that starts
  without a note (and, when the run ends, adds what its ``reconcile_recent_days`` task
  found), so that the grid and the run list say which day a run archives, and that
  creates the run's asset per group before its tasks add events to them
  (:func:`create_group_assets`).

Every Airflow component loads plugins (task processes too), so this module imports nothing
heavy: the FastAPI app is built on the first request the API server routes to it.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from dxt_core import masking

log = masking.logger("dxt_core.airflow.plugin")

PLUGIN_NAME = "dxt_archive"
URL_PREFIX = "/dxt-archive"


@functools.cache
def dxt_dag_ids() -> frozenset[str]:
    """The DAG ids of the registry's backends (built-in and ``DXT_EXTRA_BACKENDS``)."""
    from dxt_core import backends as registry

    return frozenset(b.dag_id for b in registry.backends() if b.dag_id)


class LazyApp:
    """An ASGI app that builds the coverage app on its first request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from dxt_core.airflow.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return "dxt_core.airflow.ui.app:create_app"


from sqlalchemy.orm import object_session  # noqa: E402


class RunNoteListener:
    """When a dxt DAG run starts (in the scheduler): note which day it archives (if the run
    has no note), and make sure the assets its tasks will add events to exist."""

    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str) -> None:
        if dag_run.dag_id not in dxt_dag_ids():
            return
        try:
            note_run_day(dag_run)
        except Exception:  # a note is never worth failing the scheduler's loop
            log.warning("could not note the archive day of %s", dag_run.run_id, exc_info=True)
        try:
            session = object_session(dag_run)
            if session is not None:
                # our queries must not flush the scheduler's pending changes of this loop
                with session.no_autoflush:
                    create_group_assets(dag_run)
        except Exception:
            log.warning("could not create the assets of %s", dag_run.dag_id, exc_info=True)

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        note_reconcile(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        note_reconcile(dag_run)


def note_reconcile(dag_run: Any) -> str | None:
    """When a dxt DAG run ends: add what its ``reconcile_recent_days`` task found (its XCom's
    ``note``) to the run's note. Returns the text added, None when there is none.

    The scheduler's run is bound to its session (the note is committed with the run's state);
    ``airflow dags test`` hands over a detached one, noted in a session of its own."""
    if dag_run.dag_id not in dxt_dag_ids():
        return None
    try:
        session = object_session(dag_run)
        if session is not None:
            with session.no_autoflush:
                return _note_reconcile(session, dag_run)
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as own:
            bound = own.get(DagRun, dag_run.id)
            return None if bound is None else _note_reconcile(own, bound)
    except Exception:  # a note is never worth failing the scheduler's loop
        log.warning("could not note the reconcile of %s", dag_run.run_id, exc_info=True)
        return None


def _note_reconcile(session: Any, dag_run: Any) -> str | None:
    from airflow.models.xcom import XComModel

    from dxt_core.airflow.runs import RECONCILE_TASK_ID, note_with_reconcile

    row = session.scalars(
        XComModel.get_many(
            run_id=dag_run.run_id,
            dag_ids=dag_run.dag_id,
            task_ids=RECONCILE_TASK_ID,
            key="return_value",
            map_indexes=-1,
        )
    ).first()
    doc = XComModel.deserialize_value(row) if row is not None else None
    found = doc.get("note") if isinstance(doc, dict) else None
    if not isinstance(found, str) or not found:
        return None
    dag_run.note = note_with_reconcile(dag_run.note, found)
    return found


def note_run_day(dag_run: Any) -> None:
    """Note the day the run archives; fail a run that has no task because its logical date
    lies before the DAG's start date (Airflow creates none for it, and the run would turn
    green having archived nothing). A run whose day cannot be archived (a ``day`` param
    before the start date or not begun, none at all) is noted "Archives nothing: why"."""
    from dxt_core.airflow.runs import (
        DAY_PARAM,
        archivable_problem,
        failed_note,
        parse_param_day,
        run_day,
        run_note,
        utc_date,
    )
    from dxt_core.errors import ConfigError

    conf = dag_run.conf if isinstance(dag_run.conf, dict) else {}
    chosen = conf.get(DAY_PARAM)
    dag = getattr(dag_run, "dag", None)
    start = getattr(dag, "start_date", None)
    try:
        day = run_day(chosen, dag_run.data_interval_start, dag_run.logical_date, dag_run.dag_id)
    except ConfigError as exc:  # no day at all (a misspelt "Day"), or not a day: its task says
        if not dag_run.note:
            dag_run.note = failed_note(str(exc).rstrip("."))
        return
    logical = dag_run.logical_date
    backfill = getattr(dag_run.run_type, "value", dag_run.run_type) == "backfill"
    if (
        start is not None
        and logical is not None
        and not backfill
        and utc_date(logical) < utc_date(start)
    ):
        from airflow.utils.state import DagRunState

        problem = archivable_problem(utc_date(logical), start, dag_run.dag_id) or ""
        dag_run.note = failed_note(problem)
        dag_run.set_state(DagRunState.FAILED)
        log.warning("failed run %s of %s: %s", dag_run.run_id, dag_run.dag_id, problem)
        return
    why = archivable_problem(day, start, dag_run.dag_id) if chosen or not backfill else None
    if why and not dag_run.note:  # its first task fails the run saying the same
        dag_run.note = failed_note(why.rstrip("."))
    elif not dag_run.note:
        dag_run.note = run_note(day, parse_param_day(chosen) is not None)


def create_group_assets(dag_run: Any) -> list[str]:
    """Create the assets of the run's source groups that do not exist yet.

    Airflow creates an asset named by an alias event when the first event arrives, without
    guarding against two tasks doing so at once: two metric-days of a new plugin that finish
    together fail with a unique-constraint error (seen on SQLite; the code path is the same on
    PostgreSQL). Creating them here, once per run start in the scheduler, removes the race.
    Returns the names created.
    """
    from airflow.models.asset import AssetAliasModel, AssetModel, alias_association_table
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    from dxt_core.airflow.assets import archive_asset, source_alias
    from dxt_core.airflow.ui.grid import dag_sources, display_name

    session = object_session(dag_run)
    spec = dag_sources().get(dag_run.dag_id)
    if session is None or spec is None:
        return []
    units, _ = spec.units()
    assets = {a.name: a for a in (archive_asset(spec.source, display_name(p[:1])) for p in units)}
    if not assets:
        return []
    have = set(session.scalars(select(AssetModel.name).where(AssetModel.name.in_(list(assets)))))
    created = sorted(set(assets) - have)
    # INSERT ... ON CONFLICT DO NOTHING in the scheduler's own transaction: the scheduler
    # commits it, and a task that created the same row meanwhile loses nothing. (A savepoint
    # would commit inside the scheduler's critical section, which Airflow refuses: "UNEXPECTED
    # COMMIT - THIS WILL BREAK HA LOCKS!") Both the assets and their link to the source's
    # alias are made here: a task's first event creates either one without a guard.
    if created:
        rows = [{"name": n, "uri": assets[n].uri, "group": "asset", "extra": {}} for n in created]
        session.execute(_insert_ignore(session, AssetModel.__table__, rows))
    alias_id = session.scalar(
        select(AssetAliasModel.id).where(AssetAliasModel.name == source_alias(spec.source).name)
    )
    if alias_id is not None:
        ids = session.scalars(select(AssetModel.id).where(AssetModel.name.in_(list(assets))))
        links = [{"alias_id": alias_id, "asset_id": i} for i in ids]
        if links:
            session.execute(_insert_ignore(session, alias_association_table, links))
    if created:
        log.info("created the assets %s", ", ".join(created))
    return created


def _insert_ignore(session: Any, table: Any, rows: list[dict[str, Any]]) -> Any:
    """INSERT of ``rows`` that skips rows already there, in the session's dialect."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).values(rows).on_conflict_do_nothing()
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).values(rows).on_conflict_do_nothing()
    from sqlalchemy import insert

    return insert(table).prefix_with("IGNORE").values(rows)


class DxtArchivePlugin(AirflowPlugin):
    name = PLUGIN_NAME
    fastapi_apps = [
        {"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "dxt-archive coverage"},
    ]
    external_views = [
        {
            "name": "Archive coverage",
            "href": f"{URL_PREFIX.lstrip('/')}/coverage",
            "destination": "nav",
            "category": "browse",
            "url_route": "dxt-archive-coverage",
        },
        {
            "name": "Archive coverage",
            "href": f"{URL_PREFIX.lstrip('/')}/coverage?dag_id={{DAG_ID}}",
            "destination": "dag",
            "url_route": "dxt-archive-dag-coverage",
        },
    ]
    listeners = [RunNoteListener()]
