"""The collectd_es benchmark runs end to end at its tiny size (a smoke test: no timing asserted)."""

from __future__ import annotations

import pytest

from tests.conftest import run_benchmarks

pytestmark = pytest.mark.perf


def test_collectd_es_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--repeat", "1", "--workloads", "collectd_es")
    assert "pytokio 20k/s (external)" in stdout
    res = doc["results"][0]
    assert res["workload"] == "collectd_es"
    pipes = res["pipelines"]
    assert set(pipes) == {"pit", "scroll", "input", "floor", "reference", "replay", "replay_floor"}
    # 2 hosts x 4 devices x 360 steps, every pipeline read every document once
    assert res["docs"] == 2 * 4 * 360
    for p in pipes.values():
        assert p["docs"] == res["docs"]
        assert p["seconds"] > 0 and p["peak_rss_mb"] > 0
        assert p["ratio_vs_floor"] > 0 and p["ratio_vs_reference"] > 0
    # the reference inserted both values of every document
    assert pipes["reference"]["runs"][0]["inserted"] == 2 * res["docs"]
    # the HDF5 exports from a server took every page column-wise
    for mode in ("pit", "scroll", "replay"):
        run = pipes[mode]["runs"][0]
        assert run["columnar_pages"] == run["pages"] >= 2, mode
    writers = [p for m, p in pipes.items() if m in ("pit", "scroll", "input", "replay")]
    # the four pipelines wrote the same cells and layout; sizes differ by a few bytes only
    # because noida-db prints some doubles one ulp off, which changes the gzip stream
    sizes = [p["output_bytes"] for p in writers]
    assert min(sizes) > 0
    assert max(sizes) - min(sizes) <= 0.01 * min(sizes)
