"""Fault matrix, archive side: concurrent writers, the disk and the file system, bad input.

Runs the real ``dxt`` command (a separate process) against the Examon simulator where the
user would see the outcome there: one FAILED line per metric-day with a one-line cause, a
summary, a non-zero exit, and never a traceback.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dxt_core import Archive, DayKey
from dxt_core.backends.examon.catalog import load_catalog
from dxt_core.errors import CatalogError

pytestmark = pytest.mark.integration

DAY = "2020-03-09"


def extract(url: str, root: Path, *extra: str, **kw) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", url,
           "--metric", "ambient", "--plugin", "ipmi_pub", "--start-day", DAY,
           "--archive", str(root), "-q", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def assert_one_failed_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, out.stderr
    assert "1 failed" in out.stdout
    assert "Traceback" not in out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("FAILED ")]
    assert line.startswith(f"FAILED ipmi_pub/ambient {DAY}: ")
    return line


# -- two writers of one metric-day -------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import datetime as dt, sys
    from dxt_core.archive import Archive, DayKey
    w = Archive(sys.argv[1]).begin(DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9)))
    print("locked", flush=True)
    sys.stdin.readline()
    """
)


def test_a_second_writer_of_the_same_day_fails_naming_the_holder(examon_sim, tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = assert_one_failed_line(extract(examon_sim.url, tmp_path))
        assert f"is being archived by pid {holder.pid} on host {os.uname().nodename} since" in line
        assert "wait for it to finish" in line
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    assert extract(examon_sim.url, tmp_path).returncode == 0  # free once the holder is gone


@pytest.mark.slow  # 3 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_concurrent_extracts_of_one_day_never_crash(examon_sim, tmp_path):
    """Three CLI runs of the same metric-day at once: one writes it, the others are refused
    at the lock (before touching anything), and the day verifies."""
    examon_sim.faults(delay_s=0.4)
    try:
        cmd = [sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url",
               examon_sim.url, "--metric", "ambient", "--plugin", "ipmi_pub", "--start-day",
               DAY, "--archive", str(tmp_path), "-q"]  # fmt: skip
        procs = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        examon_sim.reset_faults()
    codes = [p.returncode for p in procs]
    assert codes.count(0) >= 1
    for p, (_, err) in zip(procs, outs):
        assert "Traceback" not in err
        if p.returncode:
            assert "is being archived by pid" in err
    assert codes.count(1) >= 1, "the runs did not overlap; the test needs a slower simulator"
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    assert Archive(tmp_path).status(key, verify=True) == ("archived", "")
    d = tmp_path / "examon/ipmi_pub/ambient"
    assert sorted(x.name for x in d.iterdir()) == [f"{DAY}.csv.gz", f"{DAY}.manifest.json"]


# -- the file system says no ---------------------------------------------------------------------


def test_a_file_where_the_metric_directory_should_be(examon_sim, tmp_path):
    (tmp_path / "examon/ipmi_pub").mkdir(parents=True)
    (tmp_path / "examon/ipmi_pub/ambient").write_text("oops")
    line = assert_one_failed_line(extract(examon_sim.url, tmp_path))
    assert f"cannot create directory {tmp_path}/examon/ipmi_pub/ambient: File exists" in line
    assert "a file stands where a directory should be" in line


def _small_file_limit() -> None:
    # A full disk, as far as this process can tell: writes past 16 KiB fail (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))


def test_a_disk_that_refuses_the_write(examon_sim, tmp_path):
    out = extract(examon_sim.url, tmp_path, preexec_fn=_small_file_limit)
    line = assert_one_failed_line(out)
    assert f"cannot write {tmp_path}/examon/ipmi_pub/ambient/{DAY}.csv.gz: File too large" in line
    d = tmp_path / "examon/ipmi_pub/ambient"
    assert list(d.iterdir()) == []  # no partial file, no staged file, no lock


# -- what coverage believes ----------------------------------------------------------------------


def test_coverage_verify_never_follows_a_manifest_out_of_its_directory(tmp_path):
    """A manifest whose ``file`` names a system file (with its true size and sha256) must
    not make the day "archived"."""
    target = Path(sys.executable).resolve()

    archive = Archive(tmp_path / "archive")
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    archive.write_manifest(
        key,
        {
            "status": "archived",
            "file": str(target),
            "rows": 1,
            "bytes": target.stat().st_size,
            "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
        },
    )
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "coverage", "--archive", str(tmp_path / "archive"),
         "--catalog", str(catalog), "--start-day", DAY, "--end-day", DAY, "--verify", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (row,) = json.loads(out.stdout)["rows"]
    assert row["status"] == "corrupt"
    assert "not a file of its own directory" in row["detail"]


# -- leftovers of crashes ------------------------------------------------------------------------


def test_stale_parquet_manifest_temporaries_are_cleaned(examon_sim, tmp_path):
    d = tmp_path / "examon/plugin=ipmi_pub/metric=ambient"
    d.mkdir(parents=True)
    stale = d / f"._{DAY}.manifest.json.x1y2z3.tmp"  # a crash while writing the manifest
    stale.write_bytes(b"{")
    assert extract(examon_sim.url, tmp_path, "--format", "parquet").returncode == 0
    assert sorted(x.name for x in d.iterdir()) == [f"{DAY}.parquet", f"_{DAY}.manifest.json"]


# -- bad catalogs --------------------------------------------------------------------------------


def test_a_catalog_with_a_bom_and_a_comment_first(tmp_path):
    p = tmp_path / "catalog.csv"
    p.write_bytes(
        "\ufeff# exported from the spreadsheet\nmetric,plugin\nambient,ipmi_pub\n".encode()
    )
    (entry,) = load_catalog(p)
    assert (entry.metric, entry.plugin) == ("ambient", "ipmi_pub")


def test_a_metric_name_over_255_bytes_is_refused_at_the_catalog(tmp_path):
    p = tmp_path / "catalog.csv"
    p.write_text(f"metric,plugin\nambient,ipmi_pub\n{'m' * 300},ipmi_pub\n")
    with pytest.raises(CatalogError) as ei:
        load_catalog(p)
    assert str(ei.value).startswith(f"{p}, line 3: metric name 'mmmm")
    assert "is 300 bytes long in UTF-8; file systems accept at most 255 bytes" in str(ei.value)


def test_lock_files_do_not_outlive_their_run(examon_sim, tmp_path):
    assert extract(examon_sim.url, tmp_path).returncode == 0
    d = tmp_path / "examon/ipmi_pub/ambient"
    assert not list(d.glob(".*"))
