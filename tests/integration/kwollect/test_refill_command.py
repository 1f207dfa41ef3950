"""The refill command ``dxt coverage kwollect`` prints, run as printed.

``dxt coverage kwollect`` used to print ``dxt extract kwollect <connection options> ...``:
no API URL, nodes or metrics, though the manifests record them, so the command could not be
run; and ``dxt extract kwollect --archive`` without nodes named the DAG's DXT_KWOLLECT_*
variables, which the command line does not read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.backends.kwollect.cli import refill_options
from tests.kwollect_sim import KwollectSimProcess

DXT = str(Path(sys.executable).parent / "dxt")
BMC = "bmc_node_power_watt"
PDU = "pdu_outlet_power_watt"
DAYS = ["2024-11-26", "2024-11-27", "2024-11-28"]
REFILL_HEADER = "To refill the missing and corrupt metric-days with the dxt command"


def dxt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300, env=env)


def refill_commands(coverage_stdout: str) -> list[str]:
    """The ``dxt extract`` lines under the refill header of ``dxt coverage``'s output."""
    lines = coverage_stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(REFILL_HEADER))
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("  dxt extract "):
            break
        commands.append(line.strip())
    return commands


def run_as_printed(
    command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[:3] == ["dxt", "extract", "kwollect"], command
    return subprocess.run([DXT, *words[1:]], capture_output=True, text=True, timeout=300, env=env)


def manifest(root: Path, site: str, metric: str, day: str) -> dict[str, object]:
    return json.loads((root / "kwollect" / site / metric / f"{day}.manifest.json").read_text())


def delete_day(root: Path, site: str, metric: str, day: str) -> None:
    for path in (root / "kwollect" / site / metric).glob(f"{day}.*"):
        path.unlink()


@pytest.mark.integration
@pytest.mark.slow  # 9 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_the_printed_refill_command_runs_as_printed_and_completes_the_archive(tmp_path):
    root = tmp_path / "archive"
    sim = KwollectSimProcess()
    try:
        # two sites: nodes named one by one (lyon), a whole cluster (nancy/gros, resolved by
        # the API to its nodes); days cut in UTC, not the default Europe/Paris
        made = dxt("extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
                   "--clusters", "nancy/gros", "--metrics", BMC, "--tz", "UTC",
                   "--archive", str(root), "--start-day", DAYS[0], "--end-day", DAYS[-1])  # fmt: skip
        assert made.returncode == 0, made.stderr
        nancy_nodes = manifest(root, "nancy", BMC, DAYS[0])["nodes"]
        assert nancy_nodes and len(nancy_nodes) > 1  # the cluster, resolved
        sha = {site: manifest(root, site, BMC, DAYS[1])["sha256"] for site in ("lyon", "nancy")}
        # one unit of each site loses its middle day
        delete_day(root, "lyon", BMC, DAYS[1])
        delete_day(root, "nancy", BMC, DAYS[1])

        cov_args = ("coverage", "kwollect", "--archive", str(root), "--start-day", DAYS[0],
                    "--end-day", DAYS[-1], "--metrics", BMC)  # fmt: skip
        cov = dxt(*cov_args)
        assert cov.returncode == 3, cov.stdout + cov.stderr
        assert "2 missing" in cov.stdout, cov.stdout
        commands = refill_commands(cov.stdout)
        assert len(commands) == 1, cov.stdout
        command = commands[0]
        # everything the run needs, from the manifests: no placeholder to fill in
        assert "<" not in command and "_NODES" not in command, command
        words = shlex.split(command)
        assert words[words.index("--api-url") + 1] == sim.url
        nodes = words[words.index("--nodes") + 1].split(",")
        assert nodes == ["nova-1.lyon", *(f"{n}.nancy" for n in nancy_nodes)]
        assert words[words.index("--metrics") + 1] == BMC
        assert words[words.index("--tz") + 1] == "UTC"
        assert words[words.index("--start-day") + 1] == DAYS[1]
        assert words[words.index("--end-day") + 1] == DAYS[1]

        refill = run_as_printed(command)
        assert refill.returncode == 0, refill.stdout + refill.stderr
        assert "archived 2 metric-days" in refill.stdout, refill.stdout
        for site in ("lyon", "nancy"):
            again = manifest(root, site, BMC, DAYS[1])
            assert again["status"] == "archived" and again["sha256"] == sha[site]
            assert again["nodes"] == manifest(root, site, BMC, DAYS[0])["nodes"]

        cov = dxt(*cov_args)
        assert cov.returncode == 0, cov.stdout + cov.stderr
        assert "0 missing, 0 corrupt" in cov.stdout and REFILL_HEADER not in cov.stdout
    finally:
        sim.stop()


@pytest.mark.integration
@pytest.mark.slow  # 5 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_the_refill_command_names_the_user_and_never_the_password(tmp_path):
    root = tmp_path / "archive"
    sim = KwollectSimProcess(["--user", "alice", "--password", "pw-s3cret"])
    env = {**os.environ, "DXT_KWOLLECT_PASSWORD": "pw-s3cret"}
    try:
        made = dxt("extract", "kwollect", "--api-url", sim.url, "--user", "alice",
                   "--nodes", "nova-2.lyon", "--metrics", BMC, "--archive", str(root),
                   "--start-day", DAYS[0], "--end-day", DAYS[1], env=env)  # fmt: skip
        assert made.returncode == 0, made.stderr
        delete_day(root, "lyon", BMC, DAYS[0])
        cov_args = ("coverage", "kwollect", "--archive", str(root), "--start-day", DAYS[0],
                    "--end-day", DAYS[1], "--metrics", BMC, "--user", "alice")  # fmt: skip
        cov = dxt(*cov_args, env=env)
        assert cov.returncode == 3, cov.stdout + cov.stderr
        (command,) = refill_commands(cov.stdout)
        assert "s3cret" not in cov.stdout + cov.stderr
        words = shlex.split(command)
        assert words[words.index("--user") + 1] == "alice"
        assert "--password" not in words and "--tz" not in words  # the default zone
        assert words[words.index("--nodes") + 1] == "nova-2.lyon"
        # the password comes from the environment, as for the archive run
        refill = run_as_printed(command, env=env)
        assert refill.returncode == 0, refill.stdout + refill.stderr
        assert dxt(*cov_args, env=env).returncode == 0
    finally:
        sim.stop()


def test_archive_without_nodes_names_the_command_line_options(tmp_path):
    out = dxt("extract", "kwollect", "--api-url", "http://127.0.0.1:9", "--archive",
              str(tmp_path / "a"), "--start-day", DAYS[0])  # fmt: skip
    assert out.returncode == 2
    assert "--nodes" in out.stderr and "--clusters" in out.stderr, out.stderr
    assert "DXT_KWOLLECT" not in out.stderr, out.stderr
    assert not (tmp_path / "a").exists()


# -- refill_options from manifests written by hand (no API) ------------------------------------


def write_manifest(root: Path, site: str, metric: str, day: str, **fields: object) -> None:
    doc: dict[str, object] = {
        "source": "kwollect",
        "site": site,
        "metric": metric,
        "day": day,
        "status": "archived",
        "source_url": "https://api.example.org/stable",
        "time_zone": "Europe/Paris",
        "made_by": {"tool": "dxt"},
    }
    doc.update(fields)
    archive = Archive(root)
    path = archive.manifest_path(DayKey("kwollect", (site, metric), dt.date.fromisoformat(day)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def coverage_args(root: Path, **given: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "archive": str(root),
        "start_day": DAYS[0],
        "end_day": DAYS[-1],
        "sites": None,
        "metrics": None,
        "api_url": None,
        "url": None,
        "user": None,
        "password": None,
        "no_verify_tls": False,
    }
    values.update(given)
    return argparse.Namespace(**values)


def test_a_unit_with_no_manifest_in_the_range_takes_its_site_nodes_or_a_placeholder(tmp_path):
    day = dt.date.fromisoformat(DAYS[0])
    for d in DAYS:
        write_manifest(tmp_path, "lyon", BMC, d, nodes=["nova-1", "nova-2"], password="x")
    write_manifest(tmp_path, "nancy", BMC, DAYS[0], nodes=["gros-1"])
    args = coverage_args(tmp_path, metrics=f"{BMC},{PDU}", sites="lyon,nancy,rennes")
    sample = json.loads((tmp_path / "kwollect/lyon" / BMC / f"{DAYS[0]}.manifest.json").read_text())
    # lyon's PDU was never archived: lyon's nodes come from its complete BMC unit; nancy's
    # BMC lost a day; rennes was never archived: nothing names its nodes
    units = {("lyon", PDU): None, ("nancy", BMC): day, ("nancy", PDU): None, ("rennes", BMC): None}
    words = shlex.split(refill_options(args, sample, units))
    assert words == [
        "--api-url", "https://api.example.org/stable",
        "--nodes", "nova-1.lyon,nova-2.lyon,gros-1.nancy,RENNES_NODES",
        "--metrics", f"{BMC},{PDU}",
    ]  # fmt: skip


def test_the_url_given_wins_and_a_url_none_records_is_a_placeholder(tmp_path):
    day = dt.date.fromisoformat(DAYS[0])
    write_manifest(
        tmp_path, "lyon", BMC, DAYS[0], nodes=["nova-1"], source_url=None,
        day_definition={"time_zone": "UTC", "day": "[local midnight, next local midnight)"},
    )  # fmt: skip
    units = {("lyon", BMC): day}
    words = shlex.split(refill_options(coverage_args(tmp_path), None, units))
    assert words[:2] == ["--api-url", "URL"] and words[-2:] == ["--tz", "UTC"]
    given = coverage_args(
        tmp_path, api_url="https://bob:pw@api.example.org/other", user="bob", no_verify_tls=True
    )
    words = shlex.split(refill_options(given, None, units))
    assert words[:5] == [
        "--api-url", "https://api.example.org/other", "--user", "bob", "--no-verify-tls",
    ]  # fmt: skip
    assert "pw" not in " ".join(words).replace("power", "")


def test_metrics_archived_on_different_nodes_are_not_refilled_on_all_of_them(tmp_path, capsys):
    """BMC archived on nova-1, the network counter on nova-2 and nova-3: one refill command
    with the union of their nodes archived both metrics on all three, exit 0. And a metric
    with no manifest in the range took its sibling's nodes, not its own."""
    net = "network_ifacein_bytes_total"
    for d in DAYS:
        write_manifest(tmp_path, "lyon", BMC, d, nodes=["nova-1"])
        write_manifest(tmp_path, "lyon", net, d, nodes=["nova-2", "nova-3"])
    day = dt.date.fromisoformat(DAYS[0])
    args = coverage_args(tmp_path, metrics=f"{BMC},{net}", sites="lyon")
    words = shlex.split(refill_options(args, None, {("lyon", BMC): day, ("lyon", net): day}))
    assert words[words.index("--nodes") + 1] == "LYON_NODES", words
    err = capsys.readouterr().err
    assert "lyon's metrics were archived on different nodes" in err
    assert f"{BMC}: nova-1.lyon; {net}: nova-2.lyon,nova-3.lyon" in err
    # only BMC to refill, no manifest of it in the range: its own latest manifest names nova-1
    words = shlex.split(refill_options(args, None, {("lyon", BMC): None}))
    assert words[words.index("--nodes") + 1] == "nova-1.lyon", words
