"""How an upload is proven on the real S3 server (dxt_core/store/client.py ``_verify``):
moto gives no SHA-256 of what it stored, so the ETag (the MD5 of the bytes, of the parts'
MD5s for a multipart upload) proves them; an ETag that is not that MD5 (SSE-KMS on AWS, a
server's own scheme) sends the upload to a read-back, as does ``DXT_S3_VERIFY=read``."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from dxt_core.errors import ArchiveError
from dxt_core.store import parse_root
from dxt_core.store.client import PreconditionFailed, S3Client

pytestmark = [pytest.mark.integration]


def _store(
    bucket: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, **env: str
) -> tuple[S3Client, list[str]]:
    """A store on boto3 (the light client off: these are boto3's requests), its calls
    counted; handlers are unregistered at the end (the process shares one client)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    store = S3Client(parse_root(f"s3://{bucket}/m100"))
    store._light = None
    calls: list[str] = []
    _on(store, request, "before-call.s3.*", lambda model, **_: calls.append(model.name))
    return store, calls


def _on(store: S3Client, request: pytest.FixtureRequest, event: str, handler) -> None:
    events = store._client.meta.events
    events.register(event, handler)
    request.addfinalizer(lambda: events.unregister(event, handler))


@pytest.mark.parametrize("size", [3 * 2**20, 13 * 2**20 + 5], ids=["one-put", "multipart"])
def test_the_etag_proves_an_upload_without_reading_it_back(
    bucket, s3_server, monkeypatch, tmp_path, request, size
):
    store, calls = _store(
        bucket,
        request,
        monkeypatch,
        DXT_S3_PART_SIZE=str(5 * 2**20),
        DXT_S3_MULTIPART_THRESHOLD=str(8 * 2**20),
    )
    path = tmp_path / "day.csv.gz"
    path.write_bytes(os.urandom(size))
    got_size, digest = store.upload_file(path, "m100/day.csv.gz", None)
    assert got_size == size
    assert "GetObject" not in calls  # no read-back
    assert calls[-1] == "HeadObject"
    assert ("CompleteMultipartUpload" in calls) == (size > 8 * 2**20)
    body = s3_server.client().get_object(Bucket=bucket, Key="m100/day.csv.gz")["Body"].read()
    assert body == path.read_bytes()
    assert hashlib.sha256(body).hexdigest() == digest


def test_an_etag_that_is_not_the_md5_sends_the_upload_to_a_read_back(
    bucket, s3_server, monkeypatch, tmp_path, request
):
    store, calls = _store(bucket, request, monkeypatch)

    def kms_like(parsed, **_):  # the answer of a server whose ETag is not the body's MD5
        parsed["ETag"] = '"0123456789abcdef0123456789abcdef"'

    _on(store, request, "after-call.s3.HeadObject", kms_like)
    path = tmp_path / "day.csv.gz"
    path.write_bytes(os.urandom(100_000))
    store.upload_file(path, "m100/day.csv.gz", None)
    assert calls[-2:] == ["HeadObject", "GetObject"]


def test_verify_read_reads_every_upload_back(bucket, s3_server, monkeypatch, tmp_path, request):
    store, calls = _store(bucket, request, monkeypatch, DXT_S3_VERIFY="read")
    path = tmp_path / "day.csv.gz"
    path.write_bytes(os.urandom(100_000))
    store.upload_file(path, "m100/day.csv.gz", None)
    assert calls[-2:] == ["HeadObject", "GetObject"]


def test_a_read_back_that_differs_is_an_error(bucket, s3_server, monkeypatch, tmp_path, request):
    store, _ = _store(bucket, request, monkeypatch, DXT_S3_VERIFY="read")

    def other_body(parsed, **_):  # the object as a server that stored other bytes answers
        from botocore.response import StreamingBody

        parsed["Body"] = StreamingBody(io.BytesIO(b"y" * 10), 10)

    _on(store, request, "after-call.s3.GetObject", other_body)
    path = tmp_path / "day.csv.gz"
    path.write_bytes(b"x" * 10)
    with pytest.raises(ArchiveError, match=r"s3://.*/m100/day\.csv\.gz: the object read back"):
        store.upload_file(path, "m100/day.csv.gz", None)


@pytest.mark.parametrize("client", ["light", "boto3"])
@pytest.mark.parametrize("size", [5_000, 20_000], ids=["one-put", "multipart"])
def test_a_conditional_upload_changes_nothing_when_the_object_is_not_as_read(
    bucket, s3_server, monkeypatch, tmp_path, request, client, size
):
    """The commit uploads a day's file only if the object is still what it read (none:
    If-None-Match; else If-Match on the listed ETag): refused, S3 keeps the other bytes
    (moto 5.2 checks If-Match on PutObject, If-None-Match on PutObject and on
    CompleteMultipartUpload; If-Match on CompleteMultipartUpload only on AWS)."""
    store, _calls = _store(
        bucket,
        request,
        monkeypatch,
        DXT_S3_PART_SIZE="4096",
        DXT_S3_MULTIPART_THRESHOLD=str(8 * 2**10),
    )
    if client == "light":
        store = S3Client(parse_root(f"s3://{bucket}/m100"))
        assert store._light is not None
    c = s3_server.client()
    key = "m100/day.csv.gz"
    theirs = c.put_object(Bucket=bucket, Key=key, Body=b"theirs")["ETag"]
    path = tmp_path / "day.csv.gz"
    path.write_bytes(os.urandom(size))
    with pytest.raises(PreconditionFailed, match=r"m100/day\.csv\.gz: changed by another"):
        store.upload_file(path, key, None, if_none_match=True)
    assert c.get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"
    if size <= 8 * 2**10:  # one PUT: If-Match on an ETag this run read, replaced since
        with pytest.raises(PreconditionFailed):
            store.upload_file(path, key, None, if_match='"0123456789abcdef0123456789abcdef"')
        assert c.get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"
    # the ETag read: the upload goes through
    got_size, digest = store.upload_file(path, key, None, if_match=theirs)
    assert c.get_object(Bucket=bucket, Key=key)["Body"].read() == path.read_bytes()
    # a retried upload whose first attempt was stored: refused by its own write, not an error
    assert store.upload_file(path, key, digest, if_none_match=True) == (got_size, digest)
    # If-Match on an object that is gone: refused (S3's 404 NoSuchKey), not a missing key
    c.delete_object(Bucket=bucket, Key=key)
    if size <= 8 * 2**10:
        with pytest.raises(PreconditionFailed):
            store.upload_file(path, key, None, if_match=theirs)
        assert "Contents" not in c.list_objects_v2(Bucket=bucket, Prefix=key)
    assert not c.list_multipart_uploads(Bucket=bucket).get("Uploads")  # aborted
    # a conditional delete of an object that is gone: refused too (404 NoSuchKey)
    with pytest.raises(PreconditionFailed):
        store.delete(key, if_match=theirs)
    # a 404 that is not the condition's (no such bucket) stays the error it is
    other = S3Client(parse_root("s3://no-such-bucket-dxt/m100"))
    if client == "boto3":
        other._light = None
    with pytest.raises(ArchiveError, match="NoSuchBucket") as err:
        other.upload_file(path, key, None, if_match=theirs)
    assert not isinstance(err.value, PreconditionFailed)
