"""The rerun-planning benchmark at a small size: both ways find every day complete, and the
planning makes one listing and one index read per unit on S3."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.perf, pytest.mark.integration]


def test_s3_plan_benchmark_small():
    pytest.importorskip("boto3")
    from benchmarks.s3_plan import main

    report = main(["--units", "2", "--days", "5"])
    for target in ("local", "s3"):
        for how in ("incomplete", "day_by_day"):
            assert report[target][how]["complete"] == 10, (target, how, report)
    assert report["s3"]["incomplete"]["requests"] == {"ListObjectsV2": 2, "GetObject": 2}
    assert report["s3"]["day_by_day"]["requests"] == {"ListObjectsV2": 10, "GetObject": 20}
