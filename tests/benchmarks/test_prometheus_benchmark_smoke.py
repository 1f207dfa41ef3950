"""The Prometheus-family benchmark runs end to end at its tiny size (no timing asserted)."""

from __future__ import annotations

import pytest

from tests.conftest import run_benchmarks

pytestmark = pytest.mark.perf


def test_prometheus_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--repeat", "1", "--workloads", "prometheus")
    assert "samples/CPU-s" in stdout
    res = doc["results"][0]
    for kind in ("prometheus", "victoriametrics"):
        runs = res[kind]
        assert runs["curl"]["status"] == 200 and runs["curl"]["bytes"] > 0
        for name in ("ours_csv", "ours_parquet"):
            r = runs[name]
            assert r["samples"] == res["samples_expected"] == 10 * 5760
            assert r["seconds"] > 0 and r["peak_rss_mb"] > 0 and r["output_bytes"] > 0
