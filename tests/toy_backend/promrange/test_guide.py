"""docs/adding-a-backend.md, followed: a fourth backend (tests/toy_backend/promrange) with the
documented files, registered through DXT_EXTRA_BACKENDS, served by its own simulator process,
archived by `dxt extract`, checked by `dxt coverage`, skipped when complete."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from dxt_core.backends import BUILTIN
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

TOY = ROOT / "tests" / "toy_backend" / "promrange"
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "DXT_EXTRA_BACKENDS": "tests.toy_backend.promrange",
}


def dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_files_are_the_backend():
    doc = (ROOT / "docs" / "adding-a-backend.md").read_text()
    section = doc.split("## The files to create", 1)[1].split("## Registering it", 1)[0]
    # the files every backend has (an optional role, such as publish.py, is marked so)
    files = re.findall(r"^\d+\. \*\*`([a-z_]+\.py)`\*\*(?! \(optional\))", section, re.M)
    assert files == [
        "__init__.py",
        "connection.py",
        "source.py",
        "archive_day.py",
        "tasks.py",
        "cli.py",
        "simulator.py",
    ]
    for name in files:
        assert (TOY / name).is_file(), name
    # its DAG file, and its contract adapter (out of tree: in the package)
    assert (TOY / "dxt_promrange.py").is_file() and (TOY / "contract.py").is_file()
    # the shipped backends have the same files, and their DAG files
    for backend in BUILTIN:
        package = ROOT / "dxt_core" / "backends" / backend
        for name in files:
            assert (package / name).exists() or (package / name.removesuffix(".py")).is_dir()
        assert (ROOT / "dags" / f"dxt_{backend}.py").is_file()


@pytest.fixture()
def prom_server():
    proc = subprocess.Popen(
        [sys.executable, "-m", "dxt_core.cli", "simulate", "promrange", "--port", "0"],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    yield line.rsplit(" ", 1)[-1].strip()
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


@pytest.mark.slow  # 4 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_a_fourth_backend_archives_through_the_registry(prom_server, tmp_path):
    archive = tmp_path / "archive"
    help_text = dxt("extract", "--help").stdout
    assert "promrange" in help_text

    r = dxt(
        "extract",
        "promrange",
        "--url",
        prom_server,
        "--metrics",
        "up,node_load1",
        "--start-day",
        "2024-03-09",
        "--end-day",
        "2024-03-10",
        "--archive",
        str(archive),
    )
    assert r.returncode == 0, r.stderr
    assert "archived 4 metric-days" in r.stdout

    day = archive / "promrange" / "up" / "2024-03-09"
    manifest = json.loads(day.with_name("2024-03-09.manifest.json").read_text())
    assert manifest["status"] == "archived"
    with gzip.open(day.with_name("2024-03-09.csv.gz"), "rt") as fh:
        lines = fh.read().splitlines()
    # three instances, one point a minute over the UTC day, no point of the next day
    assert len(lines) - 1 == manifest["rows"] == 3 * 1440
    assert lines[0] == "__name__,instance,job,timestamp_ms,value"
    stamps = {int(line.split(",")[3]) for line in lines[1:]}
    assert min(stamps) == 1709942400000 and max(stamps) == 1709942400000 + 86_340_000

    cov = dxt(
        "coverage",
        "promrange",
        "--archive",
        str(archive),
        "--metrics",
        "up,node_load1,absent",
        "--start-day",
        "2024-03-09",
        "--end-day",
        "2024-03-10",
        "--json",
    )
    counts = json.loads(cov.stdout)["counts"]
    assert counts == {"archived": 4, "empty": 0, "missing": 2, "corrupt": 0}
    assert cov.returncode == 3

    again = dxt(
        "extract",
        "promrange",
        "--url",
        prom_server,
        "--metrics",
        "up,node_load1",
        "--start-day",
        "2024-03-09",
        "--end-day",
        "2024-03-10",
        "--archive",
        str(archive),
    )
    assert again.returncode == 0
    assert "4 already archived (skipped" in again.stdout

    unknown = dxt(
        "coverage",
        "nosuchbackend",
        "--archive",
        str(archive),
        "--start-day",
        "2024-03-09",
        "--end-day",
        "2024-03-09",
    )
    assert unknown.returncode == 2
    assert "unknown backend 'nosuchbackend'" in unknown.stderr and "promrange" in unknown.stderr


@pytest.mark.slow  # 4 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_cli_refetches_only_incomplete_days_and_reports_every_failure(prom_server, tmp_path):
    archive = tmp_path / "archive"
    args = (
        "extract",
        "promrange",
        "--url",
        prom_server,
        "--start-day",
        "2024-03-09",
        "--archive",
        str(archive),
    )
    assert dxt(*args, "--metrics", "up,node_load1").returncode == 0
    # a truncated file fails the size check: that day is fetched again, the other skipped
    data = archive / "promrange" / "up" / "2024-03-09.csv.gz"
    data.write_bytes(data.read_bytes()[:100])
    r = dxt(*args, "--metrics", "up,node_load1")
    assert r.returncode == 0, r.stderr
    assert "archived 1 metric-day (" in r.stdout and "1 already archived (skipped" in r.stdout
    assert gzip.decompress(data.read_bytes()).count(b"\n") == 1 + 3 * 1440
    # --refetch redoes both
    r = dxt(*args, "--metrics", "up,node_load1", "--refetch")
    assert "archived 2 metric-days" in r.stdout and "skipped" not in r.stdout
    # a unit that cannot be written (a file where its folder should be) fails alone,
    # with a one-line cause; the others are archived and the run ends with its summary
    (archive / "promrange" / "node_memory_free").write_text("not a folder")
    r = dxt(*args, "--metrics", "node_memory_free,node_cpu", "--refetch")
    assert r.returncode == 1
    assert "archived 1 metric-day (" in r.stdout and "1 failed" in r.stdout
    failed = [line for line in r.stderr.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED node_memory_free 2024-03-09: ")
    assert "Traceback" not in r.stderr
