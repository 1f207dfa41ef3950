"""The archive's S3 reads before boto3 is needed: ListObjectsV2 and GetObject, signed with
AWS Signature Version 4 on httpx.

Why: an archive run's first S3 request is the day's status (a listing of its prefix), made
before the fetch. Making boto3's client there (its service models) costs about 26 MiB that
then sit under the fetch's peak (measured: 116 MiB for the 864,000-point metric-day, against
98 MiB when the client is made after the fetch). These two reads, on the httpx the sources
use already, cost next to nothing; boto3 comes at the commit, when the fetch's memory is
free again.

Used only where the answer is certain to be boto3's: static credentials in the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, optionally ``AWS_SESSION_TOKEN``), no
``AWS_PROFILE`` (boto3 would then take the profile's credentials), and an S3-compatible
endpoint in ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, Ceph RGW, moto: path-style
requests, which these servers take). AWS itself (no endpoint), Airflow connections and
credential files go through boto3 from the first request. Any answer but a 200 (or a 404
``NoSuchKey`` to a GET), and any connection error, is handed to boto3, which asks again and
gives the archive's usual errors: the light path never decides a failure.

The signature follows AWS's "Signature Version 4 signing process" for S3 (canonical request,
string to sign, the key derived from date, region and service); tests/unit/core/test_sigv4.py
checks it against botocore's own signer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote, urlsplit

import httpx

from dxt_core.errors import ConfigError
from dxt_core.masking import hide, hide_proxies
from dxt_core.urls import redact_url, split_credentials

#: sha256 of the empty body (of every request but a PUT)
EMPTY_SHA256: Final = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_NS: Final = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class Fallback(Exception):
    """The light path cannot answer this one: ask boto3."""


def _gone_under_if_match(r: httpx.Response) -> bool:
    """S3's answer to If-Match on an object that is not there: 404 NoSuchKey (a refusal of
    the condition; any other 404, such as NoSuchBucket, is not)."""
    return (
        r.status_code == 404
        and "if-match" in r.request.headers
        and b"<Code>NoSuchKey</Code>" in r.content
    )


class Refused(Exception):
    """S3 refused a conditional write (412 PreconditionFailed, 409
    ConditionalRequestConflict): the condition does not hold, whichever client asks."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(repr=False)
    region: str
    endpoint: str  # scheme://host[:port][/path], no trailing slash

    def __post_init__(self) -> None:
        hide(self.secret_key)
        hide(self.token)
        hide_proxies()  # the client reads HTTPS_PROXY as boto3 does


#: where the credentials of the environment's endpoint go (not in its URL)
_ENV_CREDENTIALS: Final = "give the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"


def check_endpoint(endpoint: str, where: str, credentials: str) -> str:
    """An S3 endpoint URL, ``http(s)://host[:port][/path]``, checked before boto3 sees it (it
    would say only "Invalid endpoint", or send the credentials elsewhere); the error names
    ``where`` it came from (a variable, a connection's extra), never the URL's userinfo.
    ``credentials`` says where the credentials go instead."""
    if split_credentials(endpoint.strip())[1] is not None:
        # up to the last "@": a secret key holding "/" ends urlsplit's netloc before it
        raise ConfigError(
            f"{where} holds a user name or password: write the endpoint as "
            f"scheme://host[:port] and {credentials}"
        )
    try:
        parts = urlsplit(endpoint.strip())
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = urlsplit(""), False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ConfigError(
            f"{where}={redact_url(endpoint.strip())!r} is not an http(s) URL: write it "
            "http://host:port or https://host[:port], e.g. http://127.0.0.1:9000 or "
            "https://rgw.example.org"
        )
    return endpoint.strip()


def environment_endpoint(environ: Mapping[str, str] | None = None) -> str:
    """The S3 endpoint of the environment (``AWS_ENDPOINT_URL_S3``, else
    ``AWS_ENDPOINT_URL``; ``""``: AWS), checked: an error names the variable."""
    env = os.environ if environ is None else environ
    name = _endpoint_variable(env)
    endpoint = env.get(name) or ""
    if endpoint:
        try:
            check_endpoint(endpoint, name, _ENV_CREDENTIALS)
        except ConfigError as exc:
            exc.run_wide = True  # the environment's: every unit of a run fails alike
            raise
    return endpoint


def _endpoint_variable(env: Mapping[str, str]) -> str:
    """The variable boto3 takes the S3 endpoint from."""
    return "AWS_ENDPOINT_URL_S3" if env.get("AWS_ENDPOINT_URL_S3") else "AWS_ENDPOINT_URL"


def environment_credentials(environ: dict[str, str] | None = None) -> Credentials | None:
    """The static credentials and S3-compatible endpoint of the environment, or None when
    boto3 would find its credentials or endpoint another way (see the module's text)."""
    env = os.environ if environ is None else environ
    key, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
    name = _endpoint_variable(env)
    endpoint = env.get(name) or ""
    if split_credentials(endpoint.strip())[1] is not None:
        error = ConfigError(
            f"{name} holds a user name or password: write the endpoint as "
            f"scheme://host[:port] and {_ENV_CREDENTIALS}"
        )
        error.run_wide = True
        raise error
    if not key or not secret or not endpoint or env.get("AWS_PROFILE"):
        return None
    try:
        parts = urlsplit(endpoint)
    except ValueError:  # not a URL: boto3's own check of the endpoint says so
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        return None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Credentials(
        key, secret, env.get("AWS_SESSION_TOKEN") or None, region, endpoint.rstrip("/")
    )


def _enc(text: str, safe: str = "") -> str:
    """RFC 3986 percent-encoding: everything but unreserved characters (and ``safe``)."""
    return quote(text, safe="-_.~" + safe)


def sign(
    creds: Credentials,
    method: str,
    path: str,
    query: dict[str, str],
    host: str,
    when: dt.datetime,
    *,
    headers: dict[str, str] | None = None,
    payload_sha256: str = EMPTY_SHA256,
) -> tuple[str, dict[str, str]]:
    """The canonical query string and the headers (Authorization included) of a request.
    ``path`` is the request's path, already percent-encoded; ``headers`` (lower-case names)
    are signed with the rest; ``payload_sha256`` is the hex SHA-256 of the body."""
    amz_date = when.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{creds.region}/s3/aws4_request"
    canonical_query = "&".join(f"{_enc(k)}={_enc(v)}" for k, v in sorted(query.items()))
    extra = {k.lower(): v for k, v in (headers or {}).items()}
    headers = {
        **extra,
        "host": host,
        "x-amz-content-sha256": payload_sha256,
        "x-amz-date": amz_date,
    }
    if creds.token:
        headers["x-amz-security-token"] = creds.token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join(
        [
            method,
            path,
            canonical_query,
            "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names),
            signed,
            payload_sha256,
        ]
    )
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    k = hmac.new(f"AWS4{creds.secret_key}".encode(), amz_date[:8].encode(), "sha256").digest()
    for part in (creds.region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), "sha256").digest()
    signature = hmac.new(k, to_sign.encode(), "sha256").hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return canonical_query, headers


class LightClient:
    """The requests of one bucket that an archive run makes when nothing goes wrong, signed
    here: ListObjectsV2, ListMultipartUploads, GetObject, HeadObject, PutObject (conditional,
    and streamed from a file), DeleteObject; :class:`Fallback` for any other answer."""

    def __init__(self, creds: Credentials, bucket: str) -> None:
        self.creds = creds
        self.bucket = bucket
        parts = urlsplit(creds.endpoint)
        self._host = parts.netloc.rsplit("@", 1)[-1]
        self._base_path = parts.path.rstrip("/")
        self._origin = f"{parts.scheme}://{self._host}"
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                # as boto3: AWS_CA_BUNDLE, and the proxy variables (HTTPS_PROXY, NO_PROXY)
                verify: str | bool = os.environ.get("AWS_CA_BUNDLE") or True
                self._client = httpx.Client(
                    timeout=httpx.Timeout(60.0, connect=10.0), verify=verify, trust_env=True
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _request(
        self,
        key: str | None,
        query: dict[str, str],
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        content: bytes | Iterator[bytes] | None = None,
        payload_sha256: str = EMPTY_SHA256,
    ) -> httpx.Response:
        path = f"{self._base_path}/{_enc(self.bucket)}"
        if key is not None:
            path += "/" + _enc(key, safe="/")
        canonical_query, signed = sign(
            self.creds,
            method,
            path,
            query,
            self._host,
            dt.datetime.now(dt.UTC),
            headers=headers,
            payload_sha256=payload_sha256,
        )
        url = f"{self._origin}{path}" + (f"?{canonical_query}" if canonical_query else "")
        try:
            return self._http().request(method, url, headers=signed, content=content)
        except httpx.HTTPError as exc:
            raise Fallback(str(exc)) from exc

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag; None when S3 says NoSuchKey."""
        r = self._request(key, {})
        if r.status_code == 200 and "etag" in r.headers:
            return r.content, r.headers["etag"]
        if r.status_code == 404 and b"<Code>NoSuchKey</Code>" in r.content:
            return None
        raise Fallback(f"GET answered {r.status_code}")

    def list_page(
        self, prefix: str, delimiter: str | None, token: str | None, max_keys: int = 1000
    ) -> tuple[list[tuple[str, int, str]], str | None]:
        """One page of ListObjectsV2: (key, size, ETag) of its objects and the next page's
        continuation token (None on the last page)."""
        query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        if max_keys != 1000:
            query["max-keys"] = str(max_keys)
        if delimiter:
            query["delimiter"] = delimiter
        if token:
            query["continuation-token"] = token
        root = self._xml(query, "LIST", "ListBucketResult")
        url_encoded = (root.findtext(f"{_NS}EncodingType") or "") == "url"
        objects = []
        for c in root.iter(f"{_NS}Contents"):
            key, size, etag = (c.findtext(f"{_NS}{n}") for n in ("Key", "Size", "ETag"))
            if key is None or size is None or etag is None:
                raise Fallback("LIST answer without Key, Size or ETag")
            objects.append((_unquote(key) if url_encoded else key, int(size), etag))
        truncated = (root.findtext(f"{_NS}IsTruncated") or "false").lower() == "true"
        nxt = root.findtext(f"{_NS}NextContinuationToken") if truncated else None
        if truncated and not nxt:
            raise Fallback("LIST truncated without a continuation token")
        return objects, nxt

    # -- the commit's requests ------------------------------------------------------------
    def _written(self, r: httpx.Response, what: str) -> str:
        """The ETag of a successful write; :class:`Refused` for a condition that does not
        hold; :class:`Fallback` for anything else."""
        if r.status_code == 200 and "etag" in r.headers:
            return r.headers["etag"]
        if (
            r.status_code == 412
            or (r.status_code == 409 and b"<Code>ConditionalRequestConflict</Code>" in r.content)
            or _gone_under_if_match(r)
        ):
            raise Refused(f"{what} answered {r.status_code}")
        raise Fallback(f"{what} answered {r.status_code}")

    def put(
        self,
        key: str,
        body: bytes,
        *,
        headers: dict[str, str],
    ) -> str:
        """PutObject of a small body; ``headers``: Content-Type, If-Match / If-None-Match,
        x-amz-checksum-sha256. Returns the ETag."""
        r = self._request(
            key,
            {},
            method="PUT",
            headers=headers,
            content=body,
            payload_sha256=hashlib.sha256(body).hexdigest(),
        )
        return self._written(r, "PUT")

    def put_file(
        self, key: str, chunks: Iterator[bytes], size: int, sha256_hex: str, headers: dict[str, str]
    ) -> str:
        """PutObject streamed from ``chunks`` (``size`` bytes whose SHA-256 is
        ``sha256_hex``, signed as the payload: S3 refuses a body that does not hash to it)."""
        r = self._request(
            key,
            {},
            method="PUT",
            headers={**headers, "content-length": str(size)},
            content=chunks,
            payload_sha256=sha256_hex,
        )
        return self._written(r, "PUT")

    def head(self, key: str) -> dict[str, object] | None:
        """HeadObject as boto3 gives it (ContentLength, ETag, ChecksumSHA256, Metadata);
        None when there is no such object."""
        r = self._request(key, {}, method="HEAD", headers={"x-amz-checksum-mode": "ENABLED"})
        if r.status_code == 404:
            return None
        if r.status_code != 200 or "etag" not in r.headers:
            raise Fallback(f"HEAD answered {r.status_code}")
        meta = {
            k[len("x-amz-meta-") :]: v
            for k, v in r.headers.items()
            if k.lower().startswith("x-amz-meta-")
        }
        out: dict[str, object] = {
            "ContentLength": int(r.headers.get("content-length", "-1")),
            "ETag": r.headers["etag"],
            "Metadata": meta,
        }
        if "x-amz-checksum-sha256" in r.headers:
            out["ChecksumSHA256"] = r.headers["x-amz-checksum-sha256"]
        return out

    def delete(self, key: str, *, if_match: str | None) -> None:
        """DeleteObject, conditional on the ETag when one is given."""
        r = self._request(
            key, {}, method="DELETE", headers={"if-match": if_match} if if_match else None
        )
        if r.status_code == 204:
            return
        if r.status_code == 412 or _gone_under_if_match(r):
            raise Refused(f"DELETE answered {r.status_code}")
        raise Fallback(f"DELETE answered {r.status_code}")

    def has_uploads(self, prefix: str) -> bool:
        """Whether ListMultipartUploads shows an unfinished upload under ``prefix``."""
        root = self._xml(
            {"uploads": "", "prefix": prefix}, "LIST uploads", "ListMultipartUploadsResult"
        )
        return root.find(f"{_NS}Upload") is not None

    def _xml(self, query: dict[str, str], what: str, tag: str) -> ET.Element:
        """The XML answer (root element ``tag``) of a GET on the bucket."""
        r = self._request(None, query)
        if r.status_code != 200:
            raise Fallback(f"{what} answered {r.status_code}")
        try:
            root = ET.fromstring(r.content)
        except ET.ParseError as exc:
            raise Fallback(f"{what} answer unreadable: {exc}") from exc
        if root.tag != f"{_NS}{tag}":
            raise Fallback(f"{what} answered <{root.tag}>")
        return root


def _unquote(text: str) -> str:
    from urllib.parse import unquote_plus

    return unquote_plus(text)
