"""A Prometheus-family archive on S3 (moto_server, tests/integration/s3/conftest.py):
``dxt coverage prometheus`` without ``--metrics`` lists the units the bucket holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.prometheus.servers import ServerProcess
from tests.integration.prometheus.test_cli import dxt

pytestmark = pytest.mark.integration


@pytest.mark.slow  # moto_server and three dxt processes
def test_coverage_of_an_s3_archive_lists_the_metrics_it_holds(
    victoriametrics: ServerProcess, bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    archive = f"s3://{bucket}/prom"
    env = {**os.environ, **s3_env}
    out = dxt(
        "extract", "prometheus", "--url", victoriametrics.url, "--tz", "Europe/Rome",
        "--start-day", "2024-03-31", "--archive", archive, "-q", env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    # another machine's view: its staging folder holds nothing of the archive
    elsewhere = {**env, "DXT_S3_STAGING": str(tmp_path / "other-staging")}
    cov = dxt(
        "coverage", "prometheus", "--archive", archive, "--start-day", "2024-03-30",
        "--end-day", "2024-03-31", "--all", env=elsewhere,
    )  # fmt: skip
    assert cov.returncode == 3, cov.stdout + cov.stderr  # 2024-03-30 was not archived
    assert "3 units x 2 days: 3 archived, 0 empty, 3 missing" in cov.stdout
    assert "node_jobs_total" in cov.stdout and "node_temp_celsius" in cov.stdout
