"""The ``publish`` benchmark at its tiny size: it runs, and the three pipelines read the
same rows (the figures themselves are printed, never asserted)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.perf
pytest.importorskip("pyarrow")


def test_publish_workload_tiny():
    from benchmarks.publish import print_result, workload

    res = workload("tiny")
    print_result(res)
    assert res["rows"] == 8 * 4320 * 2
    for k in ("from_parquet", "from_csv", "plain_pyarrow"):
        assert res[k]["rows"] == res["rows"]
        assert res[k]["peak_rss_mb"] > 0 and res[k]["cpu_s"] > 0
