"""A moto_server of its own that enforces IAM policies, for the tests of what the archive
needs (and does) when S3 refuses an operation: users with a policy each, made while the
server lets everything through, then authorization switched on (moto's ``reset-auth``).

moto names the action of a request after the API operation (``s3:HeadObject``,
``s3:ListMultipartUploads``, ``s3:CopyObject``), where AWS checks the permission the
operation needs (``s3:GetObject``, ``s3:ListBucketMultipartUploads``, ...). A policy of AWS
permissions is therefore given to moto as the operations they allow, through the archive's
own table :data:`dxt_core.store.client.OPERATION_PERMISSION`; an operation the archive makes
that the table does not know is allowed by no policy here, and refused.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core import procs
from dxt_core.store.permissions import OPERATION_PERMISSION
from tests.s3_fixtures import CREDENTIALS, FOREIGN, S3Server, start_s3_server


def moto_actions(permissions: Iterable[str]) -> list[str]:
    """The operations (moto's actions) that ``permissions`` (AWS's) allow: each operation
    whose permissions are all among them."""
    given = set(permissions)
    return sorted(
        f"s3:{op}"
        for op, needs in OPERATION_PERMISSION.items()
        if set(re.findall(r"s3:\w+", needs)) <= given
    )


@dataclass
class IamS3:
    server: S3Server
    buckets: list[str] = field(default_factory=list)

    def _auth(self, on: bool) -> None:
        r = httpx.post(f"{self.server.url}/moto-api/reset-auth", content=b"0" if on else b"inf")
        r.raise_for_status()

    def admin(self, service: str = "s3") -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.server.url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )

    def setup(self) -> Any:
        """A context in which the server checks nothing (for the test's own set-up)."""
        iam = self

        class _Open:
            def __enter__(self) -> None:
                iam._auth(False)

            def __exit__(self, *exc: object) -> None:
                iam._auth(True)

        return _Open()

    def new_bucket(self) -> str:
        with self.setup():
            name = self.server.new_bucket()
        self.buckets.append(name)
        return name

    def user(
        self, bucket: str, allow: Iterable[str], deny: Iterable[tuple[str, str]] = ()
    ) -> dict[str, str]:
        """The AWS environment of a new user allowed the AWS permissions ``allow`` on
        ``bucket`` and denied each (permission, key pattern) of ``deny``."""
        statements: list[dict[str, Any]] = [
            {
                "Effect": "Allow",
                "Action": moto_actions(allow),
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ]
        for permission, pattern in deny:
            statements.append(
                {
                    "Effect": "Deny",
                    "Action": [a for a in moto_actions(allow) if _needs(a, permission)],
                    "Resource": [f"arn:aws:s3:::{bucket}/{pattern}"],
                }
            )
        name = f"u-{uuid.uuid4().hex[:8]}"
        with self.setup():
            iam = self.admin("iam")
            iam.create_user(UserName=name)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            iam.put_user_policy(
                UserName=name,
                PolicyName="dxt",
                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
            )
        return {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.server.url,
        }


def _needs(action: str, permission: str) -> bool:
    """The operation ``action`` (moto's name) needs ``permission`` (AWS's)."""
    return permission in re.findall(r"s3:\w+", OPERATION_PERMISSION[action.removeprefix("s3:")])


@pytest.fixture(scope="module")
def iam_s3() -> Iterator[IamS3]:
    """A moto_server of this module's own, enforcing IAM from the first test on."""
    server = start_s3_server()
    found = IamS3(server)
    try:
        found._auth(True)
        yield found
    finally:
        procs.stop(server.proc, 10)


def as_user(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], staging: Path) -> None:
    """This process runs as the user of ``env`` (the light client and boto3 alike)."""
    for k, v in {**env, "DXT_S3_STAGING": str(staging)}.items():
        monkeypatch.setenv(k, v)
    for k in FOREIGN:
        monkeypatch.delenv(k, raising=False)
