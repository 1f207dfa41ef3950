"""A commit killed between its steps, then rerun: the parked manifest (``.pending``) is trusted
only while the files on disk are the ones it describes.

Each crash is real: ``dxt extract examon`` against the Examon simulator, in a process that
dies (``os._exit(137)``, as by ``kill -9``) at a commit point: ``before_manifest`` (the data
renamed into place, the old manifest parked, no new manifest) or ``after_manifest`` (the
new manifest written, the parked one not yet removed).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from tests.conftest import SimulatorProcess

#: processes killed at commit points, simulators of three sizes: the light tier
pytestmark = pytest.mark.slow

DAY = "2020-03-09"
PER_NODE = 4320  # one sample every 20 s
THREE, FOUR = 3 * PER_NODE, 4 * PER_NODE  # 12,960 and 17,280 rows
LATE = FOUR - 4 * 180  # 16,560: the four nodes' day after retention dropped its first hour

CRASH = textwrap.dedent(
    """
    import os, sys
    from dxt_core import archive as A
    point = os.environ["CRASH_AT"]
    place = A.Archive.place_manifest
    def crash(self, *args, **kwargs):
        if point == "after_manifest":
            place(self, *args, **kwargs)
        os._exit(137)
    A.Archive.place_manifest = crash
    from dxt_core.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.fixture(scope="module")
def sims(small_catalog, examon_sim) -> Iterator[dict[str, SimulatorProcess]]:
    """Three nodes (12,960 rows), four (17,280: the module's simulator), and four after
    retention dropped the day's first hour (16,560)."""
    three = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "3"])
    late = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "4", "--data-start", DAY])
    yield {"three": three, "four": examon_sim, "late": late}
    three.stop()
    late.stop()


def extract(
    url: str, root: Path, *extra: str, crash: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = ["extract", "examon", "--url", url, "--metric", "ambient", "--plugin", "ipmi_pub",
            "--start-day", DAY, "--archive", str(root), "-q", *extra]  # fmt: skip
    if crash:
        cmd = [sys.executable, "-c", CRASH, *args]
        env = {**os.environ, "CRASH_AT": crash}
    else:
        cmd = [sys.executable, "-m", "dxt_core.cli", *args]
        env = dict(os.environ)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    if crash:
        assert out.returncode == 137, out.stderr
    return out


def rows_in(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        return fh.read().count(b"\n") - 1


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unit(root: Path) -> Path:
    return root / "examon" / "ipmi_pub" / "ambient"


def files(d: Path) -> dict[str, str]:
    """The day's files and their sha256 (not the lock file a killed run leaves)."""
    return {
        p.relative_to(d).as_posix(): sha(p)
        for p in sorted(d.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def test_a_stale_pending_never_lets_a_rerun_shrink_the_day(sims, tmp_path):
    """Killed after the new manifest, before the parked one is removed; then the manifest
    is damaged: the rerun compares with the file on disk (17,280 rows), not the parked
    manifest's 12,960, and keeps the day."""
    d = unit(tmp_path)
    assert extract(sims["three"].url, tmp_path).returncode == 0
    extract(sims["four"].url, tmp_path, "--refetch", crash="after_manifest")
    data, pending = d / f"{DAY}.csv.gz", d / f".{DAY}.manifest.json.pending"
    assert json.loads(pending.read_text())["rows"] == THREE
    assert rows_in(data) == FOUR
    (d / f"{DAY}.manifest.json").write_text("garbage\n")
    before = files(d)

    out = extract(sims["late"].url, tmp_path, "--refetch")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"source has fewer rows than the archive ({FOUR:,} -> {LATE:,})" in out.stderr
    assert f"kept the archived file {data}" in out.stderr
    assert rows_in(data) == FOUR
    after = files(d)
    kept = json.loads((d / f"{DAY}.kept.json").read_text())
    assert kept["archive_sha256"] == sha(data)
    del after[f"{DAY}.kept.json"]
    assert after == before  # nothing replaced, nothing moved to .versions/


def test_a_refetch_of_the_same_bytes_never_shows_the_day_missing(sims, tmp_path):
    """A refetch that replaces no file by other bytes left the day without its manifest
    (parked as .pending) until the new one was written: coverage run beside it said
    "missing" and exited 3. Killed at that point now, the day still reads archived."""
    d = unit(tmp_path)
    assert extract(sims["four"].url, tmp_path).returncode == 0
    before = files(d)
    extract(sims["four"].url, tmp_path, "--refetch", crash="before_manifest")
    assert not (d / f".{DAY}.manifest.json.pending").exists()
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date.fromisoformat(DAY))
    assert Archive(tmp_path).status(key, verify=True) == ("archived", "")
    after = files(d)
    # the new manifest, written before the renames, stays under a temporary name (removed
    # by the day's next transaction, as any temporary file a kill leaves)
    left = [n for n in after if n not in before]
    assert all(n.startswith(f".{DAY}.manifest.json.") and n.endswith(".tmp") for n in left)
    assert {n: h for n, h in after.items() if n not in left} == before


def test_a_stale_pending_is_dropped_once_the_manifest_is_back(tmp_path):
    """The state a crash after the manifest leaves (the new manifest, the old one still
    parked): the next transaction of the day removes the obsolete parked manifest."""
    archive = Archive(tmp_path)
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))

    def write(text: bytes) -> Path:
        payload = gzip.compress(text, mtime=0)
        with archive.begin(key) as day:
            with day.open("csv.gz") as fh:
                fh.write(payload)
            return day.commit(
                {"status": "archived", "file": f"{DAY}.csv.gz", "rows": text.count(b"\n") - 1,
                 "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
            )  # fmt: skip

    old = write(b"t,v\n1,1\n").read_bytes()
    manifest = write(b"t,v\n1,1\n2,2\n")
    pending = manifest.parent / f".{manifest.name}.pending"
    pending.write_bytes(old)
    with archive.begin(key):
        pass
    assert not pending.exists()


def test_a_growth_refetch_killed_before_its_manifest(sims, tmp_path):
    """Killed after the data rename, before the manifest: the file on disk (17,280 rows) is
    newer than the parked manifest (12,960). A source that lost rows keeps it; the full
    source completes the day, and its manifest says what the killed run replaced."""
    d = unit(tmp_path)
    assert extract(sims["three"].url, tmp_path).returncode == 0
    old_sha = sha(d / f"{DAY}.csv.gz")
    extract(sims["four"].url, tmp_path, "--refetch", crash="before_manifest")
    data = d / f"{DAY}.csv.gz"
    assert not (d / f"{DAY}.manifest.json").exists()
    assert json.loads((d / f".{DAY}.manifest.json.pending").read_text())["rows"] == THREE
    assert rows_in(data) == FOUR
    new_sha = sha(data)

    out = extract(sims["late"].url, tmp_path, "--refetch")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"source has fewer rows than the archive ({FOUR:,} -> {LATE:,})" in out.stderr
    assert sha(data) == new_sha

    out = extract(sims["four"].url, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = json.loads((d / f"{DAY}.manifest.json").read_text())
    assert (manifest["rows"], manifest["sha256"]) == (FOUR, new_sha)
    version = f".versions/{DAY}.csv.gz.prev-{old_sha[:8]}"
    assert [r["version"] for r in manifest["replaced"]] == [version]
    assert manifest["replaced"][0]["sha256"] == old_sha
    assert manifest["replaced_rows"] == THREE
    assert sha(d / version) == old_sha
    assert not (d / f".{DAY}.manifest.json.pending").exists()
    assert not (d / f"{DAY}.kept.json").exists()


def test_a_replace_killed_before_its_manifest_is_completed_by_the_refill(sims, tmp_path):
    """--replace killed after the data rename: the file on disk is the new 16,560-row one,
    the 17,280 rows are in .versions/. The refill (no --replace) recognises the interrupted
    commit: it completes the day instead of "keeping" a file that is not on disk."""
    d = unit(tmp_path)
    assert extract(sims["four"].url, tmp_path).returncode == 0
    full_sha = sha(d / f"{DAY}.csv.gz")
    extract(sims["late"].url, tmp_path, "--refetch", "--replace", crash="before_manifest")
    data = d / f"{DAY}.csv.gz"
    assert rows_in(data) == LATE
    late_sha = sha(data)

    out = extract(sims["late"].url, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fewer rows" not in out.stderr
    manifest = json.loads((d / f"{DAY}.manifest.json").read_text())
    assert (manifest["rows"], manifest["sha256"]) == (LATE, late_sha)
    version = f".versions/{DAY}.csv.gz.prev-{full_sha[:8]}"
    assert [r["version"] for r in manifest["replaced"]] == [version]
    assert manifest["replaced_rows"] == FOUR
    assert sha(d / version) == full_sha
    assert not (d / f"{DAY}.kept.json").exists()
    assert not (d / f".{DAY}.manifest.json.pending").exists()
