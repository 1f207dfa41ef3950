"""The S3 server of these tests: moto_server, started once per session (tests/s3_fixtures.py,
shared with the contract suite and the Airflow S3 DAG test)."""

from __future__ import annotations

import pytest

from tests.integration.s3.iam import iam_s3  # noqa: F401
from tests.s3_fixtures import CREDENTIALS, S3Server, bucket, s3_env, s3_server  # noqa: F401


@pytest.fixture(autouse=True)
def _as_the_cli_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests run as ``dxt`` does: no Airflow connection factory for S3 clients.
    Importing ``dxt_core.airflow`` (as an earlier test in the same worker may have) sets one
    process-wide, and which client an archive makes first would then depend on test order.
    A test that imports ``dxt_core.airflow`` itself sets it again."""
    monkeypatch.setattr("dxt_core.store._client_factory", None)
