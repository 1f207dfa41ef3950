"""Contract tests: the Examon simulator answers as the upstream servers do.

Each test names the upstream file whose behaviour it encodes (facts gathered in
docs/compatibility.md). The simulator runs as a separate process, over real HTTP.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import orjson
import pytest

from dxt_core.backends.examon.simulator.model import JOB_PERIOD_S, DataModel, SimConfig
from tests.integration.examon.test_simulator import SimProcess

pytestmark = pytest.mark.integration

DAY_MS = int(datetime(2020, 3, 9, tzinfo=UTC).timestamp() * 1000)
HOUR_MS = 3_600_000
TABLE = "job_info_marconi100"


def client_query(tstart: int, tstop: int | None, **changes: object) -> dict[str, object]:
    """The serialized examon-client 0.4 ``Query`` (querybuilder.py field order)."""
    return {
        "tstart": tstart,
        "tstop": tstop,
        "metrics": [TABLE],
        "tags": None,
        "groupby": [{"name": "tag", "tags": []}],
        "aggrby": None,
        "limit": None,
        "time_zone": "Europe/Rome",
        **changes,
    }


@pytest.fixture(scope="module")
def real() -> Iterator[SimProcess]:
    """Default (realistic) mode, with a jobs-only port as the real Examon server has."""
    process = SimProcess("--nodes", "4", "--jobs-port", "0")
    yield process
    assert process.stop() == 0


@pytest.fixture
def c(real: SimProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=real.url, timeout=30) as client:
        yield client
        client.post("/_sim/faults/reset").raise_for_status()


def jobs_port_url(real: SimProcess) -> str:
    lines = []
    assert real.proc.stdout is not None
    while not any("jobs API also on" in line for line in lines):
        lines.append(real.proc.stdout.readline())
    return next(line for line in lines if "jobs API" in line).strip().rsplit(" ", 1)[-1]


# --------------------------------------------------------------------------------------------
# ExamonHPC/examon web/examon-server/server.py: the job accounting endpoints
# --------------------------------------------------------------------------------------------


def test_v1_takes_a_json_string_and_answers_a_json_string(c: httpx.Client) -> None:
    # examon-client jobsclient.py query_jobs: json.dumps(query._asdict()), json.dumps'ed again
    # by kairosdb.py send_req; server.py get_jobs_test: json.loads(request.json), then
    # jsonify(df.to_json(date_format='iso', orient='records')).
    body = json.dumps(client_query(DAY_MS, DAY_MS + HOUR_MS))
    r = c.post("/api/v1/examon/jobs/query", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content.endswith(b'"\n')  # jsonify of a str: a JSON string literal + newline
    records = json.loads(r.json())
    assert isinstance(records, list) and len(records) == HOUR_MS // (JOB_PERIOD_S * 1000)
    # pandas to_json: naive UTC datetimes with milliseconds and a literal Z; "/" escaped.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z", records[0]["start_time"])
    assert b"\\\\/m100" in r.content  # "\/" inside the string literal


def test_v1_refuses_the_old_object_body_with_500(c: httpx.Client) -> None:
    # json.loads(request.json) on a dict raises TypeError outside the handler's try.
    r = c.post("/api/v1/examon/jobs/query", json={"table": TABLE, "tstart": 1, "tstop": 2})
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("text/html")
    assert "<title>500 Internal Server Error</title>" in r.text


def test_v2_takes_the_object_and_needs_every_key(c: httpx.Client) -> None:
    full = client_query(DAY_MS, DAY_MS + HOUR_MS)
    r = c.post("/api/v2/examon/jobs/query", json=full)
    assert r.status_code == 200 and not r.content.endswith(b"\n")
    assert isinstance(r.json(), list) and r.json()
    # query_builder reads query['groupby'] first; the KeyError reaches the except, whose
    # logger line names the unassigned stmt: UnboundLocalError, so 500 and not 400.
    del full["groupby"]
    assert c.post("/api/v2/examon/jobs/query", json=full).status_code == 500
    old = {"table": TABLE, "tstart": DAY_MS, "tstop": DAY_MS + HOUR_MS}
    assert c.post("/api/v2/examon/jobs/query", json=old).status_code == 500
    # A JSON string (the v1 body) is not subscriptable with 'groupby' either.
    assert c.post("/api/v2/examon/jobs/query", json=json.dumps(old)).status_code == 500
    # aggrby and time_zone are never read.
    lean = {k: v for k, v in client_query(DAY_MS, DAY_MS + 1).items() if k != "aggrby"}
    del lean["time_zone"]
    assert c.post("/api/v2/examon/jobs/query", json=lean).status_code == 200


def test_bad_payloads_are_400_html_and_cassandra_errors_400_json(c: httpx.Client) -> None:
    q = json.dumps(client_query(DAY_MS, DAY_MS + 1))
    # Werkzeug 0.16 request.json is None without a JSON content type: abort(400).
    r = c.post("/api/v1/examon/jobs/query", content=json.dumps(q), headers={"Content-Type": ""})
    assert r.status_code == 400 and "<title>400 Bad Request</title>" in r.text
    r = c.post(
        "/api/v1/examon/jobs/query",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and "text/html" in r.headers["content-type"]
    assert c.post("/api/v1/examon/jobs/query", json="").status_code == 400  # falsy payload
    # Errors raised by Cassandra after the statement is built: jsonify(e.message), 400.
    r = c.post(
        "/api/v1/examon/jobs/query",
        json=json.dumps(client_query(DAY_MS, DAY_MS + 1, metrics=["job_info_nowhere"])),
    )
    assert r.status_code == 400
    assert "unconfigured table job_info_nowhere" in r.json()
    # Only POST is routed: Flask answers 405 before the view.
    assert c.get("/api/v1/examon/jobs/query").status_code == 405


def test_jobs_are_selected_by_start_time_as_cql_tuples(c: httpx.Client) -> None:
    # WHERE (start_time, end_time) >= (T1,T1) AND (start_time, end_time) <= (T2,T2):
    # a job starting at T2 comes back only if it also ends at T2 (zero length).
    model = DataModel(SimConfig(catalog=[(TABLE, "job_table")], nodes=4))
    period_ms = JOB_PERIOD_S * 1000
    k = next(k for k in range(DAY_MS // period_ms, DAY_MS // period_ms + 500)
             if model.job_span_ms(k)[0] == model.job_span_ms(k)[1])  # fmt: skip
    zero_start = model.job_span_ms(k)[0]
    long_k = next(
        j for j in range(k + 1, k + 500) if model.job_span_ms(j)[1] > model.job_span_ms(j)[0]
    )
    long_start = model.job_span_ms(long_k)[0]

    def starts(tstart: int, tstop: int) -> list[int]:
        r = c.post("/api/v2/examon/jobs/query", json=client_query(tstart, tstop))
        return [
            int(datetime.fromisoformat(j["start_time"].replace("Z", "+00:00")).timestamp() * 1000)
            for j in r.json()
        ]

    assert zero_start in starts(zero_start - 2 * period_ms, zero_start)
    assert long_start not in starts(long_start - 2 * period_ms, long_start)
    got = starts(long_start, long_start + 2 * period_ms)
    assert got[0] == long_start and all(long_start <= s <= long_start + 2 * period_ms for s in got)


def test_records_are_dataframe_rows(c: httpx.Client) -> None:
    # Cassandra rows have every column (null when empty); pandas turns an integer column
    # holding a null into float64, written "123.0".
    r = c.post(
        "/api/v2/examon/jobs/query",
        json=client_query(DAY_MS, DAY_MS + 6 * HOUR_MS),
        headers={"Accept-Encoding": "identity"},
    )
    jobs = r.json()
    assert len({frozenset(j) for j in jobs}) == 1
    arrays = [j["array_job_id"] for j in jobs]
    assert None in arrays and any(isinstance(a, float) for a in arrays)
    assert re.search(rb'"array_job_id":\d+\.0,', r.content)


def test_flask_gzip_rules(c: httpx.Client) -> None:
    # web/examon-server/flask_gzip.py: 2xx, at least 500 bytes, 'gzip' in Accept-Encoding;
    # no Vary header.
    q = client_query(DAY_MS, DAY_MS + HOUR_MS)
    r = c.post("/api/v2/examon/jobs/query", json=q, headers={"Accept-Encoding": "gzip"})
    assert r.headers.get("content-encoding") == "gzip" and "vary" not in r.headers
    small = client_query(DAY_MS + 1, DAY_MS + 2)
    r = c.post("/api/v2/examon/jobs/query", json=small, headers={"Accept-Encoding": "gzip"})
    assert r.content == b"[]" and "content-encoding" not in r.headers


def test_jobs_only_port_is_the_examon_server(real: SimProcess) -> None:
    url = jobs_port_url(real)
    body = json.dumps(client_query(DAY_MS, DAY_MS + HOUR_MS))
    r = httpx.post(url + "/api/v1/examon/jobs/query", json=body)
    assert r.status_code == 200 and json.loads(r.json())
    assert httpx.get(url + "/").text == "Examon Server"
    assert httpx.get(url + "/api/v1/version").status_code == 404  # no KairosDB there


def test_jobs_auth_is_flask_httpauth() -> None:
    process = SimProcess("--nodes", "2", "--user", "u", env={"DXT_SIM_PASSWORD": "p"})
    try:
        q = json.dumps(client_query(DAY_MS, DAY_MS + 1))
        r = httpx.post(process.url + "/api/v1/examon/jobs/query", json=q)
        # Flask-HTTPAuth 3.3.0: "Unauthorized Access", realm "Authentication Required".
        assert r.status_code == 401 and r.text == "Unauthorized Access"
        assert r.headers["www-authenticate"] == 'Basic realm="Authentication Required"'
        ok = httpx.post(process.url + "/api/v1/examon/jobs/query", json=q, auth=("u", "p"))
        assert ok.status_code == 200
    finally:
        process.stop()


# --------------------------------------------------------------------------------------------
# kairosdb/kairosdb v1.2.2 and its org.json (chargebee-1.0)
# --------------------------------------------------------------------------------------------


def test_numbers_are_printed_as_org_json_does(c: httpx.Client) -> None:
    # DoubleDataPoint.writeValueToJson -> JSONWriter.value(double) -> JSONObject.numberToString:
    # Double.toString without trailing zeros and point: "24", "24.5", "0.30000000000000004".
    body = {
        "start_absolute": DAY_MS,
        "end_absolute": DAY_MS + 6 * HOUR_MS,
        "metrics": [{"name": "ambient", "group_by": [{"name": "tag", "tags": ["node"]}]}],
    }
    raw = c.post("/api/v1/datapoints/query", json=body).content
    assert b".0]" not in raw
    whole = re.findall(rb",(-?\d+)\]", raw)
    fractions = re.findall(rb",(-?\d+\.\d+)\]", raw)
    assert whole and fractions  # one series mixes 24 and 24.5
    assert any(len(f.replace(b".", b"").lstrip(b"-0")) >= 15 for f in fractions)  # float noise


def test_realistic_timestamps_carry_millisecond_jitter(c: httpx.Client) -> None:
    body = {
        "start_absolute": DAY_MS,
        "end_absolute": DAY_MS + HOUR_MS - 1,
        "metrics": [{"name": "ambient", "group_by": [{"name": "tag", "tags": ["node"]}]}],
    }
    answer = c.post("/api/v1/datapoints/query", json=body).json()["queries"][0]
    stamps = [ts for r in answer["results"] for ts, _ in r["values"]]
    assert len(stamps) == 4 * 180  # still one sample per series per 20 s
    assert any(ts % 1000 for ts in stamps) and all(ts % 20_000 < 128 for ts in stamps)
    assert answer["sample_size"] == len(stamps)


def test_metricnames_prefix(c: httpx.Client) -> None:
    # MetricsResource.getMetricNames(prefix); CassandraDatastore.getMetricNames increments
    # the prefix's last byte, so an empty prefix fails with 500.
    r = c.get("/api/v1/metricnames", params={"prefix": "ambi"})
    assert r.json() == {"results": ["ambient"]}
    r = c.get("/api/v1/metricnames?prefix=")
    assert r.status_code == 500 and "errors" in r.json()


@pytest.mark.parametrize(
    ("refusal", "text"),
    [("memory", "Insufficient memory to perform request"), ("heap", "Java heap space")],
)
def test_memory_refusals(c: httpx.Client, refusal: str, text: str) -> None:
    # util/MemoryMonitorException.java; MetricsResource.runQuery catch (OutOfMemoryError).
    c.post("/_sim/faults", json={"max_points": 1, "refusal": refusal}).raise_for_status()
    body = {"start_absolute": DAY_MS, "end_absolute": DAY_MS + HOUR_MS, "metrics": [{"name": "ambient"}]}  # fmt: skip
    r = c.post("/api/v1/datapoints/query", json=body)
    assert r.status_code == 500 and r.json() == {"errors": [text]}


# --------------------------------------------------------------------------------------------
# grafana/grafana and nginx in front
# --------------------------------------------------------------------------------------------


def test_grafana_id_endpoint_is_not_gzipped(c: httpx.Client) -> None:
    # conf/defaults.ini [server] enable_gzip = false; pkg/api/datasources.go
    # GetDataSourceIdByName answers {"id": N}.
    r = c.get("/api/datasources/id/kairosdb", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.content == b'{"id":1}'
    r = c.get("/api/datasources/id/nope", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 404 and "content-encoding" not in r.headers
    assert r.json() == {"message": "Data source not found"}


def test_grafana_proxy_timeout_is_504_with_empty_body(c: httpx.Client) -> None:
    # pkg/util/proxyutil/reverse_proxy.go errorHandler: a timed-out upstream is 504, no body.
    c.post(
        "/_sim/faults", json={"slow_points": 1, "slow_delay_s": 5.0, "grafana_timeout_s": 0.5}
    ).raise_for_status()
    body = {"start_absolute": DAY_MS, "end_absolute": DAY_MS + HOUR_MS, "metrics": [{"name": "ambient"}]}  # fmt: skip
    r = c.post("/api/datasources/proxy/1/api/v1/datapoints/query", json=body)
    assert r.status_code == 504 and r.content == b""
    assert r.elapsed.total_seconds() < 4


def test_rate_limit_is_nginx_limit_req(c: httpx.Client) -> None:
    # nginx src/http/modules/ngx_http_limit_req_module.c (limit_req_status), error page from
    # src/http/ngx_http_special_response.c; Retry-After only when configured.
    c.post("/_sim/faults", json={"rate_limit_next": 1, "retry_after_s": 2}).raise_for_status()
    r = c.get("/api/v1/version")
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert "<title>429 Too Many Requests</title>" in r.text
    assert c.get("/api/v1/version").status_code == 200
    c.post("/_sim/faults", json={"rate_limit_next": 1, "rate_limit_status": 503}).raise_for_status()
    r = c.get("/api/v1/version")
    assert r.status_code == 503 and "Service Temporarily Unavailable" in r.text
    assert "retry-after" not in r.headers or r.headers["retry-after"] == "2"


@pytest.mark.parametrize(("mode", "text"), [("trailing_comma", b","), ("bad_number", b",1-2e")])
def test_corrupt_values_fault(c: httpx.Client, mode: str, text: bytes) -> None:
    c.post("/_sim/faults", json={"corrupt_values": mode}).raise_for_status()
    body = {"start_absolute": DAY_MS, "end_absolute": DAY_MS + 60_000, "metrics": [{"name": "ambient"}]}  # fmt: skip
    raw = c.post("/api/v1/datapoints/query", json=body, headers={"Accept-Encoding": "identity"})
    assert re.search(rb'"values":\[\[\d+' + re.escape(text) + rb"\]", raw.content)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw.content)


def test_stray_points_fault(c: httpx.Client) -> None:
    c.post("/_sim/faults", json={"stray_points": True}).raise_for_status()
    body = {"start_absolute": DAY_MS, "end_absolute": DAY_MS + 60_000, "metrics": [{"name": "ambient"}]}  # fmt: skip
    values = c.post("/api/v1/datapoints/query", json=body).json()["queries"][0]["results"][0][
        "values"
    ]
    assert values[0][0] == DAY_MS - HOUR_MS and all(t >= DAY_MS for t, _ in values[1:])


def test_kairosdb_gzip_is_unchanged(c: httpx.Client) -> None:
    body = {"start_absolute": DAY_MS, "end_absolute": DAY_MS + 60_000, "metrics": [{"name": "ambient"}]}  # fmt: skip
    with c.stream(
        "POST", "/api/v1/datapoints/query", json=body, headers={"Accept-Encoding": "gzip"}
    ) as r:
        raw = b"".join(r.iter_raw())
    assert r.headers["content-encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(raw))["queries"]
