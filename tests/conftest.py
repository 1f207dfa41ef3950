"""Shared fixtures: the project's simulators run as separate processes on loopback ports."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dxt_core.simulate import spawn_examon_simulator
from tests.noida_fixtures import noida_es  # noqa: F401  (session fixture: noida-db)

ROOT = Path(__file__).resolve().parent.parent


class SimulatorProcess:
    def __init__(self, args: list[str]) -> None:
        self.proc, self.url = spawn_examon_simulator(args, stderr=subprocess.PIPE)

    def faults(self, **changes: object) -> dict[str, object]:
        r = httpx.post(f"{self.url}/_sim/faults", json=changes, timeout=10)
        r.raise_for_status()
        return r.json()

    def reset_faults(self) -> None:
        self.faults(
            delay_s=0.0,
            fail_next=0,
            max_points=None,
            slow_points=None,
            slow_delay_s=0.0,
            fail_metrics=[],
        )

    def stats(self) -> dict[str, object]:
        return httpx.get(f"{self.url}/_sim/stats", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                with contextlib.suppress(Exception):
                    stream.close()


@pytest.fixture(scope="session")
def small_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few metrics of every kind: float, int, string (nagios), no-cluster, job table."""
    p = tmp_path_factory.mktemp("catalog") / "catalog.csv"
    p.write_text(
        "metric,plugin\n"
        "ambient,ipmi_pub\n"
        "pcie,ipmi_pub\n"
        "state,nagios_pub\n"
        "num_nodes,slurm_pub\n"
        "PLC_PLC_Q101.Abilita_inverter,schneider_pub\n"
        "job_info_marconi100,job_table\n"
    )
    return p


@pytest.fixture(scope="module")
def examon_sim(small_catalog: Path) -> Iterator[SimulatorProcess]:
    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "4"])
    yield sim
    sim.stop()


def run_benchmarks(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[str, dict]:
    """``python -m benchmarks --size tiny ARGS`` from the project root; returns its stdout
    and the JSON file it wrote."""
    out_file = tmp_path / "bench.json"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--size", "tiny", *args, "--out", str(out_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, json.loads(out_file.read_text())
