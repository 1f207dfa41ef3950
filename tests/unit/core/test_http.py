"""Retry and error classification; the server's answers are faked with httpx.MockTransport."""

import httpx
import pytest

from dxt_core.errors import (
    AnswerTooLarge,
    ConfigError,
    QueryRejected,
    RateLimited,
    SourceError,
    SourceUnavailable,
    WindowTooLarge,
)
from dxt_core.http import HttpClient, RequestStats, RetryPolicy
from dxt_core.urls import normalise_base_url, redact_url, split_credentials


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


# -- one retry policy, with jitter -------------------------------------------------------------


def test_jitter_spreads_delays_below_the_backoff():
    p = RetryPolicy(backoff_s=1.0, max_backoff_s=30, jitter=0.5)
    assert p.delay(3, rand=lambda: 0.0) == 4.0
    assert p.delay(3, rand=lambda: 1.0) == 2.0
    delays = {p.delay(2) for _ in range(50)}
    assert len(delays) > 1 and all(1.0 <= d <= 2.0 for d in delays)
    # Retry-After is a floor, the cap a ceiling
    assert p.delay(1, retry_after=7, rand=lambda: 0.0) == 7.0
    assert p.delay(1, retry_after=99) == 30.0


# -- rate limits ---------------------------------------------------------------------------------


def always_too_large(status, body):
    return True  # as a source's check that would read any error text as "too large"


@pytest.mark.parametrize(
    "status,headers,body",
    [
        (429, {"Retry-After": "2"}, b"Too Many Requests"),
        (503, {"Retry-After": "2"}, b"Service Unavailable"),
        (503, {}, b"<html>503 Too Many Requests</html>"),
    ],
)
def test_rate_limits_wait_and_are_never_read_as_too_large(status, headers, body):
    calls = iter([status, status, 200])

    def handler(req):
        s = next(calls)
        if s == 200:
            return httpx.Response(200, json={"ok": 1})
        return httpx.Response(s, headers=headers, content=body)

    c, sleeps = client(handler)
    stats = RequestStats()
    assert c.post_json("q", {}, stats=stats, too_large=always_too_large) == {"ok": 1}
    assert stats.retries == 2 and stats.splits == 0
    if "Retry-After" in headers:
        assert sleeps == [2.0, 2.0]  # Retry-After (above the 0.5 s and 1 s backoff)
    else:
        assert sleeps == [0.5, 1.0]


def test_persistent_rate_limit_raises_rate_limited_retryable():
    c, sleeps = client(lambda req: httpx.Response(429, text="Too Many Requests"), attempts=3)
    with pytest.raises(RateLimited, match="limits the request rate: still refused after 3") as ei:
        c.get_json("x", too_large=always_too_large)
    assert ei.value.retryable and ei.value.status == 429
    assert len(sleeps) == 2


def test_quota_exceeded_is_not_retried():
    c, sleeps = client(lambda req: httpx.Response(403, json={"message": "API quota exceeded"}))
    with pytest.raises(QueryRejected, match="quota exceeded") as ei:
        c.get_json("x")
    assert not ei.value.retryable and ei.value.status == 403
    assert "not retried: wait until the server's quota resets" in str(ei.value)
    assert sleeps == []


def test_plain_503_is_transient_and_may_still_mean_too_large():
    c, sleeps = client(lambda req: httpx.Response(503, json={"errors": ["query_limit"]}))
    with pytest.raises(WindowTooLarge):
        c.post_json("q", {}, too_large=lambda s, b: b"query_limit" in b)
    assert sleeps == []


# -- credentials in URLs -------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["Xy7/pq#Zr@w?k", "Kj8#Q9", "Vv9/Ww"])
def test_unencoded_password_characters_never_reach_messages(password):
    url = f"http://alice:{password}@kairos.example:8083"
    assert redact_url(url) == "http://kairos.example:8083"
    seen = {}

    def handler(req):
        seen["auth"] = req.headers["authorization"]
        return httpx.Response(400, json={"errors": ["bad"]})

    c = HttpClient(url, transport=httpx.MockTransport(handler), retry=RetryPolicy(attempts=1))
    assert c.base_url == "http://kairos.example:8083"
    with pytest.raises(QueryRejected) as ei:
        c.get_json("api/v1/version")
    assert seen["auth"] == basic("alice", password)
    for piece in (password, password.split("/")[0], password.split("#")[0]):
        assert piece not in str(ei.value)


def test_a_bad_url_error_shows_no_password_piece():
    with pytest.raises(ConfigError) as ei:
        normalise_base_url("http://alice:secret/x#y@", "Examon URL")
    assert "secret" not in str(ei.value) and "alice" not in str(ei.value)
    assert "%2F" in str(ei.value)


def test_percent_encoded_password_is_decoded_before_basic_auth():
    user, password = split_credentials("https://al%40ce:p%2Fss%23w%25@h.example/api")[1:]
    assert (user, password) == ("al@ce", "p/ss#w%")
    seen = {}

    def handler(req):
        seen["auth"] = req.headers["authorization"]
        return httpx.Response(200, json={})

    c = HttpClient("https://alice:p%2Fss@h.example", transport=httpx.MockTransport(handler))
    c.get_json("x")
    assert seen["auth"] == basic("alice", "p/ss")


def test_sibling_service_gets_the_connection_credentials():
    seen = []

    def handler(req):
        seen.append((req.url.host, req.url.port, req.headers.get("authorization")))
        return httpx.Response(200, json=[])

    c = HttpClient(
        "http://alice:s3/cret@examon.example:8083", transport=httpx.MockTransport(handler)
    )
    jobs = c.sibling("http://examon.example:5000")
    jobs.post_json("api/v1/examon/jobs/query", {})
    other = c.sibling("http://bob:pw@examon.example:5000")  # its own credentials win
    other.get_json("x")
    assert seen == [
        ("examon.example", 5000, basic("alice", "s3/cret")),
        ("examon.example", 5000, basic("bob", "pw")),
    ]
    assert jobs.retry == c.retry and jobs.timeout_s == c.timeout_s


def basic(user, password):
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- answer size cap -----------------------------------------------------------------------------


def test_answer_over_the_cap_is_refused_with_the_context():
    c = HttpClient(
        "http://h.example",
        transport=httpx.MockTransport(
            lambda req: httpx.Response(200, content=b"[" + b"1," * 600 + b"1]")
        ),
        max_answer_bytes=1000,
    )
    with pytest.raises(AnswerTooLarge, match=r"larger than 0.000953674 MiB.*\(metric m, day 1\)"):
        c.get_json("x", context="metric m, day 1")
    with pytest.raises(WindowTooLarge):
        c.get_json("x", timeout_is_too_large=True)


def test_cap_and_deadline_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("DXT_MAX_ANSWER_MB", "2")
    monkeypatch.setenv("DXT_REQUEST_DEADLINE_S", "7.5")
    c = HttpClient("http://h.example")
    assert c.max_answer_bytes == 2 << 20 and c.deadline_s == 7.5
    monkeypatch.setenv("DXT_REQUEST_DEADLINE_S", "soon")
    with pytest.raises(ConfigError, match="DXT_REQUEST_DEADLINE_S must be a number"):
        HttpClient("http://h.example")


# -- compression on the wire ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:9090", True),
        ("http://127.3.0.9:9090/prometheus", True),
        ("http://[::1]:8428", True),
        ("http://localhost:9090", True),
        ("http://user:pw@LOCALHOST", True),
        ("http://prometheus.localhost", True),
        ("http://10.0.0.7:9090", False),
        ("https://prometheus.example.org", False),
        ("http://localhost.example.org", False),
    ],
)
def test_compression_auto_is_none_on_this_machine_only(url, loopback):
    from dxt_core.urls import is_loopback, wants_gzip

    assert is_loopback(url) is loopback
    assert wants_gzip("auto", url) is not loopback
    assert wants_gzip("gzip", url) is True and wants_gzip("none", url) is False
    with pytest.raises(ConfigError, match="compression must be one of auto, gzip, none"):
        wants_gzip("zstd", url)


@pytest.mark.parametrize("accept_gzip", [True, False])
def test_the_encoding_asked_for_is_sent_and_either_answer_is_read(accept_gzip):
    import gzip

    seen = []
    body = b'{"status":"success","data":[1,2,3]}'

    def handler(req):
        seen.append(req.headers["accept-encoding"])
        if "gzip" in req.headers["accept-encoding"]:
            return httpx.Response(
                200, content=gzip.compress(body), headers={"Content-Encoding": "gzip"}
            )
        return httpx.Response(200, content=body)

    c = HttpClient(
        "http://h.example", accept_gzip=accept_gzip, transport=httpx.MockTransport(handler)
    )
    assert c.get_json("api/v1/x") == {"status": "success", "data": [1, 2, 3]}
    assert seen == ["gzip" if accept_gzip else "identity"]


@pytest.mark.parametrize("port", ["99999", "abc", "0"])
def test_a_bad_port_is_named_in_the_url_error(port):
    with pytest.raises(ConfigError) as err:
        normalise_base_url(f"http://alice:s3cret@127.0.0.1:{port}/api", "Examon URL")
    assert f"its port {port!r} is not a number from 1 to 65535" in str(err.value)
    assert "s3cret" not in str(err.value) and "alice" not in str(err.value)


def test_an_html_answer_says_the_url_may_not_be_the_apis():
    def handler(req):
        return httpx.Response(200, text="<!DOCTYPE html><html><title>Grafana</title></html>")

    c, _ = client(handler)
    with pytest.raises(SourceError) as err:
        c.get_json("api/v1/version")
    assert "the server answered a web page (HTML): is the URL the API's" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_parameters_too_long_for_a_url_are_a_clear_error_not_a_crash():
    """httpx refuses a URL query over 64 KiB before anything is sent; that was an
    ``httpx.InvalidURL`` out of every caller. A form (``form=``) carries them."""
    sent: list[bytes] = []

    def handler(req):
        sent.append(req.content)
        return httpx.Response(200, json={"ok": True})

    c, _ = client(handler)
    long = {"match[]": 'm{instance=~"' + "|".join(f"h{i:05d}" for i in range(12_000)) + '"}'}
    with pytest.raises(QueryRejected) as e:
        c.exchange("GET", "api/v1/series", params=long)
    assert "the request was not sent" in str(e.value) and "s3cret" not in str(e.value)
    assert sent == []
    status, _, _ = c.exchange("POST", "api/v1/series", form=list(long.items()))
    assert status == 200 and sent[0].startswith(b"match%5B%5D=m%7Binstance")


def test_one_attempt_is_said_in_the_singular():
    c, _ = client(lambda req: httpx.Response(503, text="down"), attempts=1)
    with pytest.raises(SourceUnavailable, match="gave up after 1 attempt: "):
        c.get_json("x")
