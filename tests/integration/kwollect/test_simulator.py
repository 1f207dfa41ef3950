"""The Kwollect simulator behaves like the real API (shared/notes/backends.md), over HTTP."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.integration

UTC = dt.UTC


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def get(sim, path, **params):
    return httpx.get(f"{sim.url}{path}", params=params, timeout=30)


def ts(points):
    return [dt.datetime.fromisoformat(p["timestamp"]) for p in points]


def test_reference_api_catalog(sim):
    assert [s["uid"] for s in get(sim, "/stable/sites").json()["items"]] == ["lyon", "nancy"]
    taurus = get(sim, "/sites/lyon/clusters/taurus").json()
    by_name = {m["name"]: m for m in taurus["metrics"]}
    assert by_name["pdu_outlet_power_watt"]["only_for"] == ["taurus-1", "taurus-2"]
    assert by_name["prom_default_metrics"]["source"]["protocol"] == "prometheus"
    nova = {m["name"]: m for m in get(sim, "/sites/lyon/clusters/nova").json()["metrics"]}
    assert nova["wattmetre_power_watt"]["period"] == 1000
    assert nova["wattmetre_power_watt"]["optional_period"] == 20
    nodes = get(sim, "/sites/nancy/clusters/gros/nodes").json()["items"]
    assert [n["uid"] for n in nodes] == ["gros-1", "gros-2", "gros-3", "gros-4"]
    assert get(sim, "/sites/paris/clusters").status_code == 404


def test_times_epoch_iso_paris_default_inclusive_and_five_minutes(sim):
    base = {"nodes": "nova-1.lyon.grid5000.fr", "metrics": "wattmetre_power_watt"}
    by_epoch = get(
        sim, "/sites/lyon/metrics", start_time="1732629600", end_time="1732629610", **base
    ).json()
    # no offset: Europe/Paris (UTC+1 in November)
    by_iso = get(
        sim,
        "/sites/lyon/metrics",
        start_time="2024-11-26T15:00:00",
        end_time="2024-11-26T15:00:10",
        **base,
    ).json()
    assert by_epoch == by_iso and len(by_epoch) == 11
    assert ts(by_epoch)[0] == dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)
    only_start = get(sim, "/sites/lyon/metrics", start_time="1732629600", **base).json()
    assert len(only_start) == 301  # 5 minutes, both ends included
    assert ts(only_start) == sorted(ts(only_start))


def test_all_metrics_oldest_first_with_device_orig_labels(sim):
    points = get(
        sim,
        "/sites/lyon/metrics",
        nodes="nova-1,taurus-1",
        start_time="1732629600",
        end_time="1732629660",
    ).json()
    assert ts(points) == sorted(ts(points))
    seen = {(p["device_id"], p["metric_id"]) for p in points}
    assert ("taurus-1", "pdu_outlet_power_watt") in seen and (
        "nova-1",
        "pdu_outlet_power_watt",
    ) not in seen
    watt = next(p for p in points if p["metric_id"] == "wattmetre_power_watt")
    assert watt["labels"] == {"_device_orig": ["wattmetre-nova-port1"]}


def test_errors_follow_the_real_function(sim):
    # kwollect kwollect/db/kwollect_setup_db.py api.get_metrics, as PostgREST answers it
    r = get(sim, "/sites/lyon/metrics", nodes="nova-1,nova-77", start_time="1732629600")
    assert r.status_code == 200 and {p["device_id"] for p in r.json()} == {"nova-1"}
    assert get(sim, "/sites/lyon/metrics", devices="nope-1").json() == []
    r = get(sim, "/sites/lyon/metrics", start_time="1732629600")
    assert r.status_code == 500 and r.json() == {
        "code": "XX000",
        "details": None,
        "hint": None,
        "message": "plpy.Error: Missing 'devices', 'nodes' or 'job_id' argument",
    }
    r = get(sim, "/sites/lyon/metrics", job_id="999")
    assert r.status_code == 500 and r.json()["message"] == "IndexError: list index out of range"
    r = get(sim, "/sites/lyon/metrics", nodes="nova-1", start_time="noon-ish")
    assert r.status_code == 400 and r.json()["code"] == "22007"
    r = get(sim, "/sites/lyon/metrics", nodes="nova-1", job_id="x")
    assert r.status_code == 400 and r.json()["code"] == "22P02"


def test_job_id_summary_and_as_rate(sim):
    job = get(sim, "/sites/lyon/jobs/1930000").json()
    assert job["assigned_nodes"] == ["nova-1.lyon.grid5000.fr", "nova-2.lyon.grid5000.fr"]
    points = get(
        sim, "/sites/lyon/metrics", job_id="1930000", metrics="wattmetre_power_watt"
    ).json()
    assert {p["device_id"] for p in points} == {"nova-1", "nova-2"}
    assert len(points) == 2 * (job["stopped_at"] - job["started_at"] + 1)
    summary = get(
        sim, "/sites/lyon/metrics", job_id="1930000", metrics="wattmetre_power_watt", summary="true"
    ).json()
    # 5-minute buckets starting in [14:00, 14:30] UTC: 7 per node, stamped with their start
    assert len(summary) == 2 * 7
    first = next(p for p in summary if p["device_id"] == "nova-1")
    assert first["timestamp"] == "2024-11-26T15:00:00+01:00"
    one = [p["value"] for p in points if p["device_id"] == "nova-1"][:300]
    assert first["value"] == pytest.approx(sum(one) / len(one))
    raw = get(
        sim,
        "/sites/lyon/metrics",
        nodes="nova-2",
        metrics="network_ifacein_bytes_total",
        start_time="1732629600",
        end_time="1732629660",
    ).json()
    rate = get(
        sim,
        "/sites/lyon/metrics",
        nodes="nova-2",
        metrics="network_ifacein_bytes_total",
        start_time="1732629600",
        end_time="1732629660",
        as_rate="true",
    ).json()
    dt_s = (ts(raw)[1] - ts(raw)[0]).total_seconds()
    assert rate[0]["value"] is None
    assert rate[1]["value"] == pytest.approx((raw[1]["value"] - raw[0]["value"]) / dt_s)


def test_too_much_data_answer_and_per_site_delay(sim):
    sim.configure(max_points=100, site_delay_s={"nancy": 0.5})
    try:
        r = get(
            sim,
            "/sites/lyon/metrics",
            nodes="nova-1",
            start_time="1732629600",
            end_time="1732629800",
        )
        assert (
            r.status_code == 500
            and r.json()["message"] == "Exception: Request timeout, too much data to process."
        )
        t = dt.datetime.now(UTC)
        assert (
            get(sim, "/sites/nancy/metrics", nodes="gros-1", metrics="prom_node_load1").status_code
            == 200
        )
        assert (dt.datetime.now(UTC) - t).total_seconds() >= 0.5
    finally:
        sim.reset()


def test_config_updates_of_the_wrong_kind_are_refused_whole(sim):
    before = httpx.get(f"{sim.url}/_sim/config", timeout=10).json()
    for bad in (
        {"delay_s": "slow"},
        {"delay_s": -1},
        {"slow_delay_s": None},
        {"site_delay_s": {"nancy": "x"}},
        {"slow_requests": 1.5},
        {"max_points": -3},
        {"expired_before_s": True},
        # one good change with a bad one: neither is applied
        {"max_points": 10, "timeout_delay_s": [1]},
    ):
        r = httpx.post(f"{sim.url}/_sim/config", json=bad, timeout=10)
        assert r.status_code == 400, bad
        assert "must be" in r.json()["message"], r.text
    assert httpx.get(f"{sim.url}/_sim/config", timeout=10).json() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--delay", "nan"],
        ["--timeout-delay", "inf"],
        ["--delay", "-1"],
        ["--site-delay", "lyon=nan"],
    ],
)
def test_a_delay_that_is_no_number_of_seconds_is_refused_at_start(argv, capsys):
    from dxt_core.backends.kwollect.simulator.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["--port", "0", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}:" in err and "finite number" in err, err


@pytest.mark.slow  # 3 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_streams_a_day_of_fifty_nodes(tmp_path):
    sim = KwollectSimProcess(["--nodes", "50"])
    try:
        nodes = ",".join(f"nova-{i}" for i in range(1, 51))
        size = 0
        with httpx.stream(
            "GET",
            f"{sim.url}/sites/lyon/metrics",
            params={
                "nodes": nodes,
                "metrics": "wattmetre_power_watt",
                "start_time": "2024-11-26T00:00:00",
                "end_time": "2024-11-26T01:59:59",
            },
            timeout=300,
        ) as r:
            assert r.status_code == 200
            tail = b""
            for chunk in r.iter_bytes():
                size += len(chunk)
                tail = (tail + chunk)[-200:]
        assert tail.endswith(b"]") and size > 50 * 7200 * 100
        assert sim.stats()["points_served"] == 50 * 7200
    finally:
        sim.stop()


def test_late_points_are_served_in_order_but_not_summarised(sim):
    """``POST /_sim/points``: rows a collector writes after the window was read come back
    like the others, in time order; the 5-minute summary, a continuous aggregate refreshed
    over the last 12 hours only, never sees them on past days; ``DELETE`` removes them."""
    q = {"nodes": "nova-2", "metrics": "bmc_node_power_watt"}
    window = {"start_time": "2024-11-26T12:00:00+01:00", "end_time": "2024-11-26T12:00:10+01:00"}
    before = get(sim, "/sites/lyon/metrics", **q, **window).json()
    summary = get(sim, "/sites/lyon/metrics", **q, **window, summary="true").json()
    assert [p["timestamp"] for p in before] == [
        "2024-11-26T12:00:00.25+01:00",
        "2024-11-26T12:00:05.25+01:00",
    ]
    late = [["2024-11-26T12:00:01+01:00", 150.5], ["1732618806", 151.25]]  # 12:00:06 Paris
    r = httpx.post(
        f"{sim.url}/_sim/points",
        json={"site": "lyon", "node": "nova-2", "metric": "bmc_node_power_watt", "points": late},
        timeout=10,
    )
    try:
        assert r.json() == {"added": 2}
        after = get(sim, "/sites/lyon/metrics", **q, **window).json()
        assert [p["timestamp"] for p in after] == [
            "2024-11-26T12:00:00.25+01:00",
            "2024-11-26T12:00:01+01:00",
            "2024-11-26T12:00:05.25+01:00",
            "2024-11-26T12:00:06+01:00",
        ]
        assert [p["value"] for p in after][1::2] == [150.5, 151.25]
        assert after[1]["labels"] == before[0]["labels"]
        assert get(sim, "/sites/lyon/metrics", **q, **window, summary="true").json() == summary
        # a time the series already samples, and a series that does not exist
        for bad in (
            {"node": "nova-2", "points": [["2024-11-26T12:00:05.25+01:00", 1]]},
            {"node": "nova-99", "points": [["2024-11-26T12:00:01+01:00", 1]]},
        ):
            doc = {"site": "lyon", "metric": "bmc_node_power_watt", **bad}
            assert httpx.post(f"{sim.url}/_sim/points", json=doc, timeout=10).status_code == 400
    finally:
        httpx.delete(f"{sim.url}/_sim/points", timeout=10).raise_for_status()
    assert get(sim, "/sites/lyon/metrics", **q, **window).json() == before


def test_a_summary_counts_only_the_buckets_that_hold_samples(sim):
    # prom_node_load1 is on demand: nova-1 has it only while job 1930000 (14:00-14:30 UTC,
    # monitor=prom_default_metrics) runs. Window 13:40-15:10 Paris = 12:40-14:10 UTC.
    window = {"start_time": "2024-11-26T13:40:00", "end_time": "2024-11-26T15:10:00"}
    q = {"nodes": "nova-1", "summary": "true", **window}
    load = get(sim, "/sites/lyon/metrics", metrics="prom_node_load1", **q).json()
    assert [p["timestamp"][11:16] for p in load] == ["15:00", "15:05", "15:10"]
    every = get(sim, "/sites/lyon/metrics", **q).json()
    # what the limit counts is what is served: 19 buckets of the three metrics sampled at
    # all times, 3 of the load (it counted 19 of the load too)
    assert len(every) == 3 * 19 + 3
    sim.configure(max_points=len(every))
    assert get(sim, "/sites/lyon/metrics", **q).status_code == 200
    sim.configure(max_points=len(every) - 1)
    assert get(sim, "/sites/lyon/metrics", **q).status_code == 500
