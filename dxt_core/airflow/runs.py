"""What a DAG run archives (its day, and whether that day is over), and the dxt DAGs' Params.

Scheduled and backfill runs of logical date D archive day D (the UTC date of their data
interval start, which is their logical date with the daily UTC timetable). A run triggered
with the ``day`` param (the UI's trigger form, ``airflow dags trigger -c '{"day": "..."}'``)
archives that day. A manual run without it archives its data interval, the day before its
logical date: "trigger now" archives yesterday. Kept free of Airflow imports so that the
task helpers, the plugin's listener and the coverage view agree on one rule.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from dxt_core.errors import ConfigError
from dxt_core.windows import day_window

log = logging.getLogger("dxt_core.airflow")

DAY_PARAM = "day"
REPLACE_PARAM = "replace"

DAY_DESCRIPTION = (
    "Day to archive (YYYY-MM-DD). Empty: scheduled and backfill runs archive their logical "
    "date; a manual run archives the day before its logical date (trigger now = yesterday)."
)
REPLACE_DESCRIPTION = (
    "Replace an archived day even when the source now returns fewer rows than the archive "
    "holds (data expired at the source). Off: such a day is kept as archived."
)


def parse_param_day(value: object, where: str = "the 'day' param") -> dt.date | None:
    """The ``day`` param as a date (None when empty); a clear error for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10])
        except ValueError:
            pass
    raise ConfigError(f"{where} is {value!r}: give a day as YYYY-MM-DD, or leave it empty")


def utc_date(t: dt.datetime) -> dt.date:
    utc = t.astimezone(dt.UTC)
    return dt.date(utc.year, utc.month, utc.day)


def run_day(
    conf_day: object,
    data_interval_start: dt.datetime | None,
    logical_date: dt.datetime | None,
    dag_id: str = "the DAG",
) -> dt.date:
    """The day a run archives (see the module docstring)."""
    chosen = parse_param_day(conf_day)
    if chosen is not None:
        return chosen
    start = data_interval_start or logical_date
    if start is None:
        raise ConfigError(
            f"this run of {dag_id} has no logical date and no 'day' param: trigger it with a "
            "day (the trigger form's 'day' field, or -c '{\"day\": \"YYYY-MM-DD\"}'), or use "
            f"'airflow backfill create --dag-id {dag_id} --from-date D --to-date D'"
        )
    return utc_date(start)


def day_of(context: Mapping[str, Any]) -> dt.date:
    """The archive day of the running task's DAG run: its ``day`` param, else its data
    interval start (the logical date of scheduled and backfill runs)."""
    params = context.get("params") or {}
    dag = context.get("dag")
    return run_day(
        params.get(DAY_PARAM),
        context.get("data_interval_start"),
        context.get("logical_date"),
        getattr(dag, "dag_id", "the DAG"),
    )


def day_end(day: dt.date, time_zone: str, settle_s: int) -> dt.datetime:
    """When ``day`` (midnight to midnight in ``time_zone``) may be archived: its end plus
    ``settle_s`` seconds of ingestion lag."""
    return day_window(day, time_zone).end + dt.timedelta(seconds=settle_s)


def day_is_over(day: dt.date, time_zone: str, settle_s: int) -> bool:
    """True once ``day`` (midnight to midnight in ``time_zone``) has ended plus ``settle_s``."""
    end = day_end(day, time_zone, settle_s)
    if dt.datetime.now(dt.UTC) < end:
        log.info("day %s (%s) is not over until %s; waiting", day, time_zone, end)
        return False
    return True


def replace_of_context(context: Mapping[str, Any]) -> bool:
    params = context.get("params") or {}
    value = params.get(REPLACE_PARAM, False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def run_note(day: dt.date, chosen: bool) -> str:
    """The note the plugin puts on a run that has none."""
    how = "the day chosen when it was triggered" if chosen else "from its logical date"
    return f"Archives {day.isoformat()} ({how})."


#: The task a backend with the reconcile role adds (dxt_core.airflow.dags.backend_dag).
RECONCILE_TASK_ID = "reconcile_recent_days"
#: Airflow's limit on a run note (``DagRunNote.content``, String(1000)).
NOTE_LIMIT = 1000


def note_with_reconcile(note: str | None, found: str) -> str:
    """The run's note with what its reconcile task found as its last sentence (replacing the
    one an earlier end of the same run left), cut to Airflow's limit with an ellipsis."""
    note = (note or "").strip()
    found = " ".join(found.split())
    if not found:
        return note
    found = f"{found[0].upper()}{found[1:]}."
    at = note.find("Reconcile ")
    if at == 0 or (at > 0 and note[at - 2 : at] == ". "):
        note = note[:at].rstrip()  # a cleared run that ends again: its new finding
    text = f"{note} {found}" if note else found
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 1] + "…"


def day_param() -> Any:
    """The ``day`` Param of the dxt DAGs (a date picker in the trigger form)."""
    from airflow.sdk import Param

    return Param(
        None,
        type=["null", "string"],
        format="date",
        title="Day to archive",
        description=DAY_DESCRIPTION,
    )


def replace_param() -> Any:
    """The ``replace`` Param of the dxt DAGs."""
    from airflow.sdk import Param

    return Param(False, type="boolean", title="Replace", description=REPLACE_DESCRIPTION)
