"""Unit tests of how the Examon client reads refusals and values (no server process).

Each case names the upstream file whose wording or format it encodes.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection, examon_connection_from_fields
from dxt_core.backends.examon.decode import _bad_pair, _valid_numbers
from dxt_core.backends.examon.policy import REFUSAL_RULES, too_large
from dxt_core.backends.examon.simulator.faults import REFUSALS, nginx_page
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.errors import ConfigError, SourceError
from dxt_core.http import RetryPolicy

ROOT = Path(__file__).resolve().parents[3]


def errors(text: str) -> bytes:
    return ('{"errors":["' + text + '"]}').encode()


@pytest.mark.parametrize(
    "text",
    [
        # kairosdb v1.2.2 QueryMonitor.java, wrapped by CassandraDatastore and KairosDatastore
        REFUSALS["query_limit"].format(limit=10_000_000),
        # util/MemoryMonitorException.java, bare and wrapped (CachedSearchResult.getRows)
        "Insufficient memory to perform request",
        "org.kairosdb.util.MemoryMonitorException: Insufficient memory to perform request",
        # MetricsResource.runQuery catch (OutOfMemoryError e): the JVM's messages
        "Java heap space",
        "GC overhead limit exceeded",
    ],
)
def test_kairosdb_refusals_are_window_too_large(text: str) -> None:
    assert too_large(500, errors(text))
    assert not too_large(400, errors(text))  # KairosDB answers these with 500 only


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (429, nginx_page(429)),  # nginx limit_req: a rate limit, not a size
        (503, nginx_page(503)),
        (429, b"Too Many Requests"),
        (403, errors("quota exceeded")),  # a permission refusal
        (500, errors("Query exceeded the query_limit of 5 data points; narrow the time range")),
        (500, errors("org.kairosdb.core.exception.DatastoreException: bogus")),
        (502, b""),  # Grafana 7 proxy on any upstream error: transient
    ],
)
def test_other_answers_are_not_window_too_large(status: int, body: bytes) -> None:
    assert not too_large(status, body)
    assert not too_large(status, body, proxy=True)


def test_grafana_proxy_504_is_too_large_only_through_the_proxy() -> None:
    # grafana/grafana pkg/util/proxyutil/reverse_proxy.go: 504, no body, on a proxy timeout.
    assert too_large(504, b"", proxy=True)
    assert not too_large(504, b"", proxy=False)
    assert not too_large(504, b"<html>504 Gateway Time-out</html>", proxy=True)


def test_the_rules_table_is_in_the_docs() -> None:
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    for rule in REFUSAL_RULES:
        assert rule.upstream in doc, rule
        assert rule.action in doc, rule


@pytest.mark.parametrize(
    "inner",
    [b"[1,2]", b"[1,-2.5e-3],[2,0]", b"[1,0.30000000000000004],[2,24]", b"[1,1E+5],[2,-0]"],
)
def test_valid_numbers(inner: bytes) -> None:
    assert _valid_numbers(inner)


@pytest.mark.parametrize(
    ("inner", "bad"),
    [
        (b"[1,2],[3,]", b"[3,]"),
        (b"[1,1-2e],[3,4]", b"[1,1-2e]"),
        (b"[1,2],[3,.5],[5,6]", b"[3,.5]"),
        (b"[1,01]", b"[1,01]"),
        (b"[1,1.],[2,2]", b"[1,1.]"),
        (b"[1,+1]", b"[1,+1]"),
        (b"[1,1e5.2]", b"[1,1e5.2]"),
    ],
)
def test_invalid_numbers_and_the_pair_shown(inner: bytes, bad: bytes) -> None:
    assert not _valid_numbers(inner)
    assert _bad_pair(inner) == bad


class _AnswersEmptyObject(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_kairosdb() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnswersEmptyObject)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_tags_query_error_names_the_full_url(not_kairosdb: str) -> None:
    with (
        KairosDBSource(ExamonConnection(url=not_kairosdb), retry=RetryPolicy(attempts=1)) as src,
        pytest.raises(SourceError) as ei,
    ):
        src.schema(CatalogEntry("ambient", "ipmi_pub"))
    assert f"{not_kairosdb}/api/v1/datapoints/query/tags" in str(ei.value)


def test_jobs_api_is_checked() -> None:
    assert ExamonConnection(url="http://x:1", jobs_api="v2").jobs_api == "v2"
    with pytest.raises(ConfigError, match="v1, v2"):
        ExamonConnection(url="http://x:1", jobs_api="v3")
    with pytest.raises(ConfigError, match=r"connection .e.*jobs_api"):
        examon_connection_from_fields(conn_id="e", host="x", extra={"jobs_api": "2"})
    conn = examon_connection_from_fields(conn_id="e", host="x", extra={"jobs_api": "v2"})
    assert conn.jobs_api == "v2"


def test_a_rate_limit_that_outlasted_the_retries_names_its_status_and_url_once():
    """The 429 the retries gave up on becomes RateLimited; the message quoted the whole
    error, so "HTTP 429 | from <url>" came twice."""
    from dxt_core.backends.examon.client import rate_limited
    from dxt_core.errors import RateLimited, SourceUnavailable

    url = "http://kairos.example:8080/api/v1/datapoints/query"

    def refused() -> None:
        raise SourceUnavailable("gave up after 5 attempts: rate limited", url=url, status=429)

    with pytest.raises(RateLimited) as err:
        rate_limited(refused)
    msg = str(err.value)
    assert msg.count(url) == 1 and msg.count("HTTP 429") == 1, msg
    assert "(gave up after 5 attempts: rate limited)" in msg, msg
