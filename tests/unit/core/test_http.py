"""Retry and error classification; the server's answers are faked with httpx.MockTransport."""

import httpx
import pytest

from dxt_core.errors import QueryRejected, SourceUnavailable, WindowTooLarge
from dxt_core.http import HttpClient, RequestStats, RetryPolicy, redact_url


def client(handler, attempts=4):
    sleeps: list[float] = []
    c = HttpClient(
        "http://alice:s3cret@kairos.example:8083/",
        retry=RetryPolicy(attempts=attempts, backoff_s=0.5, max_backoff_s=3, jitter=0),
        sleep=sleeps.append,
        transport=httpx.MockTransport(handler),
    )
    return c, sleeps


def test_retries_5xx_with_backoff_then_succeeds():
    calls = iter([503, 500, 200])

    def handler(req):
        assert req.headers["authorization"].startswith("Basic ")
        status = next(calls)
        return httpx.Response(status, json={"ok": True} if status == 200 else {"errors": ["x"]})

    c, sleeps = client(handler)
    stats = RequestStats()
    assert c.get_json("api/v1/version", stats=stats) == {"ok": True}
    assert sleeps == [0.5, 1.0]
    assert stats.requests == 3 and stats.retries == 2


def test_retry_after_is_honoured_and_capped():
    calls = iter([429, 429, 200])

    def handler(req):
        status = next(calls)
        headers = {"Retry-After": "2"} if status == 429 else {}
        if status == 429 and len(sleeps) == 1:
            headers = {"Retry-After": "60"}
        return httpx.Response(status, headers=headers, json={})

    c, sleeps = client(handler)
    c.get_json("x")
    assert sleeps == [2.0, 3.0]


def test_4xx_fails_at_once_with_server_text_and_no_secret():
    def handler(req):
        return httpx.Response(400, json={"errors": ["metrics[0].name may not be empty"]})

    c, sleeps = client(handler)
    with pytest.raises(QueryRejected) as ei:
        c.post_json("api/v1/datapoints/query", {"metrics": []})
    msg = str(ei.value)
    assert "may not be empty" in msg and "HTTP 400" in msg
    assert "s3cret" not in msg and "alice" not in msg
    assert "http://kairos.example:8083/api/v1/datapoints/query" in msg
    assert sleeps == []


def test_gives_up_after_attempts():
    c, sleeps = client(lambda req: httpx.Response(502, text="bad gateway"), attempts=3)
    with pytest.raises(SourceUnavailable, match="gave up after 3 attempts"):
        c.get_json("x")
    assert len(sleeps) == 2


def test_connection_errors_are_retried():
    n = {"i": 0}

    def handler(req):
        n["i"] += 1
        if n["i"] < 3:
            raise httpx.ConnectError("refused", request=req)
        return httpx.Response(200, json=[1])

    c, _ = client(handler)
    assert c.get_json("x") == [1]


def test_too_large_is_raised_immediately():
    def handler(req):
        return httpx.Response(500, json={"errors": ["Query exceeded the query_limit"]})

    c, sleeps = client(handler)
    with pytest.raises(WindowTooLarge):
        c.post_json("q", {}, too_large=lambda s, b: b"query_limit" in b)
    assert sleeps == []


def test_read_timeout_can_mean_too_large():
    def handler(req):
        raise httpx.ReadTimeout("slow", request=req)

    c, sleeps = client(handler)
    with pytest.raises(WindowTooLarge, match="read timeout"):
        c.post_json("q", {}, timeout_is_too_large=True)
    with pytest.raises(SourceUnavailable):
        c.post_json("q", {})
    assert len(sleeps) == 3


def test_redact_url():
    assert redact_url("https://u:p@h.example:443/a/b?token=x#f") == "https://h.example:443/a/b"
