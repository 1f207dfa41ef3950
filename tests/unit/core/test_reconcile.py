"""dxt_core.reconcile's daily pass and the run note it leaves, against a faked source answer
(the counter stands for the server's count; the archive and the comparison are ours)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from dxt_core.airflow.runs import NOTE_LIMIT, note_with_reconcile
from dxt_core.archive import Archive, DayKey
from dxt_core.errors import ConfigError, SourceError
from dxt_core.reconcile import (
    CHECKS_NAME,
    SourceCount,
    checks_parts,
    reconcile,
    reconcile_days,
    reconcile_recent,
    unit_checks,
)

DAY = dt.date(2024, 5, 4)
UNITS = [("p", "a"), ("p", "b")]


def archived(archive: Archive, parts: tuple[str, ...], day: dt.date, rows: int) -> None:
    key = DayKey("toy", parts, day)
    data = archive.directory(key) / f"{day}.csv.gz"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(b"x" * rows)
    archive.write_manifest(
        key, {"status": "archived", "rows": rows, "file": data.name, "bytes": rows}
    )


def counter(counts: dict[tuple[tuple[str, ...], dt.date], int]):
    def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        if (parts, day) not in counts:
            raise SourceError("HTTP 500 from the source", url="http://source")
        return SourceCount(counts[(parts, day)], "faked count")

    return count


def test_counts_only_flags_late_data_and_fetches_nothing(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d1, d2 = DAY - dt.timedelta(days=2), DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d1, 10)
    archived(archive, UNITS[0], d2, 10)
    archived(archive, UNITS[1], d2, 10)
    fetched: list[object] = []
    report = reconcile_recent(
        archive,
        "toy",
        UNITS,
        DAY,
        2,
        counter({(UNITS[0], d1): 10, (UNITS[0], d2): 12, (UNITS[1], d2): 7}),
        None,
        record_kept=False,
    )
    assert report.counts() == {"equal": 1, "more": 1, "fewer": 1, "missing": 1}
    assert report.counts_only and not fetched and not report.refetched
    assert not archive.kept_path(DayKey("toy", UNITS[1], d2)).exists()  # not recorded
    doc = report.as_dict()
    assert [(r["parts"], r["state"]) for r in doc["rows"]] == [
        (["p", "a"], "more"),
        (["p", "b"], "fewer"),
    ]  # missing days are in the counts only
    assert doc["note"] == (
        f"reconcile {d1}..{d2} (4 metric-days, counts at the source): 1 equal, 1 fewer, "
        "1 missing (not archived when counted), 1 more; counts only, nothing refetched"
    )


def test_the_daily_pass_refetches_the_grown_day_records_the_shrunk_one(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    fetched: list[tuple[tuple[str, ...], dt.date]] = []

    def refetch(parts: tuple[str, ...], day: dt.date) -> None:
        fetched.append((parts, day))

    report = reconcile_recent(
        archive, "toy", UNITS, DAY, 1, counter({(UNITS[0], d): 11, (UNITS[1], d): 9}), refetch
    )
    assert fetched == [(UNITS[0], d)]
    assert report.refetched == [(UNITS[0], d, 10, 11)]
    assert archive.kept_path(DayKey("toy", UNITS[1], d)).is_file()
    assert "refetched 1 grown: p/a 2024-05-03: 10 -> 11" in report.note()


def test_a_kept_record_that_cannot_be_written_is_said_not_a_stop(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    blocked = archive.kept_path(DayKey("toy", UNITS[0], d))
    blocked.mkdir()  # a directory where the record goes: the write fails
    report = reconcile_recent(
        archive, "toy", UNITS, DAY, 1, counter({(UNITS[0], d): 7, (UNITS[1], d): 8}), None
    )
    assert report.counts() == {"fewer": 2}
    rows = report.as_dict()["rows"]
    assert "the kept record was not written" in rows[0]["detail"]
    assert rows[1]["detail"] == "" and archive.kept_path(DayKey("toy", UNITS[1], d)).is_file()


def test_a_failed_count_is_an_error_row_not_a_stop(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    report = reconcile_recent(archive, "toy", UNITS, DAY, 1, counter({(UNITS[1], d): 10}), None)
    assert report.counts() == {"error": 1, "equal": 1}
    assert "HTTP 500 from the source" in report.as_dict()["rows"][0]["detail"]
    # the daily task fails with it (it ended successfully, the failure in its note alone)
    failed = report.failure()
    assert failed is not None and failed.startswith("1 count(s) FAILED (the rest was done): ")
    assert "1 equal, 1 error" in failed


def test_a_reconcile_that_did_everything_is_no_failure(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    report = reconcile_recent(archive, "toy", UNITS, DAY, 1, counter({(UNITS[0], d): 10}), None)
    assert report.counts() == {"equal": 1, "missing": 1} and report.failure() is None


def test_a_damaged_day_is_not_compared_nor_recorded(tmp_path: Path) -> None:
    """A day whose file is gone (or not the manifest's size) holds no count to compare: an
    error row that says so, never "equal" from the manifest alone, and no check record."""
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    (archive.directory(DayKey("toy", UNITS[0], d)) / f"{d}.csv.gz").unlink()
    rows = reconcile(archive, "toy", UNITS, [d], counter({(u, d): 10 for u in UNITS}))
    assert [(r.parts, r.state) for r in rows] == [(UNITS[0], "error"), (UNITS[1], "equal")]
    assert "not compared: the archived day is damaged" in rows[0].detail
    assert "is missing" in rows[0].detail and "refetch it" in rows[0].detail
    checks = unit_checks(archive.read_internal, "toy", UNITS[0], d.year, d.month)
    assert checks == {}


def test_reconcile_days_setting() -> None:
    assert reconcile_days("toy", {}) == 3
    assert reconcile_days("toy", {"reconcile_days": 0}) == 0
    with pytest.raises(ConfigError, match="DXT_TOY_RECONCILE_DAYS=-2 must be >= 0"):
        reconcile_days("toy", {"reconcile_days": -2})


def test_the_run_note_gets_the_reconcile_once_within_airflows_limit() -> None:
    found = "reconcile 2024-05-01..2024-05-03 (3 metric-days, counts at the source): 3 equal"
    note = note_with_reconcile("Archives 2024-05-04 (from its logical date).", found)
    assert note == f"Archives 2024-05-04 (from its logical date). R{found[1:]}."
    assert note_with_reconcile(note, found) == note  # the same run ending twice: once
    again = note_with_reconcile(note, found.replace("3 equal", "2 equal, 1 more"))
    assert again == "Archives 2024-05-04 (from its logical date). " + (
        f"R{found[1:].replace('3 equal', '2 equal, 1 more')}."
    )  # a cleared run that ends again: its new finding replaces the old one
    assert note_with_reconcile(None, found) == f"R{found[1:]}."
    long = note_with_reconcile("x" * 990, found)
    assert len(long) == NOTE_LIMIT and long.endswith("…")


def test_every_comparison_is_recorded_per_month(tmp_path: Path) -> None:
    """Equal outcomes too: a day checked and found equal reads apart from one never checked."""
    archive = Archive(tmp_path)
    d1, d2 = dt.date(2024, 4, 30), dt.date(2024, 5, 1)  # two months
    for parts in UNITS:
        archived(archive, parts, d1, 10)
    archived(archive, UNITS[0], d2, 10)  # UNITS[1] d2: missing, asks nothing
    counts = {(UNITS[0], d1): 10, (UNITS[0], d2): 12, (UNITS[1], d1): 10}
    at = dt.datetime(2024, 5, 3, 6, 0, 5, tzinfo=dt.UTC)
    rows = reconcile(archive, "toy", UNITS, [d1, d2], counter(counts), now=at)
    assert [r.state for r in rows] == ["equal", "more", "equal", "missing"]
    assert [r.recorded for r in rows] == [True, True, True, False]

    def record(month: str) -> dict[str, Any]:
        y, m = map(int, month.split("-"))
        data = archive.read_internal(CHECKS_NAME, *checks_parts("toy", y, m))
        assert data is not None, month
        doc: dict[str, Any] = json.loads(data)
        return doc

    equal = {
        "state": "equal",
        "archive_count": 10,
        "source_count": 10,
        "method": "faked count",
        "checked_at": "2024-05-03T06:00:05Z",
        "checks": 1,
    }
    assert record("2024-04") == {
        "schema": "dxt-checks/1",
        "source": "toy",
        "month": "2024-04",
        "units": {"p/a": {"2024-04-30": equal}, "p/b": {"2024-04-30": equal}},
    }
    # a unit whose days were all missing has no entry
    assert list(record("2024-05")["units"]) == ["p/a"]
    assert record("2024-05")["units"]["p/a"]["2024-05-01"]["state"] == "more"
    assert unit_checks(archive.read_internal, "toy", UNITS[0], 2024, 5)["2024-05-01"]["checks"] == 1
    assert unit_checks(archive.read_internal, "toy", UNITS[1], 2024, 5) == {}

    # checked again: the last outcome stands, the count of checks grows, the rest stays
    counts[(UNITS[0], d1)] = 8
    later = at + dt.timedelta(days=1)
    reconcile(archive, "toy", [UNITS[0]], [d1], counter(counts), now=later)
    day = record("2024-04")["units"]["p/a"]["2024-04-30"]
    assert (day["state"], day["source_count"], day["checks"]) == ("fewer", 8, 2)
    assert day["checked_at"] == "2024-05-04T06:00:05Z"
    assert record("2024-04")["units"]["p/b"]["2024-04-30"] == equal
    assert record("2024-05")["units"]["p/a"]["2024-05-01"]["checks"] == 1


def test_a_reader_who_may_not_write_leaves_no_check_record(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    archived(archive, UNITS[0], DAY, 10)
    rows = reconcile(
        archive, "toy", [UNITS[0]], [DAY], counter({(UNITS[0], DAY): 10}), record_kept=False
    )
    assert [r.state for r in rows] == ["equal"] and not rows[0].recorded
    assert not (tmp_path / f".dxt-{CHECKS_NAME}").exists()


def test_a_check_record_that_cannot_be_written_is_said_not_a_stop(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    april = dt.date(2024, 4, 30)
    archived(archive, UNITS[0], DAY, 10)
    archived(archive, UNITS[1], april, 10)
    blocked = archive.internal_path(CHECKS_NAME, *checks_parts("toy", 2024, 5))
    blocked.mkdir(parents=True)  # a directory where May's record goes: the write fails
    counts = {(UNITS[0], DAY): 10, (UNITS[1], april): 9}
    rows = reconcile(archive, "toy", UNITS, [april, DAY], counter(counts))
    states = [(r.state, r.day) for r in rows]
    assert states == [("missing", april), ("equal", DAY), ("fewer", april), ("missing", DAY)]
    assert "the check was not recorded" in rows[1].detail
    assert "the next reconcile records it" in rows[1].detail
    assert rows[2].detail == "" and rows[2].recorded and not rows[1].recorded
    assert unit_checks(archive.read_internal, "toy", UNITS[1], 2024, 4)["2024-04-30"]


def test_the_run_note_says_how_many_comparisons_were_not_recorded(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    blocked = archive.internal_path(CHECKS_NAME, *checks_parts("toy", d.year, d.month))
    blocked.mkdir(parents=True)
    counts = {(UNITS[0], d): 10, (UNITS[1], d): 10}
    report = reconcile_recent(archive, "toy", UNITS, DAY, 1, counter(counts), None)
    assert report.unrecorded == 2
    assert report.note().endswith(
        "; 2 comparisons NOT recorded in the archive (the next reconcile records them)"
    )
    rows = report.as_dict()["rows"]  # the equal days with something to say
    assert [r["parts"] for r in rows] == [["p", "a"], ["p", "b"]]
    assert all("the check was not recorded" in r["detail"] for r in rows)
    # a reader's count records nothing, on purpose: nothing to say
    viewer = reconcile_recent(
        archive, "toy", UNITS, DAY, 1, counter(counts), None, record_kept=False
    )
    assert viewer.unrecorded == 0 and "NOT recorded" not in viewer.note()


def test_a_mismatch_shows_a_long_count_method_by_its_start_and_length() -> None:
    """A selector unit's count method holds its selector (100 KB for a long one): the
    error shows its start and length, the manifest keeps it whole."""
    from dxt_core.errors import CountMismatch
    from dxt_core.reconcile import SourceCount, check_source_count

    method = 'count_over_time(m{instance!~"' + "x" * 100_000 + '"}[86399999ms])'
    with pytest.raises(CountMismatch) as e:
        check_source_count("m 2024-04-01", 10, SourceCount(12, method), past=True)
    assert len(str(e.value)) < 1000 and f"({len(method):,} characters)" in str(e.value)


def test_a_run_conf_key_that_is_not_a_param_is_refused() -> None:
    """``{"Day": "2024-05-03"}`` was ignored: the run archived its logical date's day, not
    the one asked for (checked with a real ``airflow dags test -c``; here the check alone,
    on the context's shape: a DAG with params and a run with conf)."""
    from types import SimpleNamespace

    from dxt_core.airflow.runs import check_conf_keys

    dag = SimpleNamespace(
        dag_id="dxt_examon", params={"day": "", "format": "csv", "replace": False}
    )
    with pytest.raises(ConfigError) as err:
        check_conf_keys({"dag": dag, "dag_run": SimpleNamespace(conf={"Day": "2024-05-03"})})
    assert "'Day', which is not a param of dxt_examon (its params: day, format, replace)" in str(
        err.value
    )
    check_conf_keys({"dag": dag, "dag_run": SimpleNamespace(conf={"day": "2024-05-03"})})
    check_conf_keys({"dag": dag, "dag_run": SimpleNamespace(conf=None)})


def test_a_day_committed_again_while_counted_gets_no_kept_record(tmp_path: Path) -> None:
    """A --replace committed while the source was counted: the record written after it said
    the archive held the old rows, and coverage showed K until the next commit."""
    archive = Archive(tmp_path)
    d = DAY - dt.timedelta(days=1)
    archived(archive, UNITS[0], d, 10)
    archived(archive, UNITS[1], d, 10)
    base = counter({(UNITS[0], d): 7, (UNITS[1], d): 7})
    held = archive.day_lock(DayKey("toy", UNITS[1], d))

    def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        if parts == UNITS[0]:
            archived(archive, parts, day, 7)  # the replacing commit, mid-count
        else:
            held.acquire()  # a writer holds the day when the record would be written
        return base(parts, day)

    try:
        report = reconcile_recent(archive, "toy", UNITS, DAY, 1, count, None)
    finally:
        held.release()
    rows = report.as_dict()["rows"]
    assert "committed again while the source was counted" in rows[0]["detail"]
    assert "being archived now" in rows[1]["detail"]
    for unit in UNITS:
        assert not archive.kept_path(DayKey("toy", unit, d)).exists()


def test_days_before_the_start_date_are_said_left_out_not_missing() -> None:
    from dxt_core.reconcile import RecentReport

    assert RecentReport(before_start=3).note() == (
        "reconcile: nothing (3 days before this one, all before the DAG's start date)"
    )
    assert RecentReport().note() == "reconcile: off (0 days)"


def test_a_short_reconcile_is_unavailable_only_when_no_count_was_answered(tmp_path) -> None:
    """Under UNREACHABLE_AFTER counts, a reconcile stops as unreachable (exit 4) when every
    count it asked went unanswered; one the server refused is an answer (exit 3, as before)."""
    from dxt_core.errors import SourceUnavailable

    archive = Archive(tmp_path)
    d1, d2 = DAY - dt.timedelta(days=2), DAY - dt.timedelta(days=1)
    for d in (d1, d2):
        archived(archive, UNITS[0], d, 10)

    def down(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        raise SourceUnavailable("connection refused", url="http://source")

    def refused_then_down(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        if day == d1:
            raise SourceError("HTTP 400: bad query", url="http://source")
        return down(parts, day)

    with pytest.raises(SourceUnavailable, match="for any of the 2 metric-days it was asked"):
        reconcile(archive, "toy", UNITS, [d1, d2], down, record_kept=False)
    rows = reconcile(archive, "toy", UNITS, [d1, d2], refused_then_down, record_kept=False)
    assert [(r.day, r.state) for r in rows if r.state != "missing"] == [
        (d1, "error"),
        (d2, "error"),
    ]


def test_more_rows_than_the_source_counts_is_not_called_an_answer_cut_short():
    """Reading more points than the source counts was explained as "the answer was cut short
    or points were lost", which cannot give more points."""
    from dxt_core.errors import CountMismatch
    from dxt_core.reconcile import SourceCount, check_source_count

    with pytest.raises(CountMismatch) as more:
        check_source_count("u 2024-04-01", 27, SourceCount(24, "count_over_time"), past=True)
    assert "more points were read than the source counts" in str(more.value)
    assert "cut short" not in str(more.value)
    with pytest.raises(CountMismatch) as fewer:
        check_source_count("u 2024-04-01", 24, SourceCount(27, "count_over_time"), past=True)
    assert "late data" in str(fewer.value)


def test_a_day_archived_before_it_ended_is_not_counted_until_it_has(tmp_path: Path) -> None:
    """A day archived before its end (``day_not_over``), reconciled while it still runs:
    the source's count had grown (as it does all day) and the day was said "MORE at the
    source (late data: refetch)", exit 4. It is "not over" and not asked; once the day
    has ended it is compared (then more is late data: the refetch fetches the whole day)."""
    archive = Archive(tmp_path)
    key = DayKey("toy", UNITS[0], DAY)
    archived(archive, UNITS[0], DAY, 24)
    doc = archive.read_manifest(key)
    assert doc is not None
    ends = dt.datetime(2024, 5, 5, tzinfo=dt.UTC)
    archive.write_manifest(key, {**doc, "day_not_over": {"ends": ends.isoformat(), "zone": "UTC"}})
    asked: list[object] = []

    def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        asked.append((parts, day))
        return SourceCount(26, "faked count")

    during = ends - dt.timedelta(hours=6)
    (row,) = reconcile(archive, "toy", [UNITS[0]], [DAY], count, now=during, record_kept=False)
    assert (row.state, row.archive_count, row.source_count) == ("not over", 24, None)
    assert "compared once it has ended" in row.detail and not asked
    (row,) = reconcile(archive, "toy", [UNITS[0]], [DAY], count, now=ends, record_kept=False)
    assert (row.state, row.archive_count, row.source_count) == ("more", 24, 26) and asked


def test_failed_refetches_alone_fail_the_daily_task() -> None:
    """Every count answered and equal, a refetch failed: the task must fail (and be
    retried), not end successfully with the failure in its note alone."""
    from dxt_core.reconcile import RecentReport, ReconcileRow

    d = DAY - dt.timedelta(days=1)
    report = RecentReport(
        days=[d],
        rows=[ReconcileRow(UNITS[0], d, "equal", 10, 10, "faked count")],
        failed=[(UNITS[1], d, "boom")],
    )
    failed = report.failure()
    assert failed is not None and failed.startswith("1 refetch(es) FAILED (the rest was done)")
    assert "p/b 2024-05-03: boom" in failed


def test_scattered_unreachable_counts_do_not_stop_a_reconcile(tmp_path: Path) -> None:
    """The source unreachable for one count in two: an answered count between them resets
    the run, so a reconcile of 10 days is not stopped as "5 metric-days in a row"."""
    from dxt_core.errors import SourceUnavailable

    archive = Archive(tmp_path)
    days = [DAY - dt.timedelta(days=n) for n in range(10, 0, -1)]
    for d in days:
        archived(archive, UNITS[0], d, 10)

    def flaky(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        if days.index(day) % 2 == 0:
            raise SourceUnavailable("connection refused", url="http://source")
        return SourceCount(10, "faked count")

    rows = reconcile(archive, "toy", [UNITS[0]], days, flaky, record_kept=False)
    assert [r.state for r in rows] == ["error", "equal"] * 5


def test_a_short_unreachable_reconcile_is_unavailable_beside_a_day_not_over(tmp_path) -> None:
    """Two archived days unanswered and today's (not over, not asked): the source answered
    no count, so the reconcile is unreachable (exit 4), not "counts failed"."""
    from dxt_core.errors import SourceUnavailable

    archive = Archive(tmp_path)
    d1, d2 = DAY - dt.timedelta(days=2), DAY - dt.timedelta(days=1)
    for d in (d1, d2, DAY):
        archived(archive, UNITS[0], d, 10)
    key = DayKey("toy", UNITS[0], DAY)
    doc = archive.read_manifest(key)
    assert doc is not None
    ends = dt.datetime(2024, 5, 5, tzinfo=dt.UTC)
    archive.write_manifest(key, {**doc, "day_not_over": {"ends": ends.isoformat(), "zone": "UTC"}})

    def down(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        raise SourceUnavailable("connection refused", url="http://source")

    now = ends - dt.timedelta(hours=1)
    with pytest.raises(SourceUnavailable, match="for any of the 2 metric-days it was asked"):
        reconcile(archive, "toy", [UNITS[0]], [d1, d2, DAY], down, now=now, record_kept=False)


def test_fewer_points_than_rows_and_holes_is_kept_only_below_the_rows(tmp_path: Path) -> None:
    """A day of 10 rows and a hole of 5 unreadable points: a source count of 12 may be the
    hole's points gone (fewer, no kept record: the next run retries the hole); 8 is below
    the rows archived (retention: the archive keeps them, coverage shows K)."""
    archive = Archive(tmp_path)
    key = DayKey("toy", UNITS[0], DAY)
    archived(archive, UNITS[0], DAY, 10)
    doc = archive.read_manifest(key)
    assert doc is not None
    archive.write_manifest(key, {**doc, "holes": [{"points": 5}]})
    (row,) = reconcile(archive, "toy", [UNITS[0]], [DAY], counter({(UNITS[0], DAY): 12}))
    assert (row.state, row.archive_count) == ("fewer", 15)
    assert not archive.kept_path(key).exists()
    (row,) = reconcile(archive, "toy", [UNITS[0]], [DAY], counter({(UNITS[0], DAY): 8}))
    assert row.state == "fewer" and archive.kept_path(key).exists()
