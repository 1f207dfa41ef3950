"""`dxt extract kwollect` and `dxt simulate kwollect` as processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.integration

DXT = str(Path(sys.executable).parent / "dxt")


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def dxt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow  # 6 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_backup_archive_and_errors(sim, tmp_path):
    out = dxt(
        "extract",
        "kwollect",
        "--api-url",
        sim.url,
        "--nodes",
        "nova-1.lyon,gros-1.nancy",
        "--start",
        "2024-11-26T15:00:00+01:00",
        "--end",
        "1732630200",
        "--metrics",
        "wattmetre_power_watt",
        "--backup",
        str(tmp_path / "b"),
        "--format",
        "csv",
    )
    assert out.returncode == 0, out.stderr
    m = json.loads((tmp_path / "b/manifest.json").read_text())
    assert m["format"] == "csv" and m["rows"] == 2 * 601 and len(m["files"]) == 2
    out = dxt(
        "extract",
        "kwollect",
        "--api-url",
        sim.url,
        "--job",
        "lyon:1930000",
        "--metrics",
        "bmc_node_power_watt",
        "--backup",
        str(tmp_path / "j"),
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "j/manifest.json").read_text())["job"] == 1930000
    out = dxt(
        "extract",
        "kwollect",
        "--api-url",
        sim.url,
        "--clusters",
        "nancy/gros",
        "--metrics",
        "bmc_node_power_watt",
        "--archive",
        str(tmp_path / "a"),
        "--start-day",
        "2024-11-26",
        "--end-day",
        "2024-11-27",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("archived, 69120 rows") == 2  # 4 nodes x 17,280 BMC samples
    assert (tmp_path / "a/kwollect/nancy/bmc_node_power_watt/2024-11-27.jsonl.gz").exists()
    bad = dxt(
        "extract",
        "kwollect",
        "--api-url",
        sim.url,
        "--nodes",
        "nova-1",
        "--start",
        "1",
        "--backup",
        "x",
    )
    assert bad.returncode == 2 and "'nova-1' has no site" in bad.stderr


def test_simulate_kwollect_through_the_cli():
    proc = subprocess.Popen(
        [DXT, "simulate", "kwollect", "--port", "0", "--nodes", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "dxt-simulate-kwollect listening on http://127.0.0.1:" in line
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def test_job_site_that_would_escape_the_backup_directory_is_refused(sim, tmp_path):
    # issue 12.3: the site of --job SITE:ID becomes a path component (and a URL component)
    backup = tmp_path / "deep" / "backup"
    out = dxt(
        "extract", "kwollect", "--api-url", sim.url, "--job", "../../x:1930000",
        "--backup", str(backup),
    )  # fmt: skip
    assert out.returncode == 2
    assert "site '../../x'" in out.stderr and "escape" in out.stderr
    assert not list(tmp_path.rglob("*"))  # nothing written, not even the backup directory
    bad = dxt("extract", "kwollect", "--api-url", sim.url, "--job", "lyon", "--backup", "x")
    assert bad.returncode == 2 and "SITE:JOB_ID" in bad.stderr


def test_the_manifest_holds_the_count_and_reconcile_recounts(sim, tmp_path):
    """Issue 19: Kwollect has no count API (api.get_metrics returns rows; summary=true gives
    5-minute means), so the count is the points of the archive's own requests, said so in
    the manifest; ``coverage --reconcile`` asks again and compares."""
    archive = tmp_path / "a"
    out = dxt("extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
              "--metrics", "bmc_node_power_watt", "--archive", str(archive),
              "--start-day", "2024-11-26")  # fmt: skip
    assert out.returncode == 0, out.stderr
    m = json.loads(
        (archive / "kwollect/lyon/bmc_node_power_watt/2024-11-26.manifest.json").read_text()
    )
    assert m["rows"] > 0 and m["source_count"]["count"] == m["rows"]
    assert m["source_count"]["method"].startswith("Kwollect has no count")
    rec = dxt("coverage", "kwollect", "--reconcile", "--api-url", sim.url, "--archive",
              str(archive), "--sites", "lyon", "--metrics", "bmc_node_power_watt",
              "--start-day", "2024-11-26", "--end-day", "2024-11-26")  # fmt: skip
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "1 equal" in rec.stdout and "Kwollect has no count" in rec.stdout
