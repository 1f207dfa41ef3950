"""The ``dxt_publish`` DAG: once a month is over and complete, publish it as a dataset
(``dxt publish <backend>`` in a task) for every backend that declares a publish role.

The DAG file is one call, ``publish_dag(doc_md=__doc__)``. Each monthly run publishes the
month it covers into ``$DXT_PUBLISH_DIR/<backend>/<from>_<to>/`` (docs/publish.md). The task
fails and retries (hourly, for a day) while a month has days neither archived nor empty.
People in job tables are pseudonymised with the key in ``DXT_PUBLISH_KEY_FILE``; without it
the task refuses unless the ``keep_identities`` Param is set. Trigger with ``from_month`` /
``to_month`` to publish other months, ``backend`` to publish one backend only.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

from dxt_core.config import archive_root
from dxt_core.errors import ConfigError, DxtError

log = logging.getLogger("dxt_core.airflow")

DAG_ID = "dxt_publish"
MONTH: dict[str, Any] = {"type": ["null", "string"], "pattern": "^[0-9]{4}-[0-9]{2}$"}


class MonthIncomplete(DxtError):
    """The month still has metric-days that are neither archived nor empty."""


def run_month(context: Any) -> str:
    """``YYYY-MM`` of the run: the month its data interval starts in (a monthly run of
    logical date 2020-03-01 publishes March, after March has ended)."""
    start = context.get("data_interval_start") or context.get("logical_date")
    if start is None:
        start = dt.datetime.now(dt.UTC)
    return f"{start.year:04d}-{start.month:02d}"


def publish_dag(*, doc_md: str | None = None) -> Any:
    """Build ``dxt_publish``: one monthly task publishing every backend that publishes (or
    the one the ``backend`` Param names)."""
    from datetime import UTC, datetime, timedelta

    from airflow.sdk import Param, dag, get_current_context, task

    from dxt_core import backends as registry

    names = [b.name for b in registry.publishers()]

    @dag(
        dag_id=DAG_ID,
        schedule="@monthly",
        start_date=datetime(2020, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["dxt", "publish", *names],
        doc_md=doc_md,
        params={
            "backend": Param(
                None,
                type=["null", "string"],
                enum=[None, *names],
                description="publish this backend only (default: every backend that publishes)",
            ),
            "from_month": Param(
                None, **MONTH, description="first month, YYYY-MM (default: the run's)"
            ),
            "to_month": Param(None, **MONTH, description="last month, YYYY-MM (default: from)"),
            "keep_identities": Param(False, type="boolean", description="publish people's names"),
            "require_complete": Param(True, type="boolean", description="wait for whole months"),
            "out": Param(None, type=["null", "string"], description="default: $DXT_PUBLISH_DIR"),
        },
    )
    def build() -> None:
        @task(retries=24, retry_delay=timedelta(hours=1), multiple_outputs=False)
        def publish_months() -> dict[str, object]:
            result: dict[str, object] = run_publish(get_current_context())
            return result

        publish_months()

    return build()


def run_publish(context: Any) -> dict[str, Any]:
    """Publish ``from_month``..``to_month`` (Params; default: the run's month) of the
    ``backend`` Param's archive (default: every backend that publishes) into
    ``out/<backend>/<from>_<to>`` (``out``: Param, else ``DXT_PUBLISH_DIR``); returns the
    reports by backend (XCom). Checks every month is complete before publishing any."""
    from dxt_core import backends as registry
    from dxt_core.publish import PublishOptions, incomplete_days, publish

    params = context.get("params") or {}
    first = params.get("from_month") or run_month(context)
    last = params.get("to_month") or first
    out = params.get("out") or os.environ.get("DXT_PUBLISH_DIR")
    if not out:
        raise ConfigError("set DXT_PUBLISH_DIR (or the out Param) to the dataset directory")
    key = params.get("pseudonymise_key_file") or os.environ.get("DXT_PUBLISH_KEY_FILE")
    root = Path(archive_root())
    chosen = params.get("backend")
    found = [registry.get_publisher(str(chosen))] if chosen else registry.publishers()
    if not found:
        raise ConfigError("no backend declares a publish role: nothing to publish")
    # Only the backends with an archive under the root, when publishing all of them.
    roles = [b.publish_role() for b in found]
    if not chosen:
        roles = [r for r in roles if (root / r.backend).is_dir()]
        skipped = sorted({b.name for b in found} - {r.backend for r in roles})
        if skipped:
            log.info("no archive under %s for %s: not published", root, ", ".join(skipped))
        if not roles:
            raise ConfigError(
                f"{root} holds no archive of a publishing backend "
                f"({', '.join(b.name for b in found)}): check DXT_ARCHIVE_ROOT"
            )
    if params.get("require_complete", True):
        gaps = [f"{r.backend}/{g}" for r in roles for g in incomplete_days(r, root, first, last)]
        if gaps:
            raise MonthIncomplete(
                f"{first}..{last} is not complete: {len(gaps)} metric-days neither archived "
                f"nor empty (first: {', '.join(gaps[:5])}); the task retries, or trigger with "
                "require_complete = false to publish what there is"
            )
    results: dict[str, Any] = {}
    for role in roles:
        report = publish(
            role,
            PublishOptions(
                archive=root,
                out=Path(str(out)) / role.backend / f"{first}_{last}",
                from_month=first,
                to_month=last,
                pseudonymise_key_file=Path(key) if key else None,
                keep_identities=bool(params.get("keep_identities", False)),
                name=str(params.get("name") or ""),
            ),
        )
        for w in report.warnings:
            log.warning("%s: %s", role.backend, w)
        log.info("%s: %s", role.backend, report.summary())
        results[role.backend] = {
            "out": str(report.out),
            "months": [f"{y}-{m:02d}" for y, m in report.months],
            "files": len(report.files),
            "rows": report.rows,
            "records": [e.path for e in report.records],
            "warnings": len(report.warnings),
        }
    return results
