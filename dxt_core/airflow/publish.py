"""The ``dxt_publish`` DAG: once a month of the archive is complete, publish it as a dataset
(``dxt publish <backend>`` in a task) for every backend that declares a publish role.

The DAG file is one call, ``publish_dag()`` (``dxt dags write``). It is scheduled on the archive's
assets: every archive task adds an event per metric-day to ``dxt-archive/<backend>/<group>``
through its backend's alias ``dxt-archive/<backend>`` (dxt_core/airflow/assets.py), and the
DAG runs on the events of any of those aliases (``AssetAny``). A run looks at the months of
the days its events name, per backend: a month with unit-days neither archived nor empty is
not complete yet (said so, with counts: it will be published by the run that follows the
event of its last day); a complete month is published into
``$DXT_PUBLISH_DIR/<backend>/<YYYY-MM>_<YYYY-MM>/`` (a directory or ``s3://``), and one already
published from the same archive days is left as it is, said so (a no-op). Several
backend-months are published one after the other; one that fails does not stop the others,
and the task fails at the end naming it.

A manual run publishes the ``from_month``..``to_month`` Params (default: the month before the
run's date) of the ``backend`` Param (default: every backend with an archive) into
``<out>/<backend>/<from>_<to>/``; with ``require_complete`` (default) it fails, publishing
nothing, while a month is not complete. People in job tables are pseudonymised with the key
in ``DXT_PUBLISH_KEY_FILE``; without it the task refuses unless ``keep_identities`` is set.
The licence, its URL and the citation come from the Params, else ``DXT_PUBLISH_LICENCE``,
``DXT_PUBLISH_LICENCE_URL`` and ``DXT_PUBLISH_CITE``; a licence whose URL is unknown fails
the run before any month.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dxt_core import masking
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError, DxtError

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

log = masking.logger("dxt_core.airflow")

DAG_ID = "dxt_publish"
MONTH: dict[str, Any] = {"type": ["null", "string"], "pattern": "^[0-9]{4}-[0-9]{2}$"}


class MonthIncomplete(DxtError):
    """The month still has unit-days that are neither archived nor empty."""


class PublishFailed(DxtError):
    """Some backend-months could not be published (the others were)."""


def previous_month(context: Mapping[str, Any]) -> str:
    """``YYYY-MM`` before the run's date: the last month that can be over."""
    start = context.get("logical_date") or context.get("data_interval_start")
    if start is None:
        start = dt.datetime.now(dt.UTC)
    first = dt.date(start.year, start.month, 1) - dt.timedelta(days=1)
    return f"{first.year:04d}-{first.month:02d}"


#: The DAG's documentation (its Docs tab), whatever file builds it (``dxt dags write``).
DAG_DOC = """dxt_publish: publish each month of the archive as a dataset once it is complete.

Scheduled on the archive's assets: after the archive tasks' events, a run publishes each month
they name that is complete (``dxt publish <backend>`` in a task, for every backend that
publishes) into ``$DXT_PUBLISH_DIR/<backend>/<YYYY-MM>_<YYYY-MM>/``: typed Parquet in the
backend's layout (M100 ExaData's where it applies), checksums, datapackage.json, croissant.json, a
datacard and tar records (docs/publish.md). A month not complete yet is left for a later
event, and one already published from the same archive days is not written again; both are
said so in the log and the XCom. People in job tables are pseudonymised with the key in
``DXT_PUBLISH_KEY_FILE``; without it the task refuses unless the ``keep_identities`` Param is
set. The datasets' licence, its URL and how to cite them come from the ``licence``,
``licence_url`` and ``cite`` Params, else ``DXT_PUBLISH_LICENCE`` (default CC-BY-4.0),
``DXT_PUBLISH_LICENCE_URL`` and ``DXT_PUBLISH_CITE``. Trigger with ``from_month`` /
``to_month`` to publish other months.
"""


def publish_dag(*, doc_md: str | None = None) -> Any:
    """Build ``dxt_publish``: one task, run on the archive assets' events (or by hand)."""
    from datetime import UTC, datetime, timedelta

    from airflow.sdk import AssetAny, Param, dag, get_current_context, task

    from dxt_core import backends as registry
    from dxt_core.airflow.assets import source_alias

    def text_param(description: str) -> Any:
        """An optional text Param (empty: its default, which ``description`` says)."""
        return Param(None, type=["null", "string"], description=description)

    names = [b.name for b in registry.publishers()]
    schedule = AssetAny(*(source_alias(n) for n in names)) if names else None

    @dag(
        dag_id=DAG_ID,
        schedule=schedule,
        start_date=datetime(2020, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["dxt", "publish", *names],
        doc_md=doc_md if doc_md is not None else DAG_DOC,
        params={
            "backend": Param(
                None,
                type=["null", "string"],
                enum=[None, *names],
                description="publish this backend only (default: every backend that publishes)",
            ),
            "from_month": Param(
                None,
                **MONTH,
                description="first month, YYYY-MM (default: the months of the triggering "
                "events, else the month before the run's date)",
            ),
            "to_month": Param(None, **MONTH, description="last month, YYYY-MM (default: from)"),
            "keep_identities": Param(False, type="boolean", description="publish people's names"),
            "require_complete": Param(True, type="boolean", description="wait for whole months"),
            "out": text_param("default: $DXT_PUBLISH_DIR"),
            "source": text_param(
                "what the datacard names as the source (default: $DXT_PUBLISH_SOURCE, else "
                "the source URLs the manifests record)"
            ),
            "licence": text_param(
                "the datasets' licence, an SPDX identifier (default: $DXT_PUBLISH_LICENCE, "
                "else CC-BY-4.0)"
            ),
            "licence_url": text_param(
                "its text's URL (default: $DXT_PUBLISH_LICENCE_URL, else the known one of "
                "the licence; needed for others)"
            ),
            "cite": text_param("how to cite the datasets (default: $DXT_PUBLISH_CITE)"),
        },
    )
    def build() -> None:
        @task(retries=2, retry_delay=timedelta(minutes=5), multiple_outputs=False)
        def publish_months() -> dict[str, object]:
            from airflow.sdk.exceptions import AirflowFailException

            try:
                result: dict[str, object] = run_publish(get_current_context())
            except (MonthIncomplete, ConfigError) as exc:
                # bad input or an incomplete month: a retry would find the same
                raise AirflowFailException(str(exc)) from exc
            return result

        publish_months()

    return build()


def event_months(events: Mapping[Any, Iterable[Any]] | None) -> dict[str, set[str]]:
    """``{backend: {YYYY-MM}}`` of the days the triggering asset events name."""
    out: dict[str, set[str]] = {}
    for _, evs in (events or {}).items():
        for ev in evs:
            extra = getattr(ev, "extra", None) or {}
            source, day = extra.get("source"), str(extra.get("day") or "")
            if source and len(day) >= 7:
                out.setdefault(str(source), set()).add(day[:7])
    return out


def _out(params: Mapping[str, Any]) -> str:
    out = params.get("out") or os.environ.get("DXT_PUBLISH_DIR")
    if not out:
        raise ConfigError("set DXT_PUBLISH_DIR (or the out Param) to the datasets' directory")
    return str(out).rstrip("/")


def run_publish(context: Mapping[str, Any]) -> dict[str, Any]:
    """The task: the months of the triggering events (each once complete), else the Params'
    range. Returns what was done per backend and month range (XCom)."""
    from dxt_core import backends as registry
    from dxt_core.publish.licences import licence_and_url
    from dxt_core.publish.tree import open_tree

    params = context.get("params") or {}
    # a licence that cannot go out fails the run once, before any month (ConfigError)
    licence_and_url(
        _given(params, "licence") or "CC-BY-4.0",
        _given(params, "licence_url"),
        (
            "the licence Param (else DXT_PUBLISH_LICENCE)",
            "the licence_url Param (else DXT_PUBLISH_LICENCE_URL)",
        ),
    )
    root = str(archive_root())
    chosen = params.get("backend")
    found = [registry.get_publisher(str(chosen))] if chosen else registry.publishers()
    if not found:
        raise ConfigError("no backend declares a publish role: nothing to publish")
    tree = open_tree(root)
    roles = [b.publish_role() for b in found]
    if not chosen:  # only the backends with an archive under the root
        roles = [r for r in roles if tree.dirs(r.backend) is not None]
        if not roles:
            raise ConfigError(
                f"{root} holds no archive of a publishing backend "
                f"({', '.join(b.name for b in found)}): check DXT_ARCHIVE_ROOT"
            )
    by_event = event_months(context.get("triggering_asset_events"))
    if params.get("from_month") or not by_event:
        first = params.get("from_month") or previous_month(context)
        last = params.get("to_month") or first
        return _publish_range(roles, root, str(first), str(last), params)
    return _publish_events(roles, root, by_event, params)


def _publish_range(
    roles: list[PublishRole], root: str, first: str, last: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    from dxt_core.publish import incomplete_days

    if params.get("require_complete", True):
        gaps = [f"{r.backend}/{g}" for r in roles for g in incomplete_days(r, root, first, last)]
        if gaps:
            raise MonthIncomplete(
                f"{first}..{last} is not complete: {len(gaps)} unit-days neither archived "
                f"nor empty (first: {', '.join(gaps[:5])}); nothing was published. Archive "
                "them, or trigger with require_complete = false to publish what there is"
            )
    out = _out(params)
    return {
        r.backend: {f"{first}_{last}": _publish_one(r, root, out, first, last, params)}
        for r in roles
    }


def _publish_events(
    roles: list[PublishRole], root: str, months: dict[str, set[str]], params: Mapping[str, Any]
) -> dict[str, Any]:
    from dxt_core.publish import incomplete_days

    out = _out(params)
    results: dict[str, Any] = {}
    failed: list[str] = []
    for role in roles:
        for month in sorted(months.get(role.backend, ())):
            gaps = incomplete_days(role, root, month, month)
            key = f"{month}_{month}"
            if gaps:
                log.info(
                    "%s %s: not complete yet, not published: %d unit-days neither archived "
                    "nor empty (first: %s)",
                    role.backend,
                    month,
                    len(gaps),
                    ", ".join(gaps[:3]),
                )
                results.setdefault(role.backend, {})[key] = {
                    "state": "incomplete",
                    "unit_days_missing": len(gaps),
                    "first": gaps[:5],
                }
                continue
            try:
                done = _publish_one(role, root, out, month, month, params)
            except DxtError as exc:
                log.error("%s %s: not published: %s", role.backend, month, exc)
                failed.append(f"{role.backend} {month}: {exc}")
                done = {"state": "failed", "error": str(exc)}
            results.setdefault(role.backend, {})[key] = done
    if failed:
        raise PublishFailed(
            f"{len(failed)} backend-months not published (the others were, see the log): "
            + "; ".join(failed)
        )
    return results


def _given(params: Mapping[str, Any], name: str) -> str:
    """A run's Param, else its ``DXT_PUBLISH_<NAME>`` variable, else ""."""
    return str(params.get(name) or os.environ.get(f"DXT_PUBLISH_{name.upper()}", ""))


def _publish_one(
    role: PublishRole, root: str, out: str, first: str, last: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    from pathlib import Path

    from dxt_core.publish import PublishOptions, publish

    key = params.get("pseudonymise_key_file") or os.environ.get("DXT_PUBLISH_KEY_FILE")
    report = publish(
        role,
        PublishOptions(
            archive=root,
            out=f"{out}/{role.backend}/{first}_{last}",
            from_month=first,
            to_month=last,
            pseudonymise_key_file=Path(key) if key else None,
            keep_identities=bool(params.get("keep_identities", False)),
            name=str(params.get("name") or ""),
            source=_given(params, "source"),
            licence=_given(params, "licence") or "CC-BY-4.0",
            licence_url=_given(params, "licence_url"),
            cite=_given(params, "cite"),
        ),
    )
    for w in report.operator_warnings():
        log.warning("%s: %s", role.backend, w)
    log.info("%s: %s", role.backend, report.summary())
    return {
        "state": "unchanged" if report.unchanged else "published",
        "out": report.out,
        "months": [f"{y}-{m:02d}" for y, m in report.months],
        "files": report.unchanged_files if report.unchanged else len(report.files),
        "rows": report.rows,
        "records": [e.path for e in report.records],
        "warnings": len(report.warnings),
        "summary": report.summary(),
    }
