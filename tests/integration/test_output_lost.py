"""A run whose output cannot be written (a reader gone, ``> /dev/full``, ``>&-``, a terminal
hung up) does what it would do otherwise, and its commits never outlive its word.

Found by a review of interruptions: Ctrl-C on ``dxt extract ... | tee log`` (tee dies with the
same Ctrl-C) raised BrokenPipeError in the summary, so the run never reached its own exit:
it waited 11 s for the abandoned days instead of 5, exited 141, and the days it called
"abandoned" were committed. A day abandoned while the summary was printed slowly was
committed too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.integration

DXT = str(Path(sys.executable).parent / "dxt")
DAY = "2020-03-09"


@pytest.fixture
def slow_sim(small_catalog):
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "2"])
    yield sim
    sim.stop()


def _kairos_catalog(catalog: Path, tmp_path: Path) -> Path:
    plain = tmp_path / "kairos-only.csv"
    lines = catalog.read_text().splitlines()
    plain.write_text("".join(line + "\n" for line in lines if "job_table" not in line))
    return plain


def _manifests(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.manifest.json")}


@pytest.mark.slow
def test_ctrl_c_with_the_reader_gone_keeps_its_grace_status_and_word(
    slow_sim, small_catalog, tmp_path
):
    slow_sim.faults(delay_s=3.0)  # every metric-day in flight longer than the grace
    root = tmp_path / "archive"
    p = subprocess.Popen(
        [DXT, "extract", "examon", "--url", slow_sim.url, "--catalog",
         str(_kairos_catalog(small_catalog, tmp_path)), "--archive", str(root),
         "--workers", "2", "-q", "--start-day", DAY, "--end-day", "2020-03-12"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None
    p.stdout.close()  # the reader is gone (tee killed by the same Ctrl-C)
    time.sleep(2.5)
    t0 = time.monotonic()
    p.send_signal(2)
    err = p.communicate(timeout=60)[1]
    took = time.monotonic() - t0
    assert p.returncode == 130, err
    assert took < 9, took  # the 5 s grace, not the abandoned requests' own end
    assert "Traceback" not in err and "Bad file descriptor" not in err, err
    abandoned = [line for line in err.splitlines() if line.startswith("INTERRUPTED ")]
    assert abandoned, err
    for line in abandoned:  # "INTERRUPTED ipmi_pub/ambient 2020-03-09: abandoned ..."
        metric, day = line.split()[1].split("/")[1], line.split()[2].rstrip(":")
        assert not list(root.rglob(f"{metric}/{day}.manifest.json")), line


def test_a_full_or_closed_standard_output_is_said_not_taken_for_the_archive(tmp_path):
    """``> /dev/full`` said "No space left on device" like a full archive disk (exit 2 after
    a complete run); ``>&-`` raised AttributeError."""
    root = tmp_path / "archive"
    root.mkdir()
    (root / ".dxt-days-examon.json").write_text('{"time_zone": "UTC"}')  # an archive, empty
    cov = [DXT, "index", "rebuild", "--archive", str(root)]  # one line on standard output
    with open("/dev/full", "w") as full:
        out = subprocess.run(cov, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert "standard output could not be written (No space left on device)" in out.stderr
    assert "Traceback" not in out.stderr
    plain = subprocess.run(cov, capture_output=True, text=True, timeout=120)
    assert out.returncode == (plain.returncode or 2), (plain.returncode, out.stderr)
    closed = subprocess.run(
        ["bash", "-c", 'exec "$@" >&-', "bash", *cov], capture_output=True, text=True, timeout=120
    )
    assert closed.returncode == plain.returncode, closed.stderr
    assert "Traceback" not in closed.stderr, closed.stderr


_GATE = textwrap.dedent(
    """
    import datetime as dt, gzip, hashlib, io, signal, sys, threading, time
    from dxt_core.archive import Archive, DayKey
    from dxt_core.archive_day import DayReport
    from dxt_core.runner import Unit, run_units

    archive = Archive(sys.argv[1])

    def unit(day, wait_s):
        key = DayKey("toy", ("m",), day)
        def run():
            time.sleep(wait_s)  # the server's answer
            body = gzip.compress(b"timestamp,value\\n1,1\\n", mtime=0)
            w = archive.begin(key)
            with w.open("csv.gz") as fh:
                fh.write(body)
            m = w.commit({"status": "archived", "file": f"{day}.csv.gz", "rows": 1,
                          "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})
            return DayReport(key, "archived", 1, len(body), None, m, wait_s)
        return Unit(key, run)

    class SlowTerminal(io.StringIO):
        def write(self, text):  # a slow terminal, a pipe nobody reads
            time.sleep(1.0)
            sys.__stdout__.write(text)
            sys.__stdout__.flush()
            return len(text)

    # the second day waits on its server for 3 s: abandoned by the second Ctrl-C (the first
    # one's message takes the slow terminal 2 s), it reaches its commit while the INTERRUPTED
    # lines go out
    units = [unit(dt.date(2020, 3, 9), 0.0), unit(dt.date(2020, 3, 10), 3.0)]
    threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGINT)).start()
    threading.Timer(0.8, lambda: signal.raise_signal(signal.SIGINT)).start()
    sys.exit(run_units(units, archive, workers=2, quiet=True, out=io.StringIO(), err=SlowTerminal()))
    """
)


@pytest.mark.slow  # 3-6 s on 2 cores (the fast tier's limit is 3 s)
def test_a_day_abandoned_by_its_run_is_never_committed_after(tmp_path):
    """Two Ctrl-C: the run abandons the day still waiting on its server; while its summary
    goes out to a slow terminal, that day reaches its commit, which the run's gate refuses."""
    root = tmp_path / "archive"
    out = subprocess.run(
        [sys.executable, "-c", _GATE, str(root)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 130, out.stderr
    assert "INTERRUPTED m 2020-03-10: abandoned in flight, not archived" in out.stdout, out
    # (the first day is done by the first Ctrl-C, unless the machine is slow: both said right)
    said = re.search(r"(\d) metric-days? in flight (gets?) ", out.stdout)
    assert said and (said[1], said[2]) in (("1", "gets"), ("2", "get")), out.stdout
    time.sleep(1.0)  # (the process has exited: nothing can commit any more anyway)
    assert _manifests(root) == {"2020-03-09.manifest.json"}, out.stdout
    assert json.loads((root / "toy/m/2020-03-09.manifest.json").read_text())["rows"] == 1
    assert os.listdir(root / "toy/m") and not list((root / "toy/m").glob("2020-03-10.csv.gz"))


def test_an_archive_run_whose_summary_cannot_be_written_says_so(examon_sim, tmp_path):
    """``dxt extract ... > /dev/full``: the run archived its day, its summary was lost, and it
    exited 0 without a word."""
    catalog = tmp_path / "one.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    cmd = [DXT, "extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog),
           "--archive", str(tmp_path / "a"), "--start-day", DAY]  # fmt: skip
    with open("/dev/full", "w") as full:
        out = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert (
        "standard output could not be written (No space left on device): what it printed is "
        "lost; its work is done (its exit status was 0)" in out.stderr
    )
    assert _manifests(tmp_path / "a") == {f"{DAY}.manifest.json"}


def test_a_run_against_a_server_that_cannot_be_reached_stops_after_five(tmp_path):
    """A refill against a server that is down (or a stale URL from old manifests) failed
    every metric-day one by one, each after its retries: a year's refill took about two
    hours to say "could not be reached". It stops after five in a row, exit status 4."""
    from tests.conftest import free_port

    catalog = tmp_path / "three.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\nfan0,ipmi_pub\n")
    out = subprocess.run(
        [DXT, "extract", "examon", "--url", f"http://127.0.0.1:{free_port()}", "--catalog",
         str(catalog), "--archive", str(tmp_path / "a"), "--start-day", DAY, "--end-day",
         "2020-03-12", "--workers", "1", "--retries", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 4, out.stdout + out.stderr
    assert "the server could not be reached for 5 metric-days in a row" in out.stderr
    assert "7 metric-days not started" in out.stderr  # 3 metrics x 4 days, 5 tried
    assert "5 failed, 7 not started (stopped at a run-wide error)" in out.stdout


_AFTER_COMMIT = textwrap.dedent(
    """
    import datetime as dt, gzip, hashlib, io, signal, sys, threading, time
    from dxt_core.archive import Archive, DayKey
    from dxt_core.archive_day import DayReport
    from dxt_core.runner import Unit, run_units

    archive = Archive(sys.argv[1])
    after_s, signals = float(sys.argv[2]), int(sys.argv[3])

    def run():
        key = DayKey("toy", ("m",), dt.date(2020, 3, 9))
        body = gzip.compress(b"timestamp,value\\n1,1\\n", mtime=0)
        w = archive.begin(key)
        with w.open("csv.gz") as fh:
            fh.write(body)
        m = w.commit({"status": "archived", "file": "2020-03-09.csv.gz", "rows": 1,
                      "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})
        time.sleep(after_s)  # the work after the commit: the index, the report, its line
        return DayReport(key, "archived", 1, len(body), None, m, after_s)

    class Through(io.StringIO):  # what the run says, as it says it (os._exit ends it)
        def write(self, text):
            sys.__stdout__.write(text)
            sys.__stdout__.flush()
            return len(text)

    for at in (0.5, 0.8, 1.5)[:signals]:
        threading.Timer(at, lambda: signal.raise_signal(signal.SIGINT)).start()
    sys.exit(run_units([Unit(DayKey("toy", ("m",), dt.date(2020, 3, 9)), run)], archive,
                       workers=1, quiet=True, out=Through(), err=Through()))
    """
)


@pytest.mark.slow  # 3-6 s on 2 cores (the fast tier's limit is 3 s)
def test_a_day_whose_commit_began_is_counted_archived_and_a_third_signal_ends_the_wait(tmp_path):
    """Two Ctrl-C while a day's commit is done but its unit still works (the index, the
    report): it was reported "abandoned in flight, not archived" although it was archived.
    It is waited for and counted; and a third signal ends that wait at once (it waited for
    every fetch to end, and lost the summary), saying the day may be archived."""
    waited = subprocess.run(
        [sys.executable, "-c", _AFTER_COMMIT, str(tmp_path / "a"), "2.0", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert waited.returncode == 130, waited.stdout + waited.stderr
    assert "archived 1 metric-day (1 rows" in waited.stdout, waited.stdout
    assert "0 interrupted (0 not started, 0 abandoned in flight)" in waited.stdout
    assert "INTERRUPTED" not in waited.stdout
    t0 = time.monotonic()
    cut = subprocess.run(
        [sys.executable, "-c", _AFTER_COMMIT, str(tmp_path / "b"), "30", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cut.returncode == 130, cut.stdout + cut.stderr
    assert time.monotonic() - t0 < 8, cut.stdout  # not the 30 s after the commit
    assert "INTERRUPTED m 2020-03-09: abandoned in flight, not archived" in cut.stdout
    assert "a commit was still under way when the run stopped waiting" in cut.stdout
