"""What a DAG run archives: its day, and whether that day is over."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from dxt_core.errors import ConfigError
from dxt_core.windows import day_window

log = logging.getLogger("dxt_core.airflow")


def day_of(context: Any) -> dt.date:
    """The archive day of a run: the UTC date of its data interval start (= logical date)."""
    start = context.get("data_interval_start") or context.get("logical_date")
    if start is None:
        dag = context.get("dag")
        dag_id = getattr(dag, "dag_id", "the DAG")
        raise ConfigError(
            f"this run has no logical date; trigger {dag_id} through its schedule or "
            f"'airflow backfill create --dag-id {dag_id} --from-date D --to-date D'"
        )
    utc = start.astimezone(dt.UTC)
    return dt.date(utc.year, utc.month, utc.day)


def day_is_over(day: dt.date, time_zone: str, settle_s: int) -> bool:
    """True once ``day`` (midnight to midnight in ``time_zone``) has ended plus ``settle_s``."""
    end = day_window(day, time_zone).end + dt.timedelta(seconds=settle_s)
    if dt.datetime.now(dt.UTC) < end:
        log.info("day %s (%s) is not over until %s; waiting", day, time_zone, end)
        return False
    return True
