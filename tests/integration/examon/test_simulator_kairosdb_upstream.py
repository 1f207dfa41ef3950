"""The Examon simulator's KairosDB answers, checked against kairosdb/kairosdb v1.2.2.

Each test names the upstream file (and method) whose behaviour it encodes; the expected
messages are the ones upstream's own ``QueryParserTest`` asserts where it has one. The
simulator runs as a separate process, over real HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.integration.examon.test_simulator import SimProcess

pytestmark = pytest.mark.integration

NODES = 4
STEP_MS = 20_000
DATA_START_MS = int(datetime(2020, 3, 1, tzinfo=UTC).timestamp() * 1000)
DAY_MS = int(datetime(2020, 3, 9, tzinfo=UTC).timestamp() * 1000)
#: CassandraDatastore.ROW_WIDTH (3 weeks): the row holding DATA_START_MS starts 2020-02-20.
ROW_WIDTH_MS = 1_814_400_000
QUERY = "/api/v1/datapoints/query"
TAGS = "/api/v1/datapoints/query/tags"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    process = SimProcess(
        "--nodes", str(NODES), "--interval", "20", "--tidy", "--data-start", "2020-03-01"
    )  # fmt: skip
    yield process.url
    assert process.stop() == 0


@pytest.fixture
def c(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=30) as client:
        yield client


def body(metric: dict[str, Any], start: Any = DAY_MS, end: Any = DAY_MS + 3_600_000) -> Any:
    return {"start_absolute": start, "end_absolute": end, "metrics": [metric]}


def errors(r: httpx.Response, status: int = 400) -> list[str]:
    assert r.status_code == status, r.text
    found: list[str] = r.json()["errors"]
    return found


# --------------------------------------------------------------------------------------------
# core/http/rest/json/JsonResponseBuilder.java: how a 400 is written
# --------------------------------------------------------------------------------------------


def test_a_400_is_application_json_without_charset_and_allows_any_origin(c: httpx.Client) -> None:
    # JsonResponseBuilder.build: .header("Access-Control-Allow-Origin", "*")
    # .type(MediaType.APPLICATION_JSON_TYPE)
    r = c.post(QUERY, json=body({"name": ""}))
    assert errors(r) == ["query.metric[0].name may not be empty"]
    assert r.headers["content-type"] == "application/json"
    assert r.headers["access-control-allow-origin"] == "*"


# --------------------------------------------------------------------------------------------
# core/groupby/TagGroupBy.java: @NotNull @NotEmpty List<String> tags
# --------------------------------------------------------------------------------------------


def test_group_by_tag_needs_a_non_empty_tags_list(c: httpx.Client) -> None:
    # QueryParserTest test_groupby_tag_emtpy_tags_invalid / test_groupby_tag_missing_tags_invalid
    empty = {"name": "total_power", "group_by": [{"name": "tag", "tags": []}]}
    assert errors(c.post(QUERY, json=body(empty))) == [
        "query.metric[0].group_by[0].tags may not be empty"
    ]
    assert errors(c.post(TAGS, json=body(empty))) == [
        "query.metric[0].group_by[0].tags may not be empty"
    ]
    missing = {"name": "total_power", "group_by": [{"name": "tag"}]}
    assert errors(c.post(QUERY, json=body(missing))) == [
        "query.metric[0].group_by[0].tags may not be null"
    ]


# --------------------------------------------------------------------------------------------
# core/http/rest/json/QueryParser.java MetricDeserializer: tag filter values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", None, [""], ["r201n01", None]])
def test_a_null_or_empty_tag_value_is_refused(c: httpx.Client, value: Any) -> None:
    metric = {"name": "total_power", "tags": {"cluster": ["marconi100"], "node": value}}
    # the n of tags[n] counts the keys (QueryParserTest test_emptyTagValue_invalid ...)
    assert errors(c.post(QUERY, json=body(metric))) == [
        "query.metric[0].tags[1].node value must not be null or empty"
    ]


def test_an_empty_tag_value_list_filters_nothing(c: httpx.Client) -> None:
    plain = c.post(QUERY, json=body({"name": "total_power"})).json()
    empty = c.post(QUERY, json=body({"name": "total_power", "tags": {"node": []}})).json()
    assert empty == plain
    assert len(plain["queries"][0]["results"][0]["tags"]["node"]) == NODES


# --------------------------------------------------------------------------------------------
# core/datastore/KairosDatastore.java groupByTypeAndTag / getMatchingTags / getTagsKey
# --------------------------------------------------------------------------------------------


def test_group_by_gives_the_tag_group_then_the_type_group(c: httpx.Client) -> None:
    metric = {"name": "total_power", "group_by": [{"name": "tag", "tags": ["node"]}]}
    results = c.post(QUERY, json=body(metric)).json()["queries"][0]["results"]
    assert len(results) == NODES
    for r in results:
        assert [g["name"] for g in r["group_by"]] == ["tag", "type"]


def test_a_grouping_key_a_series_lacks_is_an_empty_value(c: httpx.Client) -> None:
    # DataPointGroupRowWrapper.getTagValues is Collections.singleton(row.getTagValue(tag)):
    # never null, so getMatchingTags puts "" for a key the row does not have.
    metric = {"name": "total_power", "group_by": [{"name": "tag", "tags": ["node", "panel"]}]}
    results = c.post(QUERY, json=body(metric)).json()["queries"][0]["results"]
    groups = [r["group_by"][0]["group"] for r in results]
    assert groups == [{"node": f"r201n0{i}", "panel": ""} for i in range(1, NODES + 1)]


def test_groups_are_sorted_by_keys_and_values_run_together(c: httpx.Client) -> None:
    # getTagsKey: "host_group" + value + "description" + value, in a TreeSet: "compute,..."
    # sorts before "compute" + "description..." (',' < 'd'), unlike a sort on the values.
    keys = ["host_group", "description"]
    metric = {"name": "plugin_output", "group_by": [{"name": "tag", "tags": keys}]}
    results = c.post(QUERY, json=body(metric)).json()["queries"][0]["results"]
    groups = [r["group_by"][0]["group"] for r in results]
    assert [g["host_group"] for g in groups] == ["compute,cincompute"] * 2 + ["compute"] * 2
    assert groups == sorted(groups, key=lambda g: "".join(k + g[k] for k in keys))


def test_a_count_keeps_the_rows_type_group(c: httpx.Client) -> None:
    # AggregatedDataPointGroupWrapper.getGroupByResult returns the inner group's results.
    metric = {"name": "plugin_output", "aggregators": [{"name": "count"}]}
    result = c.post(QUERY, json=body(metric)).json()["queries"][0]["results"][0]
    assert result["group_by"] == [{"name": "type", "type": "text"}]


# --------------------------------------------------------------------------------------------
# datastore/cassandra/CassandraDatastore.java queryMetricTags: row keys, 3 weeks wide
# --------------------------------------------------------------------------------------------


def test_query_tags_reports_the_series_of_the_rows_the_window_overlaps(c: httpx.Client) -> None:
    row = DATA_START_MS - DATA_START_MS % ROW_WIDTH_MS  # 2020-02-20, before the data
    before = body({"name": "total_power"}, row + 86_400_000, row + 2 * 86_400_000)
    tags = c.post(TAGS, json=before).json()["queries"][0]["results"][0]["tags"]
    assert len(tags["node"]) == NODES
    assert c.post(QUERY, json=before).json()["queries"][0]["sample_size"] == 0
    earlier = body({"name": "total_power"}, row - 2 * 86_400_000, row - 1)
    assert c.post(TAGS, json=earlier).json() == {
        "queries": [{"results": [{"name": "total_power", "tags": {}, "values": []}]}]
    }


def test_query_tags_answers_one_query_per_metric(c: httpx.Client) -> None:
    # MetricsResource.getMeta: jsonResponse.formatQuery(result, false, -1) per QueryMetric.
    q = {**body({"name": "total_power"}), "metrics": [{"name": "total_power"}, {"name": "x"}]}
    queries = c.post(TAGS, json=q).json()["queries"]
    assert [[r["name"] for r in query["results"]] for query in queries] == [["total_power"], ["x"]]


# --------------------------------------------------------------------------------------------
# core/http/rest/json/QueryParser.java parseQueryMetric and Query.java (Gson 2.2.4)
# --------------------------------------------------------------------------------------------


def test_no_metrics_is_no_query(c: httpx.Client) -> None:
    # The start time is only required per metric; an empty list asks nothing.
    for path in (QUERY, TAGS):
        r = c.post(path, json={"metrics": []})
        assert r.status_code == 200 and r.json() == {"queries": []}
    assert errors(c.post(QUERY, json={"start_absolute": 1})) == [
        "query.metric[] must have a size of at least 1"
    ]


def test_a_negative_start_is_accepted(c: httpx.Client) -> None:
    r = c.post(QUERY, json=body({"name": "total_power"}, -86_400_000, 86_400_000))
    assert r.status_code == 200 and r.json()["queries"][0]["sample_size"] == 0


def test_a_fractional_start_is_truncated_as_bigdecimal_longvalue(c: httpx.Client) -> None:
    # JsonTreeReader.nextLong -> LazilyParsedNumber.longValue -> BigDecimal.longValue.
    whole = c.post(QUERY, json=body({"name": "total_power"}, DAY_MS, DAY_MS + STEP_MS)).json()
    frac = c.post(QUERY, json=body({"name": "total_power"}, DAY_MS + 0.9, DAY_MS + STEP_MS))
    assert frac.status_code == 200 and frac.json() == whole
    assert whole["queries"][0]["sample_size"] == 2 * NODES
    assert errors(c.post(QUERY, json=body({"name": "total_power"}, "soon"))) == [
        'java.lang.NumberFormatException: For input string: "soon"'
    ]


@pytest.mark.parametrize(
    ("content", "message"), [(b"", "null"), (b"  ", "null"), (b"[1,2]", "[1,2]")]
)
def test_a_body_that_is_not_an_object_fails_with_500(
    c: httpx.Client, content: bytes, message: str
) -> None:
    # parser.parse(json).getAsJsonObject(): IllegalStateException, caught as Exception.
    for path in (QUERY, TAGS):
        r = c.post(path, content=content, headers={"Content-Type": "application/json"})
        assert errors(r, 500) == [f"Not a JSON Object: {message}"]


def test_an_unknown_time_zone_is_refused(c: httpx.Client) -> None:
    # QueryParserTest test_aggregator_sampling_timezone_invalid
    q = {**body({"name": "total_power"}), "time_zone": "Mars/Olympus"}
    (message,) = errors(c.post(QUERY, json=q))
    assert message.startswith("query.Mars/Olympus is not a valid time zone, must be one of [")
    assert "Europe/Rome" in message
    for ok in ("Europe/Rome", "UTC", ""):
        assert c.post(QUERY, json={**q, "time_zone": ok}).status_code == 200


def test_an_end_before_the_start_has_upstreams_message(c: httpx.Client) -> None:
    # QueryParserTest: "query.metric[0].end_time must be greater than the start time"
    q = body({"name": "total_power"}, DAY_MS, DAY_MS - 1)
    assert errors(c.post(QUERY, json=q)) == [
        "query.metric[0].end_time must be greater than the start time"
    ]


def test_get_without_a_query_parameter(c: httpx.Client) -> None:
    # MetricsResource.runQuery: json == null -> SimpleConstraintViolation("query json", ...)
    assert errors(c.get(QUERY)) == ["query json must not be null or empty"]


# --------------------------------------------------------------------------------------------
# MetricsResource: /datapoints/query/tags is @POST only (Jersey 1.18.3 HttpMethodRule)
# --------------------------------------------------------------------------------------------


def test_query_tags_answers_405_to_get(c: httpx.Client) -> None:
    r = c.get(TAGS, params={"query": '{"metrics": []}'})
    assert r.status_code == 405
    assert r.headers["allow"] == "POST,OPTIONS"
    assert r.content == b""
