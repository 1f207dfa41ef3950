"""An error that would fail every metric-day the same way stops ``dxt extract`` at the first,
said once, exit 2: refused credentials (asking again for each of 811 metrics could lock the
account), days cut in another zone than the archive's, a root that is a file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # dxt processes, a simulator

DXT = str(Path(sys.executable).parent / "dxt")
DAY = ["--start-day", "2020-03-09"]


def dxt(*args: str, password: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DXT_EXAMON_PASSWORD=password)
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def locked_sim(small_catalog: Path) -> Iterator[SimulatorProcess]:
    sim = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "2", "--user", "alice", "--password", "s3cret"]
    )
    yield sim
    sim.stop()


def _requests(sim: SimulatorProcess) -> int:
    counts = sim.stats()["requests"]
    assert isinstance(counts, dict)
    return sum(int(n) for n in counts.values())


def _refused(
    sim: SimulatorProcess, catalog: Path, root: Path, workers: int
) -> subprocess.CompletedProcess[str]:
    """Four days of the catalog with a wrong password."""
    return dxt(
        "extract", "examon", "--url", sim.url, "--user", "alice", "--catalog", str(catalog),
        *DAY, "--end-day", "2020-03-12", "--workers", str(workers), "--archive", str(root),
        "-q", password="wrong-Pa55",
    )  # fmt: skip


def test_refused_credentials_stop_the_run_at_the_first(
    locked_sim: SimulatorProcess, small_catalog: Path, tmp_path: Path
) -> None:
    before = _requests(locked_sim)
    out = _refused(locked_sim, small_catalog, tmp_path, workers=1)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "stopped: every other metric-day would fail the same way" in out.stderr
    assert out.stderr.count("FAILED") == 1, out.stderr  # not once per metric-day
    assert "not started (stopped at a run-wide error)" in out.stdout
    assert "wrong-Pa55" not in out.stdout + out.stderr
    assert _requests(locked_sim) - before <= 3  # the one metric-day's requests, no more
    assert not list(tmp_path.rglob("*.csv.gz"))


def test_another_zone_and_a_file_root_stop_at_once(
    locked_sim: SimulatorProcess, small_catalog: Path, tmp_path: Path
) -> None:
    base = ["extract", "examon", "--url", locked_sim.url, "--user", "alice"]
    base += ["--catalog", str(small_catalog), *DAY, "--workers", "1", "-q"]
    done = dxt(*base, "--archive", str(tmp_path / "a"), "--limit", "1", password="s3cret")
    assert done.returncode == 0, done.stdout + done.stderr
    other_zone = dxt(*base, "--tz", "UTC", "--archive", str(tmp_path / "a"), password="s3cret")
    assert other_zone.returncode == 2, other_zone.stdout + other_zone.stderr
    # refused before any metric-day (it failed the first, said once, before)
    assert other_zone.stderr.count("FAILED") == 0, other_zone.stderr
    assert "Run with time zone Europe/Rome" in other_zone.stderr
    afile = tmp_path / "afile"
    afile.write_text("not an archive")
    root_file = dxt(*base, "--archive", str(afile), password="s3cret")
    assert root_file.returncode == 2, root_file.stdout + root_file.stderr
    assert f"archive root {afile} is not a directory" in root_file.stderr
    assert afile.read_text() == "not an archive"


def test_the_units_in_flight_do_not_repeat_the_run_wide_error(
    locked_sim: SimulatorProcess, small_catalog: Path, tmp_path: Path
) -> None:
    # four workers: the metric-days in flight when the first refusal came fail with it too
    out = _refused(locked_sim, small_catalog, tmp_path, workers=4)
    assert out.returncode == 2, out.stdout + out.stderr
    error = next(x for x in out.stderr.splitlines() if x.startswith("dxt: error: "))
    said = error.removeprefix("dxt: error: ")
    assert out.stderr.count(said) == 1, out.stderr  # before: once per unit in flight, too
    (failed,) = [x for x in out.stderr.splitlines() if x.startswith("FAILED ")]
    assert failed.endswith(": the run-wide error below"), failed


def test_a_full_archive_disk_stops_the_run_at_the_first(
    locked_sim: SimulatorProcess, small_catalog: Path, tmp_path: Path
) -> None:
    """A full file system fails every metric-day the same way: the run stops at the first,
    said once (it failed each of the catalog's metric-days before, one line each). The
    archive is a tmpfs of 64 KiB filled up, mounted in a private mount namespace (skipped
    where this process may not mount)."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    small = tmp_path / "small"
    small.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {small}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a private mount namespace here")
    cmd = [DXT, "extract", "examon", "--url", locked_sim.url, "--user", "alice"]
    cmd += ["--catalog", str(small_catalog), *DAY, "--end-day", "2020-03-12"]
    cmd += ["--workers", "1", "-q", "--archive", f"{small}/archive"]
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {small} && "
        f"(head -c 1000000 /dev/zero > {small}/filler 2>/dev/null || true) && "
        f"exec {' '.join(cmd)}"
    )
    env = dict(os.environ, DXT_EXAMON_PASSWORD="s3cret")
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "No space left on device; the disk is full" in out.stderr, out.stderr
    assert "stopped: every other metric-day would fail the same way" in out.stderr
    assert out.stderr.count("FAILED") == 1, out.stderr
    assert "not started (stopped at a run-wide error)" in out.stdout


def test_days_archived_in_another_zone_are_not_skipped_as_done(
    locked_sim: SimulatorProcess, small_catalog: Path, tmp_path: Path
) -> None:
    """A rerun over days the archive holds, in another zone, was told "already archived
    (skipped)", exit 0: they are the archive's Rome days, not the UTC days asked for. The run
    is refused before any request, as when a day is missing."""
    base = ["extract", "examon", "--url", locked_sim.url, "--user", "alice"]
    base += ["--catalog", str(small_catalog), *DAY, "--workers", "1", "-q"]
    root = str(tmp_path / "a")
    done = dxt(*base, "--archive", root, "--limit", "1", password="s3cret")
    assert done.returncode == 0, done.stdout + done.stderr
    before = _requests(locked_sim)
    again = dxt(*base, "--tz", "UTC", "--archive", root, "--limit", "1", password="s3cret")
    assert again.returncode == 2, again.stdout + again.stderr
    assert "already archived" not in again.stdout
    assert "are [local midnight" in again.stderr or "Run with time zone Europe/Rome" in again.stderr
    assert _requests(locked_sim) == before
