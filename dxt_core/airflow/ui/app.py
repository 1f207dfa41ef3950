"""The coverage view's FastAPI app, mounted by Airflow's API server under ``/dxt-archive``.

Airflow does not protect a plugin's endpoints: each one here resolves the signed-in user
from the auth manager's token (the ``_token`` cookie the UI holds, or an
``Authorization: Bearer`` header) and asks the auth manager whether that user may read the
DAG's task instances before answering. The page itself redirects an anonymous visitor to the
login page. The app only reads (but for the ``kept`` sidecar that ``/api/reconcile`` records
for a user who may edit the DAG's task instances): a refill is a plan that the page sends to
Airflow's own REST API (``clearTaskInstances``, ``backfills``) with the user's own
credentials, so Airflow checks the user's right to clear or backfill as for any other client.
Paths in answers are relative to the archive root, and a cell is only looked up for a unit
that the catalog or the index names, so no request reaches a file outside the archive.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlsplit

import orjson
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel

from dxt_core import masking
from dxt_core.airflow.runs import parse_param_day
from dxt_core.airflow.ui.grid import (
    NotFound,
    SourceSpec,
    build_grid,
    cell_detail,
    dag_sources,
    parse_range,
    reconcile_range,
    sources,
)
from dxt_core.airflow.ui.refill import check_plan_size, dag_start_day, refill_plan
from dxt_core.errors import DxtError

log = masking.logger("dxt_core.airflow.ui")

URL_PREFIX = "/dxt-archive"


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")


def _base_path() -> str:
    """The path Airflow is served under (``[api] base_url``), "" at the root."""
    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


async def _user_or_none(request: Request) -> Any:
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    header = request.headers.get("authorization", "")
    creds = None
    if header[:7].lower() == "bearer ":
        creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=header[7:])
    try:
        return await get_user(request, None, creds)
    except HTTPException:
        return None


async def signed_in_user(request: Request) -> Any:
    """The signed-in Airflow user; 401 for anyone else."""
    user = await _user_or_none(request)
    if user is None:
        raise HTTPException(status_code=401, detail="Not authenticated: sign in to Airflow")
    return user


UserDep = Annotated[Any, Depends(signed_in_user)]


def _may(user: Any, dag_id: str, method: str = "GET") -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return bool(
        get_auth_manager().is_authorized_dag(
            method=method,  # type: ignore[arg-type]
            access_entity=DagAccessEntity.TASK_INSTANCE,
            details=details,
            user=user,
        )
    )


def _source(user: Any, name: str) -> SourceSpec:
    known = sources()
    spec = known.get(name)
    if spec is None:
        raise HTTPException(404, f"unknown source {name!r}; known: {', '.join(known)}")
    if not _may(user, spec.dag_id):
        raise HTTPException(403, f"you may not read the task instances of {spec.dag_id}")
    return spec


def _dag_info(dag_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(DagModel.dag_id, DagModel.is_paused, DagModel.max_active_runs).where(
                DagModel.dag_id.in_(list(dag_ids))
            )
        )
        return {
            dag_id: {"paused": bool(paused), "max_active_runs": mar} for dag_id, paused, mar in rows
        }


class ReconcileRequest(BaseModel):
    source: str
    start: str | None = None
    end: str | None = None


class RefillRequest(BaseModel):
    source: str
    start: str | None = None
    end: str | None = None
    #: [unit, day] pairs; None: every missing, corrupt or failed cell of the range
    cells: list[tuple[str, str]] | None = None
    #: with ``cells`` None: only these units (the rows the page's filters show); None: all
    units: list[str] | None = None


def _page(config: dict[str, Any]) -> str:
    static = resources.files("dxt_core.airflow.ui").joinpath("static")
    page = static.joinpath("coverage.html").read_text("utf-8")
    # Inline the script and style: the page is one authenticated answer, no static route.
    return (
        page.replace("/*STYLE*/", static.joinpath("coverage.css").read_text("utf-8"))
        .replace("/*SCRIPT*/", static.joinpath("coverage.js").read_text("utf-8"))
        .replace(
            "/*CONFIG*/null",
            # </script> cannot end the JSON early: "<" is escaped
            json.dumps(config).replace("<", "\\u003c"),
        )
    )


def create_app() -> FastAPI:
    app = FastAPI(
        title="dxt-archive coverage",
        description="Archive coverage of the dxt DAGs (a plugin of dxt-archive)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(DxtError)
    async def _dxt_error(request: Request, exc: DxtError) -> Response:
        return _json({"detail": str(exc)}, 400)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> Response:
        return _json({"detail": str(exc.args[0] if exc.args else exc)}, 404)

    @app.get("/coverage", response_class=HTMLResponse)
    async def coverage_page(request: Request) -> Response:
        user = await _user_or_none(request)
        if user is None:
            from airflow.api_fastapi.app import get_auth_manager

            here = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(get_auth_manager().get_url_login(next_url=here), 307)
        dag_id = request.query_params.get("dag_id")
        source = request.query_params.get("source")
        if dag_id and not source:
            spec = dag_sources().get(dag_id)
            source = spec.source if spec else None
        base = _base_path()
        config = {
            "base": base,
            "api": f"{base}/api/v2",
            "source": source,
            "dag_id": dag_id,
            "not_ours": bool(dag_id and dag_id not in dag_sources()),
            "user": html.escape(str(user.get_name())),
        }
        return HTMLResponse(_page(config), headers={"Cache-Control": "no-store"})

    _add_read_routes(app)
    _add_action_routes(app)
    return app


def _add_read_routes(app: FastAPI) -> None:
    """The answers the page draws: the sources, one grid, one cell."""

    @app.get("/api/sources")
    def list_sources(user: UserDep) -> Response:
        from airflow.utils.session import create_session

        visible = [s for s in sources().values() if _may(user, s.dag_id)]
        info = _dag_info([s.dag_id for s in visible])
        with create_session() as session:
            starts = {s.dag_id: dag_start_day(session, s.dag_id) for s in visible}
        return _json(
            {
                "sources": [
                    {
                        "source": s.source,
                        "title": s.title,
                        "dag_id": s.dag_id,
                        "group_label": s.group,
                        "dag_exists": s.dag_id in info,
                        "paused": info.get(s.dag_id, {}).get("paused"),
                        # the page's default range starts no earlier: days before it are
                        # never scheduled, so not "missing"
                        "start_date": (d := starts.get(s.dag_id)) and d.isoformat(),
                    }
                    for s in visible
                ]
            }
        )

    @app.get("/api/grid")
    def grid(
        source: str,
        user: UserDep,
        start: str | None = None,
        end: str | None = None,
    ) -> Response:
        from airflow.utils.session import create_session

        spec = _source(user, source)
        days = parse_range(start, end)
        with create_session() as session:
            doc = build_grid(session, spec, days)
        info = _dag_info([spec.dag_id]).get(spec.dag_id, {})
        doc["paused"] = info.get("paused")
        doc["can_clear"] = _may(user, spec.dag_id, "PUT")
        return _json(doc)

    @app.get("/api/cell")
    def cell(source: str, unit: str, day: str, user: UserDep) -> Response:
        from airflow.utils.session import create_session

        spec = _source(user, source)
        the_day = parse_param_day(day, "day")
        if the_day is None:
            raise HTTPException(400, "day is required")
        with create_session() as session:
            return _json(cell_detail(session, spec, unit, the_day))


def _add_action_routes(app: FastAPI) -> None:
    """What the page's buttons ask: a refill plan, a reconcile (counts at the source)."""

    @app.post("/api/refill/plan")
    def plan(body: RefillRequest, user: UserDep) -> Response:
        from airflow.utils.session import create_session

        spec = _source(user, body.source)
        cells: list[tuple[str, dt.date]] | None = None
        days: list[dt.date] = []
        if body.cells is None:
            days = parse_range(body.start, body.end)
        else:
            check_plan_size(len(body.cells), 0)
            cells = []
            for unit, day in body.cells:
                parsed = parse_param_day(day, "day")
                if parsed is None:
                    raise HTTPException(400, f"cell {unit!r} has no day")
                cells.append((unit, parsed))
        info = _dag_info([spec.dag_id]).get(spec.dag_id, {})
        with create_session() as session:
            result = refill_plan(
                session,
                spec,
                cells,
                days,
                max_active_runs=info.get("max_active_runs"),
                sqlite=session.get_bind().dialect.name == "sqlite",
                paused=bool(info.get("paused")),
                only_units=body.units if body.cells is None else None,
            )
        doc = result.as_dict()
        doc["can_clear"] = _may(user, spec.dag_id, "PUT")
        doc["paused"] = info.get("paused")
        return _json(doc)

    @app.post("/api/reconcile")
    def reconcile(body: ReconcileRequest, user: UserDep) -> Response:
        """Counts only, through the DAG's connection, for a user who may read the DAG's task
        instances; a day the source now has fewer points of is recorded as kept only for a
        user who may also edit them (the one write this app makes, a sidecar)."""
        spec = _source(user, body.source)
        days = parse_range(body.start, body.end)
        can_edit = _may(user, spec.dag_id, "PUT")
        doc = reconcile_range(spec, days, record_kept=can_edit)
        doc["can_clear"] = can_edit
        return _json(doc)
