"""The S3 requests made without boto3 (dxt_core/store/sigv4.py) on the real S3 server: the
same objects, ETags, conditions and errors as boto3's; no boto3 client made by a day's status
check, nor by a commit that goes as planned."""

from __future__ import annotations

import datetime as dt
import hashlib
import os

import pytest

from dxt_core.archive import DayKey
from dxt_core.errors import ArchiveError
from dxt_core.store import parse_root
from dxt_core.store.client import PreconditionFailed, S3Client
from dxt_core.store.s3 import S3Archive
from dxt_core.store.sigv4 import LightClient, environment_credentials

pytestmark = [pytest.mark.integration]

KEYS = [
    "m100/examon/ipmi_pub/ambient/2024-05-10.csv.gz",
    "m100/examon/ipmi_pub/ambient/2024-05-10.manifest.json",
    "m100/examon/ipmi_pub/ambient/a b+c=d é.json",
    "m100/examon/ipmi_pub/pcie/2024-05-10.csv.gz",
    "m100/examon/nagios_pub/state/2024-05-10.csv.gz",
]


@pytest.fixture()
def filled(s3_server, bucket):
    c = s3_server.client()
    for i, k in enumerate(KEYS):
        c.put_object(Bucket=bucket, Key=k, Body=b"x" * (i + 1))
    return bucket


def _boto3_listing(s3_server, bucket, prefix, delimiter=None):
    kw = {"Bucket": bucket, "Prefix": prefix}
    if delimiter:
        kw["Delimiter"] = delimiter
    out = []
    for page in s3_server.client().get_paginator("list_objects_v2").paginate(**kw):
        out += [(o["Key"], o["Size"], o["ETag"]) for o in page.get("Contents", [])]
    return out


def test_light_reads_answer_as_boto3_without_making_it(s3_server, filled):
    store = S3Client(parse_root(f"s3://{filled}/m100"))
    assert store._light is not None  # static keys and AWS_ENDPOINT_URL (tests/s3_fixtures.py)
    for prefix, recursive in (("m100/", True), ("m100/examon/ipmi_pub/ambient/", False)):
        got = [(o.key, o.size, o.etag) for o in store.list(prefix, recursive=recursive)]
        assert got == _boto3_listing(s3_server, filled, prefix, None if recursive else "/")
        assert got
    for k in KEYS:
        body, etag = store.get(k)
        ref = s3_server.client().get_object(Bucket=filled, Key=k)
        assert (body, etag) == (ref["Body"].read(), ref["ETag"])
    assert store.get("m100/no/such/key") is None
    assert store._made is None  # boto3's client was never made


def test_pages_follow_the_continuation_token(s3_server, filled):
    reader = LightClient(environment_credentials(), filled)
    try:
        keys, token, pages = [], None, 0
        while True:
            page, token = reader.list_page("m100/", None, token, max_keys=2)
            keys += [k for k, _, _ in page]
            pages += 1
            if token is None:
                break
        assert pages == 3 and keys == sorted(KEYS)
    finally:
        reader.close()


def test_a_day_status_check_makes_no_boto3_client(s3_server, filled):
    # as `dxt extract` runs (the package's conftest): no Airflow connection factory
    archive = S3Archive(f"s3://{filled}/m100")
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2024, 5, 11))
    assert archive.status(key) == ("missing", "")
    assert archive.store._made is None


def test_errors_are_boto3s(s3_server, s3_env):
    # no such bucket: the light reader hands the 404 to boto3, whose error names the fix
    store = S3Client(parse_root("s3://dxt-no-such-bucket/m100"))
    with pytest.raises(ArchiveError, match=r"NoSuchBucket|create the bucket"):
        list(store.list("m100/"))
    assert store._made is not None


def test_an_endpoint_the_reader_cannot_reach_is_boto3s_error(s3_server, filled, monkeypatch):
    # any answer the reader cannot use (a 403, a connection refused as here) goes to boto3,
    # which asks again and gives the archive's error; the secret is in neither
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    store = S3Client(parse_root(f"s3://{filled}/m100"))
    with pytest.raises(ArchiveError) as err:
        store.get("m100/x.json")
    assert "dxt-test-secret" not in str(err.value)
    assert store._made is not None


def _light_store(bucket: str) -> S3Client:
    store = S3Client(parse_root(f"s3://{bucket}/m100"))
    assert store._light is not None
    return store


def test_writes_are_boto3s_without_making_it(s3_server, bucket, tmp_path):
    store = _light_store(bucket)
    c = s3_server.client()
    etag = store.put("m100/a.json", b'{"a": 1}', if_none_match=True)
    got = c.get_object(Bucket=bucket, Key="m100/a.json")
    assert (got["Body"].read(), got["ETag"], got["ContentType"]) == (
        b'{"a": 1}',
        etag,
        "application/json",
    )
    # the conditions hold as boto3's do: PreconditionFailed, and nothing changed
    with pytest.raises(PreconditionFailed, match=r"s3://.*/m100/a\.json: changed by another"):
        store.put("m100/a.json", b"{}", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("m100/a.json", b"{}", if_match='"0123456789abcdef0123456789abcdef"')
    etag2 = store.put("m100/a.json", b'{"a": 2}', if_match=etag)
    with pytest.raises(PreconditionFailed):
        store.delete("m100/a.json", if_match=etag)
    assert c.get_object(Bucket=bucket, Key="m100/a.json")["Body"].read() == b'{"a": 2}'
    # a file streamed up: its bytes, the sha256 in its metadata, HEAD as boto3 gives it
    path = tmp_path / "day.csv.gz"
    path.write_bytes(os.urandom(3 * 2**20 + 7))
    size, digest = store.upload_file(path, "m100/day.csv.gz", None)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() and size == 3 * 2**20 + 7
    ref = c.head_object(Bucket=bucket, Key="m100/day.csv.gz", ChecksumMode="ENABLED")
    ours = store.head("m100/day.csv.gz")
    for k in ("ContentLength", "ETag", "Metadata", "ChecksumSHA256"):
        assert ours.get(k) == ref.get(k), k
    assert ours["Metadata"] == {"sha256": digest}
    assert c.get_object(Bucket=bucket, Key="m100/day.csv.gz")["Body"].read() == path.read_bytes()
    assert store.head("m100/no-such") is None
    assert store.abort_uploads("m100/") == 0
    store.delete("m100/a.json", if_match=etag2)
    assert "Contents" not in c.list_objects_v2(Bucket=bucket, Prefix="m100/a.json")
    assert store._made is None  # boto3's client was never made


@pytest.mark.parametrize("light", [True, False], ids=["light", "boto3"])
def test_a_retried_conditional_write_whose_first_attempt_was_stored_succeeds(
    s3_server, bucket, light
):
    """The answer of a stored PUT can be lost (a cut connection, a timeout); its retry then
    meets the write itself: the real server refuses it (412). The object holds exactly what
    was sent, so the write is taken as done; other bytes there are still a refusal."""
    store = _light_store(bucket)
    if not light:
        store._made = store._make()  # boto3's client asks from now on
    body = b'{"token": "ours"}'
    first = store.put("m100/lock.json", body, if_none_match=True)
    # the retry of that PUT, as it reaches the server after the first was stored
    assert store.put("m100/lock.json", body, if_none_match=True) == first
    second = store.put("m100/lock.json", body + b" ", if_match=first)
    assert store.put("m100/lock.json", body + b" ", if_match=first) == second
    with pytest.raises(PreconditionFailed):
        store.put("m100/lock.json", b'{"token": "theirs"}', if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("m100/lock.json", body, if_match=first)  # not what the object holds


def test_an_unfinished_upload_is_aborted_by_boto3(s3_server, bucket):
    store = _light_store(bucket)
    s3_server.client().create_multipart_upload(Bucket=bucket, Key="m100/big.csv.gz")
    assert store.abort_uploads("m100/") == 1
    assert store._made is not None
    assert "Uploads" not in s3_server.client().list_multipart_uploads(Bucket=bucket)
