"""What the archive needs of the bucket's IAM policy, and what it says when S3 refuses an
operation: on a moto_server that enforces IAM (tests/integration/s3/iam.py)."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import logging
import re

import pytest

from dxt_core import Archive
from dxt_core.archive import DayKey
from dxt_core.errors import ArchiveError, SourceShrank
from dxt_core.store.permissions import PERMISSIONS
from tests.conftest import ROOT
from tests.integration.s3.iam import IamS3, as_user

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a moto_server with IAM: 2-3 s a test

DAY = dt.date(2020, 3, 9)
KEY = DayKey("toy", ("m",), DAY)


def documented_permissions() -> list[str]:
    """The permissions docs/deploy.md says the credentials need."""
    text = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    said = re.search(r"the credentials need (.*?) on it\b", text)
    assert said, "docs/deploy.md no longer says which permissions the credentials need"
    return re.findall(r"`(s3:\w+)`", said.group(1))


def commit_day(root: str, rows: int, value: str, *, replace: bool = False) -> bytes:
    """A CSV day of ``rows`` rows, its values ``value`` and noise (a file of several parts
    at the 1 KiB part size of these tests)."""
    noise = hashlib.sha256(value.encode()).hexdigest()
    body = gzip.compress(
        "".join(
            f"{i},{value},{hashlib.sha256(f'{noise}{i}'.encode()).hexdigest()}\n"
            for i in range(rows)
        ).encode(),
        mtime=0,
    )
    day = Archive(root, replace=replace).begin(KEY)
    with day.open("csv.gz") as fh:
        fh.write(body)
    day.commit(
        {
            "status": "archived",
            "file": f"{DAY}.csv.gz",
            "rows": rows,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
    )
    return body


@pytest.fixture()
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files over 1 KiB go up in 1 KiB parts (the test server allows them)."""
    monkeypatch.setenv("DXT_S3_MULTIPART_THRESHOLD", "1024")
    monkeypatch.setenv("DXT_S3_PART_SIZE", "1024")


def leftover_upload(iam: IamS3, bucket: str, key: str) -> None:
    """An unfinished multipart upload, as a killed run leaves one."""
    with iam.setup():
        iam.admin().create_multipart_upload(Bucket=bucket, Key=key)


def uploads(iam: IamS3, bucket: str) -> list[str]:
    with iam.setup():
        return [
            u["Key"] for u in iam.admin().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        ]


def test_the_documented_permissions_are_enough_for_every_commit(
    iam_s3, monkeypatch, tmp_path, small_parts
):
    documented = documented_permissions()
    assert sorted(documented) == sorted(PERMISSIONS)
    bucket = iam_s3.new_bucket()
    as_user(monkeypatch, iam_s3.user(bucket, documented), tmp_path / "staging")
    root = f"s3://{bucket}/p"
    leftover_upload(iam_s3, bucket, f"p/toy/m/{DAY}.csv.gz")  # a killed run's
    commit_day(root, 50, "1")  # a new day, in parts; the leftover upload aborted
    assert uploads(iam_s3, bucket) == []
    commit_day(root, 50, "1")  # a byte-identical rerun
    new = commit_day(root, 50, "2", replace=True)  # the old bytes copied to .versions/
    archive = Archive(root)
    assert archive.status(KEY, verify=True) == ("archived", "")
    assert archive.unit_states("toy", [("m",)], [DAY]) == [[("archived", "", False)]]
    assert archive.rebuild_index("toy") == (1, 0)
    with iam_s3.setup():
        got = iam_s3.admin().get_object(Bucket=bucket, Key=f"p/toy/m/{DAY}.csv.gz")
        assert got["Body"].read() == new


@pytest.mark.parametrize(
    ("missing", "refused", "leftover"),
    [
        ("s3:ListBucketMultipartUploads", "ListMultipartUploads", False),
        ("s3:AbortMultipartUpload", "AbortMultipartUpload", True),
        ("s3:PutObject", "PutObject", False),
    ],
)
def test_a_refused_operation_names_the_permission_it_needs(
    iam_s3, monkeypatch, tmp_path, missing, refused, leftover
):
    bucket = iam_s3.new_bucket()
    env = iam_s3.user(bucket, [p for p in PERMISSIONS if p != missing])
    as_user(monkeypatch, env, tmp_path / "staging")
    if leftover:
        leftover_upload(iam_s3, bucket, f"p/toy/m/{DAY}.csv.gz")
    with pytest.raises(ArchiveError) as err:
        commit_day(f"s3://{bucket}/p", 10, "1")
    message = str(err.value)
    assert f"s3://{bucket}/p/" in message
    assert "AccessDenied" in message
    assert f"{refused} needs {missing}: give it to these credentials" in message
    assert env["AWS_SECRET_ACCESS_KEY"] not in message


def test_a_refused_head_says_access_denied_with_the_permission(iam_s3, monkeypatch, tmp_path):
    from dxt_core.store import parse_root
    from dxt_core.store.client import S3Client

    bucket = iam_s3.new_bucket()
    as_user(monkeypatch, iam_s3.user(bucket, ["s3:ListBucket"]), tmp_path)
    store = S3Client(parse_root(f"s3://{bucket}/p"))  # type: ignore[arg-type]
    with pytest.raises(ArchiveError, match=r"AccessDenied .*HeadObject needs s3:GetObject"):
        store.head("p/x")


def test_a_lock_its_writer_may_not_delete_is_said_and_marked_released(
    iam_s3, monkeypatch, tmp_path, caplog
):
    bucket = iam_s3.new_bucket()
    env = iam_s3.user(bucket, PERMISSIONS, deny=[("s3:DeleteObject", "p/.dxt/locks/*")])
    as_user(monkeypatch, env, tmp_path / "staging")
    root = f"s3://{bucket}/p"
    lock = f"s3://{bucket}/p/.dxt/locks/toy/m/{DAY}.lock"
    archive = Archive(root)
    with caplog.at_level(logging.DEBUG, logger="dxt_core.store.s3"):
        for day in (DAY, DAY + dt.timedelta(days=1)):  # two days of one run: said once
            write = archive.begin(DayKey("toy", ("m",), day))
            with write.open("csv.gz") as fh:
                fh.write(b"x\n")
            write.commit(
                {
                    "status": "archived",
                    "file": f"{day}.csv.gz",
                    "rows": 1,
                    "bytes": 2,
                    "sha256": hashlib.sha256(b"x\n").hexdigest(),
                }
            )
    said = [r for r in caplog.records if r.levelno == logging.WARNING and "lock" in r.message]
    assert len(said) == 1, [r.message for r in said]
    assert lock in said[0].message and "DeleteObject needs s3:DeleteObject" in said[0].message
    assert "the next run takes the lock over" in said[0].message
    assert env["AWS_SECRET_ACCESS_KEY"] not in said[0].message
    # another host reruns the day at once: not "being archived by", not "took over the stale lock"
    monkeypatch.setattr("socket.gethostname", lambda: "another-host")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dxt_core.store.s3"):
        commit_day(root, 1, "1", replace=True)
    assert not [r.message for r in caplog.records if "stale lock" in r.message]


def test_a_kept_record_a_replace_could_not_delete_is_not_reported_kept(
    iam_s3, monkeypatch, tmp_path
):
    bucket = iam_s3.new_bucket()
    env = iam_s3.user(bucket, PERMISSIONS, deny=[("s3:DeleteObject", "p/toy/m/*.kept.json")])
    as_user(monkeypatch, env, tmp_path / "staging")
    root = f"s3://{bucket}/p"
    commit_day(root, 10, "1")
    with pytest.raises(SourceShrank):
        commit_day(root, 5, "1")
    archive = Archive(root)
    assert archive.status(KEY)[1].startswith("kept:")
    assert archive.unit_states("toy", [("m",)], [DAY])[0][0][2] is True
    commit_day(root, 5, "1", replace=True)  # its delete of the kept record is refused
    with iam_s3.setup():
        iam_s3.admin().head_object(Bucket=bucket, Key=f"p/toy/m/{DAY}.kept.json")  # still there
    assert archive.status(KEY) == ("archived", "")
    assert archive.unit_states("toy", [("m",)], [DAY]) == [[("archived", "", False)]]
