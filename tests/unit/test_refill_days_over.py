"""``dxt coverage``'s refill commands name only days that have ended in the zone the
archive's days are cut in: ``dxt extract`` refuses a day not begun and archives a day not over
as ``day_not_over``, and Airflow backfills only runs whose interval has ended. The days left
out are said, with the zone."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import pytest

from dxt_core import refill_commands
from dxt_core.archive import Archive, DayKey
from dxt_core.cli import main
from dxt_core.refill_commands import split_days_over

D1, D2, D3, D4 = (dt.date(2024, 5, d) for d in range(1, 5))
#: 2024-05-02 ends at 22:00 UTC in Europe/Rome (CEST), at 2024-05-03 00:00 UTC in UTC
LATE_EVENING = dt.datetime(2024, 5, 2, 22, 30, tzinfo=dt.UTC)


def at(monkeypatch: pytest.MonkeyPatch, now: dt.datetime) -> None:
    """Run ``dxt coverage`` as if it were ``now``."""
    monkeypatch.setattr(
        refill_commands, "split_days_over", functools.partial(split_days_over, now=now)
    )


def test_a_day_is_over_when_it_has_ended_in_the_zone() -> None:
    days = [D1, D2, D3]
    assert split_days_over(days, "Europe/Rome", LATE_EVENING) == ([D1, D2], [D3])
    assert split_days_over(days, "UTC", LATE_EVENING) == ([D1], [D2, D3])
    before = LATE_EVENING - dt.timedelta(hours=1)  # 21:30 UTC: 23:30 in Rome
    assert split_days_over(days, "Europe/Rome", before) == ([D1], [D2, D3])
    # the end itself is over (a day is [midnight, next midnight))
    assert split_days_over([D2], "UTC", dt.datetime(2024, 5, 3, tzinfo=dt.UTC)) == ([D2], [])


def test_with_no_zone_a_day_is_over_once_it_is_over_everywhere() -> None:
    # the last day to end is UTC-12's: 2024-05-01 ends there at 2024-05-02 12:00 UTC
    noon = dt.datetime(2024, 5, 2, 12, tzinfo=dt.UTC)
    assert split_days_over([D1], None, noon - dt.timedelta(seconds=1)) == ([], [D1])
    assert split_days_over([D1], None, noon) == ([D1], [])


@pytest.fixture()
def catalog(tmp_path: Path) -> Path:
    p = tmp_path / "catalog.csv"
    p.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    return p


def examon_day(root: Path, doc: dict[str, object]) -> None:
    """An empty examon day (ipmi_pub/ambient, 2024-05-01) with ``doc``'s manifest fields."""
    with Archive(root).begin(DayKey("examon", ("ipmi_pub", "ambient"), D1)) as day:
        day.commit({"status": "empty", **doc})


def coverage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(["coverage", *argv])
    out = capsys.readouterr()
    # nothing on stderr but the index's repair notice (a manifest written here without it)
    assert [x for x in out.err.splitlines() if "repair" not in x] == []
    return rc, out.out


def test_the_dxt_refill_stops_at_the_last_day_over_in_the_archives_zone(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    catalog: Path,
    tmp_path: Path,
) -> None:
    examon_day(
        tmp_path,
        {
            "source_url": "http://examon:8083",
            "made_by": {"tool": "dxt"},
            "day_definition": {"time_zone": "Europe/Rome", "day": "local midnight"},
            "plugin_options": "",  # a manifest of today's dxt (an older one's is said)
        },
    )
    argv = ("examon", "--archive", str(tmp_path), "--catalog", str(catalog))
    argv += ("--start-day", str(D1), "--end-day", str(D4))
    at(monkeypatch, LATE_EVENING)
    rc, out = coverage(capsys, *argv)
    assert rc == 3  # the missing days are still missing
    assert (
        f"dxt extract examon --url http://examon:8083 --catalog {catalog} --start-day "
        f"{D1} --end-day {D2} --archive {tmp_path}"
    ) in out
    assert f"--end-day {D4}" not in out and f"--start-day {D3}" not in out
    assert (
        "2 missing or corrupt day(s) not over yet in Europe/Rome, left out of the refill "
        f"commands: {D3}..{D4}"
    ) in out
    # an hour earlier, 2024-05-02 is not over in Rome either
    at(monkeypatch, LATE_EVENING - dt.timedelta(hours=1))
    rc, out = coverage(capsys, *argv)
    assert f"--start-day {D1} --end-day {D1} " in out
    assert "3 missing or corrupt day(s) not over yet in Europe/Rome" in out


def test_only_days_not_over_print_no_refill_command(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    catalog: Path,
    tmp_path: Path,
) -> None:
    examon_day(tmp_path, {"made_by": {"tool": "airflow"}, "time_zone": "UTC"})
    at(monkeypatch, dt.datetime(2024, 5, 1, 23, tzinfo=dt.UTC))
    rc, out = coverage(
        capsys,
        *("examon", "--archive", str(tmp_path), "--catalog", str(catalog)),
        *("--start-day", str(D1), "--end-day", str(D2)),
    )
    assert rc == 3
    assert "airflow" not in out and "dxt extract" not in out
    assert "2 missing or corrupt day(s) not over yet in UTC, left out of the refill" in out
    assert f"{D1}..{D2}; refill them once they have ended" in out


def test_no_zone_known_leaves_out_the_days_not_over_everywhere(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    catalog: Path,
    tmp_path: Path,
) -> None:
    examon_day(tmp_path, {})  # an old manifest: it says neither its maker nor its zone
    at(monkeypatch, LATE_EVENING)  # 2024-05-02 is over in UTC+1 and beyond, not in UTC-12
    rc, out = coverage(
        capsys,
        *("examon", "--archive", str(tmp_path), "--catalog", str(catalog)),
        *("--start-day", str(D1), "--end-day", str(D3)),
    )
    assert rc == 3
    assert f"--start-day {D1} --end-day {D1} " in out
    assert f"--from-date {D1}T00:00:00+00:00 --to-date {D1}T00:00:00+00:00 " in out
    assert "not over yet everywhere on Earth (no manifest says the archive's zone" in out
    assert f"left out of the refill commands: {D2}..{D3}" in out


def test_collectd_days_are_utc_days_and_the_future_is_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """collectd-es manifests name no zone: the backend's UTC days are its refill's (now,
    not a fixed time: days ahead are never refilled, the day before yesterday always is)."""
    today = dt.datetime.now(dt.UTC).date()
    first, last = today - dt.timedelta(days=3), today + dt.timedelta(days=3)
    Archive(tmp_path).write_manifest(
        DayKey("collectd_es", ("disk",), first),
        {"status": "empty", "file": None, "rows": 0, "bytes": 0},
    )
    rc, out = coverage(
        capsys,
        *("collectd-es", "--archive", str(tmp_path), "--families", "disk"),
        *("--start-day", str(first), "--end-day", str(last)),
    )
    assert rc == 3
    refill = next(line for line in out.splitlines() if "airflow backfill create" in line)
    to_date = dt.date.fromisoformat(refill.split("--to-date ")[1].split()[0][:10])
    assert first < to_date <= today  # today only if UTC midnight passed while it ran
    assert "day(s) not over yet in UTC, left out of the refill commands:" in out
    assert f"..{last}; refill them once they have ended" in out


def test_the_refill_command_quotes_an_archive_root_with_a_space(tmp_path, capsys):
    root = tmp_path / "my archive"
    root.mkdir()
    with Archive(root).begin(DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2024, 5, 1))) as d:
        d.commit({"status": "empty"})
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    rc = main(["coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
               "--start-day", "2024-05-01", "--end-day", "2024-05-02"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 3
    assert f"--archive '{root}'" in out, out
