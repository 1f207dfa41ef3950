"""dxt_core.reconcile's daily pass and the run note it leaves, against a faked source answer
(the counter stands for the server's count; the archive and the comparison are ours)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from dxt_core.airflow.runs import NOTE_LIMIT, note_with_reconcile
from dxt_core.archive import Archive, DayKey
from dxt_core.errors import ConfigError, SourceError
from dxt_core.reconcile import SourceCount, reconcile_days, reconcile_recent

DAY = dt.date(2024, 5, 4)
UNITS = [("p", "a"), ("p", "b")]


def archived(archive: Archive, parts: tuple[str, ...], day: dt.date, rows: int) -> None:
    archive.write_manifest(
        DayKey("toy", parts, day), {"status": "archived", "rows": rows, "file": "x.csv.gz"}
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
        "1 missing, 1 more; counts only, nothing refetched"
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
