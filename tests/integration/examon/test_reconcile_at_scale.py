"""``dxt coverage --reconcile`` over many days, as a facility runs it (a review at the scale of
three years of the Marconi100 catalog): with the server down it gave one "count FAILED" line
per metric-day, a month in minutes, exit 3; its lists had no bound (915 lines for a month),
although the docs said 20; a damaged day was called a failed count, to reconcile again."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two dxt runs over 25 days each

DXT = str(Path(sys.executable).parent / "dxt")
FIRST, LAST = dt.date(2020, 3, 1), dt.date(2020, 3, 25)


def dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def archived(examon_sim: SimulatorProcess, tmp_path_factory) -> tuple[Path, Path]:
    """25 archived days of one metric."""
    tmp = tmp_path_factory.mktemp("reconcile")
    catalog, root = tmp / "one.csv", tmp / "archive"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    out = dxt(
        "extract", "examon", "--url", examon_sim.url, "--catalog", str(catalog),
        "--archive", str(root), "--start-day", str(FIRST), "--end-day", str(LAST), "-q",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return catalog, root


def test_a_server_that_cannot_be_reached_stops_the_reconcile(archived) -> None:
    catalog, root = archived
    dead = f"http://127.0.0.1:{free_port()}"
    out = dxt(
        "coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
        "--start-day", str(FIRST), "--end-day", str(LAST), "--reconcile", "--url", dead,
    )  # fmt: skip
    assert out.returncode == 4, out.stdout + out.stderr
    assert "stopped: the source could not be reached for 5 metric-days in a row" in out.stderr
    assert "0 of the 5 metric-days looked at were compared" in out.stderr
    # what it looked at before it stopped is shown (not one line for each of the 25 days)
    assert out.stdout.count("count FAILED") == 5, out.stdout
    assert (
        "reconciled 5 of the 25 metric-days (it stopped there) against the source's counts: 5 error"
    ) in out.stdout
    as_json = dxt(
        "coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
        "--start-day", str(FIRST), "--end-day", str(LAST), "--reconcile", "--url", dead,
        "--json",
    )  # fmt: skip
    assert as_json.returncode == 4
    doc = json.loads(as_json.stdout)
    assert len(doc["rows"]) == 5 and "could not be reached for 5 metric-days" in doc["error"]


def test_a_short_reconcile_whose_server_cannot_be_reached_exits_4(archived) -> None:
    """Under 5 days the reconcile never stopped, and exited 3 (counts failed) for a server
    that was down, where a longer one exits 4: a script could not tell the two apart."""
    catalog, root = archived
    dead = f"http://127.0.0.1:{free_port()}"
    out = dxt(
        "coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
        "--start-day", str(FIRST), "--end-day", str(FIRST + dt.timedelta(days=1)),
        "--reconcile", "--url", dead,
    )  # fmt: skip
    assert out.returncode == 4, out.stdout + out.stderr
    assert "could not be reached for any of the 2 metric-days it was asked about" in out.stderr
    assert out.stdout.count("count FAILED") == 2, out.stdout


def test_a_reconcile_lists_at_most_20_lines_of_a_kind_and_names_damaged_days(
    examon_sim: SimulatorProcess, archived
) -> None:
    catalog, root = archived
    for data in sorted(root.rglob("*.csv.gz"))[:22]:  # cut short: damaged, not compared
        data.write_bytes(data.read_bytes()[:100])
    out = dxt(
        "coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
        "--start-day", str(FIRST), "--end-day", str(LAST), "--reconcile",
        "--url", examon_sim.url,
    )  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr
    damaged = [line for line in out.stdout.splitlines() if line.startswith("DAMAGED")]
    assert len(damaged) == 20, out.stdout
    assert "not compared: refetch it" in damaged[0]
    assert (
        "... and 2 more count FAILED days: dxt coverage ... --reconcile --json | grep "
        '\'"state": "error"\'' in out.stdout
    )
    assert "3 equal, 22 error" in out.stdout
