"""``dxt coverage --verify`` reads and hashes several metric-days at once (``--workers``) and says
on stderr how far it has got: the rows are the same, in the same order, whatever the number of
workers, and the changed bytes it exists to find are found."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dxt_core.archive import Archive
from dxt_core.cli import main
from dxt_core.coverage import Verified, VerifyOptions, coverage, iter_coverage, progress_lines
from tests.unit.core.test_coverage_output_scale import archive_day, day, make_archive


def flip_a_byte(root, parts, d):
    """The day's data file with one byte changed: its size still matches the manifest, so
    only its sha256 shows it."""
    path = root / "examon" / parts[0] / parts[1] / f"{d}.csv.gz"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def run(capsys, root, catalog, n_days, *extra):
    rc = main(
        [
            "coverage",
            "examon",
            "--archive",
            str(root),
            "--catalog",
            str(catalog),
            "--start-day",
            day(0).isoformat(),
            "--end-day",
            day(n_days - 1).isoformat(),
            *extra,
        ]
    )
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("workers", ["1", "3", "8"])
def test_rows_do_not_depend_on_the_workers(capsys, tmp_path, workers):
    root, catalog, units = make_archive(tmp_path, 5, 6, skip=lambda m, i: (m + i) % 4 == 0)
    flip_a_byte(root, units[1], day(2))
    flip_a_byte(root, units[4], day(5))
    rc, out, err = run(capsys, root, catalog, 6, "--json", "--verify", "--workers", workers)
    assert rc == 3
    rows = json.loads(out)["rows"]
    assert [(r["metric"], r["day"]) for r in rows] == [
        (p[1], day(i).isoformat()) for p in units for i in range(6)
    ]
    corrupt = [(r["metric"], r["day"]) for r in rows if r["status"] == "corrupt"]
    assert corrupt == [("m01", day(2).isoformat()), ("m04", day(5).isoformat())]
    assert all("sha256" in r["detail"] for r in rows if r["status"] == "corrupt")
    # the last line says what was done
    assert "dxt: verified 30 metric-days (manifests, and the files of those archived) in " in err
    assert err.splitlines()[-1].endswith(": 2 corrupt")
    # the same rows from the library, in order, as without --verify but for the sha256
    archive = Archive(root)
    verified = list(
        iter_coverage(archive, "examon", units, [day(i) for i in range(6)], True, VerifyOptions(2))
    )
    plain = coverage(archive, "examon", units, [day(i) for i in range(6)])
    assert [(r.parts, r.day) for r in verified] == [(r.parts, r.day) for r in plain]
    assert sum(r.status == "corrupt" for r in plain) == 0  # the sizes still match


def test_without_verify_nothing_is_said_of_it(capsys, tmp_path):
    root, catalog, _ = make_archive(tmp_path, 2, 2)
    rc, _, err = run(capsys, root, catalog, 2)
    assert rc == 0 and "verif" not in err


def test_progress_lines_say_how_far_and_how_long():
    lines: list[str] = []
    show = progress_lines(lines.append, every_s=10)
    show(Verified(1, 600, 0, 1.0))  # under 10 s: nothing yet
    assert lines == []
    show(Verified(100, 600, 1, 12.0))
    show(Verified(101, 600, 1, 13.0))  # 1 s after the last line: nothing
    show(Verified(200, 600, 2, 3_600.0))
    show(Verified(600, 600, 2, 10_000.0))
    assert lines == [
        "verifying: 100 of 600 metric-days checked (1 corrupt), about 60 s left",
        "verifying: 200 of 600 metric-days checked (2 corrupt), about 2 h 0 min left",
        "verified 600 metric-days (manifests, and the files of those archived) in 10000.0 s: 2 corrupt",
    ]


def test_a_consumer_that_stops_early_leaves_no_thread_running(tmp_path):
    import threading

    root, _, units = make_archive(tmp_path, 4, 5)
    archive_day(root, units[0], dt.date(2024, 5, 9))
    rows = list(iter_coverage(Archive(root), "examon", units, [day(i) for i in range(5)], True))
    assert len(rows) == 20
    found = iter_coverage(
        Archive(root), "examon", units, [day(i) for i in range(5)], True, VerifyOptions(3)
    )
    next(found)
    found.close()  # the pool is shut down, its queued checks cancelled
    assert not [t for t in threading.enumerate() if t.name.startswith("dxt-verify")]


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_are_refused(capsys, tmp_path, workers):
    root, catalog, _ = make_archive(tmp_path, 1, 1)
    rc, out, err = run(capsys, root, catalog, 1, "--verify", "--workers", workers)
    assert rc == 2 and f"--workers {workers}: give 1 or more" in err and out == ""


def test_a_closed_stderr_keeps_the_json_whole(capsys, tmp_path, monkeypatch):
    """With stderr closed (``2>&-``) Python has no ``sys.stderr``, and ``print`` to it would
    write to stdout: the progress is then not said at all."""
    import sys

    root, catalog, _ = make_archive(tmp_path, 2, 2)
    monkeypatch.setattr(sys, "stderr", None)
    rc, out, _ = run(capsys, root, catalog, 2, "--json", "--verify")
    assert rc == 0 and len(json.loads(out)["rows"]) == 4


def test_a_pass_stopped_early_says_how_far_it_got(tmp_path):
    """Ctrl-C (or any error) while rows are taken: the last progress line says the pass
    stopped, after how many of how many metric-days."""
    root, _, units = make_archive(tmp_path, 3, 4)
    lines: list[str] = []
    options = VerifyOptions(2, progress_lines(lines.append, every_s=3600))
    found = iter_coverage(Archive(root), "examon", units, [day(i) for i in range(4)], True, options)
    next(found), next(found)
    with pytest.raises(KeyboardInterrupt):
        found.throw(KeyboardInterrupt())
    assert lines == [lines[-1]] and lines[-1].startswith(
        "verification stopped after 2 of 12 metric-days checked (0 corrupt), "
    )
