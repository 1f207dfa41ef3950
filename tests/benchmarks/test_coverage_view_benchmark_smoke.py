"""The coverage view benchmark runs end to end at its tiny size (a smoke test: no timing asserted)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from benchmarks.coverage_view import _states
from tests.conftest import run_benchmarks

pytestmark = [pytest.mark.perf, pytest.mark.airflow, pytest.mark.alone]


def test_coverage_view_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--repeat", "1", "--workloads", "coverage_view")
    assert "grid, server side" in stdout
    res = doc["results"][0]
    assert res["workload"] == "coverage_view"
    assert (res["metrics"], res["days"], res["cells"]) == (20, 10, 200)
    assert res["task_instances"] == 200
    # the grid counts what the fixture built, cell by cell
    built = Counter(_states(u, d) for u in range(20) for d in range(10))
    assert res["counts"] == {
        "archived": built["archived"],
        "empty": built["empty"],
        "missing": built["missing"] + built["missing_failed"],
        "corrupt": built["corrupt"],
        "kept": 0,
    }
    assert res["airflow_counts"]["failed"] == built["missing_failed"] > 0
    assert res["airflow_counts"]["success"] == 200 - built["missing_failed"]
    assert res["server_s"] > 0 and res["api_s"] > 0 and res["api_bytes"] > 0
    if os.path.exists("/usr/bin/chromium"):
        assert res["render_s"] > 0
