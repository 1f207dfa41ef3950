"""The ``command`` workload at its tiny size, and what ``dxt extract examon`` imports.

The import tests fail without dxt_core.http's stand-in for ``httpx._main`` (httpx would pull
in click, rich and pygments, which Airflow installs beside us) or with a module-level import
of NumPy, pandas, pyarrow, the Elasticsearch client or h5py on the Examon CSV path.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_benchmarks

#: Not needed by a CSV extract of Examon: each costs tens of ms or MB at start.
HEAVY = ("numpy", "pandas", "pyarrow", "elasticsearch", "h5py", "rich", "click", "pygments")


def _imported(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", out.stderr, re.M))


def _present(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.skipif(
    importlib.util.find_spec("rich") is None or importlib.util.find_spec("click") is None,
    reason="httpx imports its command line only when click and rich are installed",
)
def test_dxt_core_http_imports_httpx_without_its_command_line():
    mods = _imported("-c", "import dxt_core.http")
    assert _present(mods, "httpx")
    assert not [m for m in ("rich", "click", "pygments") if _present(mods, m)]


def test_httpx_command_line_still_works_after_dxt_core_http():
    # httpx.main is the stand-in's; it loads the real command line when called.
    if importlib.util.find_spec("click") is None:
        pytest.skip("httpx's command line needs click")
    code = "import dxt_core.http, httpx, sys; sys.argv = ['httpx', '--help']; httpx.main()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage" in out.stdout and "httpx" in out.stdout


def test_dxt_extract_examon_imports_nothing_heavy():
    mods = _imported("-m", "dxt_core.cli", "extract", "examon", "--help")
    assert _present(mods, "dxt_core.backends.examon.source")
    heavy = [m for m in HEAVY if _present(mods, m)]
    assert not heavy, f"`dxt extract examon` imports {heavy}"


@pytest.mark.perf
def test_command_benchmark_runs_at_tiny_size(tmp_path):
    stdout, doc = run_benchmarks(tmp_path, "--repeat", "1", "--workloads", "command")
    assert "first request after" in stdout
    res = doc["results"][0]
    assert res["workload"] == "command" and "invalid" not in res, res.get("invalid")
    assert set(res["cases"]) == {"metric_day", "catalog_day"}
    for case in res["cases"].values():
        cmd, ref = case["pipelines"]["command"], case["pipelines"]["reference"]
        assert cmd["points"] == ref["points"] > 0
        assert cmd["seconds"] > 0 and ref["seconds"] > 0
        assert 0 < cmd["peak_rss_mb"] < ref["peak_rss_mb"]
        assert cmd["output_bytes"] > 0 and ref["output_bytes"] > 0
        assert case["first_request_ms"]["median"] > 0
        assert case["imports"]["returncode"] == 0
        assert not [h for h in case["imports"]["heavy_imported"] if h in HEAVY]
    assert res["cases"]["metric_day"]["pipelines"]["command"]["points"] == 4 * 4320
    assert res["cases"]["catalog_day"]["metrics"] == 20
    curl = res["cases"]["metric_day"]["curl"]  # the day in one request, the same points
    cached, cold = curl["cached"], curl["cold"]
    assert cached["points"] == cold["curl"]["points"] == 4 * 4320
    assert cached["seconds"] > 0 and cached["answer_bytes"] > 0
    assert cold["curl"]["seconds"] > 0 and cold["command"]["seconds"] > 0
    ratios = res["cases"]["metric_day"]["ratios"]
    assert ratios["vs_curl"] == cold["ratio"] > 0 and ratios["vs_curl_cached"] > 0
    assert "curl, the day in one request" in stdout
    goals = res["goals"]["measured_and_met"]
    assert set(goals) == {
        "speedup_vs_reference",
        "peak_rss_mb",
        "bytes_vs_reference",
        "first_request_ms",
        "vs_curl",
    }
    json.dumps(goals)  # plain data, as committed runs hold it
