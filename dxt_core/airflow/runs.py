"""What a DAG run archives (its day, and whether that day can be archived), and the Params.

One rule, whatever made the run (schedule, ``airflow backfill create``, the trigger form,
``airflow dags trigger -l``, the REST API, ``airflow dags test``): a run archives the day of
its ``day`` param when it has one, else the UTC date of its logical date. For scheduled and
backfill runs the logical date is the start of their data interval (the daily UTC
``CronDataIntervalTimetable``), so this is also their data interval's day. The data interval
of a *manual* run is not used: Airflow 3.3 infers it from a different moment depending on how
the run was made (``airflow dags trigger -l`` from the trigger time, ``run_after``; the REST
API and the trigger form from the logical date; both give the interval *before* that moment,
see ``infer_manual_data_interval`` in airflow/timetables/interval.py and
airflow/api/common/trigger_dag.py), so a run's interval may name neither the chosen
Logical Date nor the day before it. The logical date is what the user chose.

A run whose day lies before the DAG's start date, or that has not begun anywhere yet, cannot
be archived: its tasks fail with a message saying so (:func:`check_archivable`), and the
plugin's listener fails a run that Airflow made without tasks (a logical date before the start
date). Kept free of Airflow imports so that the task helpers, the plugin's listener and the
coverage view agree on one rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from dxt_core import masking
from dxt_core.errors import ConfigError
from dxt_core.windows import day_window

log = masking.logger("dxt_core.airflow")

DAY_PARAM = "day"
REPLACE_PARAM = "replace"

DAY_DESCRIPTION = (
    "Day to archive (YYYY-MM-DD). Empty: the run archives the UTC day of its Logical Date "
    "(a Logical Date of now archives today, once today is over). Days before the DAG's start "
    "date and days not begun yet cannot be archived."
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
    """The day a run archives (see the module docstring): the ``day`` param, else the UTC
    date of the logical date (of the data interval start for a run without one)."""
    chosen = parse_param_day(conf_day)
    if chosen is not None:
        return chosen
    start = logical_date or data_interval_start
    if start is None:
        raise ConfigError(
            f"this run of {dag_id} has no logical date and no 'day' param: trigger it with a "
            "day (the trigger form's 'day' field, or -c '{\"day\": \"YYYY-MM-DD\"}'), or use "
            f"'airflow backfill create --dag-id {dag_id} --from-date YYYY-MM-DDT00:00:00+00:00 "
            "--to-date YYYY-MM-DDT00:00:00+00:00'"
        )
    return utc_date(start)


def check_conf_keys(context: Mapping[str, Any]) -> None:
    """Refuse a run whose conf names a key that is not a param of its DAG: a misspelt
    ``{"Day": ...}`` was ignored, and the run archived another day than the one asked for.

    Raises:
        ConfigError: names the unknown keys and the DAG's params.
    """
    dag = context.get("dag")
    declared = getattr(dag, "params", None)
    conf = getattr(context.get("dag_run"), "conf", None)
    if not isinstance(conf, Mapping) or declared is None:
        return
    known = set(declared.keys())
    unknown = sorted(str(k) for k in conf if k not in known)
    if unknown:
        raise ConfigError(
            f"the run's conf has {', '.join(repr(k) for k in unknown)}, which "
            f"{'is not a param' if len(unknown) == 1 else 'are not params'} of "
            f"{getattr(dag, 'dag_id', 'the DAG')} (its params: {', '.join(sorted(known))}): "
            "fix the name and trigger the run again (it would be ignored)"
        )


def day_of(context: Mapping[str, Any]) -> dt.date:
    """The archive day of the running task's DAG run (its ``day`` param, else the day of its
    logical date), checked by :func:`check_archivable`."""
    params = context.get("params") or {}
    dag = context.get("dag")
    dag_id = getattr(dag, "dag_id", "the DAG")
    check_conf_keys(context)
    day = run_day(
        params.get(DAY_PARAM),
        context.get("data_interval_start"),
        context.get("logical_date"),
        dag_id,
    )
    start = getattr(dag, "start_date", None)
    check_archivable(day, start if isinstance(start, dt.datetime) else None, dag_id)
    return day


#: The widest offset ahead of UTC (Kiribati, UTC+14): a day not begun there has begun nowhere.
_AHEAD = dt.timedelta(hours=14)


def archivable_problem(
    day: dt.date,
    start_date: dt.datetime | None,
    dag_id: str = "the DAG",
    now: dt.datetime | None = None,
) -> str | None:
    """Why ``day`` cannot be archived by a run of ``dag_id`` (None when it can)."""
    if start_date is not None and day < utc_date(start_date):
        first = utc_date(start_date).isoformat()
        return (
            f"{day.isoformat()} is before the start date of {dag_id} ({first}): nothing "
            f"archives it. Archive it without Airflow (dxt extract ... --start-day {day} "
            f"--end-day {day}), or set the DAG's start date (DXT_<BACKEND>_START_DATE) earlier"
        )
    now = now or dt.datetime.now(dt.UTC)
    if day > utc_date(now + _AHEAD):
        return (
            f"{day.isoformat()} has not begun yet (now {now.astimezone(dt.UTC):%Y-%m-%d %H:%M} "
            "UTC): trigger a run for a day that is over, or today's to archive it once it ends"
        )
    return None


def check_archivable(day: dt.date, start_date: dt.datetime | None, dag_id: str = "the DAG") -> None:
    """Raise a :class:`ConfigError` saying why when ``day`` cannot be archived."""
    problem = archivable_problem(day, start_date, dag_id)
    if problem is not None:
        raise ConfigError(f"this run cannot archive {day.isoformat()}: {problem}")


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


def failed_note(problem: str) -> str:
    """The note of a run that cannot archive its day (failed by the plugin's listener)."""
    return f"Archives nothing: {problem}."


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
