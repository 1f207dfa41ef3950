"""The S3-against-local-disk benchmark at its tiny size: it runs and reports both targets."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.perf, pytest.mark.integration]


def test_s3_archive_benchmark_tiny(tmp_path):
    pytest.importorskip("boto3")
    from benchmarks.s3_archive import main

    report = main(["--size", "tiny", "--repeat", "1", "--out", str(tmp_path / "s3.json")])
    assert report["points"] == 4 * 4320 and report["refetch"] is False
    for target in ("local", "s3"):
        assert report[target]["seconds_median"] > 0
        assert report[target]["peak_rss_mib_max"] > 0
        assert len(report[target]["runs"]) == 1
    assert len(report["loadavg_before"]) == 3 and report["cpus"]
    assert (tmp_path / "s3.json").exists()
