"""The coverage grid: archive state (manifest index) x Airflow state (task instances).

One row per unit (Examon metric, Kwollect site/metric, collectd family), one column per day.
Archive states come from :func:`dxt_core.index.scan_states`; Airflow states from the
metadata database, read in one query per range: the task instance of the unit in the latest
run that archives that day (a run's day follows :mod:`dxt_core.airflow.runs`). A mapped task
instance is matched to its unit by its rendered map index (``plugin/metric``, ``site/metric``,
``family``); one that has not run yet has none, and is matched through the list its
upstream task returned (the map index is a position in it). Refill planning is in
:mod:`.refill`.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dxt_core.airflow.runs import DAY_PARAM, parse_param_day, run_day
from dxt_core.archive import Archive, DayKey
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError, DxtError
from dxt_core.index import ManifestIndex, unit_of
from dxt_core.manifests import NOT_OVER_DETAIL
from dxt_core.reconcile import day_check
from dxt_core.scan import STATE_CODES, StateGrid, scan_states
from dxt_core.windows import days as day_range

#: Airflow task instance state -> one character per cell.
TI_CODES: dict[str | None, str] = {
    "success": "s",
    "failed": "f",
    "upstream_failed": "f",
    "running": "r",
    "deferred": "r",
    "restarting": "r",
    "up_for_reschedule": "r",
    "queued": "q",
    "scheduled": "q",
    None: "q",  # cleared, or created and not scheduled yet
    "up_for_retry": "u",
    "skipped": "o",
    "removed": "o",
}
NO_RUN = "n"
TI_NAMES = {
    "s": "success",
    "f": "failed",
    "r": "running",
    "q": "queued",
    "u": "up for retry",
    "n": "no run",
    "o": "skipped",
}
MAX_DAYS = 3700
#: The most days one click of the view's "Reconcile" asks the source to count.
MAX_RECONCILE_DAYS = 31


class NotFound(LookupError):
    """A unit or cell the source does not have (answered with 404)."""


@dataclass(frozen=True)
class SourceSpec:
    """How one archive source maps onto its DAG."""

    source: str
    title: str
    dag_id: str
    task_id: str
    group: str
    #: upstream task whose return value lists the mapped units, in map index order
    expand_from: str | None

    def units(self) -> tuple[list[tuple[str, ...]], list[str]]:
        """The configured units (archive path parts) and configuration warnings."""
        try:
            return _configured_units(self.source), []
        except (DxtError, OSError, KeyError) as exc:
            return [], [f"{self.source}: {exc}"]


def sources() -> dict[str, SourceSpec]:
    """Every backend of the registry that has a DAG, by source (archive directory) name."""
    from dxt_core import backends as registry

    out: dict[str, SourceSpec] = {}
    for b in registry.backends():
        if not (b.dag_id and b.task_id):
            continue
        group, expand_from = ("group", None)
        if b.tasks is not None:
            tasks = b.dag_tasks()
            group, expand_from = tasks.group, tasks.units_task_id
        out[b.name] = SourceSpec(b.name, b.title, b.dag_id, b.task_id, group, expand_from)
    return out


def dag_sources() -> dict[str, SourceSpec]:
    """The same, by DAG id."""
    return {s.dag_id: s for s in sources().values()}


def _configured_units(source: str) -> list[tuple[str, ...]]:
    """The units the DAG's settings name (no network), from the backend's tasks; a backend
    that declares none shows the units its index holds."""
    from dxt_core import backends as registry

    b = registry.get(source)
    return b.dag_tasks().configured_parts() if b.tasks is not None else []


def display_name(parts: Sequence[str]) -> str:
    """The unit's name in the grid, equal to its task's rendered map index."""
    return "/".join(p.split("=", 1)[1] if "=" in p else p for p in parts)


def _unit_namer(source: str) -> Callable[[object], str | None]:
    """Unit -> its name (the rendered map index), by the backend's declaration."""
    from dxt_core import backends as registry

    b = registry.get(source)
    if b.tasks is None:
        return lambda item: item if isinstance(item, str) else None
    tasks = b.dag_tasks()

    def name(item: object) -> str | None:
        try:
            return tasks.unit_name(item)
        except (KeyError, TypeError, IndexError):
            return None

    return name


@dataclass
class Units:
    """The rows of a source's grid, sorted by group then name."""

    parts: list[tuple[str, ...]]
    names: list[str]
    groups: list[str]
    warnings: list[str] = field(default_factory=list)

    def position(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}


def archived_units(archive: Archive, source: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """The units the archive's index holds, and a warning when it holds none though the
    archive has the source's data. A directory archive: its SQLite index; an S3 archive: a
    listing of its index objects (the local staging folder knows nothing)."""
    from dxt_core.store.s3 import S3Archive

    if isinstance(archive, S3Archive):
        found = archive.units(source)
        if found or not archive.holds(source):
            return found, []
        return [], [
            f"{archive.url} holds {source} data but no index objects: units no longer "
            f"configured are not shown; run dxt index rebuild --archive {archive.url}"
        ]
    with ManifestIndex(archive.root) as idx:
        return [tuple(u.split("/")) for u in idx.units(source)], []


def source_units(spec: SourceSpec, archive: Archive) -> Units:
    """The configured units and those archived before (no longer configured: still shown)."""
    configured, warnings = spec.units()
    indexed, more = archived_units(archive, spec.source)
    warnings += more
    by_name: dict[str, tuple[str, ...]] = {}
    for parts in configured:
        by_name.setdefault(display_name(parts), parts)
    for parts in indexed:  # archived before, no longer configured: still shown
        by_name.setdefault(display_name(parts), parts)
    ordered = sorted(by_name.items(), key=lambda kv: (kv[1][0], kv[0]))
    return Units(
        parts=[p for _, p in ordered],
        names=[n for n, _ in ordered],
        groups=[display_name(p[:1]) for _, p in ordered],
        warnings=warnings,
    )


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: int
    run_id: str
    day: dt.date
    state: str | None
    conf_day: bool


@dataclass(frozen=True, slots=True)
class TaskInfo:
    run_id: str
    map_index: int
    state: str | None
    try_number: int


def _runs(session: Any, dag_id: str, first: dt.date, last: dt.date) -> list[RunInfo]:
    """Runs of ``dag_id`` that archive a day in ``[first, last]``, oldest first."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    dr = DagRun.__table__
    rows = session.execute(
        select(
            dr.c.id,
            dr.c.run_id,
            dr.c.state,
            dr.c.conf,
            dr.c.data_interval_start,
            dr.c.logical_date,
        )
        .where(dr.c.dag_id == dag_id)
        .order_by(dr.c.id)
    )
    out: list[RunInfo] = []
    for rid, run_id, state, conf, start, logical in rows:
        chosen = conf.get(DAY_PARAM) if isinstance(conf, dict) else None
        try:
            day = run_day(chosen, _aware(start), _aware(logical), dag_id)
        except ConfigError:
            continue
        if first <= day <= last:
            out.append(RunInfo(rid, run_id, day, state, parse_param_day(chosen) is not None))
    return out


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=dt.UTC)  # SQLite returns naive UTC


def _task_instances(
    session: Any, spec: SourceSpec, run_ids: Sequence[str]
) -> list[tuple[str, int, str | None, str | None, int]]:
    """``(run_id, map_index, rendered_map_index, state, try_number)`` of the mapped task in
    ``run_ids``. Read with the driver's own cursor: at 300,000 rows, building SQLAlchemy rows
    took longer than the query (values are rendered as literals by the dialect, so this works
    on SQLite and PostgreSQL alike; the run ids come from the database)."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    ti = TaskInstance.__table__
    connection = session.connection()
    out: list[tuple[str, int, str | None, str | None, int]] = []
    for i in range(0, len(run_ids), 500):
        stmt = select(
            ti.c.run_id, ti.c.map_index, ti.c.rendered_map_index, ti.c.state, ti.c.try_number
        ).where(
            ti.c.dag_id == spec.dag_id,
            ti.c.task_id == spec.task_id,
            ti.c.run_id.in_(run_ids[i : i + 500]),
        )
        sql = str(stmt.compile(dialect=connection.dialect, compile_kwargs={"literal_binds": True}))
        cursor = connection.connection.cursor()
        try:
            cursor.execute(sql)
            out += cursor.fetchall()
        finally:
            cursor.close()
    return out


def _expanded_names(session: Any, spec: SourceSpec, run_id: str) -> list[str | None]:
    """Unit names by map index for a run whose mapped tasks have not rendered theirs yet."""
    if spec.expand_from is None:
        return [display_name(p) for p in spec.units()[0]]
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    row = session.execute(
        select(XComModel.value).where(
            XComModel.dag_id == spec.dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == spec.expand_from,
            XComModel.key == "return_value",
            XComModel.map_index == -1,
        )
    ).first()
    if row is None:
        return []
    value = XComModel.deserialize_value(row)
    name = _unit_namer(spec.source)
    return [name(v) for v in value] if isinstance(value, list) else []


@dataclass
class AirflowStates:
    """Per cell: a code of :data:`TI_CODES` and the task instance it came from."""

    rows: list[str]
    tasks: dict[tuple[int, int], TaskInfo]
    runs: dict[dt.date, RunInfo]


def airflow_states(
    session: Any,
    spec: SourceSpec,
    units: Units,
    days: Sequence[dt.date],
    keep_tasks: bool = True,
) -> AirflowStates:
    """The Airflow state of every cell; with ``keep_tasks`` also the task instance of each
    (the grid itself needs only the codes)."""
    day_pos = {d: i for i, d in enumerate(days)}
    runs = [r for r in _runs(session, spec.dag_id, min(days), max(days)) if r.day in day_pos]
    unit_pos = units.position()
    n_units, n_days = len(units.names), len(days)
    latest_run: dict[dt.date, RunInfo] = {}
    for r in runs:
        latest_run[r.day] = r  # oldest first: the last one wins
    # per run: its rank (newer runs of a day win), the column of its day, and whether a newer
    # run of that day is on its way (then the cell shows that run: queued)
    rank = {r.run_id: k for k, r in enumerate(runs)}
    column = {r.run_id: day_pos[r.day] for r in runs}
    superseded = {
        r.run_id
        for r in runs
        if latest_run[r.day] is not r and latest_run[r.day].state in ("queued", "running")
    }
    # Cells without a task instance take their state from the day's latest run: a run that
    # has not expanded yet is queued; one that failed before expanding failed.
    run_codes = bytearray(NO_RUN * n_days, "ascii")
    for day, last in latest_run.items():
        if last.state in ("queued", "running"):
            run_codes[day_pos[day]] = ord("q")
        elif last.state == "failed":
            run_codes[day_pos[day]] = ord("f")
    codes = [bytearray(run_codes) for _ in range(n_units)]
    best = [0] * (n_units * n_days)  # per cell: rank + 1 of the run its state comes from
    tasks: dict[tuple[int, int], TaskInfo] = {}
    ti_codes = {k: ord(v) for k, v in TI_CODES.items()}
    other = ord("o")
    unnamed: dict[str, list[tuple[int, str | None, int]]] = {}

    def place(u: int, d: int, run_id: str, map_index: int, state: str | None, tries: int) -> None:
        k = rank[run_id] + 1  # 0: no task instance yet
        cell = u * n_days + d
        if best[cell] >= k:
            return
        best[cell] = k
        codes[u][d] = ti_codes.get(state, other)
        if keep_tasks:
            tasks[(u, d)] = TaskInfo(run_id, map_index, state, tries)

    get_unit, get_code = unit_pos.get, ti_codes.get
    for run_id, map_index, rendered, state, tries in _task_instances(
        session, spec, [r.run_id for r in runs if r.run_id not in superseded]
    ):
        # place() inlined: this loop runs once per task instance, 300,000 times a year
        u = get_unit(rendered) if rendered is not None else None
        if u is None:
            if rendered is None:
                unnamed.setdefault(run_id, []).append((map_index, state, tries))
            continue
        d = column[run_id]
        k = rank[run_id] + 1
        cell = u * n_days + d
        if best[cell] < k:
            best[cell] = k
            codes[u][d] = get_code(state, other)
            if keep_tasks:
                tasks[(u, d)] = TaskInfo(run_id, map_index, state, tries)
    for run_id, tis in unnamed.items():
        names = _expanded_names(session, spec, run_id)
        for map_index, state, tries in tis:
            name = names[map_index] if 0 <= map_index < len(names) else None
            u = unit_pos.get(name) if name else None
            if u is not None:
                place(u, column[run_id], run_id, map_index, state, tries)
    return AirflowStates([c.decode() for c in codes], tasks, latest_run)


def parse_range(start: str | None, end: str | None, today: dt.date | None = None) -> list[dt.date]:
    """Days from ``start`` to ``end`` (inclusive); default: the 30 days before today (UTC)."""
    today = today or dt.datetime.now(dt.UTC).date()
    last = parse_param_day(end, "end") or today - dt.timedelta(days=1)
    first = parse_param_day(start, "start") or last - dt.timedelta(days=29)
    if first > last:
        raise ConfigError(f"start {first} is after end {last}")
    n = (last - first).days + 1
    if n > MAX_DAYS:
        raise ConfigError(f"{n} days asked; at most {MAX_DAYS} at once")
    return list(day_range(first, last))


def build_grid(
    session: Any,
    spec: SourceSpec,
    days: Sequence[dt.date],
    archive: Archive | None = None,
) -> dict[str, Any]:
    """Everything the page draws for one source and range, ready for JSON."""
    t0 = time.perf_counter()
    archive = archive or Archive(archive_root())
    units = source_units(spec, archive)
    t1 = time.perf_counter()
    states, told = archive_cells(archive, spec.source, units.parts, days)
    t2 = time.perf_counter()
    af = airflow_states(session, spec, units, days, keep_tasks=False)
    t3 = time.perf_counter()
    airflow_counts = dict.fromkeys(TI_NAMES.values(), 0)
    for row in af.rows:
        for code, name in TI_NAMES.items():
            airflow_counts[name] += row.count(code)
    return {
        "source": spec.source,
        "title": spec.title,
        "dag_id": spec.dag_id,
        "task_id": spec.task_id,
        "group_label": spec.group,
        "days": [d.isoformat() for d in days],
        "units": units.names,
        "groups": units.groups,
        "archive": states.rows,
        "airflow": af.rows,
        "details": {
            **{f"{u}:{d}": text for (u, d), text in told.items()},
            **{f"{u}:{d}": text for (u, d), text in states.details.items()},
        },
        # archived around unreadable windows (dxt_core.reconcile): "u:d" of each such cell
        "holes": [f"{u}:{d}" for (u, d), t in sorted(told.items()) if t.startswith("holes:")],
        # archived (or found empty) before the day ended: what the source held then
        "not_over": [
            f"{u}:{d}" for (u, d), t in sorted(told.items()) if t.startswith(NOT_OVER_DETAIL)
        ],
        "can_reconcile": reconciles(spec.source),
        "runs": {d.isoformat(): {"run_id": r.run_id, "state": r.state} for d, r in af.runs.items()},
        "counts": states.counts(),
        "airflow_counts": airflow_counts,
        "warnings": units.warnings,
        "codes": {"archive": STATE_CODES, "airflow": TI_NAMES},
        "seconds": {
            "units": round(t1 - t0, 3),
            "archive": round(t2 - t1, 3),
            "airflow": round(t3 - t2, 3),
        },
    }


def archive_cells(
    archive: Archive, source: str, parts: Sequence[tuple[str, ...]], days: Sequence[dt.date]
) -> tuple[StateGrid, dict[tuple[int, int], str]]:
    """The archive's side of the grid and of a refill plan: each cell's state, with each data
    file's size compared with its manifest's as ``dxt coverage`` does (one ``stat`` per file:
    a file cut short is corrupt, not archived), and :func:`hole_cells`' details."""
    states = scan_states(archive, source, parts, days, check_sizes=True)
    return states, hole_cells(archive, source, parts, days)


def hole_cells(
    archive: Archive, source: str, parts: Sequence[tuple[str, ...]], days: Sequence[dt.date]
) -> dict[tuple[int, int], str]:
    """``(unit, day) index -> detail`` of the cells archived with holes or before their day
    ended (the manifest index's detail; without an index, none are told apart; an S3 archive
    has no SQLite index: its cells' details say it)."""
    if not days or archive.remote:
        return {}
    with ManifestIndex(archive.root) as idx:
        found = idx.day_details(source, min(days), max(days))
    row = {unit_of(p): u for u, p in enumerate(parts)}
    col = {d.isoformat(): c for c, d in enumerate(days)}
    out: dict[tuple[int, int], str] = {}
    for (unit, day), detail in found.items():
        u, c = row.get(unit), col.get(day)
        if u is not None and c is not None:
            out[(u, c)] = detail
    return out


def reconciles(source: str) -> bool:
    """Whether the source's backend declares the reconcile role (counts at the source)."""
    from dxt_core import backends as registry

    b = registry.get(source)
    return b.tasks is not None and b.dag_tasks().reconciles()


def reconcile_range(
    spec: SourceSpec,
    days: Sequence[dt.date],
    *,
    record_kept: bool,
    archive: Archive | None = None,
) -> dict[str, Any]:
    """Count the archived cells of ``days`` at the source (counts only, never the data),
    through the DAG's own Airflow connection and the backend's reconcile role.

    Each archived unit-day comes back ``equal``, ``more`` (late data: refill it), ``fewer``
    (recorded as kept when ``record_kept``: the user may edit the DAG's task instances) or
    ``error``; days not archived are ``missing`` and not asked.
    """
    from dxt_core import backends as registry

    if not days:
        raise ConfigError("no days to reconcile")
    if len(days) > MAX_RECONCILE_DAYS:
        raise ConfigError(
            f"{len(days)} days asked; reconcile at most {MAX_RECONCILE_DAYS} at once "
            "(each day is counted at the source)"
        )
    if not reconciles(spec.source):
        raise ConfigError(
            f"{spec.source} cannot count at the source: its backend declares no reconcile "
            "role (BackendTasks.recount)"
        )
    tasks = registry.get(spec.source).dag_tasks()
    archive = archive or Archive(archive_root())
    conn_id = str(tasks.settings()["conn_id"])
    from dxt_core.airflow.hooks import hook_for

    first, last = min(days), max(days)
    t0 = time.perf_counter()
    report = tasks.reconcile(
        last + dt.timedelta(days=1),
        (last - first).days + 1,
        archive,
        hook_for(spec.source, conn_id).connection(),
        {},
        refetch=False,
        record_kept=record_kept,
    )
    cells = [
        {
            "unit": display_name(r.parts),
            "day": r.day.isoformat(),
            "state": r.state,
            "archive_count": r.archive_count,
            "source_count": r.source_count,
            "method": r.method,
            "detail": relative_to_archive(r.detail, archive),
        }
        for r in report.rows
        if r.state != "missing"
    ]
    return {
        "source": spec.source,
        "dag_id": spec.dag_id,
        "start": first.isoformat(),
        "end": last.isoformat(),
        "counts": report.counts(),
        "cells": cells,
        "kept_recorded": record_kept,
        # comparisons written to the archive's check records (none for a reader)
        "checks_recorded": sum(r.recorded for r in report.rows),
        "note": relative_to_archive(report.note(), archive),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def relative_to_archive(text: str, archive: Archive) -> str:
    """``text`` with the archive's root directory written ``<archive>``: answers carry
    paths relative to the archive root, never the API server's own."""
    return text.replace(str(archive.root), "<archive>")


def find_unit(spec: SourceSpec, archive: Archive, name: str) -> tuple[int, Units]:
    """The row of the unit called ``name``; only configured or indexed units exist."""
    units = source_units(spec, archive)
    pos = units.position().get(name)
    if pos is None:
        raise NotFound(f"{spec.source} has no unit {name!r}")
    return pos, units


def cell_detail(
    session: Any, spec: SourceSpec, unit: str, day: dt.date, archive: Archive | None = None
) -> dict[str, Any]:
    """One cell: its manifest (paths relative to the archive root) and its task instances."""
    archive = archive or Archive(archive_root())
    u, units = find_unit(spec, archive, unit)
    parts = units.parts[u]
    key = DayKey(spec.source, parts, day)
    manifest_path = archive.manifest_path(key)
    if not manifest_path.resolve().is_relative_to(archive.root):
        raise NotFound(f"{unit} {day}: the manifest lies outside the archive")
    grid = scan_states(archive, spec.source, [parts], [day], check_sizes=True)
    state = grid.state(0, 0)
    manifest: dict[str, Any] | None = None
    problem = grid.details.get((0, 0), "")
    try:
        manifest = archive.read_manifest(key)
    except DxtError as exc:
        problem = relative_to_archive(str(exc), archive)
    rel = manifest_path.relative_to(archive.root).as_posix()
    data = None
    if manifest and isinstance(manifest.get("file"), str) and "/" not in manifest["file"]:
        data = f"{os.path.dirname(rel)}/{manifest['file']}"
    runs = _runs(session, spec.dag_id, day, day)
    one = Units([parts], [unit], [units.groups[u]])
    af = airflow_states(session, spec, one, [day])
    info = af.tasks.get((0, 0))
    history = _cell_history(session, spec, runs, unit)
    return {
        "source": spec.source,
        "dag_id": spec.dag_id,
        "task_id": spec.task_id,
        "unit": unit,
        "group": units.groups[u],
        "day": day.isoformat(),
        "archive_state": state,
        "problem": problem,
        "kept": archive.read_kept(key) if state == "kept" else None,
        # the last comparison with the source's count after archiving (reconcile), if any
        "check": day_check(archive, key),
        "manifest_path": rel,
        "data_path": data,
        "manifest": manifest,
        "airflow_state": TI_NAMES[af.rows[0][0]],
        "task": None
        if info is None
        else {
            "run_id": info.run_id,
            "map_index": info.map_index,
            "state": info.state,
            "try_number": info.try_number,
        },
        "runs": history,
    }


def _cell_history(
    session: Any, spec: SourceSpec, runs: Sequence[RunInfo], unit: str
) -> list[dict[str, Any]]:
    """Every run of the cell's day, newest first, with the unit's task instance in each."""
    tis: dict[str, list[tuple[int, str | None, str | None, int]]] = {}
    for run_id, map_index, rendered, state, try_number in _task_instances(
        session, spec, [r.run_id for r in runs]
    ):
        tis.setdefault(run_id, []).append((map_index, rendered, state, try_number))
    out: list[dict[str, Any]] = []
    for r in reversed(runs):
        found = next((t for t in tis.get(r.run_id, []) if t[1] == unit), None)
        if found is None and any(t[1] is None for t in tis.get(r.run_id, [])):
            names = _expanded_names(session, spec, r.run_id)
            if unit in names:
                mi = names.index(unit)
                found = next((t for t in tis[r.run_id] if t[0] == mi), None)
        out.append(
            {
                "run_id": r.run_id,
                "run_state": r.state,
                "day_from_param": r.conf_day,
                "map_index": None if found is None else found[0],
                "state": None if found is None else found[2],
                "try_number": None if found is None else found[3],
            }
        )
    return out
