"""The backend contract: every registered backend (the toy one included) behaves the same
against its simulator process, through its declaration alone (``Backend.dag_tasks()``, its
connection spec, its CLI).

Each case runs on each archive root kind (``root``: a local directory and an ``s3://``
prefix on moto_server) and checks what a reader of that archive sees (its listing and
objects), not the local staging folder.

A new backend gets these tests by registering and adding its adapter (tests/contract/
adapters.py, or ``<package>.contract``)."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from typing import Any

import pytest

from dxt_core import backends as registry
from dxt_core.archive import Archive
from dxt_core.archive_day import DayReport
from dxt_core.errors import DxtError, SourceShrank
from dxt_core.reconcile import CHECKS_NAME, checks_parts, parse_checks
from tests.contract.adapters import ROOT, Adapter, adapter_for
from tests.contract.conftest import NAMES, ArchiveRoot

pytestmark = pytest.mark.integration


def archive_day(
    a: Adapter,
    root: ArchiveRoot,
    *,
    day: Any = None,
    unit: Any = None,
    conn: Any = None,
    **kw: Any,
) -> DayReport:
    """One unit-day through the backend's declared archive call, as the DAG's task makes it."""
    tasks = registry.get(a.backend).dag_tasks()
    return tasks.archive(
        a.unit if unit is None else unit,
        day or a.day,
        Archive(root.url, **kw),
        a.connection() if conn is None else conn,
        a.params,
    )


def manifest(root: ArchiveRoot, report: DayReport) -> dict[str, Any]:
    """The day's manifest as the archive holds it (the object, on S3)."""
    assert report.manifest is not None
    doc: dict[str, Any] = json.loads(root.read(root.rel(report.manifest)))
    return doc


def day_dir(root: ArchiveRoot, report: DayReport) -> str:
    assert report.path is not None
    return root.rel(report.path.parent)


def day_checks(root: ArchiveRoot, report: DayReport) -> dict[str, Any]:
    """The reconcile's check record of the report's day, as the archive holds it."""
    k = report.key
    where = checks_parts(k.source, k.day.year, k.day.month)
    data = Archive(root.url).read_internal(CHECKS_NAME, *where)
    assert data is not None, f"no check record {where} in {root.url}"
    return parse_checks(data)["/".join(k.parts)][k.day.isoformat()]


def test_every_registered_backend_has_an_adapter(contract_env):
    assert set(NAMES) >= {"examon", "kwollect", "collectd_es"} and len(NAMES) > 3
    for b in registry.backends():
        a = adapter_for(b)  # fails the test, naming the backend, when there is none
        assert b.tasks is not None, f"{b.name} declares no DAG (Backend.tasks)"
        assert a.backend == b.name and b.dag_tasks().backend == b.name


def test_every_backend_preloads_its_archive_modules(contract_env):
    """What a Celery worker's main process imports before it forks (``preload``): each
    backend's ``preload_modules``, in a fresh interpreter, so nothing is imported already."""
    import subprocess
    import sys

    code = (
        "import sys; from dxt_core.backends import backends\n"
        "for b in backends():\n"
        "    t = b.dag_tasks(); t.preload()\n"
        "    for m in t.preload_modules:\n"
        "        name = b.package + m\n"
        "        assert name in sys.modules, name\n"
        "        print(name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = out.stdout.split()
    for b in registry.backends():
        assert f"{b.package}.archive_day" in loaded, (b.name, loaded)


class Lines(logging.Handler):
    """The messages of one logger, caught on the logger itself: Airflow's logging set-up
    (made by an earlier test in the same worker) may keep them from reaching the root
    logger, where ``caplog`` listens."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_archive_a_day_then_a_rerun_is_byte_identical(adapter, root):
    from dxt_core.backends.roles import log as task_log

    lines, level = Lines(), task_log.level
    task_log.addHandler(lines)
    task_log.setLevel(logging.INFO)
    try:
        first = archive_day(adapter, root)
    finally:
        task_log.removeHandler(lines)
        task_log.setLevel(level)
    assert first.status == "archived" and first.rows > 0 and first.path is not None
    if adapter.backend in registry.BUILTIN:
        # the task's log line names the archive where a reader finds the day (its s3:// URL,
        # not the local staging folder)
        said = [m for m in lines.messages if m.startswith("archiving ")]
        assert said and said[0].endswith(f" into {root.url}"), said
    doc = manifest(root, first)
    assert doc["status"] == "archived" and doc["rows"] == first.rows
    before = root.files(day_dir(root, first))
    again = archive_day(adapter, root, replace=True)
    assert again.rows == first.rows
    # said so (a cleared task said "archived" and emitted the same asset event again)
    assert again.extra.get("unchanged") is True and not first.extra.get("unchanged")
    assert "unchanged: archived so already" in again.summary()
    after = root.files(day_dir(root, first))
    data = [n for n in before if not n.endswith(".json")]
    assert data and {n: after[n] for n in data} == {n: before[n] for n in data}
    # every file the manifest names is there with its size and sha256
    for f in doc.get("files") or [doc]:
        assert len(after[f["file"]]) == f["bytes"]
        assert hashlib.sha256(after[f["file"]]).hexdigest() == f["sha256"]
    # ... and it names every data file of the day (coverage --verify reports any other)
    assert Archive(root.url).status(first.key, verify=True)[0] == "archived"


def test_an_empty_day_gets_an_empty_manifest(adapter, root):
    report = archive_day(adapter, root, day=adapter.empty_day)
    assert report.status == "empty" and report.rows == 0 and report.path is None
    assert manifest(root, report)["status"] == "empty"
    assert Archive(root.url).status(report.key, verify=True)[0] == "empty"


def test_an_unknown_unit_is_a_clear_error(adapter, root):
    tasks = registry.get(adapter.backend).dag_tasks()
    name = tasks.unit_name(adapter.missing_unit)
    with pytest.raises(DxtError) as ei:
        archive_day(adapter, root, unit=adapter.missing_unit)
    shown = str(ei.value)
    known = tasks.unit_name(adapter.unit).split("/")
    assert [p for p in name.split("/") if p not in known and p in shown], (name, shown)
    assert not root.find(".manifest.json"), "no manifest for a unit in error"


def test_a_window_the_server_refuses_as_too_large_is_split(adapter, both_roots):
    # the whole day into a directory, the split one into S3: the refusing server is started
    # once per adapter (a second server of its own for some backends)
    local, s3 = both_roots
    refusing = adapter.too_large()
    if refusing is None:
        pytest.skip(f"{adapter.backend} pages through the day: it has no window to split")
    whole = archive_day(adapter, local)
    with refusing as conn:
        split = archive_day(adapter, s3, conn=conn)
    assert split.stats.splits > 0 and split.stats.requests > whole.stats.requests
    assert split.rows == whole.rows == manifest(s3, split)["rows"]


def test_a_rerun_with_fewer_rows_keeps_the_archive(adapter, root):
    first = archive_day(adapter, root)
    assert first.path is not None
    before = root.files(day_dir(root, first))
    with adapter.fewer_rows() as (conn, unit), pytest.raises(SourceShrank) as ei:
        archive_day(adapter, root, conn=conn, unit=unit)
    assert f"({first.rows:,} -> " in str(ei.value)
    after = root.files(day_dir(root, first))
    kept = [n for n in after if n.endswith(".kept.json")]
    assert len(kept) == 1
    after.pop(kept[0])
    assert after == before  # data and manifest byte for byte


def test_reconcile_with_fewer_rows_at_the_source_records_the_kept_day(adapter, root):
    """A later count finds the source holding fewer rows (retention): the archive is kept
    byte for byte and the ``kept`` record lies beside the day's manifest, where a reader of
    the archive (and coverage) finds it, on every root."""
    import datetime as dt

    tasks = registry.get(adapter.backend).dag_tasks()
    if not tasks.reconciles():
        pytest.skip(f"{adapter.backend} declares no reconcile role (BackendTasks.recount)")
    first = archive_day(adapter, root)
    assert first.path is not None
    before = root.files(day_dir(root, first))
    with adapter.fewer_rows() as (conn, unit):
        if unit != adapter.unit:
            pytest.skip(
                f"{adapter.backend}'s fewer-rows server holds another unit, not the same unit "
                "with fewer rows: reconcile counts the unit the settings name"
            )
        report = tasks.reconcile(
            adapter.day + dt.timedelta(days=1), 1, Archive(root.url), conn, adapter.params
        )
    assert report.counts() == {"fewer": 1}, report.note()
    assert not report.refetched and not report.failed
    [row] = report.rows
    assert row.detail == "" and row.archive_count == first.rows > row.source_count
    after = root.files(day_dir(root, first))
    [kept] = [n for n in after if n.endswith(".kept.json")]
    record = json.loads(after.pop(kept))
    assert record["archive_rows"] == first.rows and record["source_rows"] == row.source_count
    assert record["by"].startswith("reconcile")
    assert after == before  # data and manifest byte for byte
    assert Archive(root.url).status(first.key)[0] == "archived"
    assert Archive(root.url).read_kept(first.key) == record  # what coverage shows as K
    checks = day_checks(root, first)
    assert (checks["state"], checks["source_count"]) == ("fewer", row.source_count), checks


def test_dxt_coverage_lists_the_unit(adapter, root):
    archive_day(adapter, root)
    b = registry.get(adapter.backend)
    name = b.dag_tasks().unit_name(adapter.unit)
    day = adapter.day.isoformat()
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "coverage", b.command, "--archive", root.url,
         "--start-day", day, "--end-day", day, "--all", *adapter.coverage_args()],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert name in out.stdout, out.stdout
    assert "1 units x 1 days: 1 archived, 0 empty, 0 missing, 0 corrupt" in out.stdout


def test_the_coverage_view_plans_the_unit(adapter, root):
    from dxt_core.airflow.ui import grid

    # nothing archived: the unit comes from the backend's settings
    spec = grid.sources()[adapter.backend]
    units = grid.source_units(spec, Archive(root.url))
    name = registry.get(adapter.backend).dag_tasks().unit_name(adapter.unit)
    assert not units.warnings
    assert name in units.names
    tasks = registry.get(adapter.backend).dag_tasks()
    assert spec.group == tasks.group and spec.expand_from == tasks.units_task_id
    # once archived, the archive's own index names it (on S3: its index objects, not the
    # local staging folder), so it stays in the view when no longer configured
    report = archive_day(adapter, root)
    assert report.path is not None
    parts = tuple(day_dir(root, report).split("/")[1:])  # under <root>/<source>/
    assert grid.archived_units(Archive(root.url), adapter.backend) == ([parts], [])


def test_a_counting_backend_records_the_source_count(adapter, root):
    tasks = registry.get(adapter.backend).dag_tasks()
    if not tasks.counts:
        pytest.skip(f"{adapter.backend} declares no source counts (BackendTasks.counts)")
    report = archive_day(adapter, root)
    doc = manifest(root, report)
    sc = doc["source_count"]
    assert sc["count"] == doc["rows"] == report.rows > 0
    assert isinstance(sc["method"], str) and sc["method"]
    empty = archive_day(adapter, root, day=adapter.empty_day)
    assert manifest(root, empty)["source_count"]["count"] == 0


def test_reconcile_flags_late_data_and_the_refetch_settles_it(adapter, root):
    import datetime as dt

    tasks = registry.get(adapter.backend).dag_tasks()
    if not tasks.reconciles():
        pytest.skip(f"{adapter.backend} declares no reconcile role (BackendTasks.recount)")
    late = adapter.late_points()
    if late is None:
        pytest.skip(f"{adapter.backend}'s simulator cannot add late points")
    next_day = adapter.day + dt.timedelta(days=1)
    with late as (conn, add):
        first = archive_day(adapter, root, conn=conn)
        assert first.path is not None
        same = tasks.reconcile(next_day, 1, Archive(root.url), conn, adapter.params)
        assert same.counts() == {"equal": 1} and not same.refetched
        add()
        grown = tasks.reconcile(next_day, 1, Archive(root.url), conn, adapter.params)
        assert grown.counts() == {"more": 1}, grown.note()
        [(parts, day, before, after)] = grown.refetched
        assert day == adapter.day and before == first.rows < after
        assert f"refetched 1 grown: {'/'.join(parts)} {day}: {before:,} -> {after:,}" in (
            grown.note()
        )
        doc = manifest(root, first)
        assert doc["rows"] == after == doc["source_count"]["count"]
        versions = root.files(day_dir(root, first) + "/.versions")
        assert any(n.startswith(first.path.name + ".prev-") for n in versions)
        settled = tasks.reconcile(next_day, 1, Archive(root.url), conn, adapter.params)
        assert settled.counts() == {"equal": 1} and not settled.refetched
    # every comparison is in the archive's check record (in the bucket, on S3): the day's
    # last outcome, both counts and how many times it was checked
    checks = day_checks(root, first)
    assert (checks["state"], checks["checks"]) == ("equal", 3), checks
    assert checks["source_count"] == checks["archive_count"] == after
