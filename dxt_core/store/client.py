"""The S3 calls the archive makes, on boto3 (the optional ``s3`` extra).

Why boto3: it sends the conditional writes the archive's rules stand on (``If-None-Match: *``
and ``If-Match`` on PutObject, CompleteMultipartUpload and DeleteObject), per-part SHA-256
checksums in multipart uploads, and finds credentials and the endpoint the way every AWS
tool does (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``,
``AWS_PROFILE``, ``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, instance roles); Airflow's
Amazon provider hands out boto3 sessions, so the DAGs use the same code. Throughput is set
by the part size and the parts in flight, not by the client: one metric-day file is a few
MiB to a few hundred MiB. When the environment allows it (static keys and an S3-compatible
endpoint), the requests of a run that goes as planned (the day's status before its fetch, then
the commit's conditional PUTs, one-PUT uploads, HEADs and DELETEs) go through
:mod:`dxt_core.store.sigv4` on httpx: boto3's import, client and memory (about 0.3 s and
38 MiB) are then paid only by what needs it (multipart uploads, copies of replaced objects,
aborts) or by an answer the light client does not take as final.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

from dxt_core import masking
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import sha256_file
from dxt_core.store import S3Location
from dxt_core.store.permissions import access_hint
from dxt_core.store.sigv4 import (
    Fallback,
    LightClient,
    Refused,
    environment_credentials,
    environment_endpoint,
)
from dxt_core.urls import redact_text

log = masking.logger(__name__)

#: Bytes per multipart part (S3 needs at least 5 MiB except for the last part).
PART_SIZE = 8 << 20
#: Files up to this size go up in one PutObject (atomic too), larger ones in parts.
MULTIPART_THRESHOLD = 8 << 20


def json_object(raw: bytes) -> dict[str, Any] | None:
    """The JSON object ``raw`` holds; None when it is not JSON or not an object."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


class PreconditionFailed(ArchiveError):
    """A conditional write lost: the object is not in the state this run read (412)."""


@dataclass(frozen=True, slots=True)
class _Conditions:
    """A conditional write's condition: the object still has this ETag, or there is none."""

    if_match: str | None = None
    if_none_match: bool = False

    @property
    def any(self) -> bool:
        return self.if_match is not None or self.if_none_match

    def headers(self) -> dict[str, str]:
        if self.if_match is not None:
            return {"if-match": self.if_match}
        return {"if-none-match": "*"} if self.if_none_match else {}

    def kwargs(self) -> dict[str, str]:
        if self.if_match is not None:
            return {"IfMatch": self.if_match}
        return {"IfNoneMatch": "*"} if self.if_none_match else {}


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


def _env_size(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of bytes") from None
    if value < 1024:
        raise ConfigError(f"{name}={raw!r}: at least 1024 bytes (S3 needs 5 MiB parts)")
    return value


class _Sums(NamedTuple):
    """What S3 should give for an uploaded object: its SHA-256 (base64) and its ETag."""

    sha256_b64: str
    etag: str


def _chunks(fh: BinaryIO, size: int = 1 << 20) -> Iterator[bytes]:
    """The rest of an open file, ``size`` bytes at a time."""
    yield from iter(lambda: fh.read(size), b"")


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


class S3Client:
    """One bucket's objects, with the error messages the archive gives (URL and fix).

    Args:
        location: the archive's bucket and prefix.
        client: a boto3 S3 client; default: one made by ``make`` on the first request.
        make: makes the client (default: :func:`make_client`, the standard AWS environment).

    The client is made on the first request, not here: importing boto3 and making a client
    costs about 26 MiB and half a second (measured), and an archive run makes its first
    request at its first commit, after the day's data was fetched and written to staging, so
    boto3's memory reuses what the fetch freed instead of adding to its peak. Reads made
    before that (the day's status: a listing, a manifest) go through
    :class:`~dxt_core.store.sigv4.LightClient` when the environment allows it (static
    credentials and an S3-compatible endpoint, the boto3 default client): no boto3 at all
    until the commit.
    """

    def __init__(
        self, location: S3Location, client: Any = None, make: Callable[[], Any] | None = None
    ) -> None:
        self.location = location
        self.bucket = location.bucket
        self._made = client
        self._make = make or make_client
        self._making = threading.Lock()
        creds = environment_credentials() if client is None and make is None else None
        self._light = None if creds is None else LightClient(creds, location.bucket)
        self.part_size = _env_size("DXT_S3_PART_SIZE", PART_SIZE)
        self.threshold = _env_size("DXT_S3_MULTIPART_THRESHOLD", MULTIPART_THRESHOLD)
        #: "checksum": trust S3's SHA-256 of what it stored, else an ETag that is the MD5 of
        #: the bytes uploaded (read back when it gives neither); "read": read every uploaded
        #: object back and hash it.
        #: what this client's warnings said already (one warning per run for a repeated one)
        self._said: set[str] = set()
        #: (key, sha256 of the body) of this client's conditional writes -> the threads
        self._writing: dict[tuple[str, bytes], set[int]] = {}
        self.verify = os.environ.get("DXT_S3_VERIFY", "checksum").strip() or "checksum"
        if self.verify not in ("checksum", "read"):
            raise ConfigError(f"DXT_S3_VERIFY={self.verify!r}: checksum or read")

    @property
    def _client(self) -> Any:
        """The boto3 client, made on first use (once, whatever the threads)."""
        made = self._made
        if made is None:
            with self._making:
                if self._made is None:
                    self._made = self._make()
                made = self._made
        return made

    def say_once(self, what: str) -> bool:
        """True the first time ``what`` is asked (then False): a repeated warning is said
        once per client, that is once per run."""
        with self._making:
            first = what not in self._said
            self._said.add(what)
        return first

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def close(self) -> None:
        """Close this client's own connections (boto3's client is shared: it stays)."""
        if self._light is not None:
            self._light.close()

    def _light_client(self) -> LightClient | None:
        """The light client while boto3's client is not made yet (afterwards boto3 asks)."""
        return self._light if self._made is None else None

    @staticmethod
    def _fell_back(action: str, key: str, exc: Fallback) -> None:
        log.debug("%s %s: handed to boto3 (%s)", action, key, exc)

    # -- errors -------------------------------------------------------------------------------
    def _refused(self, action: str, key: str) -> PreconditionFailed:
        return PreconditionFailed(f"cannot {action} {self.url(key)}: changed by another writer")

    def _error(self, exc: Exception, key: str, action: str) -> ArchiveError:
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        where = self.url(key)
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return self._refused(action, key)
            if code == "NoSuchKey" and action in ("write", "complete the upload of", "delete"):
                # a write or a delete answers it only for If-Match on an object that is gone
                return self._refused(action, key)
            if code in ("403", "Forbidden") or (status == 403 and not code):
                code = "AccessDenied"  # a HEAD's answer has no body, hence no code
            hint = {
                "NoSuchBucket": "create the bucket, or fix the archive root",
                "AccessDenied": access_hint(getattr(exc, "operation_name", None)),
                "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID (or the Airflow connection)",
                "SignatureDoesNotMatch": "check AWS_SECRET_ACCESS_KEY (or the connection)",
                "NotImplemented": "this S3 server lacks a feature the archive needs "
                "(conditional writes: If-None-Match / If-Match)",
            }.get(code, "")
            error = ArchiveError(
                f"cannot {action} {where}: {code or status} {err.get('Message', '')}".rstrip()
                + (f"; {hint}" if hint else "")
            )
            # the bucket or the credentials: every unit of a run would fail the same way
            error.run_wide = bool(hint)
            return error
        if type(exc).__name__ == "PartialCredentialsError":
            error = ArchiveError(
                f"cannot {action} {where}: {redact_text(str(exc))}; set both "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            )
            error.run_wide = True
            return error
        if isinstance(exc, NoCredentialsError):
            error = ArchiveError(
                f"cannot {action} {where}: no AWS credentials; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an Airflow connection)"
            )
            error.run_wide = True
            return error
        if isinstance(exc, EndpointConnectionError):
            return ArchiveError(
                f"cannot {action} {where}: {redact_text(str(exc))}; check AWS_ENDPOINT_URL "
                "and that the S3 server runs"
            )
        return ArchiveError(
            f"cannot {action} {where}: {type(exc).__name__}: {redact_text(str(exc))}"
        )

    def _call(self, action: str, key: str, method: str, **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, method)(Bucket=self.bucket, **kw)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, key, action) from exc

    # -- small objects ------------------------------------------------------------------------
    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None when there is none."""
        light = self._light_client()
        if light is not None:
            try:
                return light.get(key)
            except Fallback as exc:
                self._fell_back("GET", key, exc)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self._client.get_object(Bucket=self.bucket, Key=key)
            return r["Body"].read(), str(r["ETag"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._error(exc, key, "read") from exc
        except BotoCoreError as exc:
            raise self._error(exc, key, "read") from exc

    def put(
        self, key: str, body: bytes, *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        """Write a small object in one PUT (atomic); returns its ETag.

        ``if_none_match``: only if there is no such object; ``if_match``: only if the object
        still has this ETag. Either raises :class:`PreconditionFailed` when it does not hold,
        unless the object holds ``body`` already: a retried PUT whose first attempt was
        stored but whose answer was lost (a cut connection, a timeout) is refused by its own
        write, so a refusal is checked against the object before it is believed.
        """
        if if_match is None and not if_none_match:
            return self._put(key, body)
        mine = (key, hashlib.sha256(body).digest())
        with self._making:  # what this client's threads write (set before it is sent)
            self._writing.setdefault(mine, set()).add(threading.get_ident())
            while len(self._writing) > 4096:
                del self._writing[next(iter(self._writing))]
        try:
            return self._put(key, body, if_match=if_match, if_none_match=if_none_match)
        except PreconditionFailed:
            got = self.get(key)
            if got is None or got[0] != body:
                raise
            self._same_bytes(key, mine, if_none_match)
            return got[1]

    def _same_bytes(self, key: str, mine: tuple[str, bytes], create: bool) -> None:
        """Say a refused conditional write whose object holds its bytes already: written by
        another thread of this client (debug), created meanwhile by another writer with the
        same content (info: a record any writer writes alike), else a lost answer."""
        with self._making:
            others = self._writing.get(mine, set()) - {threading.get_ident()}
        if others or create:
            by = "another thread of this run" if others else "another writer"
            log.log(
                logging.DEBUG if others else logging.INFO,
                "%s: %s meanwhile with the same content by %s (or by an earlier attempt "
                "of this write): nothing to do",
                self.url(key),
                "created" if create else "written",
                by,
            )
            return
        log.warning(
            "%s: a conditional write was refused, but the object holds what it wrote "
            "(an earlier attempt whose answer was lost, or another writer's identical "
            "write): nothing to do",
            self.url(key),
        )

    def _put(
        self, key: str, body: bytes, *, if_match: str | None = None, if_none_match: bool = False
    ) -> str:
        kw: dict[str, Any] = {
            "Key": key,
            "Body": body,
            "ChecksumSHA256": _b64(hashlib.sha256(body).digest()),
            "ContentType": "application/json" if key.endswith(".json") else "text/plain",
        }
        if if_none_match:
            kw["IfNoneMatch"] = "*"
        if if_match is not None:
            kw["IfMatch"] = if_match
        light = self._light_client()
        if light is not None:
            headers = {
                "content-type": kw["ContentType"],
                "x-amz-checksum-sha256": kw["ChecksumSHA256"],
            }
            if if_none_match:
                headers["if-none-match"] = "*"
            if if_match is not None:
                headers["if-match"] = if_match
            try:
                return light.put(key, body, headers=headers)
            except Refused:
                raise self._refused("write", key) from None
            except Fallback as exc:
                self._fell_back("PUT", key, exc)
        return str(self._call("write", key, "put_object", **kw)["ETag"])

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        light = self._light_client()
        if light is not None:
            try:
                return light.delete(key, if_match=if_match)
            except Refused:
                raise self._refused("delete", key) from None
            except Fallback as exc:
                self._fell_back("DELETE", key, exc)
        kw: dict[str, Any] = {"Key": key}
        if if_match is not None:
            kw["IfMatch"] = if_match
        self._call("delete", key, "delete_object", **kw)

    def head(self, key: str) -> dict[str, Any] | None:
        light = self._light_client()
        if light is not None:
            try:
                return light.head(key)
            except Fallback as exc:
                self._fell_back("HEAD", key, exc)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return dict(
                self._client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            )
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise self._error(exc, key, "read") from exc
        except BotoCoreError as exc:
            raise self._error(exc, key, "read") from exc

    def copy(self, src: str, dst: str, *, if_match: str | None = None) -> None:
        """Server-side copy (no bytes through this host), in parts above 5 GiB; with
        ``if_match``, only while ``src`` still has that ETag (else PreconditionFailed)."""
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import BotoCoreError, ClientError

        extra = {"CopySourceIfMatch": if_match} if if_match else None
        try:
            self._client.copy(
                {"Bucket": self.bucket, "Key": src},
                self.bucket,
                dst,
                ExtraArgs=extra,
                Config=TransferConfig(use_threads=False, multipart_threshold=5 << 30),
            )
        except (ClientError, BotoCoreError) as exc:  # 412: PreconditionFailed (_error)
            raise self._error(exc, dst, f"copy {self.url(src)} to") from exc

    # -- listing ------------------------------------------------------------------------------
    def list(self, prefix: str, *, recursive: bool = False) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` (one LIST request per 1,000 keys); without
        ``recursive``, only those directly under it (``/`` as the delimiter)."""
        kw: dict[str, Any] = {"Prefix": prefix}
        if not recursive:
            kw["Delimiter"] = "/"
        token: str | None = None
        while True:
            light = self._light_client()
            if light is not None:
                try:
                    page, nxt = light.list_page(prefix, kw.get("Delimiter"), token)
                except Fallback as exc:
                    self._fell_back("LIST", prefix, exc)
                else:
                    for k, size, etag in page:
                        yield ObjectInfo(k, size, etag)
                    if nxt is None:
                        return
                    token = nxt
                    continue
            if token:
                kw["ContinuationToken"] = token
            r = self._call("list", prefix, "list_objects_v2", **kw)
            for o in r.get("Contents", []):
                yield ObjectInfo(str(o["Key"]), int(o["Size"]), str(o["ETag"]))
            if not r.get("IsTruncated"):
                return
            token = str(r["NextContinuationToken"])

    def abort_uploads(self, prefix: str) -> int:
        """Abort the unfinished multipart uploads under ``prefix`` (their parts are
        invisible to readers, but they cost storage); returns how many."""
        light = self._light_client()
        if light is not None:
            try:
                if not light.has_uploads(prefix):
                    return 0
            except Fallback as exc:
                self._fell_back("LIST uploads", prefix, exc)
        r = self._call("list uploads of", prefix, "list_multipart_uploads", Prefix=prefix)
        n = 0
        for u in r.get("Uploads", []):
            self._call(
                "abort the upload of",
                str(u["Key"]),
                "abort_multipart_upload",
                Key=u["Key"],
                UploadId=u["UploadId"],
            )
            n += 1
        return n

    # -- big objects --------------------------------------------------------------------------
    def upload_file(
        self,
        path: Path,
        key: str,
        sha256: str | None,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> tuple[int, str]:
        """Stream ``path`` to ``key``, visible only once complete; returns (bytes, sha256).

        The file is read once, ``part_size`` bytes at a time (never whole in memory); each
        part carries its SHA-256, and the object's checksum as S3 stores it is compared with
        the one of the bytes read (or, without one, the object is read back). ``sha256``
        (the manifest's) must match those bytes: a staged file changed after its writer
        finished is an error, not an upload.

        ``if_none_match``: only if there is no such object; ``if_match``: only if the object
        still has this ETag (on the PUT, or on CompleteMultipartUpload). Either raises
        :class:`PreconditionFailed` when it does not hold, unless the object holds these
        bytes already (a retried request whose first attempt was stored).
        """
        size = path.stat().st_size
        when = _Conditions(if_match, if_none_match)
        try:
            if size <= self.threshold:
                digest, expect = self._put_whole(path, key, size, sha256, when)
            else:
                digest, expect = self._put_parts(path, key, sha256, when)
        except PreconditionFailed:
            if not when.any:
                raise
            want = sha256 or sha256_file(path)
            if not self._holds(key, size, want):
                raise
            log.warning(
                "%s: a conditional upload was refused, but the object holds these bytes "
                "already (an earlier attempt whose answer was lost, or another writer's "
                "identical upload): nothing to do",
                self.url(key),
            )
            return size, want
        self._verify(key, size, digest, expect)
        return size, digest

    def _holds(self, key: str, size: int, sha256: str) -> bool:
        """Whether the object at ``key`` holds ``size`` bytes of this sha256: from its
        metadata, else (a multipart upload started without the manifest's) read back."""
        head = self.head(key)
        if head is None or int(head.get("ContentLength", -1)) != size:
            return False
        recorded = str((head.get("Metadata") or {}).get("sha256") or "")
        return (recorded or self.sha256_of(key)) == sha256

    def _put_whole(
        self, path: Path, key: str, size: int, sha256: str | None, when: _Conditions
    ) -> tuple[str, _Sums]:
        """One PUT, the body streamed from the file (hashed first, 1 MiB at a time);
        returns (hex sha256, the checksum and ETag S3 should give)."""
        whole = hashlib.sha256()
        md5 = hashlib.md5(usedforsecurity=False)
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                whole.update(chunk)
                md5.update(chunk)
            digest = whole.hexdigest()
            self._check_sha(path, digest, sha256)
            sums = _Sums(_b64(whole.digest()), md5.hexdigest())
            light = self._light_client()
            if light is not None:
                fh.seek(0)
                headers = {"x-amz-checksum-sha256": sums.sha256_b64, "x-amz-meta-sha256": digest}
                try:
                    light.put_file(key, _chunks(fh), size, digest, headers | when.headers())
                    return digest, sums
                except Refused:
                    raise self._refused("write", key) from None
                except Fallback as exc:
                    self._fell_back("PUT", key, exc)
            fh.seek(0)
            self._call(
                "write",
                key,
                "put_object",
                Key=key,
                Body=fh,
                ContentLength=size,
                ChecksumSHA256=_b64(whole.digest()),
                Metadata={"sha256": digest},
                **when.kwargs(),
            )
        return digest, sums

    def _put_parts(
        self, path: Path, key: str, sha256: str | None, when: _Conditions
    ) -> tuple[str, _Sums]:
        """A multipart upload of ``part_size`` parts; returns (hex sha256, S3's composite
        checksum: the SHA-256 of the parts' SHA-256s, and the multipart ETag: the MD5 of the
        parts' MD5s, ``-`` and the number of parts)."""
        # The whole-file sha256 is known only at the end, after the parts: S3 keeps user
        # metadata from the start of the upload, so it records the manifest's.
        up = self._call(
            "start uploading",
            key,
            "create_multipart_upload",
            Key=key,
            ChecksumAlgorithm="SHA256",
            Metadata={"sha256": sha256 or ""},
        )
        upload_id = str(up["UploadId"])
        whole = hashlib.sha256()
        part_digests: list[bytes] = []
        part_md5s: list[bytes] = []
        parts: list[dict[str, Any]] = []
        try:
            with path.open("rb") as fh:
                for number, chunk in enumerate(iter(lambda: fh.read(self.part_size), b""), 1):
                    whole.update(chunk)
                    d = hashlib.sha256(chunk).digest()
                    part_digests.append(d)
                    part_md5s.append(hashlib.md5(chunk, usedforsecurity=False).digest())
                    r = self._call(
                        "upload a part of",
                        key,
                        "upload_part",
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                        ChecksumAlgorithm="SHA256",
                        ChecksumSHA256=_b64(d),
                    )
                    parts.append(
                        {"PartNumber": number, "ETag": r["ETag"], "ChecksumSHA256": _b64(d)}
                    )
                    del chunk
            digest = whole.hexdigest()
            self._check_sha(path, digest, sha256)
            self._call(
                "complete the upload of",
                key,
                "complete_multipart_upload",
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **when.kwargs(),
            )
        except BaseException:
            with contextlib.suppress(Exception):  # else the day's next run aborts it
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise
        etag = hashlib.md5(b"".join(part_md5s), usedforsecurity=False).hexdigest()
        return digest, _Sums(
            _b64(hashlib.sha256(b"".join(part_digests)).digest()), f"{etag}-{len(part_md5s)}"
        )

    def _check_sha(self, path: Path, digest: str, sha256: str | None) -> None:
        if sha256 is not None and digest != sha256:
            raise ArchiveError(
                f"{path}: the staged file's sha256 {digest[:12]} is not the manifest's "
                f"{sha256[:12]} (changed after it was written?); nothing was committed, rerun"
            )

    def _verify(self, key: str, size: int, digest: str, expect: _Sums) -> None:
        head = self.head(key)
        if head is None:
            raise ArchiveError(f"{self.url(key)}: missing right after its upload; rerun")
        if int(head.get("ContentLength", -1)) != size:
            raise ArchiveError(
                f"{self.url(key)}: S3 holds {head.get('ContentLength')} bytes, {size} were "
                "uploaded; rerun"
            )
        stored = str(head.get("ChecksumSHA256") or "").split("-")[0]
        if stored and self.verify == "checksum":
            if stored != expect.sha256_b64:
                raise ArchiveError(
                    f"{self.url(key)}: S3's SHA-256 of the object is not the one of the bytes "
                    "uploaded; rerun"
                )
            return
        # S3 (and RGW, MinIO, moto) give the MD5 of what they stored as the ETag of an
        # unencrypted object (for a multipart one, the MD5 of the parts' MD5s): equal to the
        # one of the bytes uploaded, it proves them without reading the object back. Any
        # other ETag (SSE-KMS, SSE-C, a server's own scheme) proves nothing: read back.
        if self.verify == "checksum" and str(head.get("ETag") or "").strip('"') == expect.etag:
            return
        got = self.sha256_of(key)
        if got != digest:
            raise ArchiveError(
                f"{self.url(key)}: the object read back has sha256 {got[:12]}, the bytes "
                f"uploaded {digest[:12]}; rerun"
            )

    def download(self, key: str, path: Path) -> None:
        """Stream an object into a local file, 1 MiB at a time."""
        r = self._call("read", key, "get_object", Key=key)
        body = r["Body"]
        with path.open("wb") as fh:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                fh.write(chunk)

    @staticmethod
    def file_sha(path: Path) -> str:
        return sha256_file(path)

    def sha256_of(self, key: str) -> str:
        """The SHA-256 of an object, read in 1 MiB pieces."""
        r = self._call("read", key, "get_object", Key=key)
        h = hashlib.sha256()
        body = r["Body"]
        for chunk in iter(lambda: body.read(1 << 20), b""):
            h.update(chunk)
        return h.hexdigest()


#: What the standard AWS environment's client depends on (the key of a shared client).
_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
#: Connections a boto3 client keeps per host: what runs at once on one client (more would
#: open and drop connections, and urllib3 warn "Connection pool is full").
POOL_CONNECTIONS = 16
_clients: dict[tuple[tuple[str, str], ...], Any] = {}
_clients_lock = threading.Lock()


def make_client(**overrides: Any) -> Any:
    """A boto3 S3 client from the standard AWS environment (and ``overrides``).

    Clients are shared within the process, one per environment and overrides (boto3's
    clients are thread-safe): making one costs about half a second (measured), and the
    coverage view makes an archive per request. A given ``session`` is never shared.
    """
    if not overrides.get("endpoint_url"):
        environment_endpoint()  # boto3's "Invalid endpoint" would not name the variable
    if overrides.get("session") is not None:
        return _new_client(**overrides)
    key = tuple(sorted((k, str(v)) for k, v in overrides.items())) + tuple(
        (k, os.environ.get(k, "")) for k in _ENVIRONMENT
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) >= 8:  # environments change in tests only: keep a few
                _clients.clear()
            client = _clients[key] = _new_client(**overrides)
    return client


def _new_client(**overrides: Any) -> Any:
    from dxt_core.masking import hide_proxies

    hide_proxies()  # boto3 reads the proxy variables too
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError("s3:// archive roots need boto3: pip install 'dxt-archive[s3]'") from None
    config = Config(
        retries={"mode": "standard", "max_attempts": 5},
        max_pool_connections=POOL_CONNECTIONS,
        # Our own SHA-256 per part and object; no extra CRC32 on every request. These two
        # options first exist in botocore 1.36.0 (1.35.99 refuses them: TypeError), hence
        # boto3>=1.36.0 in pyproject.toml (test_packaging.py checks it).
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    from botocore.exceptions import BotoCoreError

    try:
        session = overrides.pop("session", None) or boto3.session.Session()
        return session.client("s3", config=config, **overrides)
    except BotoCoreError as exc:  # a profile that does not exist, a malformed region...
        partial = type(exc).__name__ == "PartialCredentialsError"
        error = ConfigError(
            f"cannot make the S3 client: {type(exc).__name__}: {redact_text(str(exc))}; "
            + (
                "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
                if partial
                else "check AWS_PROFILE, AWS_REGION (AWS_DEFAULT_REGION) and AWS_ENDPOINT_URL"
            )
        )
        error.run_wide = True  # every unit of the run would fail the same way
        raise error from None
