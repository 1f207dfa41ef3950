"""What an S3 archive says of a day (moto_server, and a fault proxy in front of it): holes
from the index objects, a failed read that is not a corrupt day, the versions it keeps."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import threading
import time
from typing import Any

import pytest

from dxt_core import Archive
from dxt_core.archive import DayKey
from dxt_core.coverage import coverage
from dxt_core.errors import ArchiveError
from tests.faults.proxy import Answer, FaultProxy

pytestmark = [pytest.mark.integration]

DAY = dt.date(2020, 3, 9)
HOLE = {
    "series": {"node": "r1n1"},
    "start": "2020-03-09T10:00:00+01:00",
    "end": "2020-03-09T11:00:00+01:00",
    "message": "HTTP 500",
    "points": 180,
}


def _commit(archive: Archive, key: DayKey, body: bytes, **extra: Any) -> None:
    day = archive.begin(key, replace=True)
    with day.open("csv.gz") as fh:
        fh.write(body)
    doc = {
        "status": "archived",
        "file": f"{key.day}.csv.gz",
        "rows": body.count(b"\n"),
        "bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    day.commit({**doc, **extra})


def _stalled_commit(
    archive: Archive, key: DayKey, body: bytes, at: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, list[BaseException], Any]:
    """A commit of ``body`` in a thread, held at the stall point ``at`` (the test hook of
    dxt_core/store/s3_write.py) once this returns; deleting the flag file lets it go on.
    Returns the thread, the exceptions it raised, and the flag."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            _commit(archive, key, body)
        except BaseException as exc:  # the test looks at it
            failed.append(exc)

    monkeypatch.setenv("DXT_S3_TEST_STALL_AT", at)
    thread = threading.Thread(target=run)
    thread.start()
    flag = archive.root / f".stalled-{at}"
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert thread.is_alive() and time.monotonic() < deadline, failed
        time.sleep(0.01)
    monkeypatch.delenv("DXT_S3_TEST_STALL_AT")
    return thread, failed, flag


NOT_OVER = {"ends": "2020-03-10T00:00:00+01:00", "zone": "Europe/Rome"}
QUERY_WINDOW = {"start": "2020-03-09T00:00:00+01:00", "end": "2020-03-10T00:00:00+01:00"}


@pytest.mark.parametrize(
    ("extra", "said", "older"),
    [
        ({"holes": [HOLE]}, "holes: 1 unreadable window(s)", ("holes", "day_not_over")),
        (
            {"day_not_over": NOT_OVER},
            "not over: archived before the day ended (2020-03-10T",
            ("day_not_over",),
        ),
        # a manifest written before the mark existed, before its day's end: its entry tells
        # it, and an entry written before the index kept the mark reads it from the manifest
        (
            {"written_at": "2020-03-09T20:00:00+01:00", "query_window": QUERY_WINDOW},
            "not over: archived before the day ended (2020-03-10T",
            ("day_not_over",),
        ),
    ],
    ids=["holes", "not-over", "not-over-older-manifest"],
)
def test_a_day_with_holes_says_so_from_the_index_and_from_an_older_index(
    bucket, s3_server, s3_env, extra, said, older
):
    """Holes, and a day archived before it ended, from the unit's index object and, for an
    index object written before entries kept them, from the manifest (a not-over day read
    plainly archived from such an entry)."""
    a = Archive(f"s3://{bucket}/h")
    key = DayKey("toy", ("m",), DAY)
    _commit(a, key, b"1,2\n" * 10, **extra)
    (row,) = coverage(a, "toy", [("m",)], [DAY])  # from the unit's index object
    assert row.status == "archived" and row.detail.startswith(said), row
    # an index object written before entries kept them: the manifest is read
    c = s3_server.client()
    index_key = next(
        o["Key"]
        for o in c.list_objects_v2(Bucket=bucket, Prefix="h/.dxt/")["Contents"]
        if "/index/" in o["Key"]
    )
    doc = json.loads(c.get_object(Bucket=bucket, Key=index_key)["Body"].read())
    for entry in doc["days"].values():
        for k in older:
            entry.pop(k)
    c.put_object(Bucket=bucket, Key=index_key, Body=json.dumps(doc).encode())
    (again,) = coverage(Archive(f"s3://{bucket}/h"), "toy", [("m",)], [DAY])
    assert again == row


def test_a_manifest_the_store_fails_to_send_is_an_error_not_a_corrupt_day(
    bucket, s3_server, s3_env, monkeypatch
):
    a = Archive(f"s3://{bucket}/t")
    key = DayKey("toy", ("m",), DAY)
    _commit(a, key, b"1,2\n" * 10)
    denied = (
        b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
        b"<Message>Access Denied</Message></Error>"
    )
    with FaultProxy(s3_server.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        through = Archive(f"s3://{bucket}/t")
        try:
            # the light client's GET, then boto3's (it takes over any answer but 200 and 404)
            proxy.inject(*[Answer(403, denied, match=".manifest.json") for _ in range(2)])
            with pytest.raises(ArchiveError, match="AccessDenied"):
                through.status(key)  # was ("corrupt", "cannot read ...")
            proxy.clear()
            assert through.status(key) == ("archived", "")
        finally:
            through.store.close()


def test_the_first_copy_of_a_replaced_manifest_is_kept(bucket, s3_server, s3_env):
    a = Archive(f"s3://{bucket}/v")
    key = DayKey("toy", ("m",), DAY)
    first, second = b"1,1\n" * 10, b"2,2\n" * 10
    for body in (first, second, first, b"3,3\n" * 10):  # A, B, A, C
        _commit(a, key, body)
    c = s3_server.client()
    prev = f"v/toy/m/.versions/{DAY}.manifest.json.prev-{hashlib.sha256(first).hexdigest()[:8]}"
    kept = json.loads(c.get_object(Bucket=bucket, Key=prev)["Body"].read())
    # the manifest of the first A, not of the second (written after B was replaced by it)
    assert "replaced" not in kept and kept["sha256"] == hashlib.sha256(first).hexdigest()


@pytest.mark.slow  # a thread held at a stall point
def test_a_writer_whose_lock_was_taken_over_leaves_the_old_bytes_copy_alone(
    bucket, s3_server, s3_env, monkeypatch
):
    """A claims a replace of O and stalls; its lock is taken over (a lease run out); B
    replaces O, keeping it under .versions/; A resumes: it must not copy B's bytes over O's
    copy (it did: the copy was not conditional on what A had read)."""
    root = f"s3://{bucket}/w"
    key = DayKey("toy", ("m",), DAY)
    old, a_body, b_body = b"0,0\n" * 10, b"1,1\n" * 10, b"2,2\n" * 10
    _commit(Archive(root), key, old)
    version = f"w/toy/m/.versions/{DAY}.csv.gz.prev-{hashlib.sha256(old).hexdigest()[:8]}"
    thread, failed, flag = _stalled_commit(Archive(root), key, a_body, "claimed", monkeypatch)
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"w/.dxt/locks/toy/m/{DAY}.lock")  # taken over
    _commit(Archive(root), key, b_body)
    assert c.get_object(Bucket=bucket, Key=version)["Body"].read() == old
    flag.unlink()  # A goes on
    thread.join(60)
    assert c.get_object(Bucket=bucket, Key=version)["Body"].read() == old  # still O
    got = c.get_object(Bucket=bucket, Key=f"w/toy/m/{DAY}.csv.gz")["Body"].read()
    assert got == b_body  # B's commit stands: A stopped before uploading
    assert len(failed) == 1 and "changed since this run read it" in str(failed[0]), failed


@pytest.mark.slow  # a thread held at a stall point
@pytest.mark.parametrize(
    ("before", "b_body", "stall_at"),
    [
        (None, b"2,2\n" * 10, "claimed"),
        (b"0,0\n" * 10, b"2,2\n" * 10, "versions"),
        (b"0,0\n" * 10, b"0,0\n" * 10, "versions"),
    ],
    ids=["new-day", "replace", "rerun-with-the-same-bytes"],
)
def test_a_writer_whose_lock_was_taken_over_uploads_nothing_over_the_new_writer(
    before, b_body, stall_at, bucket, s3_server, s3_env, monkeypatch
):
    """A reads the day (none yet, or O to replace) and stalls before its uploads; its lock is
    taken over and B commits (other bytes, or O's again: then B uploads nothing); A resumes:
    it checks that the day's manifest is still its claim, and its upload is conditional on
    what A read (no object: If-None-Match; O: If-Match on O's ETag), so B's day stays whole.
    Before, A's PUT replaced B's object and A failed only at its manifest, leaving B's
    manifest naming A's bytes."""
    root = f"s3://{bucket}/t"
    key = DayKey("toy", ("m",), DAY)
    a_body = b"1,1\n" * 10
    if before is not None:
        _commit(Archive(root), key, before)
    thread, failed, flag = _stalled_commit(Archive(root), key, a_body, stall_at, monkeypatch)
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"t/.dxt/locks/toy/m/{DAY}.lock")  # taken over
    _commit(Archive(root), key, b_body)
    flag.unlink()  # A goes on
    thread.join(60)
    assert len(failed) == 1, failed
    # A's manifest check sees B's manifest (the check and B's commit can also fall between
    # the check and A's upload: then the upload's condition refuses it)
    assert re.search(r"changed since this run (claimed|read) it", str(failed[0])), failed
    assert "wrote no manifest; rerun" in str(failed[0]), failed
    got = c.get_object(Bucket=bucket, Key=f"t/toy/m/{DAY}.csv.gz")["Body"].read()
    assert got == b_body  # B's commit stands
    assert Archive(root).status(key, verify=True) == ("archived", "")


def test_rebuilding_the_index_counts_every_manifest_it_cannot_use(bucket, s3_server, s3_env):
    a = Archive(f"s3://{bucket}/r")
    _commit(a, DayKey("toy", ("m",), DAY), b"1,2\n" * 10)
    c = s3_server.client()
    c.put_object(Bucket=bucket, Key="r/toy/m/2020-03-10.manifest.json", Body=b"[1, 2]")
    c.put_object(Bucket=bucket, Key="r/toy/m/2020-03-11.manifest.json", Body=b"{not json")
    assert a.rebuild_index("toy") == (1, 2)  # a JSON list is no manifest either
    # named, as a directory archive's rebuild names them (it said "2 unreadable" only)
    assert [u.rsplit("/", 1)[1] for u in a.unreadable] == [
        "2020-03-10.manifest.json",
        "2020-03-11.manifest.json",
    ]


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AWS_PROFILE": "nope"}, "ProfileNotFound"),
        ({"AWS_SECRET_ACCESS_KEY": ""}, "PartialCredentialsError"),
    ],
    ids=["no-such-profile", "half-the-credentials"],
)
def test_a_wrong_aws_environment_stops_the_run_as_a_configuration_error(
    bucket, s3_server, s3_env, monkeypatch, env, said
):
    """They failed each metric-day alone (exit 1) with botocore's bare names."""
    from dxt_core.errors import ConfigError, DxtError, run_wide

    with monkeypatch.context() as m, pytest.raises(DxtError) as ei:  # undone before the
        for k, v in env.items():  # bucket is dropped
            m.setenv(k, v) if v else m.delenv(k)
        a = Archive(f"s3://{bucket}/e")
        a.store._call("list", "e/", "list_objects_v2", Prefix="e/")
    assert said in str(ei.value) and run_wide(ei.value), ei.value
    if said == "ProfileNotFound":
        assert isinstance(ei.value, ConfigError) and "check AWS_PROFILE" in str(ei.value)
    else:
        assert "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(ei.value)


def test_a_staging_directory_that_cannot_be_one_stops_the_run_at_once(
    bucket, s3_env, monkeypatch, tmp_path
):
    """DXT_S3_STAGING naming a file failed every metric-day alone with NotADirectoryError
    (one FAILED line a metric-day); it is now one configuration error, before any unit."""
    from dxt_core.errors import ConfigError, run_wide

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("DXT_S3_STAGING", str(tmp_path / "a-file"))
    with pytest.raises(ConfigError, match=r"DXT_S3_STAGING=.*a-file.*not a directory") as ei:
        Archive(f"s3://{bucket}/st")
    assert run_wide(ei.value)
    monkeypatch.setenv("DXT_S3_STAGING", str(tmp_path / "not-yet" / "there"))
    a = Archive(f"s3://{bucket}/st")  # created when needed
    _commit(a, DayKey("toy", ("m",), DAY), b"1,2\n")
    assert (tmp_path / "not-yet" / "there").is_dir()
