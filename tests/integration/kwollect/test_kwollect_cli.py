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
    assert m["complete"] is True
    # the final line states what the backup holds
    assert "manifest.json: 2 files, 1,202 rows" in out.stdout, out.stdout
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
    # -q, as for the other backends: the run's summary, no line per metric-day
    day_line = next(x for x in out.stdout.splitlines() if "2024-11-26" in x and "rows" in x)
    quiet = dxt("extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
                "--metrics", "bmc_node_power_watt", "--archive", str(archive),
                "--start-day", "2024-11-26", "--refetch", "-q")  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr
    assert day_line not in quiet.stdout and "archived 1 metric-day" in quiet.stdout, quiet.stdout


BACKUP = ["--nodes", "nova-1.lyon", "--start", "2024-11-26T00:00:00+01:00",
          "--end", "2024-11-26T01:00:00+01:00", "--metrics", "bmc_node_power_watt"]  # fmt: skip


@pytest.fixture
def refusing(sim):
    """The simulator refuses every request with a point as "too much data"."""
    sim.configure(max_points=0)
    yield sim
    sim.reset()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        # before: split for ever on the refusals, a RecursionError traceback
        (["--min-window", "0"], "--min-window 0.0: give a number of seconds, 0.001 or more"),
        # before: a ValueError traceback from the socket
        (["--timeout", "-1"], "--timeout -1.0: give a number of seconds, above 0"),
        # before: retried 5 times, then "the API does not answer" (exit 4)
        (["--timeout", "0"], "--timeout 0.0: give a number of seconds, above 0"),
        # before: every request "max_points and max_nodes must be >= 1", no option named
        (["--max-points", "0"], "--max-points 0: give a whole number of points, 1 or more"),
    ],
    ids=["min-window", "timeout-negative", "timeout-zero", "max-points"],
)
def test_option_values_are_checked_before_any_request(refusing, tmp_path, option, message):
    asked = refusing.stats()["requests"]
    out = dxt("extract", "kwollect", "--api-url", refusing.url, *BACKUP, *option,
              "--backup", str(tmp_path / "b"))  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"dxt: error: {message}" in out.stderr
    assert "Traceback" not in out.stderr
    # checked up front: no request but this stats one (the simulator counts every request)
    assert refusing.stats()["requests"] == asked + 1
    assert not (tmp_path / "b").exists()


def test_job_with_an_epoch_start_keeps_the_jobs_end(sim, tmp_path):
    # --help: "start: ISO 8601 with offset, or epoch"; before, the epoch was refused here
    out = dxt("extract", "kwollect", "--api-url", sim.url, "--job", "lyon:1930000",
              "--start", "1732630200", "--metrics", "bmc_node_power_watt",
              "--backup", str(tmp_path / "j"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    m = json.loads((tmp_path / "j/manifest.json").read_text())
    assert m["job"] == 1930000
    # 14:10 (the epoch) to the job's end, 14:30, not to now
    assert (m["start"], m["stop"]) == ("2024-11-26T14:10:00+00:00", "2024-11-26T14:30:00+00:00")
    assert m["rows"] == 2 * 20 * 60 // 5  # two nodes, a BMC point every 5 s (at .250 s)


@pytest.mark.parametrize("mode", ["backup", "archive"])
def test_an_unknown_node_is_named_with_its_cluster(sim, tmp_path, mode):
    # before: an empty backup with exit 0, or "empty" days archived for ever
    where = (
        ["--start", "2024-11-26T00:00:00+01:00", "--end", "2024-11-26T01:00:00+01:00",
         "--backup", str(tmp_path / "out")]
        if mode == "backup"
        else ["--start-day", "2024-11-26", "--archive", str(tmp_path / "out")]
    )  # fmt: skip
    out = dxt("extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-9.lyon,nova-1.lyon",
              "--metrics", "bmc_node_power_watt", *where)  # fmt: skip
    problem = (
        "nova-9.lyon.grid5000.fr: not a node of cluster nova of site lyon (its 4 nodes are "
        "nova-1 to nova-4)"
    )
    assert "nova-1.lyon.grid5000.fr" not in out.stderr
    if mode == "backup":  # an experiment's nodes are current ones: refused
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"dxt: error: unknown node: {problem}" in out.stderr
        assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.json"))
    else:  # a past day of a node retired since may hold data: archived, the node named
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"warning: {problem} -- the reference API does not list it" in out.stderr
        (manifest,) = (tmp_path / "out").rglob("*.manifest.json")
        assert json.loads(manifest.read_text())["unlisted_nodes"] == [problem]


def test_a_backup_run_in_process_leaves_ctrl_c_as_it_found_it(sim, tmp_path, capsys):
    """``main()`` ignores Ctrl-C while a backup prints its summary and did not restore it: a
    notebook or script calling it could no longer be interrupted afterwards (a run keeps an
    ignored SIGINT ignored)."""
    import signal

    from dxt_core.cli import main

    before = signal.getsignal(signal.SIGINT)
    rc = main([
        "extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
        "--start", "2024-11-26T15:00:00+01:00", "--end", "2024-11-26T15:00:10+01:00",
        "--metrics", "wattmetre_power_watt", "--backup", str(tmp_path / "b"),
    ])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before


def test_a_metric_or_node_given_twice_is_archived_once(sim, tmp_path):
    """--metrics bmc,bmc made two units of each day: "archived 2 metric-days", one of them
    twice ("unchanged")."""
    bmc = "bmc_node_power_watt"
    out = dxt("extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon,nova-1.lyon",
              "--metrics", f"{bmc},{bmc}", "--archive", str(tmp_path), "--start-day",
              "2024-11-26")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "archived 1 metric-day " in out.stdout and "unchanged" not in out.stdout, out.stdout
    doc = json.loads((tmp_path / f"kwollect/lyon/{bmc}/2024-11-26.manifest.json").read_text())
    assert doc["nodes"] == ["nova-1"]
