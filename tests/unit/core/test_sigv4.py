"""The Signature Version 4 of the light S3 reader against botocore's own signer (a reference
implementation, not a server), and which environments may use it."""

from __future__ import annotations

import datetime as dt

import pytest

from dxt_core.store.sigv4 import Credentials, environment_credentials, sign

botocore = pytest.importorskip("botocore")


def _botocore_headers(
    creds: Credentials,
    url: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> dict[str, str]:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    request = AWSRequest(method=method, url=url, headers=dict(headers or {}), data=body)
    request.context["payload_signing_enabled"] = True
    S3SigV4Auth(
        BotoCredentials(creds.access_key, creds.secret_key, creds.token), "s3", creds.region
    ).add_auth(request)
    return {k.lower(): v for k, v in request.headers.items()}


@pytest.mark.parametrize("token", [None, "a-session-token/with+chars="])
@pytest.mark.parametrize(
    ("path", "query"),
    [
        (
            "/dxt-bucket",
            {
                "list-type": "2",
                "prefix": "m100/ipmi_pub/",
                "delimiter": "/",
                "encoding-type": "url",
            },
        ),
        (
            "/dxt-bucket",
            {"list-type": "2", "prefix": "a b+c=d/é", "continuation-token": "1/x+y=="},
        ),
        ("/dxt-bucket/m100/examon/ipmi_pub/ambient/2024-05-10.manifest.json", {}),
        ("/dxt-bucket/a%20b%2Bc%3Dd/%C3%A9.json", {}),
    ],
)
def test_the_signature_is_botocores(path, query, token):
    creds = Credentials(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        token,
        "eu-west-3",
        "http://127.0.0.1:9000",
    )
    host = "127.0.0.1:9000"
    # botocore signs at its own clock: sign with our code at the same instant
    from urllib.parse import quote

    qs = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in query.items())
    ref = _botocore_headers(creds, f"http://{host}{path}" + (f"?{qs}" if qs else ""))
    when = dt.datetime.strptime(ref["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    _, ours = sign(creds, "GET", path, query, host, when)
    assert ours["authorization"] == ref["authorization"]
    assert ours["x-amz-content-sha256"] == ref["x-amz-content-sha256"]
    if token:
        assert ours["x-amz-security-token"] == ref["x-amz-security-token"] == token


@pytest.mark.parametrize("token", [None, "tok"])
@pytest.mark.parametrize(
    ("method", "headers", "body"),
    [
        (
            "PUT",
            {
                "Content-Type": "application/json",
                "If-None-Match": "*",
                "x-amz-checksum-sha256": "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
            },
            b'{"status": "writing"}',
        ),
        ("PUT", {"If-Match": '"9b2cf535f27731c974343645a3985328"'}, b"x" * 1000),
        ("PUT", {"x-amz-meta-sha256": "ab" * 32, "x-amz-checksum-sha256": "q=="}, b"\0\1"),
        ("HEAD", {"x-amz-checksum-mode": "ENABLED"}, b""),
        ("DELETE", {"If-Match": '"9b2cf535f27731c974343645a3985328"'}, b""),
    ],
)
def test_a_write_is_signed_as_botocore_signs_it(method, headers, body, token):
    """Headers and a body are signed (the payload's SHA-256 in x-amz-content-sha256, as S3
    checks it against the body)."""
    import hashlib

    creds = Credentials("AKIDEXAMPLE", "secret/key+", token, "us-east-1", "http://h:9000")
    path = "/dxt-bucket/m100/examon/ipmi_pub/ambient/2024-05-10.manifest.json"
    ref = _botocore_headers(creds, f"http://h:9000{path}", method, headers, body)
    when = dt.datetime.strptime(ref["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    _, ours = sign(
        creds,
        method,
        path,
        {},
        "h:9000",
        when,
        headers=headers,
        payload_sha256=hashlib.sha256(body).hexdigest(),
    )
    assert ours["x-amz-content-sha256"] == ref["x-amz-content-sha256"]
    assert ours["authorization"] == ref["authorization"]


BASE = {
    "AWS_ACCESS_KEY_ID": "k",
    "AWS_SECRET_ACCESS_KEY": "s",
    "AWS_ENDPOINT_URL": "http://h:9000/",
}


def test_only_static_credentials_and_an_endpoint_go_the_light_way():
    c = environment_credentials(BASE)
    assert c is not None and c.endpoint == "http://h:9000" and c.region == "us-east-1"
    assert environment_credentials({**BASE, "AWS_REGION": "eu-west-3"}).region == "eu-west-3"
    s3_only = {**BASE, "AWS_ENDPOINT_URL_S3": "https://rgw.example.org"}
    assert environment_credentials(s3_only).endpoint == "https://rgw.example.org"
    # boto3 would take another way: a profile, AWS itself, no static keys, an odd endpoint
    assert environment_credentials({**BASE, "AWS_PROFILE": "lab"}) is None
    assert environment_credentials({**BASE, "AWS_ENDPOINT_URL": ""}) is None
    assert environment_credentials({**BASE, "AWS_SECRET_ACCESS_KEY": ""}) is None
    assert environment_credentials({**BASE, "AWS_ENDPOINT_URL": "ftp://h"}) is None


def test_credentials_never_show_in_a_repr():
    creds = Credentials("AKIAKEY", "the-secret", "the-token", "us-east-1", "http://h:9000")
    assert "the-secret" not in repr(creds) and "the-token" not in repr(creds)


def test_an_endpoint_with_a_password_is_refused_without_echoing_it():
    from dxt_core.errors import ConfigError

    env = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL": "http://user:PASSWORD99@127.0.0.1:9000",
    }
    for e in (env, {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"]}):
        with pytest.raises(ConfigError) as err:
            environment_credentials(e)
        assert "PASSWORD99" not in str(err.value)
        assert "AWS_SECRET_ACCESS_KEY" in str(err.value)
