"""Fault matrix, source side: what the network and the server do wrong, and what we do.

Each test puts the fault proxy (tests/faults/proxy.py) in front of the Examon simulator (a
separate process) and archives a metric-day through the real backend code, or sends one
request through :class:`dxt_core.http.HttpClient`. docs/faults.md has the table.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ssl
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from dxt_core import Archive, RetryPolicy
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource, WindowPolicy
from dxt_core.errors import (
    AnswerTooLarge,
    QueryRejected,
    RateLimited,
    SourceError,
    SourceUnavailable,
)
from dxt_core.http import HttpClient
from tests.conftest import SimulatorProcess
from tests.faults.proxy import Answer, FaultProxy, GzipBomb, Redirect, Reset, Trickle
from tests.services import server_tls_context

pytestmark = pytest.mark.integration

DAY = dt.date(2020, 3, 9)
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
DATA = "/api/v1/datapoints/query$"  # the data queries, not the tag queries


def source(url: str, **kw) -> KairosDBSource:
    retry = kw.pop("retry", RetryPolicy(attempts=4, backoff_s=0.01, jitter=0))
    windows = kw.pop("windows", WindowPolicy(initial_s=6 * 3600))
    return KairosDBSource(ExamonConnection(url=url, **kw), retry=retry, windows=windows)


def archive_day(url: str, root: Path, **kw):
    with source(url, **kw) as src:
        return archive_examon_day(src, AMBIENT, DAY, Archive(root))


@pytest.fixture(scope="module")
def reference(examon_sim, tmp_path_factory) -> bytes:
    """The day archived without faults: every faulty run must give these bytes."""
    rep = archive_day(examon_sim.url, tmp_path_factory.mktemp("reference"))
    return rep.path.read_bytes()


def data_requests(proxy: FaultProxy):
    return [s for s in proxy.seen if s.path.split("?")[0].endswith("/datapoints/query")]


# -- transient faults: retried, same bytes ---------------------------------------------------


def test_5xx_burst_is_retried_and_gives_the_same_bytes(examon_proxy, reference, tmp_path):
    examon_proxy.inject(
        Answer(502, b"Bad Gateway", match=DATA),
        Answer(503, b"Service Unavailable", match=DATA),
        Answer(500, b'{"errors": ["boom"]}', match=DATA),
    )
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.retries == 3 and rep.stats.splits == 0
    assert rep.path.read_bytes() == reference


def test_connection_resets_are_retried_and_give_the_same_bytes(examon_proxy, reference, tmp_path):
    examon_proxy.inject(Reset(match=DATA), Reset(match="/tags"), Reset(match=DATA))
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.retries == 3
    assert rep.path.read_bytes() == reference


# -- rate limits: wait, never split ----------------------------------------------------------


def test_429_waits_retry_after_and_never_splits(examon_proxy, reference, tmp_path):
    """Examon's "too large" check reads "Too Many Requests" as "too many points": a rate
    limit must be classified first, or a busy server gets twice the requests."""
    examon_proxy.inject(
        Answer(429, b"Too Many Requests", {"Retry-After": "1"}, match=DATA),
    )
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.splits == 0 and rep.stats.retries == 1
    first, second = data_requests(examon_proxy)[:2]
    assert second.at - first.at >= 0.95  # Retry-After, not the 0.01 s backoff
    assert rep.path.read_bytes() == reference


def test_503_saying_too_many_requests_is_a_rate_limit(examon_proxy, reference, tmp_path):
    examon_proxy.inject(
        Answer(503, b"<html><h1>503 Too Many Requests</h1></html>", match=DATA),
        Answer(503, b"Service Unavailable", {"Retry-After": "0"}, match=DATA),
    )
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.splits == 0 and rep.stats.retries == 2
    assert rep.path.read_bytes() == reference


def test_persistent_rate_limit_fails_as_rate_limited(examon_proxy, tmp_path):
    examon_proxy.inject(*[Answer(429, b"Too Many Requests", match=DATA) for _ in range(4)])
    with pytest.raises(RateLimited, match="limits the request rate: still refused after 4") as ei:
        archive_day(examon_proxy.url, tmp_path)
    assert ei.value.retryable
    assert len(data_requests(examon_proxy)) == 4  # no split: the same window four times


def test_quota_exceeded_fails_at_once(examon_proxy, tmp_path):
    examon_proxy.inject(Answer(403, b'{"message": "daily quota exceeded"}', match=DATA))
    with pytest.raises(QueryRejected, match=r"quota exceeded.*not retried") as ei:
        archive_day(examon_proxy.url, tmp_path)
    assert not ei.value.retryable and ei.value.status == 403
    assert len(data_requests(examon_proxy)) == 1


# -- slow answers: a total deadline per request ---------------------------------------------


def test_a_trickling_server_is_cut_off_at_the_deadline(examon_proxy):
    """One byte every 0.2 s never trips a 5 s read timeout; the 1 s deadline stops it."""
    examon_proxy.inject(Trickle(0.2, match="version"), Trickle(0.2, match="version"))
    c = HttpClient(
        examon_proxy.url,
        timeout_s=5,
        deadline_s=1.0,
        retry=RetryPolicy(attempts=2, backoff_s=0, jitter=0),
    )
    t0 = time.monotonic()
    with c, pytest.raises(SourceUnavailable, match=r"no complete answer within 1 s"):
        c.get_json("api/v1/version")
    assert time.monotonic() - t0 < 2 * (1.0 + 0.2) + 0.5


def test_a_trickled_window_is_split_and_the_day_completes(
    examon_proxy, reference, tmp_path, monkeypatch
):
    monkeypatch.setenv("DXT_REQUEST_DEADLINE_S", "1")
    examon_proxy.inject(Trickle(0.05, chunk=64, match=DATA))
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.splits >= 1
    assert rep.path.read_bytes() == reference


# -- answers too large once decoded ----------------------------------------------------------


def test_a_gzip_bomb_stops_at_the_cap_with_bounded_memory(examon_proxy):
    """256 MiB of zeros in 256 KiB of gzip: decoding stops at the 16 MiB cap."""
    examon_proxy.inject(GzipBomb(256 << 20, match="version"))
    c = HttpClient(examon_proxy.url, max_answer_bytes=16 << 20, retry=RetryPolicy(attempts=1))
    tracemalloc.start()
    try:
        with c, pytest.raises(AnswerTooLarge) as ei:
            c.get_json("api/v1/version", context="metric ambient, window 00:00-06:00")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(ei.value)
    assert "larger than 16 MiB once decoded (metric ambient, window 00:00-06:00)" in msg
    assert f"from {examon_proxy.url}/api/v1/version" in msg
    assert peak < 64 << 20, peak


def test_a_gzip_bomb_in_a_window_is_split_like_a_refusal(
    examon_proxy, reference, tmp_path, monkeypatch
):
    monkeypatch.setenv("DXT_MAX_ANSWER_MB", "16")
    examon_proxy.inject(GzipBomb(64 << 20, match=DATA))
    rep = archive_day(examon_proxy.url, tmp_path)
    assert rep.stats.splits >= 1
    assert rep.path.read_bytes() == reference


# -- redirects, TLS and credentials ----------------------------------------------------------


class Recorder(http.server.ThreadingHTTPServer):
    """A server that records the requests it gets and answers 401 (or 200 ``{}``)."""

    def __init__(self, status: int = 401, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict[str, str]] = []
        self.status = status
        server = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                server.requests.append(dict(self.headers.items()))
                body = b"{}" if server.status == 200 else b'{"message": "Unauthorized"}'
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

        super().__init__(("127.0.0.1", 0), H)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.daemon_threads = True
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture(scope="module")
def other_name_cert(tmp_path_factory) -> ssl.SSLContext:
    """A server TLS context with a self-signed certificate for another name."""
    return server_tls_context(tmp_path_factory.mktemp("tls"), "other.example")


def test_redirect_to_https_verifies_the_certificate(examon_proxy, other_name_cert):
    """http:// then a redirect to https:// with a self-signed certificate for another name:
    the TLS check fails, so neither the request nor the credentials reach that server."""
    tls = Recorder(status=200, tls=other_name_cert)
    try:
        examon_proxy.inject(Redirect(f"https://127.0.0.1:{tls.port}", status=301))
        c = HttpClient(
            examon_proxy.url, user="alice", password="s3cret", retry=RetryPolicy(attempts=1)
        )
        with c, pytest.raises(SourceError, match="TLS certificate check failed") as ei:
            c.get_json("api/v1/version")
        assert "s3cret" not in str(ei.value)
        assert f"https://127.0.0.1:{tls.port}/api/v1/version" in str(ei.value)
        assert tls.requests == []
    finally:
        tls.close()


def test_credentials_never_follow_a_redirect_to_another_origin(examon_proxy):
    other = Recorder(status=401)
    try:
        examon_proxy.inject(Redirect(f"http://127.0.0.1:{other.port}", status=307))
        c = HttpClient(
            examon_proxy.url, user="alice", password="s3cret", retry=RetryPolicy(attempts=1)
        )
        with c, pytest.raises(QueryRejected) as ei:
            c.post_json("api/v1/datapoints/query", {"metrics": []})
        assert "authorization" not in {k.lower() for k in other.requests[0]}
        assert examon_proxy.seen[0].headers.get("Authorization", "").startswith("Basic ")
        msg = str(ei.value)
        assert f"redirected to http://127.0.0.1:{other.port}/api/v1/datapoints/query" in msg
        assert "credentials are sent to the configured origin only" in msg
    finally:
        other.close()


@pytest.fixture(scope="module")
def auth_sim(small_catalog):
    sim = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "4", "--user", "alice",
         "--password", "pw/with#odd@chars"]
    )  # fmt: skip
    yield sim
    sim.stop()


def test_same_origin_redirect_keeps_the_credentials(auth_sim, tmp_path):
    with FaultProxy(auth_sim.url) as proxy:
        proxy.inject(Redirect(proxy.url, status=308, match=DATA))
        rep = archive_day(proxy.url, tmp_path, user="alice", password="pw/with#odd@chars")
        assert rep.rows == 4 * 4320
        assert len(data_requests(proxy)) >= 2


@pytest.mark.parametrize("status", [301, 302])
def test_a_posted_query_redirected_by_301_or_302_is_posted_again(auth_sim, tmp_path, status):
    """A proxy that moves the API (http -> https, a new path) answers 301 or 302; the
    KairosDB query is a POST, and turning it into a GET without its body (as browsers do)
    lost the query: every metric-day through such a proxy failed."""
    with FaultProxy(auth_sim.url) as proxy:
        proxy.inject(Redirect(proxy.url, status=status, match=DATA))
        rep = archive_day(proxy.url, tmp_path, user="alice", password="pw/with#odd@chars")
        assert rep.rows == 4 * 4320
        methods = [r.method for r in data_requests(proxy)]
        assert methods[:2] == ["POST", "POST"]


@pytest.mark.parametrize(
    "userinfo",
    ["alice:pw/with#odd@chars", "alice:pw%2Fwith%23odd%40chars"],
    ids=["unencoded", "percent-encoded"],
)
def test_url_passwords_with_odd_characters_work_and_never_show(auth_sim, tmp_path, userinfo):
    url = auth_sim.url.replace("http://", f"http://{userinfo}@")
    rep = archive_day(url, tmp_path)
    assert rep.rows == 4 * 4320
    manifest = rep.manifest.read_text()
    for piece in ("pw/with", "with#odd", "odd@chars", "pw%2F", "alice"):
        assert piece not in manifest
    assert auth_sim.url in manifest


def test_a_wrong_url_password_fails_without_showing_it(auth_sim, tmp_path):
    url = auth_sim.url.replace("http://", "http://alice:wr/ong#pass@")
    with pytest.raises(QueryRejected, match="authentication failed") as ei:
        archive_day(url, tmp_path)
    for piece in ("wr/ong", "ong#pass", "#pass", "alice"):
        assert piece not in str(ei.value)


def test_url_credentials_reach_the_examon_jobs_service(auth_sim, tmp_path):
    """The jobs service is another URL of the same connection: credentials given in the
    connection URL go there too."""
    url = auth_sim.url.replace("http://", "http://alice:pw%2Fwith%23odd%40chars@")
    jobs = CatalogEntry("job_info_marconi100", "job_table")
    with source(url, jobs_url=auth_sim.url) as src:
        rep = archive_examon_day(src, jobs, DAY, Archive(tmp_path))
    assert rep.status in ("archived", "empty") and rep.stats.requests >= 1


def test_default_jobs_url_with_an_odd_url_password(auth_sim):
    conn = ExamonConnection(url="http://alice:pw/x#y@examon.example:8083")
    assert conn.default_jobs_url() == "http://examon.example:5000"
