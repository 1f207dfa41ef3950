"""The cluster, jobs service and plugin options a day was archived with, read back by
``dxt coverage``: by ``--reconcile``'s counts, and from manifests older than these fields
(an archive made before 2026-12-07, then upgraded)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.integration

DAYS = ["--start-day", "2020-03-09", "--end-day", "2020-03-10"]
#: The fields an older dxt did not write into an Examon manifest.
NEWER_FIELDS = ("cluster", "jobs_url", "job_table", "plugin_options")


def _dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def galileo(tmp_path_factory: pytest.TempPathFactory):
    """A KairosDB whose cluster-tagged series are all of cluster galileo100."""
    catalog = tmp_path_factory.mktemp("g") / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2", "--cluster", "galileo100"])
    yield sim, catalog
    sim.stop()


def _archive(sim: SimulatorProcess, catalog: Path, root: Path) -> Path:
    made = _dxt("extract", "examon", "--url", sim.url, "--archive", str(root), "-q",
                "--catalog", str(catalog), "--cluster", "galileo100", *DAYS)  # fmt: skip
    assert made.returncode == 0 and "archived 2 metric-days" in made.stdout, (
        made.stdout + made.stderr
    )
    return root / "examon/ipmi_pub/ambient"


def _as_an_older_dxt_wrote_them(unit: Path) -> None:
    for m in unit.glob("*.manifest.json"):
        doc = json.loads(m.read_text())
        m.write_text(json.dumps({k: v for k, v in doc.items() if k not in NEWER_FIELDS}))


def test_reconcile_counts_with_the_cluster_the_days_were_archived_with(galileo, tmp_path):
    """Days of cluster galileo100, reconciled without --cluster: the counts were asked for
    marconi100's series (0), and both days were said fewer at the source and marked kept
    (``K``, a kept.json each), exit 0."""
    sim, catalog = galileo
    root = tmp_path / "a"
    unit = _archive(sim, catalog, root)
    rec = _dxt("coverage", "examon", "--reconcile", "--url", sim.url, "--archive", str(root),
               "--catalog", str(catalog), *DAYS)  # fmt: skip
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "fewer at the source" not in rec.stdout, rec.stdout
    assert not list(unit.glob("*.kept.json"))
    # manifests that do not say which cluster: no count is taken, the option is asked for
    _as_an_older_dxt_wrote_them(unit)
    rec = _dxt("coverage", "examon", "--reconcile", "--url", sim.url, "--archive", str(root),
               "--catalog", str(catalog), *DAYS)  # fmt: skip
    assert rec.returncode == 2, rec.stdout + rec.stderr
    assert "do not record the --cluster" in rec.stderr and "give --reconcile the --cluster" in (
        rec.stderr
    ), rec.stderr
    assert not list(unit.glob("*.kept.json"))
    given = _dxt("coverage", "examon", "--reconcile", "--url", sim.url, "--archive", str(root),
                 "--catalog", str(catalog), "--cluster", "galileo100", *DAYS)  # fmt: skip
    assert given.returncode == 0 and "fewer at the source" not in given.stdout, given.stdout


def test_a_refill_of_days_an_older_dxt_archived_asks_for_the_cluster(galileo, tmp_path):
    """Manifests without ``cluster`` (an older dxt's): the refill command had no --cluster,
    so the missing day was archived from marconi100's series, found empty and counted
    complete, exit 0. The command now holds a placeholder, and says why."""
    sim, catalog = galileo
    root = tmp_path / "a"
    unit = _archive(sim, catalog, root)
    _as_an_older_dxt_wrote_them(unit)
    for f in unit.glob("2020-03-10.*"):
        f.unlink()
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog), *DAYS)
    assert cov.returncode == 3, cov.stdout + cov.stderr
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert "--cluster CLUSTER" in line and "--plugin-options" not in line, line
    assert "older than 2026-12-07" in cov.stderr and "the --cluster" in cov.stderr, cov.stderr
    assert "taken as the shipped options" in cov.stderr, cov.stderr
    # given to coverage, the command is one to run as printed
    cov = _dxt("coverage", "--archive", str(root), "--catalog", str(catalog),
               "--cluster", "galileo100", *DAYS)  # fmt: skip
    line = next(x for x in cov.stdout.splitlines() if x.startswith("  dxt extract examon"))
    assert "--cluster galileo100" in line and "CLUSTER" not in line, line
    words = shlex.split(line)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    refill = subprocess.run([*words, "-q"], capture_output=True, text=True, timeout=120, env=env)
    assert refill.returncode == 0, refill.stdout + refill.stderr
    doc = json.loads((unit / "2020-03-10.manifest.json").read_text())
    assert doc["status"] == "archived" and doc["cluster"] == "galileo100", doc
    # a refetch command of such a day asks for it too
    import argparse

    from dxt_core.backends.examon.cli import refetch_command

    args = argparse.Namespace(archive=str(root), url=sim.url, format=None, catalog=None)
    line = refetch_command(args, ("ipmi_pub", "ambient"), "2020-03-09", "2020-03-09")
    assert "--cluster CLUSTER" in line, line
