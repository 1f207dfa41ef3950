"""The ``production`` workload and its soak at their tiny size (20 metrics x 2 days) on the
production path: PostgreSQL, CeleryExecutor, Redis (a database and a redis-server of the
benchmark's own). Each takes 1.5-3 minutes on 2 cores."""

from __future__ import annotations

import pytest

from tests.conftest import run_benchmarks
from tests.services import program, require_postgres

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.perf, pytest.mark.alone]


@pytest.fixture(autouse=True)
def services_present() -> None:
    program("redis-server", "apt-get install redis-server")
    require_postgres()


def _check_archive(run: dict) -> None:
    a = run["archive"]
    assert a["metric_days_expected"] == a["metric_days_archived"] == 40
    assert a["rows_expected"] == a["rows_archived"] > 0
    assert a["missing"] == a["rows_lost"] == a["rows_duplicated"] == 0
    assert a["file_not_matching_manifest"] == 0


def test_production_benchmark_runs_at_tiny_size(tmp_path):
    _, doc = run_benchmarks(
        tmp_path, "--workloads", "production", "--min-heartbeat-interval", "1", timeout=600
    )
    res = doc["results"][0]
    assert "invalid" not in res, res["invalid"]
    for dag_id in ("dxt_noop", "dxt_examon"):
        run = res[dag_id]
        assert run["dag_runs"] == {"success": 2}
        assert run["task_states"] == {"success": 40} and run["mapped_task_instances"] == 40
        assert run["metric_days_per_min"] > 0 and run["wall_s"] > 0
        assert run["cpu_s"]["scheduler"] > 0 and run["cpu_s"]["workers"] > 0
        assert run["cpu_s"]["postgres"] > 0
        assert run["db_growth_bytes"] > 0
    _check_archive(res["dxt_examon"])
    assert res["ours_vs_noop"]["wall"] > 0


def test_soak_runs_at_tiny_size(tmp_path):
    _, doc = run_benchmarks(
        tmp_path, "--workloads", "soak", "--min-heartbeat-interval", "1", timeout=600
    )
    res = doc["results"][0]
    assert "invalid" not in res, res["invalid"]
    run = res["dxt_examon"]
    s = run["summary"]
    assert s["failed_at_end"] == 0
    assert s["files_identical_to_fault_free"] == "40/40"
    _check_archive(run)
    # the faults and the kill happened
    assert run["faults"]["injected_total"] > 0 and run["faults"]["not_consumed_at_end"] >= 0
    assert s["http_retries"] > 0
    kill = run["worker_kill"]
    assert kill["killed_at_s"] > 0, kill
    assert kill["restarted_at_s"] is None or kill["restarted_at_s"] > kill["killed_at_s"]
