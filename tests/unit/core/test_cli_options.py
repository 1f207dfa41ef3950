"""Command-line values checked before anything starts, and the refill commands a coverage
prints: each names the option (or the command that exists) and how to fix it."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey


def dxt(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_demo_refuses_a_bad_number_before_starting_anything(tmp_path: Path) -> None:
    for argv, said in (
        (["--days", "0"], "--days 0: give 1 or more"),
        (["--metrics-per-plugin", "-1"], "--metrics-per-plugin -1: give 1 or more"),
        (["--port", "70000"], "--port 70000: give a TCP port"),
    ):
        out = dxt("demo", "--dir", str(tmp_path / "d"), "--exit", *argv)
        assert out.returncode == 2 and said in out.stderr, out.stderr
        assert not (tmp_path / "d").exists()  # nothing started, nothing made


def test_examon_limit_and_plugins_name_the_option(tmp_path: Path) -> None:
    base = ("extract", "examon", "--url", "http://127.0.0.1:9", "--start-day", "2020-03-01")
    out = dxt(*base, "--archive", str(tmp_path / "a"), "--limit", "-1")
    assert out.returncode == 2 and "--limit -1: give 1 or more" in out.stderr
    out = dxt(*base, "--archive", str(tmp_path / "a"), "--plugins", "ipmi")
    assert out.returncode == 2
    assert "no metric of the catalog belongs to --plugins ipmi" in out.stderr
    assert "ipmi_pub" in out.stderr  # the plugins there are, to choose from


def test_collectd_archive_days_are_refilled_by_the_dag_only(tmp_path: Path) -> None:
    """``dxt extract collectd-es`` exports one window to one file: it writes no archive day,
    so the refill printed for missing days is the DAG's, never a dxt command that does not
    exist (``dxt extract collectd_es ... --start-day``)."""
    archive = Archive(tmp_path)
    archive.write_manifest(
        DayKey("collectd_es", ("disk",), dt.date(2017, 12, 19)),
        {"status": "empty", "file": None, "rows": 0, "bytes": 0},
    )
    out = dxt(
        *("coverage", "collectd-es", "--archive", str(tmp_path)),
        *("--start-day", "2017-12-19", "--end-day", "2017-12-21"),
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "dxt extract" not in out.stdout
    assert "airflow backfill create --dag-id dxt_collectd_es --from-date 2017-12-" in out.stdout


def test_log_times_carry_their_offset(monkeypatch):
    """A log line's time said ``2026-12-07 10:30:13,201`` in the machine's zone, beside
    messages quoting UTC and archive-zone times; it now carries its offset."""
    import logging
    import time

    from dxt_core.cli import _LogFormat

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        record = logging.LogRecord("dxt_core.x", logging.WARNING, __file__, 1, "m", None, None)
        record.created = 1796607013.201  # 2026-12-07T01:30:13.201Z
        line = _LogFormat("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert line == "2026-12-07T10:30:13.201+09:00 WARNING dxt_core.x: m"


def test_day_and_month_ranges_are_checked_in_the_options_words():
    """A reversed --start-day/--end-day names both options (on Prometheus it was "empty
    window" with a day not given); a day is YYYY-MM-DD only (not 20240101 nor a week date);
    a publication may not span 100 years (year_month=YY-MM would name two months alike)."""
    import argparse

    import pytest

    from dxt_core.errors import ConfigError
    from dxt_core.publish.archive_scan import month_range
    from dxt_core.runner import day_range
    from dxt_core.windows import parse_day

    args = argparse.Namespace(start_day="2024-01-03", end_day="2023-12-30")
    with pytest.raises(ConfigError, match=r"--end-day 2023-12-30 is before --start-day 2024-01-03"):
        day_range(args)
    for text in ("20240101", "2024-W01-1", "2024-1-1"):
        with pytest.raises(ConfigError, match=rf"bad day '{text}': expected YYYY-MM-DD"):
            parse_day(text)
    assert parse_day(" 2024-02-29 ").isoformat() == "2024-02-29"
    with pytest.raises(ConfigError, match=r"spans 100 years or more.*99-12 is 1999-12 and 2099-12"):
        month_range("1999-12", "2099-12")
    assert len(month_range("1999-12", "2099-11")) == 1200


def test_the_run_summary_counts_unchanged_days_among_their_own(tmp_path):
    """A refetch that read what the archive held says so per kind of day: it counted the
    unchanged empty days among the archived ones ("archived 12 ..., 15 of them unchanged")."""
    import io

    from dxt_core.archive_day import DayReport
    from dxt_core.runner import _Outcome, _print_summary

    def report(day: int, status: str, rows: int) -> DayReport:
        key = DayKey("toy", ("m",), dt.date(2020, 3, day))
        return DayReport(key, status, rows, rows, None, tmp_path, 0.1, extra={"unchanged": True})  # type: ignore[arg-type]

    reports = [report(d, "archived", 10) for d in (1, 2)] + [
        report(d, "empty", 0) for d in (3, 4, 5)
    ]
    out, err = io.StringIO(), io.StringIO()
    _print_summary(_Outcome(reports=reports), 0, Archive(tmp_path), out, err)
    line = out.getvalue()
    assert line.startswith("archived 2 metric-days (20 rows, 20 bytes; 2 of them unchanged"), line
    assert "), 3 empty (3 unchanged), 0 failed" in line, line


def test_a_day_its_zone_skipped_is_a_clear_error_and_coverage_goes_on():
    """Pacific/Apia went from 2011-12-29 to 2011-12-31 (and Pacific/Kiritimati skipped
    1994-12-31): the day has no instant there. Archiving it said "empty window: end ... is
    not after start ..."; coverage's refill commands stopped on it (exit 2, no commands)."""
    import pytest

    from dxt_core.errors import ConfigError
    from dxt_core.refill_commands import split_days_over
    from dxt_core.windows import day_window

    with pytest.raises(ConfigError, match=r"2011-12-30 does not exist in Pacific/Apia: its clocks"):
        day_window(dt.date(2011, 12, 30), "Pacific/Apia")
    with pytest.raises(ConfigError, match="1994-12-31 does not exist in Pacific/Kiritimati"):
        day_window(dt.date(1994, 12, 31), "Pacific/Kiritimati")
    around = [dt.date(2011, 12, 29), dt.date(2011, 12, 30), dt.date(2011, 12, 31)]
    assert split_days_over(around, "Pacific/Apia") == (around, [])
    assert day_window(dt.date(2011, 12, 31), "Pacific/Apia").start.isoformat() == (
        "2011-12-30T10:00:00+00:00"
    )


@pytest.mark.slow  # 4.3 s: two extracts from the simulator
def test_verbose_is_taken_before_or_after_the_command(examon_sim, tmp_path):
    """``-v`` logs each request whichever side of the command it is given (after it was
    "unrecognized arguments: -v"); without it, none is logged."""
    base = ["extract", "examon", "--url", examon_sim.url, "--metric", "ambient", "--plugin"]
    base += ["ipmi_pub", "--start-day", "2020-03-09", "-q"]
    runs = {
        "after": dxt(*base, "--archive", str(tmp_path / "a"), "-v"),
        "after, long": dxt(*base, "--archive", str(tmp_path / "b"), "--verbose"),
        "before": dxt("-v", *base, "--archive", str(tmp_path / "c")),
        "none": dxt(*base, "--archive", str(tmp_path / "d")),
    }
    for how, out in runs.items():
        assert out.returncode == 0, (how, out.stderr)
        logged = "INFO httpx: HTTP Request: POST" in out.stderr
        assert logged == (how != "none"), (how, out.stderr[-2000:])
    index = dxt("index", "rebuild", "--archive", str(tmp_path / "a"), "-v")
    assert index.returncode == 0, index.stderr


def test_the_run_summary_tells_a_removed_stray_file_from_a_replaced_day(tmp_path):
    """A refill that removed a data file no manifest named (``coverage --verify`` finds
    them) said "replaced an archived day", the words of a day whose archived bytes changed."""
    import io

    from dxt_core.archive_day import DayReport
    from dxt_core.runner import _Outcome, _print_summary

    def report(day: int, *replaced: dict[str, object]) -> DayReport:
        key = DayKey("toy", ("m",), dt.date(2020, 3, day))
        extra = {"replaced": list(replaced)}
        return DayReport(key, "archived", 10, 10, None, tmp_path, 0.1, extra=extra)

    grown = {"file": "2020-03-01.csv.gz", "version": ".versions/2020-03-01.csv.gz.prev-1"}
    stray = {"file": "2020-03-02.parquet", "version": ".versions/x", "unnamed": True}
    out, err = io.StringIO(), io.StringIO()
    _print_summary(
        _Outcome(reports=[report(1, grown), report(2, stray)]), 0, Archive(tmp_path), out, err
    )
    line = out.getvalue()
    assert "; 1 of them replaced an archived day, its old files kept in .versions/" in line, line
    assert "; 1 of them removed data files their manifest did not name, kept in .versions/" in line
    assert (
        report(2, stray)
        .summary()
        .startswith("toy/m 2020-03-02: archived (removing 1 data file no manifest named), 10 rows")
    )
