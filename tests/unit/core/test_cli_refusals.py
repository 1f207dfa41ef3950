"""Options that cannot be meant as given are refused before any request, with the option
named: days that have not begun, --workers below 1, Kwollect's --archive with --backup."""

from __future__ import annotations

import datetime as dt

import pytest

from dxt_core.cli import main

# nothing listens here: a refusal must come before any request
URL = "http://127.0.0.1:9"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize("backend", ["examon", "prometheus"])
def test_a_day_that_has_not_begun_is_refused(capsys, tmp_path, backend) -> None:
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=3)).date()
    rc, said = _run(
        capsys, "extract", backend, "--url", URL, "--metrics" if backend == "prometheus" else
        "--limit", "m" if backend == "prometheus" else "1", "--start-day", str(later),
        "--archive", str(tmp_path),
    )  # fmt: skip
    assert rc == 2, said
    assert f"--start-day {later}: that day has not begun yet" in said
    assert not any(tmp_path.iterdir())


def test_an_end_day_that_has_not_begun_is_refused(capsys, tmp_path) -> None:
    rc, said = _run(
        capsys, "extract", "examon", "--url", URL, "--limit", "1", "--start-day", "2020-03-09",
        "--end-day", "2099-01-01", "--archive", str(tmp_path),
    )  # fmt: skip
    assert rc == 2 and "--end-day 2099-01-01: that day has not begun yet" in said, said


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_workers_below_one_are_refused(capsys, tmp_path, workers) -> None:
    rc, said = _run(
        capsys, "extract", "examon", "--url", URL, "--limit", "1", "--start-day", "2020-03-09",
        "--workers", workers, "--archive", str(tmp_path),
    )  # fmt: skip
    assert rc == 2 and f"--workers {workers}: give 1 or more" in said, said


@pytest.mark.parametrize(
    ("option", "value", "refusal"),
    [
        ("--workers", "0", "--workers 0: give 1 or more"),
        ("--retries", "-1", "--retries -1: give 0 (no retry) or more"),
        ("--timeout", "0", "(--timeout on the command line) must be above 0"),
        ("--target-points", "0", "--target-points 0: give 1 or more"),
        ("--min-window-s", "0", "--min-window-s 0: give 1 second or more"),
        ("--window-s", "10", "--window-s 10 is below --min-window-s 300"),
        ("--in-flight", "-1", "CLI --in-flight"),
    ],
)
def test_prometheus_refuses_bad_numbers_before_asking_the_server(
    capsys, tmp_path, option, value, refusal
) -> None:
    """Without --metrics the command first asks the server for its metric names: a number
    that cannot be meant is refused before that (exit 2), not after the retries of an
    unreachable server (exit 4) nor after the server's line is printed."""
    rc, said = _run(
        capsys, "extract", "prometheus", "--url", URL, "--start-day", "2020-03-09",
        "--archive", str(tmp_path / "ap"), *(() if option == "--retries" else ("--retries", "0")),
        option, value,
    )  # fmt: skip
    assert rc == 2 and refusal in said, said
    assert "units" not in said and "unreachable" not in said and "gave up" not in said, said
    assert not (tmp_path / "ap").exists()


def test_kwollect_archive_and_backup_together_are_refused(capsys, tmp_path) -> None:
    rc, said = _run(
        capsys, "extract", "kwollect", "--api-url", URL, "--clusters", "nancy/gros",
        "--start-day", "2024-11-26", "--archive", str(tmp_path / "a"), "--backup",
        str(tmp_path / "b"),
    )  # fmt: skip
    assert rc == 2 and "not both" in said, said
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("backend", ["examon", "prometheus", "kwollect"])
def test_a_day_that_has_not_begun_in_the_archive_zone_is_refused(capsys, tmp_path, backend):
    """A day already begun east of the archive's zone, not in it, was archived as empty
    (exit 0, "not over"); the check took the earliest zone on Earth for every archive."""
    now = dt.datetime.now(dt.UTC)
    day = (now + dt.timedelta(hours=14)).date()  # begun at UTC+14, not at UTC-12
    today_there = (now - dt.timedelta(hours=12)).date()
    which = {
        "examon": ("--url", URL, "--limit", "1"),
        "prometheus": ("--url", URL, "--metrics", "m"),
        "kwollect": ("--api-url", URL, "--clusters", "lyon/nova"),
    }[backend]
    rc, said = _run(
        capsys, "extract", backend, *which, "--tz", "Etc/GMT+12", "--start-day", str(day),
        "--archive", str(tmp_path),
    )  # fmt: skip
    assert rc == 2, said
    assert (
        f"--start-day {day}: that day has not begun yet (today is {today_there} in "
        "Etc/GMT+12, the zone its days are cut in)"
    ) in said
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("mode", "given", "named"),
    [
        (("--archive", "A", "--clusters", "lyon/nova", "--start-day", "2024-11-26"),
         ("--format", "csv"), "--format: an option of --backup only"),
        (("--archive", "A", "--clusters", "lyon/nova", "--start-day", "2024-11-26"),
         ("--start", "2024-11-26T00:00:00+00:00", "--job", "lyon:1"),
         "--job, --start: options of --backup only"),
        (("--backup", "B", "--nodes", "nova-1.lyon", "--start", "2024-11-26T00:00:00+00:00"),
         ("--start-day", "2024-11-26", "--tz", "UTC"),
         "--start-day, --tz: options of --archive only"),
        (("--backup", "B", "--nodes", "nova-1.lyon", "--start", "2024-11-26T00:00:00+00:00"),
         ("--refetch", "-q"), "--refetch, --quiet: options of --archive only"),
    ],
)  # fmt: skip
def test_kwollect_refuses_the_options_of_the_other_mode(capsys, tmp_path, mode, given, named):
    """``--archive ... --format csv`` wrote gzip JSON Lines, and a backup's ``--start-day``
    was ignored, both with exit 0."""
    argv = [str(tmp_path / a) if a in ("A", "B") else a for a in mode]
    rc, said = _run(capsys, "extract", "kwollect", "--api-url", URL, *argv, *given)
    assert rc == 2 and named in said, said
    assert not any(tmp_path.iterdir())
