"""The S3-against-local-disk benchmark at its tiny size: it runs and reports both targets."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.perf, pytest.mark.integration]


def test_s3_archive_benchmark_tiny(tmp_path):
    pytest.importorskip("boto3")
    from benchmarks.s3_archive import main

    report = main(["--size", "tiny", "--repeat", "1", "--out", str(tmp_path / "s3.json")])
    assert report["points"] == 4 * 4320
    for target in ("local", "s3"):
        assert report[target]["seconds_median"] > 0
        assert report[target]["peak_rss_mib_max"] > 0
    assert (tmp_path / "s3.json").exists()
