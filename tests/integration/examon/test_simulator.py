"""Tests of the KairosDB + Examon jobs simulator (dxt_core.backends.examon.simulator).

The integration tests run the simulator as a separate process, exactly as benchmarks and
end-to-end tests do, and talk to it over real HTTP with httpx.
"""

from __future__ import annotations

import gzip
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from dxt_core import procs
from dxt_core.backends.examon.simulator import (
    ExamonSimulator,
    Faults,
    SimConfig,
    load_catalog,
    node_names,
)
from dxt_core.backends.examon.simulator.server import _wants_gzip
from dxt_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
NODES = 4
INTERVAL_S = 20
STEP_MS = INTERVAL_S * 1000
USER, PASSWORD = "examon", "s3cret:with colon"
DAY_MS = int(datetime(2020, 3, 9, tzinfo=UTC).timestamp() * 1000)
IPMI_KEYS = ["chnl", "cluster", "node", "org", "plugin", "rack", "slot", "units"]


# --------------------------------------------------------------------------------------------
# Fixtures: simulator processes
# --------------------------------------------------------------------------------------------


class SimProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        # An inherited DXT_SIM_PASSWORD must not leak into a server meant to be open.
        inherited = {k: v for k, v in os.environ.items() if k != "DXT_SIM_PASSWORD"}
        full_env = {**inherited, "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc = procs.start(
            [sys.executable, "-m", "dxt_core.backends.examon.simulator", "--port", "0", *args],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = self._read_url(timeout=30)

    def _read_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if sel.select(timeout=0.2):
                    line = self.proc.stdout.readline()
                    if "listening on " in line:
                        return line.strip().rsplit(" ", 1)[-1]
                    if not line:
                        break
                if self.proc.poll() is not None:
                    break
        finally:
            sel.close()
        self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        raise RuntimeError(f"simulator did not start: {err}")

    def stop(self) -> int:
        rc = procs.stop(self.proc, 15)
        assert rc is not None, "the simulator could not be reaped"
        return rc


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    # Tidy mode: samples on the grid, so these tests can name exact timestamps.
    process = SimProcess("--nodes", str(NODES), "--interval", str(INTERVAL_S), "--tidy")
    yield process.url
    assert process.stop() == 0


@pytest.fixture(scope="module")
def auth_sim() -> Iterator[str]:
    process = SimProcess(
        "--nodes",
        str(NODES),
        "--interval",
        str(INTERVAL_S),
        "--user",
        USER,
        "--data-start",
        "2020-03-01",
        "--tidy",
        env={"DXT_SIM_PASSWORD": PASSWORD},
    )
    yield process.url
    assert process.stop() == 0


@pytest.fixture
def client(sim: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim, timeout=30) as c:
        yield c
        # Leave no fault behind for the next test, whatever this one did.
        c.post("/_sim/faults/reset").raise_for_status()


def query(
    metric: str,
    start: int,
    end: int,
    *,
    tags: dict[str, list[str]] | None = None,
    group_by: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    m: dict[str, Any] = {"name": metric, **extra}
    if tags is not None:
        m["tags"] = tags
    if group_by is not None:
        m["group_by"] = [{"name": "tag", "tags": group_by}]
    return {"start_absolute": start, "end_absolute": end, "metrics": [m]}


def post_query(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/api/v1/datapoints/query", json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()["queries"][0]
    return answer


# --------------------------------------------------------------------------------------------
# Unit tests (no server process)
# --------------------------------------------------------------------------------------------


def test_node_names_twenty_per_rack() -> None:
    names = node_names(42)
    assert names[:2] == ["r201n01", "r201n02"]
    assert names[19] == "r201n20"
    assert names[20] == "r202n01"
    assert names[41] == "r203n02"


def test_shipped_catalog_loads() -> None:
    catalog = load_catalog()
    assert len(catalog) == 811
    assert ("job_info_marconi100", "job_table") in catalog
    assert ("total_power", "ipmi_pub") in catalog


def test_old_catalog_header_name_plugin() -> None:
    assert len(load_catalog(ROOT / "dxt_core" / "data" / "M100_metrics_1891.csv")) == 1891


def test_bad_config_is_refused() -> None:
    with pytest.raises(ConfigError):
        SimConfig(catalog=[], nodes=0)
    with pytest.raises(ConfigError):
        Faults(fail_status=42)
    with pytest.raises(ConfigError, match="max_points"):
        Faults(max_points=-1)
    # NaN compares false with everything: it passed ">= 0" and then failed every answer
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ConfigError, match="delay_s must be a finite number"):
            Faults(delay_s=bad)


@pytest.mark.parametrize("argv", [["--delay", "nan"], ["--slow-delay", "inf"], ["--delay", "-1"]])
def test_a_delay_that_is_no_number_of_seconds_is_refused_at_start(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from dxt_core.backends.examon.simulator.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["--port", "0", "--jobs-port", "off", *argv])
    assert stop.value.code == 2
    assert f"argument {argv[0]}: '{argv[1]}': give a finite number of seconds" in (
        capsys.readouterr().err
    )


def test_accept_encoding_parsing() -> None:
    assert _wants_gzip("gzip, deflate")
    assert _wants_gzip("br;q=1.0, gzip;q=0.5")
    assert not _wants_gzip("gzip;q=0")
    assert not _wants_gzip("identity")
    assert not _wants_gzip(None)


def test_in_process_start_stop() -> None:
    config = SimConfig(catalog=[("total_power", "ipmi_pub")], nodes=2)
    with ExamonSimulator(config) as simulator:
        r = httpx.get(simulator.url + "/api/v1/metricnames?prefix=total")
        assert r.json() == {"results": ["total_power"]}
        assert simulator.stats["requests"] == {"/api/v1/metricnames": 1}


# --------------------------------------------------------------------------------------------
# Integration tests (simulator process over HTTP)
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_version_and_health(client: httpx.Client) -> None:
    assert client.get("/api/v1/version").json()["version"].startswith("KairosDB 1.2")
    assert client.get("/api/v1/health/check").status_code == 204


@pytest.mark.integration
def test_metricnames(client: httpx.Client) -> None:
    names = client.get("/api/v1/metricnames").json()["results"]
    assert "total_power" in names
    assert "Gpu0_bar1_free" in names
    assert any(n.startswith("kairosdb.") for n in names)
    assert "job_info_marconi100" not in names
    assert len([n for n in names if not n.startswith("kairosdb.")]) == 810
    prefixed = client.get("/api/v1/metricnames", params={"prefix": "p0_core1"}).json()["results"]
    assert prefixed and all(n.startswith("p0_core1") for n in prefixed)


@pytest.mark.integration
def test_query_tags_discovers_ipmi_keys(client: httpx.Client) -> None:
    body = query("total_power", DAY_MS, DAY_MS + 3_600_000)
    r = client.post("/api/v1/datapoints/query/tags", json=body)
    assert r.status_code == 200
    result = r.json()["queries"][0]["results"][0]
    assert result["name"] == "total_power"
    assert sorted(result["tags"]) == IPMI_KEYS
    assert result["tags"]["node"] == node_names(NODES)
    assert result["tags"]["cluster"] == ["marconi100"]
    assert result["tags"]["units"] == ["Watts"]
    # kairosdb v1.2.2 MetricsResource.getMeta formats an EmptyDataPointGroup: an empty
    # "values" array, no group_by, no sample_size (JsonResponse.formatQuery with -1).
    assert result["values"] == []
    assert "group_by" not in result and "sample_size" not in r.json()["queries"][0]


@pytest.mark.integration
def test_query_tags_of_nagios_and_facility_plugins(client: httpx.Client) -> None:
    def keys(metric: str) -> list[str]:
        body = query(metric, DAY_MS, DAY_MS + 60_000)
        r = client.post("/api/v1/datapoints/query/tags", json=body)
        return sorted(r.json()["queries"][0]["results"][0]["tags"])

    # Marconi's nagios tag keys as examon-client 0.4 examples/Demo_ExamonQL.ipynb lists them.
    assert keys("plugin_output") == [
        "chnl",
        "cluster",
        "description",
        "host_group",
        "nagiosdrained",
        "node",
        "org",
        "plugin",
        "rack",
        "slot",
        "state",
        "state_type",
    ]
    assert keys("s21.jobs.tot_jobs") == ["cluster", "node", "org", "plugin"]
    assert "cluster" not in keys("Supply_Air_Temperature")  # vertiv_pub
    assert keys("no_such_metric") == []


@pytest.mark.integration
def test_query_tags_window_without_points(client: httpx.Client) -> None:
    # A window between two samples holds no point, but query/tags reads row keys, not points
    # (kairosdb v1.2.2 CassandraDatastore.queryMetricTags): the series' rows overlap it.
    body = query("total_power", DAY_MS + 1, DAY_MS + STEP_MS - 1)
    r = client.post("/api/v1/datapoints/query/tags", json=body)
    (result,) = r.json()["queries"][0]["results"]
    assert result["name"] == "total_power" and result["values"] == []
    assert len(result["tags"]["node"]) == NODES
    data = client.post("/api/v1/datapoints/query", json=body).json()
    assert data["queries"][0]["sample_size"] == 0


@pytest.mark.integration
def test_bounds_are_inclusive(client: httpx.Client) -> None:
    t = DAY_MS + 37 * STEP_MS
    answer = post_query(client, query("total_power", t, t, group_by=IPMI_KEYS))
    assert answer["sample_size"] == NODES
    assert len(answer["results"]) == NODES
    for result in answer["results"]:
        assert [ts for ts, _ in result["values"]] == [t]
    # Two grid points in [t, t + step]: both ends are included.
    answer = post_query(client, query("total_power", t, t + STEP_MS, group_by=["node"]))
    assert answer["sample_size"] == 2 * NODES
    assert [ts for ts, _ in answer["results"][0]["values"]] == [t, t + STEP_MS]
    # Nothing strictly between two grid points.
    answer = post_query(client, query("total_power", t + 1, t + STEP_MS - 1))
    assert answer["sample_size"] == 0
    assert answer["results"][0]["values"] == []


@pytest.mark.integration
def test_result_shape_and_grouping(client: httpx.Client) -> None:
    day_end = DAY_MS + 86_400_000 - 1
    answer = post_query(client, query("total_power", DAY_MS, day_end, group_by=IPMI_KEYS))
    per_day = 86_400 // INTERVAL_S
    assert answer["sample_size"] == NODES * per_day
    nodes = []
    for result in answer["results"]:
        # KairosDatastore.groupByTypeAndTag: the tag group first, then the type group.
        tag_group, type_group = result["group_by"]
        assert type_group == {"name": "type", "type": "number"}
        assert tag_group["name"] == "tag"
        assert tag_group["tags"] == IPMI_KEYS
        assert sorted(tag_group["group"]) == IPMI_KEYS
        assert result["tags"]["node"] == [tag_group["group"]["node"]]
        stamps = [ts for ts, _ in result["values"]]
        assert stamps == list(range(DAY_MS, DAY_MS + 86_400_000, STEP_MS))
        # Doubles as org.json prints them: a whole one without ".0", so it reads as an int.
        assert all(type(v) in (int, float) for _, v in result["values"])
        nodes.append(tag_group["group"]["node"])
    assert nodes == node_names(NODES)
    # Without group_by every series is merged into one result, in time order.
    merged = post_query(client, query("total_power", DAY_MS, DAY_MS + 2 * STEP_MS))
    assert len(merged["results"]) == 1
    result = merged["results"][0]
    assert result["group_by"] == [{"name": "type", "type": "number"}]
    assert result["tags"]["node"] == node_names(NODES)
    stamps = [ts for ts, _ in result["values"]]
    assert stamps == sorted(stamps) and len(stamps) == 3 * NODES


@pytest.mark.integration
def test_values_are_deterministic_and_typed(client: httpx.Client, auth_sim: str) -> None:
    body = query("s21.jobs.tot_jobs", DAY_MS, DAY_MS + 3_600_000, group_by=["node"])
    first = client.post("/api/v1/datapoints/query", json=body).content
    assert client.post("/api/v1/datapoints/query", json=body).content == first
    # A second process serves the very same data.
    other = httpx.post(
        auth_sim + "/api/v1/datapoints/query", json=body, auth=(USER, PASSWORD), timeout=30
    )
    assert other.content == first
    values = [v for r in orjson.loads(first)["queries"][0]["results"] for _, v in r["values"]]
    assert values and all(type(v) is int for v in values)  # slurm_pub is integer


@pytest.mark.integration
def test_cluster_filter(client: httpx.Client) -> None:
    t0, t1 = DAY_MS, DAY_MS + 10 * STEP_MS
    answer = post_query(
        client, query("total_power", t0, t1, tags={"cluster": ["marconi100"]}, group_by=["node"])
    )
    assert len(answer["results"]) == NODES
    node = node_names(NODES)[1]
    answer = post_query(client, query("total_power", t0, t1, tags={"node": [node]}))
    assert answer["results"][0]["tags"]["node"] == [node]
    assert answer["sample_size"] == 11


@pytest.mark.integration
@pytest.mark.parametrize(
    ("metric", "tags"),
    [("total_power", {"cluster": ["galileo100"]}), ("no_such_metric", None)],
)
def test_unknown_cluster_or_metric_gives_one_empty_result(
    client: httpx.Client, metric: str, tags: dict[str, list[str]] | None
) -> None:
    body = query(metric, DAY_MS, DAY_MS + 3_600_000, tags=tags, group_by=IPMI_KEYS)
    assert client.post("/api/v1/datapoints/query", json=body).json() == {
        "queries": [
            {
                "sample_size": 0,
                # KairosDatastore.groupByTypeAndTag (v1.2.2): no rows, one group without a
                # GroupByResult, so JsonResponse.formatQuery writes no "group_by".
                "results": [{"name": metric, "tags": {}, "values": []}],
            }
        ]
    }


@pytest.mark.integration
def test_nagios_values_are_strings_needing_csv_quoting(client: httpx.Client) -> None:
    answer = post_query(
        client, query("plugin_output", DAY_MS, DAY_MS + 86_400_000 - 1, group_by=["node"])
    )
    values = [v for r in answer["results"] for _, v in r["values"]]
    assert len(values) == NODES * 86_400 // INTERVAL_S
    assert all(isinstance(v, str) for v in values)
    assert any("," in v for v in values)
    assert any('"' in v for v in values)
    assert answer["results"][0]["group_by"][-1] == {"name": "type", "type": "text"}


@pytest.mark.integration
def test_limit_order_and_get_query(client: httpx.Client) -> None:
    body = query("total_power", DAY_MS, DAY_MS + 86_400_000, group_by=["node"], limit=3)
    body["metrics"][0]["order"] = "desc"
    answer = post_query(client, body)
    stamps = [ts for ts, _ in answer["results"][0]["values"]]
    assert stamps == [DAY_MS + 86_400_000 - i * STEP_MS for i in range(3)]
    assert answer["sample_size"] == 3 * NODES
    plain = query("total_power", DAY_MS, DAY_MS + STEP_MS, group_by=["node"])
    r = client.get("/api/v1/datapoints/query", params={"query": orjson.dumps(plain).decode()})
    assert r.status_code == 200
    assert r.json() == post_query_full(client, plain)


def post_query_full(client: httpx.Client, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/datapoints/query", json=body).json()


@pytest.mark.integration
def test_relative_time_window(client: httpx.Client) -> None:
    body = {"start_relative": {"value": 1, "unit": "hours"}, "metrics": [{"name": "total_power"}]}
    answer = post_query(client, body)
    assert 3_600 // INTERVAL_S * NODES <= answer["sample_size"] <= (3_600 // INTERVAL_S + 1) * NODES
    last = answer["results"][0]["values"][-1][0]
    assert last <= time.time() * 1000


@pytest.mark.integration
def test_gzip_content_encoding(sim: str) -> None:
    body = query("total_power", DAY_MS, DAY_MS + 3_600_000, group_by=["node"])
    with httpx.Client(base_url=sim, timeout=30) as c:
        request = c.build_request(
            "POST", "/api/v1/datapoints/query", json=body, headers={"Accept-Encoding": "gzip"}
        )
        r = c.send(request, stream=True)
        raw = b"".join(r.iter_raw())
        r.close()
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["content-type"].startswith("application/json")
        assert int(r.headers["content-length"]) == len(raw)
        decoded = orjson.loads(gzip.decompress(raw))
        plain = c.post(
            "/api/v1/datapoints/query", json=body, headers={"Accept-Encoding": "identity"}
        )
        assert "content-encoding" not in plain.headers
        assert int(plain.headers["content-length"]) == len(plain.content)
        assert plain.json() == decoded


@pytest.mark.integration
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"start_absolute": 1}', "metric[]"),
        (b'{"metrics": [{"name": "total_power"}]}', "start_time"),
        (b'{"start_absolute": 10, "end_absolute": 5, "metrics": [{"name": "x"}]}', "end_time"),
        (b'{"start_absolute": 1, "metrics": [{"tags": {}}]}', "name"),
        (
            b'{"start_absolute": 1, "metrics": [{"name": "x", "aggregators": [{"name": "avg"}]}]}',
            "aggregators",
        ),
    ],
)
def test_bad_queries_answer_400_with_errors(
    client: httpx.Client, content: bytes, message: str
) -> None:
    r = client.post("/api/v1/datapoints/query", content=content)
    assert r.status_code == 400
    errors = r.json()["errors"]
    assert isinstance(errors, list) and message in errors[0]


@pytest.mark.integration
def test_fail_next_then_recovery(client: httpx.Client) -> None:
    client.post("/_sim/stats/reset").raise_for_status()
    r = client.post("/_sim/faults", json={"fail_next": 2})
    assert r.json()["fail_next"] == 2
    for _ in range(2):
        r = client.get("/api/v1/version")
        assert r.status_code == 503
        assert r.json() == {"errors": ["simulated outage"]}
    assert client.get("/_sim/faults").json()["fail_next"] == 0
    assert client.get("/api/v1/version").status_code == 200
    stats = client.get("/_sim/stats").json()
    assert stats["faults_served"] == 2
    assert stats["requests"]["/api/v1/version"] == 3


@pytest.mark.integration
def test_fault_updates_are_validated(client: httpx.Client) -> None:
    assert client.post("/_sim/faults", json={"no_such_field": 1}).status_code == 400
    assert client.post("/_sim/faults", json={"max_points": "many"}).status_code == 400
    assert client.get("/_sim/faults").json() == {
        "delay_s": 0.0,
        "fail_next": 0,
        "fail_status": 503,
        "fail_message": "simulated outage",
        "max_points": None,
        "refusal": "query_limit",
        "slow_points": None,
        "slow_delay_s": 0.0,
        "fail_metrics": [],
        "rate_limit_next": 0,
        "rate_limit_status": 429,
        "retry_after_s": None,
        "grafana_timeout_s": 30.0,
        "grafana_proxy_timeout": True,
        "slow_tags_span_s": None,
        "corrupt_values": None,
        "stray_points": False,
    }


@pytest.mark.integration
def test_fail_metrics_fail_only_those_metrics(client: httpx.Client) -> None:
    body = query("total_power", DAY_MS, DAY_MS + STEP_MS)
    assert client.post("/api/v1/datapoints/query", json=body).status_code == 200  # now cached
    client.post("/_sim/faults", json={"fail_metrics": ["total_power"]}).raise_for_status()
    for endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags"):
        r = client.post(endpoint, json=body)
        assert r.status_code == 503
        assert "total_power" in r.json()["errors"][0]
    other = query("ambient", DAY_MS, DAY_MS + STEP_MS)
    assert client.post("/api/v1/datapoints/query", json=other).status_code == 200
    client.post("/_sim/faults", json={"fail_metrics": []}).raise_for_status()
    assert client.post("/api/v1/datapoints/query", json=body).status_code == 200


@pytest.mark.integration
def test_max_points_refusal(client: httpx.Client) -> None:
    client.post("/_sim/faults", json={"max_points": 10}).raise_for_status()
    small = query("total_power", DAY_MS, DAY_MS + STEP_MS)  # 2 x NODES = 8 points
    assert client.post("/api/v1/datapoints/query", json=small).status_code == 200
    big = query("total_power", DAY_MS, DAY_MS + 2 * STEP_MS)  # 12 points
    r = client.post("/api/v1/datapoints/query", json=big)
    assert r.status_code == 500
    # kairosdb v1.2.2 datastore/cassandra/QueryMonitor.java, wrapped twice.
    assert r.json()["errors"] == [
        "org.kairosdb.core.exception.DatastoreException: org.kairosdb.core.exception."
        "DatastoreException: Query exceeded limit of 10 data points"
    ]
    # A cached answer is refused the same way once the limit drops below it.
    client.post("/_sim/faults", json={"max_points": None}).raise_for_status()
    assert client.post("/api/v1/datapoints/query", json=big).status_code == 200
    client.post("/_sim/faults", json={"max_points": 10}).raise_for_status()
    assert client.post("/api/v1/datapoints/query", json=big).status_code == 500


@pytest.mark.integration
def test_slow_points_provoke_read_timeout(client: httpx.Client, sim: str) -> None:
    client.post("/_sim/faults", json={"slow_points": 5, "slow_delay_s": 1.5}).raise_for_status()
    body = query("total_power", DAY_MS, DAY_MS + 5 * STEP_MS)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim + "/api/v1/datapoints/query", json=body, timeout=0.3)
    small = query("total_power", DAY_MS, DAY_MS)
    assert httpx.post(sim + "/api/v1/datapoints/query", json=small, timeout=0.3).is_success


@pytest.mark.integration
def test_grafana_proxy_with_basic_auth(auth_sim: str) -> None:
    body = query("total_power", DAY_MS, DAY_MS + STEP_MS, group_by=["node"])
    proxy = "/api/datasources/proxy/1/api/v1"
    with httpx.Client(base_url=auth_sim, timeout=30) as anonymous:
        r = anonymous.get("/api/datasources/id/kairosdb")
        assert r.status_code == 401
        assert r.json() == {"errors": ["authentication required"]}
        assert anonymous.post(proxy + "/datapoints/query", json=body).status_code == 401
        assert anonymous.get("/_sim/stats").status_code == 200  # admin needs no auth
    with httpx.Client(base_url=auth_sim, timeout=30, auth=(USER, "wrong")) as wrong:
        assert wrong.get("/api/v1/version").status_code == 401
    with httpx.Client(base_url=auth_sim, timeout=30, auth=(USER, PASSWORD)) as c:
        ds_id = c.get("/api/datasources/id/kairosdb").json()["id"]
        assert ds_id == 1
        r = c.post(f"/api/datasources/proxy/{ds_id}/api/v1/datapoints/query", json=body)
        assert r.status_code == 200
        assert len(r.json()["queries"][0]["results"]) == NODES
        assert c.post("/api/v1/datapoints/query", json=body).json() == r.json()
        assert c.get(proxy + "/version").status_code == 200


@pytest.mark.integration
def test_data_start(auth_sim: str) -> None:
    start = int(datetime(2020, 3, 1, tzinfo=UTC).timestamp() * 1000)
    with httpx.Client(base_url=auth_sim, timeout=30, auth=(USER, PASSWORD)) as c:
        answer = post_query(c, query("total_power", start - 3_600_000, start + STEP_MS))
        stamps = [ts for ts, _ in answer["results"][0]["values"]]
        assert min(stamps) == start
        answer = post_query(c, query("total_power", start - 3_600_000, start - 1))
        assert answer["sample_size"] == 0


@pytest.mark.integration
def test_unknown_path_is_404(client: httpx.Client) -> None:
    assert client.get("/api/v1/nothing").status_code == 404
