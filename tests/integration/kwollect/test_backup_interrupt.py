"""Ctrl-C during ``dxt extract kwollect --backup``: the command as a process, the simulator as
another, SIGINT sent by this process (a shell's background ``&`` would ignore it).

Before: the main thread waited for every site's thread, so the backup ran to its end, printed
nothing and exited 130 with every file under its final name and no manifest; a third Ctrl-C
printed an "Exception ignored" traceback and left ``.tmp`` files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dxt_core.backends.kwollect.readback import read_backup
from dxt_core.errors import ConfigError
from tests.kwollect_sim import KwollectSimProcess

# slow: each waits on a simulator made slow on purpose and on Ctrl-C timing (2-5 s)
pytestmark = [pytest.mark.integration, pytest.mark.slow]

DXT = str(Path(sys.executable).parent / "dxt")
LYON = ["nova-1.lyon.grid5000.fr", "nova-2.lyon.grid5000.fr"]
NANCY = "gros-1.nancy.grid5000.fr"


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


@pytest.fixture
def slow_lyon(sim):
    """Lyon's metrics answers take ``delay`` seconds; nancy answers at once."""

    def set_delay(delay: float) -> None:
        sim.configure(site_delay_s={"lyon": delay})

    yield set_delay
    sim.reset()


def start_backup(sim: KwollectSimProcess, out: Path, *more: str) -> subprocess.Popen[str]:
    """Three nodes on two sites over 12 h, 5,000 points a request: 22 requests for lyon's
    two nodes, 11 for nancy's one (3 metrics at 1.27 points/s a node: the catalogue's
    period-0 entries, the fan speeds and node exporter's bundles, are not collected without
    a monitor job, and are not counted)."""
    return subprocess.Popen(
        [DXT, "extract", "kwollect", "--api-url", sim.url,
         "--nodes", "nova-1.lyon,nova-2.lyon,gros-1.nancy",
         "--start", "2024-11-26T00:00:00+01:00", "--end", "2024-11-26T12:00:00+01:00",
         "--max-points", "5000", "--backup", str(out), *more],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for(condition, what: str, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the backup ended before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {timeout} s: {proc.communicate()}")
        time.sleep(0.05)


def nancy_served(sim: KwollectSimProcess) -> bool:
    """The simulator has answered nancy's 11 requests (its files are written 1 s later)."""
    return sim.stats()["metrics_requests"].get("nancy", 0) >= 11


def interrupt(
    proc: subprocess.Popen[str], times: int = 1, sig: int = signal.SIGINT
) -> tuple[float, str, str]:
    """``sig`` ``times`` times, 0.3 s apart; seconds from the first to the exit, stdout,
    stderr."""
    t0 = time.monotonic()
    for i in range(times):
        if i:
            time.sleep(0.3)
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running 30 s after Ctrl-C: {out} {err}")
    return time.monotonic() - t0, out, err


def final_files(out: Path) -> dict[str, Path]:
    """Every file under a final name: not hidden, not in a hidden directory."""
    return {
        p.relative_to(out).as_posix(): p
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts)
    }


def assert_vouched(out: Path, manifest: dict) -> None:
    """Every file under a final name is in the manifest, whole (its size and sha256)."""
    listed = {f["file"]: f for f in manifest["files"]}
    files = final_files(out)
    assert set(files) == set(listed) | {"manifest.json"}, sorted(files)
    for name, entry in listed.items():
        raw = files[name].read_bytes()
        assert len(raw) == entry["bytes"]
        assert hashlib.sha256(raw).hexdigest() == entry["sha256"]
        assert len(gzip.decompress(raw).splitlines()) == entry["rows"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert not list(out.glob(".staging-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_and_commits_the_complete_sites_only(sim, slow_lyon, tmp_path, sig):
    """Ctrl-C, and SIGTERM alike (it discarded the complete sites and said nothing had been
    fetched)."""
    slow_lyon(1.0)  # lyon: 22 requests of 1 s; nancy done in well under a second
    out = tmp_path / "b"
    proc = start_backup(sim, out)
    wait_for(lambda: nancy_served(sim), "nancy's requests", proc)
    time.sleep(2.5)  # nancy's files written (well under a second on a quiet machine)
    seconds, stdout, stderr = interrupt(proc, sig=sig)
    assert proc.returncode == 130, stderr
    # lyon's request in flight (1 s) ends, none starts: well before its 18 others
    assert seconds < 4, seconds
    what = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"  # it said Ctrl-C for both
    assert f"interrupted ({what}): starting no more requests" in stderr
    assert f"({what} again to stop now)" in stderr and "Traceback" not in stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] is False
    assert m["interrupted"]["sites_complete"] == ["nancy"]
    assert m["interrupted"]["reason"] == ("Ctrl-C (SIGINT)" if sig == signal.SIGINT else "SIGTERM")
    assert m["interrupted"]["sites_not_backed_up"] == {"lyon": "stopped"}
    assert m["interrupted"]["nodes_not_backed_up"] == LYON
    assert {f["node"] for f in m["files"]} == {NANCY} and len(m["files"]) == 3
    assert_vouched(out, m)
    # the last line says what was done, with counts
    assert "backup INTERRUPTED" in stdout and f"lists 3 files ({m['rows']:,} rows" in stdout
    assert "not backed up: lyon (stopped), 2 nodes" in stdout
    assert "Run the backup again to back up everything" in stdout
    # read back: refused as incomplete, unless asked for (then nancy's points alone)
    with pytest.raises(ConfigError, match=r"incomplete \(interrupted; not backed up: lyon"):
        read_backup(out)
    assert set(read_backup(out, allow_incomplete=True)["node"]) == {NANCY}
    assert len(read_backup(out, allow_incomplete=True)) == m["rows"]


def test_a_second_ctrl_c_abandons_at_once_and_a_third_is_ignored(sim, slow_lyon, tmp_path):
    slow_lyon(60.0)  # lyon's first request does not end during the test
    out = tmp_path / "b"
    proc = start_backup(sim, out)
    wait_for(lambda: nancy_served(sim), "nancy's requests", proc)
    time.sleep(1.0)
    seconds, stdout, stderr = interrupt(proc, times=3)
    assert proc.returncode == 130, stderr
    assert seconds < 5, seconds  # not the 5 s grace plus lyon's 60 s answer
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["interrupted"]["sites_not_backed_up"] == {"lyon": "abandoned in flight"}
    assert_vouched(out, m)
    assert "not backed up: lyon (abandoned in flight)" in stdout


def test_ctrl_c_before_any_site_is_complete_leaves_the_earlier_backup_whole(
    sim, slow_lyon, tmp_path
):
    out = tmp_path / "b"
    earlier = subprocess.run(
        [DXT, "extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
         "--start", "2024-11-26T00:00:00+01:00", "--end", "2024-11-26T00:10:00+01:00",
         "--metrics", "bmc_node_power_watt", "--backup", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert earlier.returncode == 0, earlier.stderr
    before = (out / "manifest.json").read_bytes()
    sim.configure(site_delay_s={"lyon": 1.0, "nancy": 1.0})  # reset by slow_lyon
    # another backup (without --replace it is refused before any request)
    proc = start_backup(sim, out, "--replace")
    wait_for(lambda: sim.stats()["metrics_requests"].get("nancy", 0) >= 1, "a request", proc)
    seconds, stdout, stderr = interrupt(proc)
    assert proc.returncode == 130, stderr
    assert seconds < 4, seconds
    assert "no site was complete, nothing written" in stdout
    assert "is an earlier backup's, untouched" in stdout
    assert "not backed up: lyon (stopped), nancy (stopped)" in stdout
    assert (out / "manifest.json").read_bytes() == before
    assert_vouched(out, json.loads(before))


_LIBRARY = """
import sys
from dxt_core.backends.kwollect.experiment import Kwollect
k = Kwollect(["nova-1.lyon", "nova-2.lyon", "gros-1.nancy"], api_url=sys.argv[1], max_points=5000)
k.start("2024-11-26T00:00:00+01:00").stop("2024-11-26T12:00:00+01:00")
try:
    k.backup(sys.argv[2])
except KeyboardInterrupt as exc:
    print("interrupted:", type(exc).__name__, flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_in_a_library_process_sigterm_ends_it_and_ctrl_c_interrupts(sim, slow_lyon, tmp_path, sig):
    """A notebook's kernel (the library, not the ``dxt`` command): SIGTERM was taken as Ctrl-C
    for as long as a fetch ran, so a kernel busy in ``backup()`` survived it. It now ends the
    process as it would without the library; Ctrl-C still interrupts the backup."""
    slow_lyon(1.0)
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", _LIBRARY, sim.url, str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(lambda: nancy_served(sim), "nancy's requests", proc)
    seconds, stdout, stderr = interrupt(proc, sig=sig)
    if sig == signal.SIGTERM:
        assert proc.returncode == -signal.SIGTERM, (stdout, stderr)
        assert seconds < 2, seconds
    else:
        assert proc.returncode == 0, stderr
        assert "interrupted: BackupInterrupted" in stdout, (stdout, stderr)
