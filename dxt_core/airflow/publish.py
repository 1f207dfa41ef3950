"""Task body of the ``dxt_publish`` DAG: publish the run's month (or the months of the
Params) with :func:`dxt_core.publish.publish_examon` once the month is complete."""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

from dxt_core.config import archive_root
from dxt_core.errors import ConfigError, DxtError

log = logging.getLogger("dxt_core.airflow")


class MonthIncomplete(DxtError):
    """The month still has metric-days that are neither archived nor empty."""


def run_month(context: Any) -> str:
    """``YYYY-MM`` of the run: the month its data interval starts in (a monthly run of
    logical date 2020-03-01 publishes March, after March has ended)."""
    start = context.get("data_interval_start") or context.get("logical_date")
    if start is None:
        start = dt.datetime.now(dt.UTC)
    return f"{start.year:04d}-{start.month:02d}"


def publish_months(context: Any) -> dict[str, Any]:
    """Publish ``from_month``..``to_month`` (Params; default: the run's month) into
    ``out`` (Param, else ``DXT_PUBLISH_DIR``); returns the report as a dict (XCom)."""
    from dxt_core.publish import PublishOptions, publish_examon
    from dxt_core.publish.examon import incomplete_days

    params = context.get("params") or {}
    first = params.get("from_month") or run_month(context)
    last = params.get("to_month") or first
    out = params.get("out") or os.environ.get("DXT_PUBLISH_DIR")
    if not out:
        raise ConfigError("set DXT_PUBLISH_DIR (or the out Param) to the dataset directory")
    key = params.get("pseudonymise_key_file") or os.environ.get("DXT_PUBLISH_KEY_FILE")
    root = archive_root()
    if params.get("require_complete", True):
        gaps = incomplete_days(Path(root), first, last)
        if gaps:
            raise MonthIncomplete(
                f"{first}..{last} is not complete: {len(gaps)} metric-days neither archived "
                f"nor empty (first: {', '.join(gaps[:5])}); the task retries, or trigger with "
                "require_complete = false to publish what there is"
            )
    report = publish_examon(
        PublishOptions(
            archive=Path(root),
            out=Path(str(out)) / f"{first}_{last}",
            from_month=first,
            to_month=last,
            pseudonymise_key_file=Path(key) if key else None,
            keep_identities=bool(params.get("keep_identities", False)),
            name=str(params.get("name") or "examon-dataset"),
        )
    )
    for w in report.warnings:
        log.warning("%s", w)
    log.info("%s", report.summary())
    return {
        "out": str(report.out),
        "months": [f"{y}-{m:02d}" for y, m in report.months],
        "files": len(report.files),
        "rows": report.rows,
        "records": [e.path for e in report.records],
        "warnings": len(report.warnings),
    }
