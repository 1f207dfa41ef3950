"""Ctrl-C on ``dxt extract examon``, with real signals, against the simulator answering slowly.

The first SIGINT stops new metric-days from starting, gives those in flight a few seconds,
then prints the summary with an ``interrupted`` count and exits 130; a second SIGINT ends it at
once. Every metric-day of the run is counted once in the summary, and no file lies under a
final name without its manifest.
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.integration

DAYS = 10
METRICS = 5  # the small catalog's KairosDB metrics (its job table is not asked for here)


@pytest.fixture
def slow_sim(small_catalog):
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "2"])
    yield sim
    sim.stop()


def _start(sim: SimulatorProcess, catalog: Path, archive: Path) -> subprocess.Popen:
    cmd = _command(sim, catalog, archive)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _command(sim: SimulatorProcess, catalog: Path, archive: Path) -> list[str]:
    plain = archive.parent / "kairos-only.csv"
    plain.write_text(
        "".join(line + "\n" for line in catalog.read_text().splitlines() if "job_table" not in line)
    )
    cmd = [
        *(sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", sim.url),
        *("--catalog", str(plain), "--archive", str(archive), "--workers", "2", "-q"),
        *("--start-day", "2020-03-09", "--end-day", f"2020-03-{8 + DAYS:02d}"),
    ]
    return cmd


def _summary(stdout: str) -> dict[str, int]:
    m = re.search(
        r"archived (\d+) metric-days? .*?, (\d+) empty, (\d+) failed, (\d+) interrupted "
        r"\((\d+) not started, (\d+) abandoned in flight\)",
        stdout,
    )
    assert m, stdout
    keys = ("archived", "empty", "failed", "interrupted", "not_started", "abandoned")
    return dict(zip(keys, map(int, m.groups()), strict=True))


def _no_partial_files(archive: Path) -> None:
    store = Archive(archive)
    for data in archive.rglob("*.csv.gz"):
        plugin, metric = data.parent.parent.name, data.parent.name
        key = DayKey("examon", (plugin, metric), dt.date.fromisoformat(data.name[:10]))
        status, _ = store.status(key)
        assert status == "archived", (data, status)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "what"),
    [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")],
)
def test_first_ctrl_c_lets_the_flight_land_and_counts_every_metric_day(
    slow_sim, small_catalog, tmp_path, sig, what
):
    """Ctrl-C, and ``kill`` (SIGTERM: a service manager's stop, a timeout) or a closed
    terminal (SIGHUP) alike: the run said nothing and exited 143 on SIGTERM, with the days
    it had committed counted nowhere."""
    slow_sim.faults(delay_s=0.3)  # every request waits: a metric-day takes seconds
    archive = tmp_path / "archive"
    p = _start(slow_sim, small_catalog, archive)
    time.sleep(4)
    assert p.poll() is None
    t0 = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == 130, err
    assert took < 10, took  # the 5 s grace and the summary
    assert f"interrupted ({what}): starting no more" in err
    assert f"({what} again to abort now)" in err  # it said "Ctrl-C again" for a SIGTERM
    s = _summary(out)
    assert s["interrupted"] == s["not_started"] + s["abandoned"] > 0
    assert s["archived"] + s["empty"] + s["failed"] + s["interrupted"] == DAYS * METRICS
    assert len(re.findall(r"^INTERRUPTED ", err, re.M)) == s["abandoned"]
    _no_partial_files(archive)
    # the next run picks up where it stopped: the archived ones are skipped
    slow_sim.faults(delay_s=0.0)
    again = subprocess.run(p.args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{s['archived'] + s['empty']} already archived" in again.stdout


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
def test_a_background_job_keeps_ignoring_ctrl_c(slow_sim, small_catalog, tmp_path):
    """A shell starts a script's background job (``dxt extract ... &``) with SIGINT ignored,
    so that the Ctrl-C stopping the script leaves it running: the run took it all the same
    and stopped with exit 130."""
    slow_sim.faults(delay_s=0.3)
    archive = tmp_path / "archive"
    cmd = _command(slow_sim, small_catalog, archive)
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignoring_sigint,
    )
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    time.sleep(2)
    assert p.poll() is None, p.communicate()[1]
    p.send_signal(signal.SIGTERM)  # the way to stop it stays
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "interrupted (SIGTERM)" in err
    assert "Ctrl-C" not in err.replace("(SIGTERM again", "")
    assert _summary(out)["interrupted"] > 0


@pytest.mark.slow
def test_second_ctrl_c_aborts_at_once(slow_sim, small_catalog, tmp_path):
    slow_sim.faults(delay_s=3.0)  # in flight for far longer than the grace
    archive = tmp_path / "archive"
    p = _start(slow_sim, small_catalog, archive)
    time.sleep(2.5)
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 2.5
    assert p.returncode == 130, err
    s = _summary(out)
    assert s["abandoned"] == 2  # both workers' metric-days, each waiting on the server
    assert s["archived"] + s["empty"] + s["failed"] + s["interrupted"] == DAYS * METRICS
    _no_partial_files(archive)


@pytest.mark.slow
@pytest.mark.parametrize("json_out", [True, False], ids=["json", "text"])
def test_a_stopped_reconcile_says_how_far_it_got_and_keeps_its_comparisons(
    slow_sim, small_catalog, tmp_path, json_out
):
    """``dxt coverage --reconcile`` stopped midway (SIGTERM here; Ctrl-C alike) said only
    "interrupted", printed no JSON document, and recorded none of the comparisons it had
    made. Now: how many of how many, those recorded, and with ``--json`` a whole document of
    the rows compared, closed with the error."""
    import json

    archive = tmp_path / "archive"
    p = _start(slow_sim, small_catalog, archive)
    p.communicate(timeout=120)
    assert p.returncode == 0
    slow_sim.faults(delay_s=0.5)  # each count waits: the pass takes about 25 s
    plain = archive.parent / "kairos-only.csv"
    cmd = [
        *(sys.executable, "-m", "dxt_core.cli", "coverage", "examon", "--reconcile"),
        *("--url", slow_sim.url, "--catalog", str(plain), "--archive", str(archive)),
        *("--start-day", "2020-03-09", "--end-day", f"2020-03-{8 + DAYS:02d}"),
        *(["--json"] if json_out else []),
    ]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    assert run.poll() is None
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 130, err
    m = re.search(
        r"dxt: interrupted \(SIGTERM\) before the command finished: reconciled (\d+) of "
        rf"{DAYS * METRICS} metric-days before it stopped; (\d+) comparisons recorded",
        err,
    )
    assert m and 0 < int(m[1]) < DAYS * METRICS and m[1] == m[2], err
    recorded = list((archive / ".dxt-checks").rglob("*.json"))
    assert recorded, list(archive.iterdir())
    if json_out:
        doc = json.loads(out)
        assert doc["error"] == "interrupted (SIGTERM)" and len(doc["rows"]) == int(m[1]), doc
        assert {r["state"] for r in doc["rows"]} == {"equal"}


@pytest.mark.slow  # 4.9-7.3 s measured (a whole run of 50 metric-days)
def test_an_ignored_sighup_stays_ignored(slow_sim, small_catalog, tmp_path):
    """``nohup dxt extract ...``: SIGHUP is ignored when the command starts, and a closed
    terminal must not stop the run."""
    archive = tmp_path / "archive"
    p = subprocess.Popen(
        ["nohup", *_command(slow_sim, small_catalog, archive)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    p.send_signal(signal.SIGHUP)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "interrupted" not in err and " 0 failed" in out, out
