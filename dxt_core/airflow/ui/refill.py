"""Refill planning for the coverage view: which REST calls refill the chosen cells.

A plan is computed from the archive grid and the Airflow grid of :mod:`.grid`; the page sends
it to Airflow's own REST API (``clearTaskInstances``, ``backfills``) with the signed-in user's
credentials, so Airflow checks the user's right to clear or backfill.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dxt_core.airflow.runs import DAY_PARAM, run_day, utc_date
from dxt_core.airflow.ui.grid import (
    MAX_DAYS,
    TI_CODES,
    TI_NAMES,
    AirflowStates,
    NotFound,
    SourceSpec,
    Units,
    _aware,
    _runs,
    _task_instances,
    airflow_states,
    archive_cells,
    source_units,
)
from dxt_core.archive import Archive
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError
from dxt_core.manifests import not_over_ends
from dxt_core.scan import STATE_CODES

#: The most distinct days one refill plan may name (a plan over 100,000 days once took the
#: API server to 1.1 GB); the grid's own range limit.
MAX_PLAN_DAYS = MAX_DAYS
#: The most cells one refill plan may name.
MAX_PLAN_CELLS = 100_000
#: On SQLite, the most days one refill's backfill spans (its first day to its last): Airflow
#: creates a backfill's runs in one write transaction, a row for every day of the range (a day
#: that has a run gets a row saying why it was not made: ``_create_backfill_dag_run`` in
#: airflow/models/backfill.py), and over hundreds of days it competed with the scheduler for
#: SQLite's one writer (503 "database is locked" three times, runs rolled back, the scheduler
#: dead with StaleDataError). Airflow runs one backfill of a DAG at a time, so the refill
#: names the remaining days and says to refill them once this backfill is done.
SQLITE_BACKFILL_DAYS = 31

#: skip(unit row or None for every unit, day, reason)
Skip = Callable[[int | None, dt.date, str], None]


@dataclass
class RefillPlan:
    """What "Refill" asks Airflow's REST API to do, with the signed-in user's rights.

    Every chosen cell is in exactly one place: a clear (``clears[i]["cells"]``), the
    backfill (``backfill["cells"]``), or ``skipped`` with the reason.
    """

    dag_id: str
    task_id: str
    clears: list[dict[str, Any]] = field(default_factory=list)
    backfill: dict[str, Any] | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    cells: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "clears": self.clears,
            "backfill": self.backfill,
            "skipped": self.skipped,
            "cells": self.cells,
        }


@dataclass
class _Buckets:
    """Where each wanted cell goes, before the plan is written."""

    per_run: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # run -> (u, mi)
    whole: dict[str, list[int]] = field(default_factory=dict)  # never-expanded run -> units
    no_run: dict[dt.date, list[int]] = field(default_factory=dict)
    rerun: dict[dt.date, list[int]] = field(default_factory=dict)  # failed runs of a
    # cancelled backfill, by day


def check_plan_size(n_cells: int, n_days: int) -> None:
    """A clear error for a plan too large to compute in one request."""
    if n_days > MAX_PLAN_DAYS:
        raise ConfigError(
            f"the refill names {n_days:,} distinct days; at most {MAX_PLAN_DAYS:,} at once: "
            "refill a shorter range"
        )
    if n_cells > MAX_PLAN_CELLS:
        raise ConfigError(
            f"the refill names {n_cells:,} cells; at most {MAX_PLAN_CELLS:,} at once: refill "
            "fewer units or a shorter range"
        )


def latest_dag(session: Any, dag_id: str) -> Any:
    """The DAG's latest serialized version, as Airflow's backfill reads it (None when the
    DAG is not loaded or its row cannot be read: the plan goes on without it)."""
    try:
        from airflow.models.dagbag import DBDagBag

        return DBDagBag().get_latest_version_of_dag(dag_id, session=session)
    except Exception:  # an unreadable DAG row
        return None


def start_day_of(dag: Any) -> dt.date | None:
    """The UTC day of a DAG's start date (None without a DAG or a start date)."""
    start = getattr(dag, "start_date", None)
    return utc_date(start) if isinstance(start, dt.datetime) else None


def dag_start_day(session: Any, dag_id: str) -> dt.date | None:
    """The UTC day of the DAG's start date, from its latest serialized version (None when
    the DAG is not loaded)."""
    return start_day_of(latest_dag(session, dag_id))


def _midnight(day: dt.date) -> dt.datetime:
    """The logical date of the run of ``day``: its UTC midnight (dxt_core/airflow/dags.py)."""
    return dt.datetime.combine(day, dt.time(), dt.UTC)


def _timetable_info(dag: Any, at: dt.datetime) -> Any:
    """Airflow's ``DagRunInfo`` of the DAG's run of logical date ``at``, from its timetable as
    a backfill iterates it (``SerializedDAG.iter_dagrun_infos_between`` in
    airflow/serialization/definitions/dag.py); None without a DAG, or when the timetable has
    no run of that logical date."""
    timetable = getattr(dag, "timetable", None)
    if timetable is None or getattr(timetable, "partitioned", False):
        return None
    try:
        info = next(iter(dag.iter_dagrun_infos_between(at, at)), None)
    except Exception:  # a timetable that cannot say: the plan uses the dxt DAGs' rule
        return None
    return info if info is not None and info.logical_date == at else None


def interval_end(dag: Any, day: dt.date) -> dt.datetime:
    """When the data interval of the run of ``day`` ends. The dxt DAGs' timetable,
    ``CronDataIntervalTimetable("0 0 * * *", timezone=UTC)`` (dxt_core/airflow/dags.py), gives
    the run of logical date D 00:00 UTC the interval [D 00:00, D+1 00:00) UTC, whatever the
    zone the backend cuts its days in; the DAG's own timetable says it when it is loaded."""
    info = _timetable_info(dag, _midnight(day))
    if info is not None and info.data_interval is not None:
        end: dt.datetime = info.data_interval.end
        return end
    return _midnight(day + dt.timedelta(days=1))


def _open_backfill(session: Any, dag_id: str) -> tuple[int, bool] | None:
    """The DAG's backfill that is not completed, if any: its id, and whether it is paused."""
    from airflow.models.backfill import Backfill
    from sqlalchemy import select

    found = session.execute(
        select(Backfill.id, Backfill.is_paused).where(
            Backfill.dag_id == dag_id, Backfill.completed_at.is_(None)
        )
    ).first()
    return None if found is None else (int(found[0]), bool(found[1]))


#: Added to the reason of a cell that waits for its run while the DAG is paused: Airflow
#: 3.3.2's scheduler starts a queued run, and examines a running one, only of a DAG that is not
#: paused, backfill runs included (``DagRun.get_queued_dag_runs_to_set_running`` and
#: ``get_running_dag_runs_to_examine`` in airflow/models/dagrun.py join
#: ``DagModel.is_paused == false()``).
PAUSED_NOTE = "; the DAG is paused: Airflow schedules none of its runs until it is unpaused"


def _failed_runs_between(
    session: Any, dag_id: str, first: dt.date, last: dt.date
) -> list[tuple[str, dt.datetime, dt.date]]:
    """``(run_id, logical date, day it archives)`` of each logical date in ``[first, last]``
    whose latest run failed, the run a backfill that reprocesses failed runs clears whole
    (``_get_latest_dag_run_row_query``, ``_get_dag_run_no_create_reason`` and
    ``_handle_clear_run`` in airflow/models/backfill.py: the newest run by start date)."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    dr = DagRun.__table__
    rows = session.execute(
        select(dr.c.run_id, dr.c.logical_date, dr.c.state, dr.c.start_date, dr.c.conf)
        .where(
            dr.c.dag_id == dag_id,
            dr.c.logical_date >= _midnight(first),
            dr.c.logical_date <= _midnight(last),
        )
        .order_by(dr.c.id)
    )
    latest: dict[dt.datetime, tuple[Any, ...]] = {}
    never = dt.datetime.min.replace(tzinfo=dt.UTC)
    for row in rows:
        logical = _aware(row[1])
        if logical is None:
            continue
        have = latest.get(logical)
        started = _aware(row[3]) or never
        if have is None or started >= (_aware(have[3]) or never):
            latest[logical] = row
    out: list[tuple[str, dt.datetime, dt.date]] = []
    for logical, (run_id, _, state, _, conf) in sorted(latest.items()):
        if state != "failed":
            continue
        chosen = conf.get(DAY_PARAM) if isinstance(conf, dict) else None
        try:
            day = run_day(chosen, None, logical, dag_id)
        except ConfigError:
            day = utc_date(logical)
        out.append((str(run_id), logical, day))
    return out


def _paused_backfill_runs(session: Any, run_ids: Sequence[str], dag_id: str) -> dict[str, int]:
    """The runs among ``run_ids`` that belong to a paused backfill (a cancelled one is
    paused), with its id. Airflow never starts a queued run of a paused backfill
    (``DagRun.get_queued_dag_runs_to_set_running``), so clearing such a run leaves it queued
    for ever: it is refilled by a new backfill that reprocesses failed runs instead."""
    if not run_ids:
        return {}
    from airflow.models.backfill import Backfill
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    out: dict[str, int] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        rows = session.execute(
            select(DagRun.run_id, Backfill.id)
            .join(Backfill, Backfill.id == DagRun.backfill_id)
            .where(
                DagRun.dag_id == dag_id,
                DagRun.run_id.in_(ids[i : i + 500]),
                Backfill.is_paused.is_(True),
            )
        )
        out.update({str(r): int(b) for r, b in rows})
    return out


def _run_has_expanded(session: Any, spec: SourceSpec, run_ids: Sequence[str]) -> set[str]:
    """The runs among ``run_ids`` whose mapped task has expanded (a map index >= 0)."""
    return {r for r, mi, *_ in _task_instances(session, spec, list(run_ids)) if mi >= 0}


def refill_plan(
    session: Any,
    spec: SourceSpec,
    cells: Sequence[tuple[str, dt.date]] | None,
    days: Sequence[dt.date],
    archive: Archive | None = None,
    max_active_runs: int | None = None,
    sqlite: bool = False,
    start_day: dt.date | None = None,
    paused: bool = False,
    now: dt.datetime | None = None,
    only_units: Sequence[str] | None = None,
) -> RefillPlan:
    """The REST calls that refill ``cells`` (or, when None, every missing, corrupt or failed
    cell in ``days`` from the DAG's start date on, and every cell archived before its day
    ended whose day has ended since, as ``dxt coverage`` plans them; of ``only_units`` when
    given: the rows a filtered view shows).

    Per cell, whatever its task instance's state: a task instance that is not running or
    waiting to run in a live run (failed, upstream_failed, success, or none in a finished run,
    as after a cancelled backfill) is cleared by its map index; a day whose run failed
    before expanding its units is cleared whole (Airflow expands them again); a day with no
    run goes into one backfill (on SQLite spanning at most :data:`SQLITE_BACKFILL_DAYS`
    days). Cells running or queued in a live run (waiting for the unpause when the DAG is
    ``paused``), days before the DAG's start date, days whose run's data interval has not
    ended by ``now`` (Airflow's backfill makes no run for them) and days left for a later
    backfill are skipped with the reason.
    """
    archive = archive or Archive(archive_root())
    units = source_units(spec, archive)
    if cells is not None:
        days = sorted({d for _, d in cells})
        check_plan_size(len(cells), len(days))
    if not days:
        return RefillPlan(spec.dag_id, spec.task_id)
    days = list(days)
    check_plan_size(0, len(days))
    dag = latest_dag(session, spec.dag_id)
    start_day = start_day if start_day is not None else start_day_of(dag)
    af = airflow_states(session, spec, units, days)
    now = now or dt.datetime.now(dt.UTC)
    if cells is None:
        wanted = every_bad_cell(archive, spec, units, days, af, start_day, now)
        if only_units is not None:
            pos = units.position()
            unknown = [n for n in only_units if n not in pos]
            if unknown:
                raise NotFound(f"{spec.source} has no unit {unknown[0]!r}")
            shown = {pos[n] for n in only_units}
            wanted = [(u, d) for u, d in wanted if u in shown]
        check_plan_size(len(wanted), len(days))
    else:
        pos, day_pos = units.position(), {d: i for i, d in enumerate(days)}
        wanted = []
        for name, day in cells:
            if name not in pos:
                raise NotFound(f"{spec.source} has no unit {name!r}")
            wanted.append((pos[name], day_pos[day]))
    plan = RefillPlan(spec.dag_id, spec.task_id, cells=len(wanted))

    def skip(u: int | None, day: dt.date, reason: str) -> None:
        name = "(every unit)" if u is None else units.names[u]
        plan.skipped.append({"unit": name, "day": day.isoformat(), "reason": reason})

    buckets = _sort_cells(session, spec, wanted, days, af, start_day, skip, paused)
    _move_paused_backfill_runs(session, spec, buckets, af, skip)
    _add_clears(plan, spec, units, buckets, af)
    _skip_days_not_over(buckets, dag, now, skip)
    if buckets.no_run or buckets.rerun:
        backfill = _BackfillContext(dag, af, max_active_runs, sqlite, paused)
        _plan_backfill(session, spec, plan, buckets, units, backfill, skip)
    return plan


def every_bad_cell(
    archive: Archive,
    spec: SourceSpec,
    units: Units,
    days: Sequence[dt.date],
    af: AirflowStates,
    start_day: dt.date | None,
    now: dt.datetime,
) -> list[tuple[int, int]]:
    """The (unit, day) cells "Select all missing and failed" plans: missing, corrupt (a data
    file gone, or of another size than its manifest's, :func:`archive_cells`) or failed, and
    archived before their day ended when that day is over by ``now``; from ``start_day`` on."""
    grid, holes = archive_cells(archive, spec.source, units.parts, days)
    told = {**holes, **grid.details}
    return _bad_cells(grid.rows, af.rows, days, start_day, _ended_since(told, now))


def _ended_since(details: dict[tuple[int, int], str], now: dt.datetime) -> set[tuple[int, int]]:
    """The cells archived (or found empty) before their day ended, whose day has ended by
    ``now`` (the "not over: ..." detail, :func:`dxt_core.manifests.not_over_ends`): they hold
    what the source had then, and a refill fetches the whole day."""
    out = set()
    for cell, detail in details.items():
        ends = not_over_ends(detail)
        if ends is not None and ends <= now:
            out.add(cell)
    return out


def _bad_cells(
    archive_rows: Sequence[str],
    airflow_rows: Sequence[str],
    days: Sequence[dt.date],
    start_day: dt.date | None,
    ended_since: set[tuple[int, int]] | None = None,
) -> list[tuple[int, int]]:
    """The (unit, day) cells that are missing, corrupt or failed, or in ``ended_since``
    (archived before their day ended, over now), from the start date on."""
    bad_archive = {STATE_CODES["missing"], STATE_CODES["corrupt"]}
    ended_since = ended_since or set()
    wanted: list[tuple[int, int]] = []
    for u, (arow, frow) in enumerate(zip(archive_rows, airflow_rows, strict=True)):
        for d in range(len(days)):
            if start_day is not None and days[d] < start_day:
                continue  # never scheduled: not missing, and no run can archive it
            if arow[d] in bad_archive or frow[d] == "f" or (u, d) in ended_since:
                wanted.append((u, d))
    return wanted


def _sort_cells(
    session: Any,
    spec: SourceSpec,
    wanted: Sequence[tuple[int, int]],
    days: Sequence[dt.date],
    af: AirflowStates,
    start_day: dt.date | None,
    skip: Skip,
    paused: bool = False,
) -> _Buckets:
    """Each wanted cell into a clear of its task, of its whole run, the backfill, or skipped
    (a cell that waits for its queued run says so when the DAG is ``paused``)."""
    out = _Buckets()
    waits = PAUSED_NOTE if paused else ""
    unexpanded: dict[str, list[tuple[int, dt.date]]] = {}
    for u, d in wanted:
        day = days[d]
        info = af.tasks.get((u, d))
        run = af.runs.get(day)
        live = run is not None and run.state in ("queued", "running")
        if start_day is not None and day < start_day:
            skip(
                u,
                day,
                f"before the start date of {spec.dag_id} ({start_day}): no run "
                "archives it (use dxt extract for it)",
            )
        elif info is not None:
            code = TI_CODES.get(info.state, "o")
            if code in ("r", "u"):
                skip(u, day, f"{TI_NAMES[code]} in run {info.run_id}: it runs already")
            elif code == "q" and live:
                skip(u, day, f"queued in run {info.run_id}{waits or ': it runs already'}")
            else:
                out.per_run.setdefault(info.run_id, []).append((u, info.map_index))
        elif run is None:
            out.no_run.setdefault(day, []).append(u)
        elif live:
            skip(
                u,
                day,
                f"run {run.run_id} is {run.state} and has not expanded this unit yet{waits}",
            )
        else:
            unexpanded.setdefault(run.run_id, []).append((u, day))
    expanded = _run_has_expanded(session, spec, list(unexpanded))
    for run_id, candidates in unexpanded.items():
        for u, day in candidates:
            if run_id in expanded:
                skip(
                    u,
                    day,
                    f"run {run_id} has no task for this unit (the catalog changed "
                    "since): clear the whole run in Airflow to expand it again",
                )
            else:
                out.whole.setdefault(run_id, []).append(u)
    return out


def _move_paused_backfill_runs(
    session: Any, spec: SourceSpec, buckets: _Buckets, af: AirflowStates, skip: Skip
) -> None:
    """Runs of a cancelled (paused) backfill: a clear would leave them queued for ever. A
    failed one goes to the new backfill (reprocessing failed runs); others are skipped."""
    day_of_run = {r.run_id: r.day for r in af.runs.values()}
    state_of_run = {r.run_id: r.state for r in af.runs.values()}
    paused = _paused_backfill_runs(session, [*buckets.per_run, *buckets.whole], spec.dag_id)
    for run_id, backfill_id in paused.items():
        run_of = day_of_run.get(run_id)
        if run_of is None:  # not the day's latest run: left to its clear
            continue
        found_units = [u for u, _ in buckets.per_run.pop(run_id, [])]
        found_units += buckets.whole.pop(run_id, [])
        if state_of_run.get(run_id) == "failed":
            buckets.rerun.setdefault(run_of, []).extend(found_units)
            continue
        for u in found_units:
            skip(
                u,
                run_of,
                f"run {run_id} belongs to the cancelled backfill {backfill_id}, whose runs "
                "Airflow does not start again, and it did not fail: rerun the day with "
                "'airflow backfill create ... --reprocess-behavior completed'",
            )


def _add_clears(
    plan: RefillPlan, spec: SourceSpec, units: Units, buckets: _Buckets, af: AirflowStates
) -> None:
    """One clear per run: of the units' task instances, or of the whole run."""
    day_of_run = {r.run_id: r.day for r in af.runs.values()}

    def when(run_id: str) -> str:
        day = day_of_run.get(run_id)
        return day.isoformat() if day else ""

    for run_id, found in buckets.per_run.items():
        plan.clears.append(
            {
                "dag_run_id": run_id,
                "task_ids": sorted({(spec.task_id, mi) for _, mi in found}),
                "only_failed": False,
                "cells": [[units.names[u], when(run_id)] for u, _ in found],
            }
        )
    for run_id in sorted(buckets.whole):
        plan.clears.append(
            {
                "dag_run_id": run_id,
                "task_ids": None,
                # every task of the run: it failed or was cancelled before this task expanded
                "only_failed": False,
                "whole_run": True,
                "cells": [[units.names[u], when(run_id)] for u in buckets.whole[run_id]],
            }
        )


def _skip_days_not_over(buckets: _Buckets, dag: Any, now: dt.datetime, skip: Skip) -> None:
    """Take out of the backfill each day whose run's data interval has not ended: Airflow
    3.3.2 makes a backfill run only for an interval that ended before now (``_get_info_list``
    in airflow/models/backfill.py keeps ``data_interval.end < now``), so such a day would be
    dropped without a word (and a backfill of only such days refused)."""
    for days in (buckets.no_run, buckets.rerun):
        # the newest first: once one day is over, every day before it is too
        for day in sorted(days, reverse=True):
            end = interval_end(dag, day)
            if end < now:
                break
            for u in days.pop(day):
                skip(
                    u,
                    day,
                    f"not over: the data interval of its run ends {end:%Y-%m-%d %H:%M} UTC "
                    f"(now {now.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC), and Airflow "
                    "backfills only runs whose interval has ended: refill it after that",
                )


@dataclass
class _BackfillContext:
    """What the backfill's planning reads beside the buckets."""

    dag: Any  # the DAG's latest serialized version, None when it is not loaded
    af: AirflowStates
    max_active_runs: int | None
    sqlite: bool
    paused: bool


def _plan_backfill(
    session: Any,
    spec: SourceSpec,
    plan: RefillPlan,
    buckets: _Buckets,
    units: Units,
    ctx: _BackfillContext,
    skip: Skip,
) -> None:
    """Put the days with no run, and those whose run failed in a cancelled backfill, into
    one backfill (reprocessing failed runs when there are such days), or skip them with the
    reason."""
    no_run, rerun = buckets.no_run, buckets.rerun
    cells = {d: no_run.get(d, []) + rerun.get(d, []) for d in {*no_run, *rerun}}
    if not cells:
        return
    open_backfill = _open_backfill(session, spec.dag_id)
    if open_backfill is not None:
        reason = _open_backfill_reason(spec.dag_id, *open_backfill, ctx.paused)
        for day in sorted(cells):
            for u in cells[day]:
                skip(u, day, reason)
        return
    ordered = sorted(cells)
    take, stop = _backfill_span(session, spec, ordered, ctx)
    for day in ordered[len(take) :]:
        for u in cells[day]:
            skip(
                u,
                day,
                f"later: {stop} ({take[0]} to {take[-1]} now); refill again once that "
                "backfill is done",
            )
    reprocess = "failed" if any(d in rerun for d in take) else "none"
    plan.backfill = {
        "dag_id": spec.dag_id,
        "from_date": _midnight(take[0]).isoformat().replace("+00:00", "Z"),
        "to_date": _midnight(take[-1]).isoformat().replace("+00:00", "Z"),
        # "failed": Airflow clears the failed run of such a day into this backfill
        "reprocess_behavior": reprocess,
        "days": [d.isoformat() for d in take],
        "rerun_days": [d.isoformat() for d in take if d in rerun],
        "cells": [[units.names[u], d.isoformat()] for d in take for u in cells[d]],
        # the other failed runs of the range, which Airflow reruns whole too
        "other_failed_runs": (
            _other_failed_runs(session, spec, plan, take, rerun, ctx)
            if reprocess == "failed"
            else []
        ),
        **({"max_active_runs": ctx.max_active_runs} if ctx.max_active_runs else {}),
    }


def _backfill_span(
    session: Any, spec: SourceSpec, ordered: Sequence[dt.date], ctx: _BackfillContext
) -> tuple[list[dt.date], str]:
    """The first days of ``ordered`` that one backfill refills, and why it stops there (when
    it does). A backfill makes a run for every day of its span that has none, so it stops
    before a day between two chosen days that has no run (a day archived by ``dxt extract``,
    or never run): the refill makes runs for the chosen days only. Airflow allows one open
    backfill per DAG, so the rest waits for a later refill; on SQLite the span is at most
    :data:`SQLITE_BACKFILL_DAYS` days (Airflow writes a row per day of it)."""
    have_run = {r.day for r in _runs(session, spec.dag_id, ordered[0], ordered[-1])}
    take = [ordered[0]]
    for day in ordered[1:]:
        if ctx.sqlite and (day - ordered[0]).days >= SQLITE_BACKFILL_DAYS:
            return take, f"on SQLite one refill backfills at most {SQLITE_BACKFILL_DAYS} days"
        between = (take[-1] + dt.timedelta(days=i) for i in range(1, (day - take[-1]).days))
        gap = next((d for d in between if d not in have_run), None)
        if gap is not None:
            return take, (
                f"one backfill covers consecutive days, and {gap} (not chosen) has no run: "
                "a backfill over it would make runs for days nobody chose"
            )
        take.append(day)
    return take, ""


def _open_backfill_reason(
    dag_id: str, backfill_id: int, backfill_paused: bool, paused: bool
) -> str:
    """Why a day is not backfilled while the DAG's backfill ``backfill_id`` is open."""
    if backfill_paused:
        return (
            f"backfill {backfill_id} of {dag_id} is paused and not completed; Airflow runs one "
            "backfill of a DAG at a time and starts none of a paused backfill's runs: unpause "
            "it (Airflow's Backfills list) and refill this day when it has finished, or "
            "cancel it and refill this day"
        )
    if paused:
        return (
            f"backfill {backfill_id} of {dag_id} is not completed, and its runs wait for "
            f"{dag_id} to be unpaused (Airflow starts no run of a paused DAG, backfill runs "
            "included); Airflow runs one backfill at a time: unpause the DAG and refill this "
            "day when that backfill has finished"
        )
    return (
        f"backfill {backfill_id} of {dag_id} is still running; Airflow runs one at a time: "
        "refill this day when it has finished"
    )


def _other_failed_runs(
    session: Any,
    spec: SourceSpec,
    plan: RefillPlan,
    take: Sequence[dt.date],
    rerun: dict[dt.date, list[int]],
    ctx: _BackfillContext,
) -> list[dict[str, str]]:
    """The failed runs in the backfill's range that the refill did not choose: a backfill
    that reprocesses failed runs clears each whole, every task of it (``_handle_clear_run``
    in airflow/models/backfill.py). The runs of the chosen days, and those this plan clears
    (queued again by then, so Airflow leaves them alone), are not among them."""
    chosen = {r.run_id for d, r in ctx.af.runs.items() if d in rerun}
    chosen |= {c["dag_run_id"] for c in plan.clears}
    out = []
    for run_id, logical, day in _failed_runs_between(session, spec.dag_id, take[0], take[-1]):
        if run_id in chosen:
            continue
        if ctx.dag is not None and _timetable_info(ctx.dag, logical) is None:
            continue  # not a logical date of the timetable: the backfill has no run there
        if ctx.dag is None and logical != _midnight(utc_date(logical)):
            continue
        out.append(
            {
                "run_id": run_id,
                "logical_date": utc_date(logical).isoformat(),
                "day": day.isoformat(),
            }
        )
    return out
