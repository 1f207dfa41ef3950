"""Parquet output without pyarrow (the ``parquet`` extra) fails the run once, before any
request, with exit status 2 (it failed every metric-day one by one: 20 FAILED lines, exit
status 1; in Airflow every mapped task failed and was retried). A pyarrow that is installed
but fails to import (built for another NumPy) is said as such, with its own words, not as
missing. The environment is faked in a subprocess: a directory first on ``sys.path`` holds a
``pyarrow`` package that raises as an absent or a broken one does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import httpx
import pytest

from tests.conftest import ROOT

MISSING = 'raise ModuleNotFoundError("No module named \'pyarrow\'", name="pyarrow")\n'
BROKEN = 'raise ImportError("pyarrow requires NumPy 2.0 or newer")\n'
# a module pyarrow needs is missing: pyarrow is there, and broken
DEPENDENCY = "import numpy.no_such_part_of_numpy\n"
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


@pytest.mark.parametrize(
    ("init", "words"),
    [
        (BROKEN, "ImportError: pyarrow requires NumPy 2.0 or newer"),
        (DEPENDENCY, "ModuleNotFoundError: No module named 'numpy.no_such_part_of_numpy'"),
    ],
    ids=["numpy-too-old", "a-dependency-missing"],
)
def test_a_pyarrow_that_fails_to_import_is_said_as_such(tmp_path, init, words):
    run = _dxt(
        tmp_path, init, "extract", "prometheus", "--url", "http://127.0.0.1:9",
        "--metrics", "up", "--start-day", "2024-05-01", "--archive", "archive",
        "--format", "parquet",
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Parquet output needs pyarrow, which is installed but failed to import: " in run.stderr
    assert words in run.stderr
    assert NEEDS not in run.stderr


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


def test_the_prometheus_parquet_writer_says_a_broken_pyarrow_too(tmp_path):
    """Library use (no command to check first): the day writer says it the same way."""
    code = textwrap.dedent(
        """
        import io
        from dxt_core.backends.prometheus.layout import ParquetDayWriter
        from dxt_core.errors import ConfigError
        try:
            ParquetDayWriter(io.BytesIO(), 300_000, 0, 3_600_000)
        except ConfigError as exc:
            print(exc)
        """
    )
    path = f"{_fake_pyarrow(tmp_path, BROKEN)}{os.pathsep}{ROOT}"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith(
        "Parquet output needs pyarrow, which is installed but failed to import: ImportError: "
        "pyarrow requires NumPy 2.0 or newer"
    ), run.stdout
