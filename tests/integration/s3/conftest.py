"""The S3 server of these tests: moto_server, started once per session (tests/s3_fixtures.py,
shared with the contract suite and the Airflow S3 DAG test)."""

from __future__ import annotations

from tests.s3_fixtures import CREDENTIALS, S3Server, bucket, s3_env, s3_server  # noqa: F401
