"""What ``dxt coverage`` prints can be run and repairs the archive: a day corrupt at the same
size (a changed byte, found by ``--verify``) gets a refetch command that fixes it; a reader
that goes away (``| head``) ends the command quietly."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # four to six dxt processes

DXT = str(Path(sys.executable).parent / "dxt")
DAY = "2020-03-09"


def dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300)


def _archive_one(sim: SimulatorProcess, catalog: Path, root: Path) -> Path:
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    out = dxt(
        "extract", "examon", "--url", sim.url, "--catalog", str(catalog),
        "--start-day", DAY, "--archive", str(root), "-q",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (data,) = root.rglob("*.csv.gz")
    return data


def test_a_same_size_corrupt_day_gets_a_refetch_that_repairs_it(
    examon_sim: SimulatorProcess, tmp_path: Path
) -> None:
    catalog = tmp_path / "ambient.csv"
    root = tmp_path / "archive"
    data = _archive_one(examon_sim, catalog, root)
    good = data.read_bytes()
    changed = bytearray(good)
    changed[len(good) // 2] ^= 0xFF
    data.write_bytes(bytes(changed))
    cov = ["coverage", "examon", "--archive", str(root), "--catalog", str(catalog)]
    cov += ["--start-day", DAY, "--end-day", DAY, "--verify", "--url", examon_sim.url]
    found = dxt(*cov)
    assert found.returncode == 3, found.stdout + found.stderr
    assert "refetch the corrupt days with:" in found.stdout, found.stdout
    lines = found.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "refetch the corrupt days with:" in line)
    refetch = shlex.split(lines[at + 1])
    assert refetch[:3] == ["dxt", "extract", "examon"] and "--refetch" in refetch
    # the plain refill command skips it: the file has its manifest's size
    refill = next(line for line in lines if line.strip().startswith("dxt extract examon"))
    skipped = dxt(*shlex.split(refill)[1:])
    assert skipped.returncode == 0 and "1 already archived" in skipped.stdout, skipped.stdout
    repaired = dxt(*refetch[1:])
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert data.read_bytes() == good
    again = dxt(*cov)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_reader_that_goes_away_ends_coverage_quietly(
    examon_sim: SimulatorProcess, tmp_path: Path
) -> None:
    catalog = tmp_path / "ambient.csv"
    root = tmp_path / "archive"
    _archive_one(examon_sim, catalog, root)
    p = subprocess.Popen(
        [DXT, "coverage", "examon", "--archive", str(root), "--catalog", str(catalog),
         "--start-day", "2019-01-01", "--end-day", "2020-12-31", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()  # as `| head -1` does
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
