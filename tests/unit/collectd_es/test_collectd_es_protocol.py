"""What the client makes of servers' answers (no server: the answers are written out here,
each from the upstream file or report that shows it)."""

from __future__ import annotations

import datetime as dt

import httpx
import orjson
import pytest

from dxt_core.backends.collectd_es.cli import parse_time, parse_zone
from dxt_core.backends.collectd_es.connection import (
    ServerInfo,
    context_missing,
    endpoint_missing,
    error_parts,
)
from dxt_core.backends.collectd_es.source import shard_problem, time_slices
from dxt_core.errors import ConfigError, QueryRejected, SourceError

ES_MAIN = {"name": "n", "cluster_name": "c", "tagline": "You Know, for Search"}
OS_TAGLINE = "The OpenSearch Project: https://opensearch.org/"


def main_doc(number: str, **version) -> dict:
    return {**ES_MAIN, "version": {"number": number, **version}}


@pytest.mark.parametrize(
    ("doc", "headers", "product", "pit", "shard_doc"),
    [
        # MainResponse.java (elastic/elasticsearch): no distribution key
        (main_doc("9.1.0", build_flavor="default"), {"x-elastic-product": "Elasticsearch"}, "elasticsearch", "_pit", True),
        (main_doc("8.15.3"), {}, "elasticsearch", "_pit", True),
        (main_doc("7.17.9"), {}, "elasticsearch", "_pit", True),
        (main_doc("7.12.0"), {}, "elasticsearch", "_pit", True),
        # PIT came in 7.10 (x-pack) without a tiebreaker; _shard_doc in 7.12 (#66093)
        (main_doc("7.11.2"), {}, "elasticsearch", None, False),
        (main_doc("7.10.2", build_flavor="oss"), {}, "elasticsearch", None, False),
        (main_doc("6.8.23"), {}, "elasticsearch", None, False),
        # opensearch-project/OpenSearch MainResponse.java: distribution "opensearch"
        ({"tagline": OS_TAGLINE, "version": {"distribution": "opensearch", "number": "2.11.1"}}, {}, "opensearch", "point_in_time", False),
        ({"tagline": OS_TAGLINE, "version": {"distribution": "opensearch", "number": "2.4.0"}}, {}, "opensearch", "point_in_time", False),
        ({"tagline": OS_TAGLINE, "version": {"distribution": "opensearch", "number": "3.3.0"}}, {}, "opensearch", "point_in_time", True),
        ({"tagline": OS_TAGLINE, "version": {"distribution": "opensearch", "number": "2.3.0"}}, {}, "opensearch", None, False),
        ({"tagline": OS_TAGLINE, "version": {"distribution": "opensearch", "number": "1.3.20"}}, {}, "opensearch", None, False),
        # compatibility.override_main_response_version (OpenSearch#847): 7.10.2, no
        # distribution; the tagline still says OpenSearch, and the number is not its own
        ({"tagline": OS_TAGLINE, "version": {"number": "7.10.2"}}, {}, "opensearch", None, False),
        ({"hello": "world"}, {}, "unknown", None, False),
    ],
)  # fmt: skip
def test_the_server_decides_the_paging(doc, headers, product, pit, shard_doc):
    info = ServerInfo.from_main(doc, headers)
    assert (info.product, info.pit_api, info.shard_doc) == (product, pit, shard_doc)


def test_a_hidden_elasticsearch_version_is_at_least_7_14():
    """X-Elastic-Product is on every answer from 7.14 (elastic/elasticsearch#73434)."""
    info = ServerInfo("elasticsearch", None)
    assert (
        info.pit_api == "_pit" and info.shard_doc and str(info) == "Elasticsearch (version hidden)"
    )
    assert ServerInfo("unknown", None).pit_api is None


# the answers below are those quoted in the upstream sources and reports named
ES8_PY9 = orjson.dumps(
    {
        "error": {
            "root_cause": [{"type": "media_type_header_exception", "reason": "Invalid media-type value on headers [Accept, Content-Type]"}],
            "type": "media_type_header_exception",
            "reason": "Invalid media-type value on headers [Accept, Content-Type]",
            "caused_by": {"type": "status_exception", "reason": "Accept version must be either version 8 or 7, but found 9. Accept=application/vnd.elasticsearch+json; compatible-with=9"},
        },
        "status": 400,
    }
)  # fmt: skip
NO_HANDLER = (
    b'{"error":"no handler found for uri [/cori-collectd-*/_pit] and method [POST]","status":400}'
)
TYPED_INDEX = b'{"error":{"root_cause":[{"type":"parse_exception","reason":"request body is required"}],"type":"parse_exception","reason":"request body is required"},"status":400}'
EXPIRED = b'{"error":{"root_cause":[{"type":"search_context_missing_exception","reason":"No search context found for id [1]"}],"type":"search_phase_execution_exception","reason":"all shards failed"},"status":404}'


def test_only_a_missing_endpoint_means_no_point_in_time():
    """RestController.java: "no handler found for uri" is a path without a handler. The
    media-type refusal of ES 8 (RestCompatibleVersionHelper.java) is not."""
    assert endpoint_missing(400, NO_HANDLER)
    assert endpoint_missing(405, b'{"error":"Incorrect HTTP method for uri [/x/_pit] and method [POST], allowed: [GET]","status":405}')  # fmt: skip
    assert not endpoint_missing(400, ES8_PY9)
    assert not endpoint_missing(400, TYPED_INDEX)
    assert not endpoint_missing(404, EXPIRED) and context_missing(404, EXPIRED)


def test_error_text_names_the_type_and_the_cause():
    kind, reason = error_parts(ES8_PY9)
    assert kind == "media_type_header_exception"
    assert "Invalid media-type value" in reason and "found 9" in reason
    assert error_parts(b'{"error":"Content-Type header [x] is not supported","status":406}') == (
        "",
        "Content-Type header [x] is not supported",
    )
    assert error_parts(b"<html>bad gateway</html>") == ("", "<html>bad gateway</html>")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"_shards": {"total": 5, "successful": 5, "skipped": 0, "failed": 0}}, None),
        ({"_shards": {"total": 5, "successful": 3, "skipped": 2, "failed": 0}}, None),
        ({}, None),
        # helpers/actions.py scan(): successful + skipped < total
        ({"_shards": {"total": 5, "successful": 4, "skipped": 0, "failed": 0}}, "only 4 (+0 skipped) of 5"),
        ({"_shards": {"total": 2, "successful": 1, "skipped": 0, "failed": 1, "failures": [{"reason": {"type": "node_disconnected_exception", "reason": "gone"}}]}}, "node_disconnected_exception: gone"),
        ({"timed_out": True, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}, "timed out"),
    ],
)  # fmt: skip
def test_partial_answers_are_recognised(answer, problem):
    found = shard_problem(answer)
    assert (found is None) if problem is None else (problem in found)


def test_time_slices_cover_the_window_once_on_the_grid():
    lo, hi = 1_000_000, 1_000_000 + 86_400_000
    s = time_slices(lo, hi, 3, 10_000)
    assert s[0][0] == lo and s[-1][1] == hi and len(s) == 3
    assert all(a[1] == b[0] for a, b in zip(s, s[1:]))
    assert all((b - lo) % 10_000 == 0 for _, b in s[:-1])
    assert time_slices(lo, lo + 25_000, 8, 10_000) == [(lo, lo + 10_000), (lo + 10_000, lo + 20_000), (lo + 20_000, lo + 25_000)]  # fmt: skip
    assert time_slices(lo, lo + 5, 4) == [(lo, lo + 1), (lo + 1, lo + 2), (lo + 2, lo + 3), (lo + 3, lo + 5)]  # fmt: skip
    with pytest.raises(ConfigError):
        time_slices(lo, lo, 2)


def test_naive_times_are_utc_unless_tz_says_otherwise(monkeypatch):
    assert parse_time("2017-12-13T08:00:00", "START") == dt.datetime(2017, 12, 13, 8, tzinfo=dt.UTC)
    la = parse_zone("America/Los_Angeles")
    t = parse_time("2017-12-13T00:00:00", "START", la)
    assert t.astimezone(dt.UTC) == dt.datetime(2017, 12, 13, 8, tzinfo=dt.UTC)
    # DST in the zone's own rules: July is UTC-7
    t = parse_time("2017-07-13T00:00:00", "START", la)
    assert t.astimezone(dt.UTC) == dt.datetime(2017, 7, 13, 7, tzinfo=dt.UTC)
    # an explicit offset wins over --tz
    assert parse_time("2017-12-13T09:00:00+01:00", "START", la).utcoffset() == dt.timedelta(hours=1)
    assert parse_zone("local") is None
    with pytest.raises(ConfigError, match="IANA"):
        parse_zone("Mars/Olympus")


@pytest.mark.parametrize("zone_name", ["America/Los_Angeles", "local"])
def test_a_wall_time_the_clocks_skipped_or_repeated_needs_its_offset(monkeypatch, zone_name):
    """--tz local and --tz <zone> read a time of a DST change alike: one that does not exist
    (02:30 on 2017-03-12 in Los Angeles) or happens twice (01:30 on 2017-11-05) is refused
    with the candidates, not moved by an hour one way (a zone) or the other (local)."""
    import time

    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    try:
        zone = parse_zone(zone_name)
        with pytest.raises(ConfigError, match=r"does not exist in .*give the time with its offset"):
            parse_time("2017-03-12T02:30:00", "--start", zone)
        with pytest.raises(ConfigError) as twice:
            parse_time("2017-11-05T01:30:00", "--start", zone)
        assert "happens twice" in str(twice.value)
        assert "2017-11-05T01:30:00-07:00 or 2017-11-05T01:30:00-08:00" in str(twice.value)
        t = parse_time("2017-03-12T03:30:00", "--start", zone)
        assert t.astimezone(dt.UTC) == dt.datetime(2017, 3, 12, 10, 30, tzinfo=dt.UTC)
    finally:
        monkeypatch.undo()
        time.tzset()


# --------------------------------------------------------------------------- the HTTP client
# (answers faked with httpx.MockTransport: a server's answer, not our code)


def client_for(handler, **kw):
    from dxt_core.backends.collectd_es.connection import CollectdEsConnection, EsClient
    from dxt_core.http import RetryPolicy

    conn = CollectdEsConnection("http://es.example.org:9200", user="reader", password="pw-123")
    return EsClient(conn, retry=RetryPolicy(attempts=3, backoff_s=0), sleep=lambda s: None,
                    transport=httpx.MockTransport(handler), **kw)  # fmt: skip


def test_requests_are_plain_json_with_basic_auth():
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    c = client_for(handler)
    assert c.json("POST", "/x/_search", body={"size": 1}, what="t") == {"ok": True}
    r = seen[0]
    assert r.headers["accept"] == "application/json"
    assert r.headers["content-type"] == "application/json"
    assert r.headers["authorization"].startswith("Basic ")


def test_overload_is_retried_then_answered():
    answers = iter([httpx.Response(503, json={"error": "busy"}), httpx.Response(429, text="slow down"),
                    httpx.Response(200, json={"n": 1})])  # fmt: skip
    c = client_for(lambda request: next(answers))
    assert c.json("GET", "/", what="t") == {"n": 1} and c.requests == 3


def test_a_redirect_is_not_followed_and_names_the_target():
    c = client_for(lambda r: httpx.Response(302, headers={"location": "https://u:pw@other.example.org/es/?t=1"}))  # fmt: skip
    with pytest.raises(QueryRejected, match=r"redirects to https://other.example.org/es/") as exc:
        c.json("GET", "/", what="t")
    assert "u:pw@" not in str(exc.value) and "t=1" not in str(exc.value)


def test_an_answer_larger_than_the_cap_is_refused():
    c = client_for(lambda r: httpx.Response(200, content=b"x" * 5000))
    c.max_answer_bytes = 1000
    with pytest.raises(SourceError, match="larger than 1000 bytes; lower the page size"):
        c.json("GET", "/", what="t")


def test_wrong_credentials_name_the_variables_not_the_password():
    c = client_for(lambda r: httpx.Response(401, json={"error": {"type": "security_exception", "reason": "unable to authenticate user [reader]"}, "status": 401}))  # fmt: skip
    with pytest.raises(QueryRejected) as exc:
        c.json("GET", "/", what="asking")
    assert "PYTOKIO_ES_USER" in str(exc.value) and "pw-123" not in str(exc.value)


@pytest.mark.parametrize(
    "url",
    ["http://reader:pa/ss@es.example.org:9200", "http://reader:pa#ss@es.example.org:9200",
     "http://reader:pa%2Fss@es.example.org:9200", "http://reader:pa?ss@es.example.org"],
)  # fmt: skip
def test_a_url_with_credentials_is_refused_without_echoing_it(url, capsys):
    """Issue 12.5: a password with an unencoded '/' or '#' ended in a traceback showing the
    URL. The error says where credentials go and shows no part of them."""
    from dxt_core.cli import main

    rc = main(["extract", "collectd-es", "--url", url, "2017-12-13T08:00", "2017-12-13T09:00", "--out", "x.hdf5"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "PYTOKIO_ES_PASSWORD" in err
    userinfo = url.split("://", 1)[1].split("@", 1)[0]
    assert userinfo not in err and "reader" not in err and "es.example.org" not in err
