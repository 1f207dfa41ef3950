"""The benchmark suite runs end to end at its tiny size (a smoke test: no timing asserted)."""

from __future__ import annotations

import pytest

from tests.conftest import run_benchmarks

pytestmark = pytest.mark.perf


def test_benchmarks_run_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--repeat", "1", "--workloads", "examon")
    assert "speedup_vs_reference" in stdout
    res = doc["results"][0]
    pipes = res["pipelines"]
    assert set(pipes) == {"ours", "ours_parquet", "floor", "reference"}
    # the three pipelines archived the same day: same number of points
    assert pipes["ours"]["points"] == pipes["reference"]["points"] == pipes["floor"]["points"]
    assert pipes["ours"]["points"] == 4 * 4320
    for p in pipes.values():
        assert p["seconds"] > 0 and p["peak_rss_mb"] > 0 and p["output_bytes"] > 0


def test_kwollect_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--workloads", "kwollect")
    assert "two_sites_vs_one_site_wall" in stdout
    res = doc["results"][0]
    runs = res["runs"]
    assert runs["two_sites"]["points"] == 2 * runs["one_site"]["points"] == 2 * 3 * 3600
    assert runs["two_sites_quarter"]["points"] == 2 * 3 * 900
    for r in runs.values():
        assert r["seconds"] > 0 and r["peak_rss_mb"] > 0 and r["output_bytes"] > 0


@pytest.mark.airflow
def test_airflow_benchmark_runs_at_tiny_size(tmp_path):
    # airflow standalone, 20 mapped metric-days of each DAG (ours and the no-op twin)
    _, doc = run_benchmarks(tmp_path, "--workloads", "airflow", timeout=1200)
    res = doc["results"][0]
    assert "invalid" not in res, res
    for dag_id in ("dxt_noop", "dxt_examon"):
        run = res[dag_id]
        assert run["state"] == "success"
        assert run["mapped_tasks"] == 20 and run["task_states"] == {"success": 20}
        assert run["run_seconds"] > 0 and run["task_duration_median_s"] > 0
    assert res["ours_vs_noop"] > 0 and res["parse_ms"] > 0


def test_reconcile_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--workloads", "reconcile")
    assert "reconcile / archive" in stdout
    res = doc["results"][0]
    assert res["metrics"] == 20
    assert res["archive"]["requests"] > res["reconcile"]["requests"] > 0
    # counts only: one count value per metric, no data point (the job table's records
    # come from the jobs endpoint, which serves no data points)
    assert res["reconcile"]["points_served"] <= res["metrics"]
    assert "20 equal" in res["reconcile"]["summary"]
