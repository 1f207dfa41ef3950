"""Parquet output without pyarrow (the ``parquet`` extra) fails the run once, before any
request, with exit status 2 (it failed every metric-day one by one: 20 FAILED lines, exit
status 1; in Airflow every mapped task failed and was retried). The environment is faked in
a subprocess: a directory first on ``sys.path`` holds a ``pyarrow`` package that raises as an
absent one does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import httpx
import pytest

from tests.conftest import ROOT

MISSING = 'raise ModuleNotFoundError("No module named \'pyarrow\'", name="pyarrow")\n'
NEEDS = "Parquet output needs pyarrow: pip install 'dxt-archive[parquet]'"


def _fake_pyarrow(tmp_path, init):
    fake = tmp_path / "fake"
    (fake / "pyarrow").mkdir(parents=True)
    (fake / "pyarrow" / "__init__.py").write_text(init)
    return fake


def _dxt(tmp_path, init, *argv, env=None):
    path = f"{_fake_pyarrow(tmp_path, init)}{os.pathsep}{ROOT}"
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *argv],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )  # fmt: skip


def _queries(sim):
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()
    return sum(n for path, n in stats["requests"].items() if not path.startswith("/_sim"))


@pytest.mark.integration
def test_examon_parquet_without_pyarrow_stops_before_any_request(examon_sim, tmp_path):
    before = _queries(examon_sim)
    run = _dxt(
        tmp_path, MISSING, "extract", "examon", "--url", examon_sim.url, "--limit", "4",
        "--start-day", "2024-05-01", "--end-day", "2024-05-02", "--archive", "archive",
        "--format", "parquet",
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == f"dxt: error: {NEEDS}"
    assert "FAILED" not in run.stdout + run.stderr
    assert _queries(examon_sim) == before  # nothing was asked of the server


def test_prometheus_parquet_without_pyarrow_stops_before_any_request(tmp_path):
    # nothing listens on the URL: a request would fail otherwise
    run = _dxt(
        tmp_path, MISSING, "extract", "prometheus", "--url", "http://127.0.0.1:9",
        "--metrics", "up", "--start-day", "2024-05-01", "--archive", "archive",
        "--format", "parquet",
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == f"dxt: error: {NEEDS}"


def test_an_airflow_run_in_parquet_without_pyarrow_fails_run_wide(tmp_path):
    code = textwrap.dedent(
        """
        from dxt_core import backends
        from dxt_core.errors import ConfigError, run_wide
        for name in ("examon", "prometheus"):
            try:
                backends.get(name).dag_tasks().output_format({"format": "parquet"})
            except ConfigError as exc:
                print(run_wide(exc), exc)
        """
    )
    path = f"{_fake_pyarrow(tmp_path, MISSING)}{os.pathsep}{ROOT}"
    env = {"DXT_EXAMON_FORMAT": "parquet", "DXT_PROMETHEUS_FORMAT": "parquet"}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": path, **env},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == [f"True {NEEDS}"] * 2
