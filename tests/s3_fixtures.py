"""A real S3 server for the object-store archive, shared by every test package that needs one
(tests/integration/s3, the contract suite's s3:// root kind, the Airflow S3 DAG test): moto's
``moto_server`` as a separate process on a free loopback port, started once per session
(moto 5.2 enforces If-None-Match / If-Match on PutObject, as AWS does since 2024). Clients
find it through ``AWS_ENDPOINT_URL``, like any AWS tool."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core import procs
from tests.services import require_service

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "dxt-test",
    "AWS_SECRET_ACCESS_KEY": "dxt-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
#: variables of the developer's own AWS set-up that must not reach the test server's clients
FOREIGN = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")


def _moto_server() -> str | None:
    exe = Path(sys.executable).with_name("moto_server")
    return str(exe) if exe.exists() else shutil.which("moto_server")


@dataclass
class S3Server:
    url: str
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.url}

    def client(self) -> Any:  # a plain boto3 client, to look at the bucket from outside
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )

    def new_bucket(self) -> str:
        name = f"dxt-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def drop_bucket(self, name: str) -> None:
        c = self.client()
        with contextlib.suppress(Exception):
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=name):
                for o in page.get("Contents", []):
                    c.delete_object(Bucket=name, Key=o["Key"])
            c.delete_bucket(Bucket=name)


def start_s3_server() -> S3Server:
    """moto_server on a free loopback port (a clear skip, or failure under CI, without it)."""
    from tests.conftest import free_port

    exe = _moto_server()
    if exe is None:
        require_service(
            "moto_server", "the S3 tests need it: pip install 'moto[server]' (dev extras)"
        )
    port = free_port()
    # Parts of 1 KiB are allowed here (S3 needs 5 MiB) so that small test days go up in
    # many parts: the kill -9 test needs an upload in progress to interrupt.
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": "1024"}
    proc = procs.start(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return S3Server(url, proc)
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                procs.stop(proc, 0)
                pytest.fail(f"moto_server did not start on {url}")
            time.sleep(0.05)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_s3_server()
    try:
        yield server
    finally:
        procs.stop(server.proc, 10)


@pytest.fixture()
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The AWS environment of the test server, set in this process too; a staging directory
    of the test's own."""
    env = {**s3_server.env, "DXT_S3_STAGING": str(tmp_path / "staging")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in FOREIGN:
        monkeypatch.delenv(k, raising=False)
    return env


@pytest.fixture()
def bucket(s3_server: S3Server, s3_env: dict[str, str]) -> Iterator[str]:
    """A new, empty bucket for one test."""
    name = s3_server.new_bucket()
    yield name
    s3_server.drop_bucket(name)
