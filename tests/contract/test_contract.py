"""The backend contract: every registered backend (the toy one included) behaves the same
against its simulator process, through its declaration alone (``Backend.dag_tasks()``, its
connection spec, its CLI).

A new backend gets these tests by registering and adding its adapter (tests/contract/
adapters.py, or ``<package>.contract``)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from dxt_core import backends as registry
from dxt_core.archive import Archive
from dxt_core.archive_day import DayReport
from dxt_core.errors import DxtError, SourceShrank
from tests.contract.adapters import ROOT, Adapter, adapter_for
from tests.contract.conftest import NAMES, snapshot

pytestmark = pytest.mark.integration


def archive_day(
    a: Adapter, root: Any, *, day: Any = None, unit: Any = None, conn: Any = None, **kw: Any
) -> DayReport:
    """One unit-day through the backend's declared archive call, as the DAG's task makes it."""
    tasks = registry.get(a.backend).dag_tasks()
    return tasks.archive(
        a.unit if unit is None else unit,
        day or a.day,
        Archive(root, **kw),
        a.connection() if conn is None else conn,
        a.params,
    )


def test_every_registered_backend_has_an_adapter(contract_env):
    assert set(NAMES) >= {"examon", "kwollect", "collectd_es"} and len(NAMES) > 3
    for b in registry.backends():
        a = adapter_for(b)  # fails the test, naming the backend, when there is none
        assert b.tasks is not None, f"{b.name} declares no DAG (Backend.tasks)"
        assert a.backend == b.name and b.dag_tasks().backend == b.name


def test_archive_a_day_then_a_rerun_is_byte_identical(adapter, tmp_path):
    first = archive_day(adapter, tmp_path)
    assert first.status == "archived" and first.rows > 0 and first.path is not None
    manifest = json.loads(first.manifest.read_text())
    assert manifest["status"] == "archived" and manifest["rows"] == first.rows
    before = snapshot(first.path.parent)
    again = archive_day(adapter, tmp_path, replace=True)
    assert again.rows == first.rows
    after = snapshot(first.path.parent)
    data = [n for n in before if not n.endswith(".json")]
    assert data and {n: after[n] for n in data} == {n: before[n] for n in data}


def test_an_empty_day_gets_an_empty_manifest(adapter, tmp_path):
    report = archive_day(adapter, tmp_path, day=adapter.empty_day)
    assert report.status == "empty" and report.rows == 0 and report.path is None
    assert json.loads(report.manifest.read_text())["status"] == "empty"


def test_an_unknown_unit_is_a_clear_error(adapter, tmp_path):
    tasks = registry.get(adapter.backend).dag_tasks()
    name = tasks.unit_name(adapter.missing_unit)
    with pytest.raises(DxtError) as ei:
        archive_day(adapter, tmp_path, unit=adapter.missing_unit)
    shown = str(ei.value)
    known = tasks.unit_name(adapter.unit).split("/")
    assert [p for p in name.split("/") if p not in known and p in shown], (name, shown)
    assert not list(tmp_path.rglob("*.manifest.json")), "no manifest for a unit in error"


def test_a_window_the_server_refuses_as_too_large_is_split(adapter, tmp_path):
    whole = archive_day(adapter, tmp_path / "whole")
    refusing = adapter.too_large()
    if refusing is None:
        pytest.skip(f"{adapter.backend} pages through the day: it has no window to split")
    with refusing as conn:
        split = archive_day(adapter, tmp_path / "split", conn=conn)
    assert split.stats.splits > 0 and split.stats.requests > whole.stats.requests
    assert split.rows == whole.rows


def test_a_rerun_with_fewer_rows_keeps_the_archive(adapter, tmp_path):
    first = archive_day(adapter, tmp_path)
    assert first.path is not None
    before = snapshot(first.path.parent)
    with adapter.fewer_rows() as (conn, unit), pytest.raises(SourceShrank) as ei:
        archive_day(adapter, tmp_path, conn=conn, unit=unit)
    assert f"({first.rows:,} -> " in str(ei.value)
    after = snapshot(first.path.parent)
    kept = [n for n in after if n.endswith(".kept.json")]
    assert len(kept) == 1
    after.pop(kept[0])
    assert after == before  # data and manifest byte for byte


def test_dxt_coverage_lists_the_unit(adapter, tmp_path):
    archive_day(adapter, tmp_path)
    b = registry.get(adapter.backend)
    name = b.dag_tasks().unit_name(adapter.unit)
    day = adapter.day.isoformat()
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "coverage", b.command, "--archive", str(tmp_path),
         "--start-day", day, "--end-day", day, "--all", *adapter.coverage_args()],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert name in out.stdout, out.stdout


def test_the_coverage_view_plans_the_unit(adapter, tmp_path):
    from dxt_core.airflow.ui import grid

    # nothing archived: the unit comes from the backend's settings
    spec = grid.sources()[adapter.backend]
    units = grid.source_units(spec, Archive(tmp_path))
    name = registry.get(adapter.backend).dag_tasks().unit_name(adapter.unit)
    assert not units.warnings
    assert name in units.names
    tasks = registry.get(adapter.backend).dag_tasks()
    assert spec.group == tasks.group and spec.expand_from == tasks.units_task_id


def test_a_counting_backend_records_the_source_count(adapter, tmp_path):
    tasks = registry.get(adapter.backend).dag_tasks()
    if not tasks.counts:
        pytest.skip(f"{adapter.backend} declares no source counts (BackendTasks.counts)")
    report = archive_day(adapter, tmp_path)
    manifest = json.loads(report.manifest.read_text())
    sc = manifest["source_count"]
    assert sc["count"] == manifest["rows"] == report.rows > 0
    assert isinstance(sc["method"], str) and sc["method"]
    empty = archive_day(adapter, tmp_path, day=adapter.empty_day)
    assert json.loads(empty.manifest.read_text())["source_count"]["count"] == 0


def test_reconcile_flags_late_data_and_the_refetch_settles_it(adapter, tmp_path):
    import datetime as dt

    tasks = registry.get(adapter.backend).dag_tasks()
    if not tasks.reconciles():
        pytest.skip(f"{adapter.backend} declares no reconcile role (BackendTasks.reconcile)")
    late = adapter.late_points()
    if late is None:
        pytest.skip(f"{adapter.backend}'s simulator cannot add late points")
    next_day = adapter.day + dt.timedelta(days=1)
    with late as (conn, add):
        first = archive_day(adapter, tmp_path, conn=conn)
        assert first.path is not None
        same = tasks.reconcile(next_day, 1, Archive(tmp_path), conn, adapter.params)
        assert same.counts() == {"equal": 1} and not same.refetched
        add()
        grown = tasks.reconcile(next_day, 1, Archive(tmp_path), conn, adapter.params)
        assert grown.counts() == {"more": 1}, grown.note()
        [(parts, day, before, after)] = grown.refetched
        assert day == adapter.day and before == first.rows < after
        assert f"refetched 1 grown: {'/'.join(parts)} {day}: {before:,} -> {after:,}" in (
            grown.note()
        )
        manifest = json.loads(first.manifest.read_text())
        assert manifest["rows"] == after == manifest["source_count"]["count"]
        versions = first.path.parent / ".versions"
        assert any(p.name.startswith(first.path.name + ".prev-") for p in versions.iterdir())
        settled = tasks.reconcile(next_day, 1, Archive(tmp_path), conn, adapter.params)
        assert settled.counts() == {"equal": 1} and not settled.refetched
