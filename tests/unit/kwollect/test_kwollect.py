"""Kwollect pure logic: node names, time windows, request planning, splitting, energy."""

from __future__ import annotations

import datetime as dt
import math
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest

from dxt_core.backends.kwollect.experiment import Kwollect, integrate_power
from dxt_core.backends.kwollect.source import (
    G5kNode,
    KwollectClient,
    merge_chronological,
    parse_node,
    parse_nodes,
    parse_time,
    plan_requests,
    time_windows,
)
from dxt_core.errors import ConfigError, QueryRejected, WindowTooLarge
from dxt_core.http import RequestStats, RetryPolicy

UTC = dt.UTC
T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)


# -- node names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "site", "expected"),
    [
        ("nova-1.lyon.grid5000.fr", None, G5kNode("lyon", "nova-1")),
        ("Nova-12.Lyon.grid5000.fr.", None, G5kNode("lyon", "nova-12")),
        ("gros-3.nancy", None, G5kNode("nancy", "gros-3")),
        ("chifflot-8", "lille", G5kNode("lille", "chifflot-8")),
        (
            SimpleNamespace(address="dahu-2.grenoble.grid5000.fr"),
            None,
            G5kNode("grenoble", "dahu-2"),
        ),
    ],
)
def test_parse_node_accepts_names_and_host_objects(given, site, expected):
    node = parse_node(given, site)
    assert node == expected
    assert node.fqdn == f"{expected.name}.{expected.site}.grid5000.fr"
    assert node.cluster == expected.name.rsplit("-", 1)[0]


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("nova-1", "has no site"),
        ("nova.lyon.grid5000.fr", "not a <cluster>-<number> name"),
        ("nova-1.lyon.example.org", "not a Grid'5000 node"),
        (42, "neither a host name"),
        (SimpleNamespace(address=""), "neither a host name"),
    ],
)
def test_parse_node_errors_name_the_node_and_the_fix(given, fragment):
    with pytest.raises(ConfigError) as err:
        parse_node(given)
    assert fragment in str(err.value)
    if isinstance(given, str):
        assert given in str(err.value)


def test_parse_nodes_lists_every_bad_name_and_deduplicates():
    with pytest.raises(ConfigError) as err:
        parse_nodes(["nova-1.lyon", "bad", "nova-2.paris.example.com"])
    assert "'bad'" in str(err.value) and "nova-2.paris.example.com" in str(err.value)
    assert parse_nodes(["nova-1.lyon", "nova-1.lyon.grid5000.fr"]) == [G5kNode("lyon", "nova-1")]


def test_parse_node_rejects_other_site():
    with pytest.raises(ConfigError, match="on site 'nancy', not 'lyon'"):
        parse_node("gros-1.nancy", "lyon")


def test_parse_time_forms():
    assert parse_time(1732629600) == T0
    assert parse_time("2024-11-26T15:00:00+01:00") == T0
    assert parse_time(T0) is T0
    with pytest.raises(ConfigError, match="naive"):
        parse_time(dt.datetime(2024, 11, 26))
    with pytest.raises(ConfigError, match="no UTC offset"):
        parse_time("2024-11-26T15:00:00")


# -- windows and planning ---------------------------------------------------------------------


def test_time_windows_are_inclusive_and_disjoint():
    stop = T0 + dt.timedelta(seconds=10)
    w = time_windows(T0, stop, 3)
    assert w[0][0] == T0 and w[-1][1] == stop
    for (_, b), (a, _) in zip(w, w[1:]):
        assert a - b == dt.timedelta(microseconds=1)
    assert len(w) == math.ceil(10 / 3)  # 10 s + 1 us over 3 s windows
    assert time_windows(T0, T0, 3) == [(T0, T0)]
    with pytest.raises(ConfigError, match="before start"):
        time_windows(stop, T0, 3)


def test_plan_requests_groups_nodes_and_sizes_windows_from_rates():
    nodes = [G5kNode("lyon", f"nova-{i}") for i in range(1, 8)]
    rates = dict.fromkeys(nodes, 1.0)
    stop = T0 + dt.timedelta(hours=1) - dt.timedelta(microseconds=1)
    plan = plan_requests("lyon", nodes, ["wattmetre_power_watt"], T0, stop, rates, 600, 3)
    # groups of 3, 3, 1 nodes; the largest group makes 3 points/s -> 200 s windows
    assert [len(r.nodes) for r in plan[0]] == [3, 3, 1]
    assert len(plan) == 18
    for window in plan:
        for req in window:
            assert (req.stop - req.start).total_seconds() * 3 <= 600
    params = plan[0][0].params()
    assert params["nodes"] == "nova-1,nova-2,nova-3"
    assert params["metrics"] == "wattmetre_power_watt"
    assert params["start_time"] == T0.isoformat()


def test_merge_chronological_across_offsets():
    a = [{"timestamp": "2024-10-27T02:30:00+02:00"}, {"timestamp": "2024-10-27T02:10:00+01:00"}]
    b = [{"timestamp": "2024-10-27T01:00:00+00:00"}]
    merged = merge_chronological([a, b])
    assert [p["timestamp"] for p in merged] == [
        "2024-10-27T02:30:00+02:00",  # 00:30 UTC
        "2024-10-27T01:00:00+00:00",  # 01:00 UTC
        "2024-10-27T02:10:00+01:00",  # 01:10 UTC
    ]


# -- splitting on "too much data", with a faked server answer ---------------------------------


def _fake_server(limit: int, calls: list[dict[str, list[str]]]) -> httpx.MockTransport:
    """A server with one point per node per second that refuses more than ``limit`` points."""

    def handler(request: httpx.Request) -> httpx.Response:
        q = parse_qs(urlsplit(str(request.url)).query)
        path = request.url.path
        if path.endswith("/clusters/nova"):
            return httpx.Response(200, json={"metrics": [{"name": "m", "period": 1000}]})
        calls.append(q)
        nodes = q["nodes"][0].split(",")
        a = dt.datetime.fromisoformat(q["start_time"][0])
        b = dt.datetime.fromisoformat(q["end_time"][0])
        first = math.ceil(a.timestamp())
        last = math.floor(b.timestamp())
        if (last - first + 1) * len(nodes) > limit:
            return httpx.Response(
                500, json={"code": 500, "message": "Request timeout, too much data to process"}
            )
        pts = [
            {
                "timestamp": dt.datetime.fromtimestamp(t, UTC).isoformat(),
                "device_id": n,
                "metric_id": "m",
                "value": t,
                "labels": {},
            }
            for t in range(first, last + 1)
            for n in nodes
        ]
        return httpx.Response(200, content=orjson.dumps(pts))

    return httpx.MockTransport(handler)


def test_fetch_splits_in_time_then_nodes_and_keeps_every_point_once():
    calls: list[dict[str, list[str]]] = []
    client = KwollectClient(
        "http://kwollect.test", transport=_fake_server(25, calls), max_points=10**9
    )
    nodes = [G5kNode("lyon", f"nova-{i}") for i in range(1, 5)]
    stop = T0 + dt.timedelta(seconds=59)
    stats = RequestStats()
    batches = list(client.iter_batches(client.plan("lyon", nodes, ["m"], T0, stop), stats))
    points = [p for b in batches for p in b]
    assert len(points) == 60 * 4
    assert len({(p["device_id"], p["timestamp"]) for p in points}) == 240
    times = [dt.datetime.fromisoformat(p["timestamp"]) for p in points]
    assert times == sorted(times)
    assert stats.splits > 0 and stats.retries == 0
    # planned as one request (max_points is huge), refused, then split until accepted
    assert len(calls) > 3
    assert calls[0]["nodes"] == ["nova-1,nova-2,nova-3,nova-4"]


def test_fetch_gives_up_clearly_when_one_node_and_min_window_is_still_too_much():
    client = KwollectClient("http://kwollect.test", transport=_fake_server(0, []), min_window_s=10)
    # the advice names options that exist (issue 12.14: it named one the CLI did not have)
    with pytest.raises(
        WindowTooLarge, match=r"even one node \(nova-1.lyon.grid5000.fr\).*--min-window"
    ):
        list(
            client.iter_batches(
                client.plan(
                    "lyon", [G5kNode("lyon", "nova-1")], ["m"], T0, T0 + dt.timedelta(seconds=30)
                )
            )
        )


def test_bad_request_fails_at_once_with_the_server_text_and_no_password():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"code": 400, "message": "Unknown nodes: nova-99"})

    client = KwollectClient(
        "http://alice:s3cret@kwollect.test/stable",
        transport=httpx.MockTransport(handler),
        retry=RetryPolicy(attempts=3, backoff_s=0),
    )
    with pytest.raises(QueryRejected) as err:
        client.fetch(
            plan_requests("lyon", [G5kNode("lyon", "nova-99")], None, T0, T0, {}, 10, 1)[0][0]
        )
    assert "Unknown nodes: nova-99" in str(err.value)
    assert "s3cret" not in str(err.value) and "alice" not in str(err.value)
    assert "http://kwollect.test/stable/sites/lyon/metrics" in str(err.value)


# -- energy -----------------------------------------------------------------------------------


def test_trapezoid_matches_the_analytic_integral_of_a_piecewise_linear_power():
    # P(t) = 100 + 2 t on [0, 60], then 220 constant on [60, 120]: exact for trapezoids
    times = [T0 + dt.timedelta(seconds=s) for s in range(121)]
    watts = [100.0 + 2 * min(s, 60) for s in range(121)]
    e = integrate_power(times, watts)
    analytic = (100 * 60 + 60**2) + 220 * 60
    assert e.joules == pytest.approx(analytic)
    assert e.mean_watts == pytest.approx(analytic / 120)
    assert e.max_watts == 220 and e.samples == 121 and e.gaps == []


def test_energy_reports_gaps_and_integrates_sine_close_to_analytic():
    n = 3600
    times = [T0 + dt.timedelta(seconds=s) for s in range(n + 1) if not 1000 <= s < 1100]
    watts = [150 + 50 * math.sin(2 * math.pi * (t - T0).total_seconds() / 600) for t in times]
    e = integrate_power(times, watts, period_s=1.0)
    assert e.joules == pytest.approx(150 * n, rel=2e-3)  # whole periods: the sine cancels
    assert len(e.gaps) == 1 and e.gaps[0]["seconds"] == 101.0


def test_energy_edge_cases():
    assert integrate_power([], []).samples == 0
    # a window: its seconds before the first sample and after the last are said, not filled
    w = (T0 - dt.timedelta(seconds=10), T0 + dt.timedelta(seconds=30))
    e = integrate_power([T0, T0 + dt.timedelta(seconds=2)], [100.0, 100.0], window=w)
    assert e.joules == 200.0
    assert e.as_dict()["uncovered"] == {"before_first_s": 10.0, "after_last_s": 28.0}
    assert integrate_power([], [], window=w).uncovered == {
        "before_first_s": 40.0,
        "after_last_s": 0.0,
    }
    assert "uncovered" not in integrate_power([T0], [1.0]).as_dict()
    one = integrate_power([T0], [42.0])
    assert one.joules == 0 and one.mean_watts == 42.0
    with pytest.raises(ConfigError, match="chronological"):
        integrate_power([T0, T0 - dt.timedelta(seconds=1)], [1.0, 1.0])


# -- service state (no API call) --------------------------------------------------------------


def test_start_stop_record_times_without_api_calls():
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"unexpected request {request.url}")

    k = Kwollect(
        ["nova-1.lyon"], api_url="http://kwollect.test", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(ConfigError, match="call start"):
        k.window()
    k.start(T0).stop(T0 + dt.timedelta(minutes=5))
    assert k.window() == (T0, T0 + dt.timedelta(minutes=5))
    with pytest.raises(ConfigError, match="before start"):
        k.stop(T0 - dt.timedelta(seconds=1))
    with pytest.raises(ConfigError, match="at least one node"):
        Kwollect([], api_url="http://kwollect.test")
    with pytest.raises(ConfigError, match="unknown backup format"):
        k.backup("/nonexistent-never-created", format="xml")  # type: ignore[arg-type]


def test_drop_outside_keeps_the_inclusive_window_and_names_unreadable_points():
    from dxt_core.backends.kwollect.source import MetricsRequest, drop_outside
    from dxt_core.errors import SourceError

    node = G5kNode("lyon", "nova-1")
    req = MetricsRequest("lyon", (node,), None, T0, T0 + dt.timedelta(seconds=2))
    pts = [{"timestamp": (T0 + dt.timedelta(seconds=s)).isoformat()} for s in (-86_400, 0, 1, 2, 3)]
    kept, dropped = drop_outside(pts, req)
    assert [p["timestamp"] for p in kept] == [p["timestamp"] for p in pts[1:4]] and dropped == 2
    same, none = drop_outside(pts[1:4], req)
    assert none == 0 and same == pts[1:4]
    with pytest.raises(SourceError, match="no readable timestamp"):
        drop_outside([{"value": 1}], req)
