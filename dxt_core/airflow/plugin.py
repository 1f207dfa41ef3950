"""The dxt-archive Airflow plugin: the archive coverage view and the run notes.

Registered by installing the package (entry point ``airflow.plugins`` -> ``dxt_archive``)
and, for a deployment that mounts the repository's ``plugins/`` folder without installing
the package's entry point, by ``plugins/dxt_archive.py``. It brings:

* a FastAPI app served by the API server under ``/dxt-archive`` (the page and its JSON
  endpoints, each behind the auth manager's token: ``dxt_core.airflow.ui.app``);
* two external views: "Archive coverage" in the navigation (Browse) and a tab on each DAG
  (it shows the DAG's source when the DAG is one of the dxt DAGs);
* a listener that writes "Archives <day> ..." as the note of each dxt DAG run that starts
  without a note, so that the grid and the run list say which day a run archives, and that
  creates the run's asset per group before its tasks add events to them
  (:func:`create_group_assets`).

Every Airflow component loads plugins (task processes too), so this module imports nothing
heavy: the FastAPI app is built on the first request the API server routes to it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger("dxt_core.airflow.plugin")

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


class RunNoteListener:
    """When a dxt DAG run starts (in the scheduler): note which day it archives (if the run
    has no note), and make sure the assets its tasks will add events to exist."""

    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str) -> None:
        if dag_run.dag_id not in dxt_dag_ids():
            return
        try:
            if not dag_run.note:
                from dxt_core.airflow.runs import DAY_PARAM, parse_param_day, run_day, run_note

                conf = dag_run.conf if isinstance(dag_run.conf, dict) else {}
                chosen = conf.get(DAY_PARAM)
                day = run_day(chosen, dag_run.data_interval_start, dag_run.logical_date)
                dag_run.note = run_note(day, parse_param_day(chosen) is not None)
        except Exception:  # a note is never worth failing the scheduler's loop
            log.warning("could not note the archive day of %s", dag_run.run_id, exc_info=True)
        try:
            create_group_assets(dag_run)
        except Exception:
            log.warning("could not create the assets of %s", dag_run.dag_id, exc_info=True)


def create_group_assets(dag_run: Any) -> list[str]:
    """Create the assets of the run's source groups that do not exist yet.

    Airflow creates an asset named by an alias event when the first event arrives, without
    guarding against two tasks doing so at once: two metric-days of a new plugin that finish
    together fail with a unique-constraint error (seen on SQLite; the code path is the same on
    PostgreSQL). Creating them here, once per run start in the scheduler, removes the race.
    Returns the names created.
    """
    from airflow.models.asset import AssetModel
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError
    from sqlalchemy.orm import object_session

    from dxt_core.airflow.assets import archive_asset
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
    created = []
    for name in sorted(set(assets) - have):
        try:
            with session.begin_nested():  # a savepoint: a lost race leaves the run alone
                session.add(AssetModel(name=name, uri=assets[name].uri, group="asset", extra={}))
            created.append(name)
        except IntegrityError:
            pass
    if created:
        log.info("created the assets %s", ", ".join(created))
    return created


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
