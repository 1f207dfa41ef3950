"""Request sizing and metric names from the real catalogue shapes (issue 11, issue 15.3).

Contract: grid5000/reference-repository ``data/grid5000/sites/<site>/clusters/<c>/<c>.json``
(key ``metrics``), excerpts in ``data/refrepo_metrics.json``; meaning of ``period`` 0 and
``optional_period``: refrepo ``lib/refrepo/gen/puppet/templates/kwollect-node.erb``; stored
``prom_<name>`` ids: kwollect ``kwollector.py``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from dxt_core.backends.kwollect import catalog
from dxt_core.backends.kwollect.source import G5kNode, KwollectClient
from dxt_core.errors import ConfigError

REFREPO = json.loads((Path(__file__).parent / "data/refrepo_metrics.json").read_text())
T0 = dt.datetime(2024, 11, 26, tzinfo=dt.UTC)


def entries(cluster: str, node: str | None = None) -> list[dict]:
    found = REFREPO[cluster]
    return [e for e in found if node is None or catalog.applies_to(e, node)]


def test_optional_period_wattmetre_is_fifty_times_faster_under_a_monitor_job():
    servan = entries("grenoble/servan")
    assert catalog.node_rate(servan, ["wattmetre_power_watt"], monitored=False) == 1.0
    assert catalog.node_rate(servan, ["wattmetre_power_watt"], monitored=True) == 50.0


def test_period_zero_entries_come_at_their_optional_period_and_duplicates_all_count():
    dahu = entries("grenoble/dahu")
    fans = [e for e in dahu if e["name"] == "bmc_fan_speed_rpm"]
    assert len(fans) == 8 and {e["period"] for e in fans} == {0}
    # 8 series (one per fan label) at 5 s: the old estimate (one per name, period 0 read as
    # 1 s) said 1 point/s
    assert catalog.node_rate(dahu, ["bmc_fan_speed_rpm"], monitored=False) == pytest.approx(1.6)
    # chartreuse3 lists bmc_ambient_temp_celsius twice with no labels (periods 5000 and 0/5000)
    c3 = entries("grenoble/chartreuse3")
    assert catalog.node_rate(c3, ["bmc_ambient_temp_celsius"], False) == pytest.approx(0.4)


def test_prometheus_bundles_expand_to_prom_names():
    c2 = entries("grenoble/chartreuse2")
    names, open_prom = catalog.known_names(c2)
    assert "prom_node_load1" in names and "prom_default_metrics" not in names and open_prom
    per_name = catalog.PROM_SERIES_PER_NAME / 15.0  # 15 s, several label sets per name
    assert catalog.node_rate(c2, ["prom_node_load1"], False) == pytest.approx(per_name)
    # a name outside the default list may come from prom_all_metrics
    assert catalog.unknown_metrics(["prom_node_hwmon_temp_celsius"], c2) == []
    # every metric under a plain monitor job: prom_all_metrics (its default names included)
    every = catalog.node_rate(c2, None, True)
    assert every > catalog.PROM_ALL_SERIES / 15.0
    default_bundle = catalog.PROM_SERIES_PER_NAME * 23 / 15.0
    alone = [e for e in c2 if e["name"] != "prom_default_metrics"]
    assert every == pytest.approx(catalog.node_rate(alone, None, True))
    assert every < catalog.node_rate(alone, None, True) + default_bundle / 2


def test_all_metrics_without_a_monitor_job_leave_out_what_only_a_monitor_job_collects():
    # kwollect stores a period-0 entry only while a monitor job promotes it (kwollector.py
    # keeps an optional metric only when the node's promoted pattern matches its name)
    gros = entries("nancy/gros", "gros-41")
    regular = [e for e in gros if e.get("period")]
    on_demand = [e for e in gros if not e.get("period")]
    assert len(on_demand) == 17 and {"prom_all_metrics", "prom_default_metrics"} <= {
        e["name"] for e in on_demand
    }
    plain = catalog.node_rate(gros, None, False)
    assert plain == pytest.approx(catalog.node_rate(regular, None, False))
    # counting them all (the estimate before) planned 25 times the points gros-41 stores
    assert catalog.node_rate(gros, None, True) > 25 * plain
    # a name asked for by name still counts: a past monitor job may have promoted it
    assert catalog.node_rate(gros, ["prom_node_load1"], False) > 0


def test_a_monitor_regex_promotes_only_the_names_it_matches():
    gros = entries("nancy/gros", "gros-41")
    watt = catalog.node_rate(gros, None, "wattmetre_power_watt")
    plain = catalog.node_rate(gros, None, False)
    assert watt == pytest.approx(plain - 1.0 + 50.0)  # wattmetre: 1 s -> 20 ms; no bundle
    prom = catalog.node_rate(gros, None, "prom_")
    assert prom == pytest.approx(plain + catalog.PROM_ALL_SERIES / 15.0)
    assert catalog.node_rate(gros, None, "[unclosed") == pytest.approx(plain)
    assert catalog.promotes("bmc_", {"name": "bmc_fan_speed_rpm"})
    assert not catalog.promotes("fan", {"name": "bmc_fan_speed_rpm"})  # re.match: anchored


def test_only_for_restricts_entries_to_listed_nodes():
    gros = REFREPO["nancy/gros"]
    assert catalog.node_rate(entries("nancy/gros", "gros-1"), ["wattmetre_power_watt"], True) == 1.0
    assert catalog.node_rate(entries("nancy/gros", "gros-41"), ["wattmetre_power_watt"], True) == 50
    assert catalog.unknown_metrics(["wattmetre_power_watt"], gros) == []


def test_unknown_names_and_closest_known_names():
    nova = entries("lyon/nova")
    assert catalog.unknown_metrics(["wattmetre_power_wat", "bmc_fan_speed_rpm"], nova) == [
        "wattmetre_power_wat"
    ]
    assert catalog.closest("wattmetre_power_wat", nova)[0] == "wattmetre_power_watt"


def _refrepo_server(cluster: str, calls: list[dict]) -> httpx.MockTransport:
    """A faked reference API answer with a real catalogue; metrics answer []."""

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/metrics"):
            calls.append(parse_qs(urlsplit(str(request.url)).query))
            return httpx.Response(200, json=[])
        return httpx.Response(200, json={"uid": cluster.split("/")[1], "metrics": REFREPO[cluster]})

    return httpx.MockTransport(handler)


def test_planning_a_monitor_job_keeps_each_request_under_max_points():
    calls: list[dict] = []
    client = KwollectClient(
        "http://api.test/stable", transport=_refrepo_server("grenoble/servan", calls),
        max_points=25_000,
    )  # fmt: skip
    nodes = [G5kNode("grenoble", f"servan-{i}") for i in range(1, 5)]
    stop = T0 + dt.timedelta(hours=1)
    normal = client.plan("grenoble", nodes, ["wattmetre_power_watt"], T0, stop)
    monitored = client.plan("grenoble", nodes, ["wattmetre_power_watt"], T0, stop, monitored=True)
    assert len(normal) == 1  # 4 nodes x 1 point/s x 3,601 s
    for window in monitored:  # 4 nodes x 50 points/s
        for req in window:
            assert (req.stop - req.start).total_seconds() * 4 * 50 <= 25_000
    assert len(monitored) == 29  # 4 x 50 x 3,601 / 25,000


def test_a_misspelled_metric_is_an_error_naming_the_closest_names():
    calls: list[dict] = []
    client = KwollectClient("http://api.test/stable", transport=_refrepo_server("lyon/nova", calls))
    with pytest.raises(ConfigError) as err:
        client.check_metrics("lyon", [G5kNode("lyon", "nova-1")], ["wattmetre_power_wat"])
    msg = str(err.value)
    assert "'wattmetre_power_wat'" in msg and "closest known: wattmetre_power_watt" in msg
    assert "site lyon" in msg and calls == []


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ([], False),
        (["deploy"], False),
        (["monitor"], True),
        (["deploy", "monitor=wattmetre_power_watt"], "wattmetre_power_watt"),
        (["monitor=wattmetre_.*", "monitor=prom_"], "(?:wattmetre_.*)|(?:prom_)"),
        (["monitor=prom_", "monitor"], True),
    ],
)
def test_a_jobs_types_say_what_its_monitor_promotes(types, expected):
    # kwollect db/kwollect_setup_db_oar.py, view promoted_metrics_job: "monitor" is ".*",
    # "monitor=REGEX" is REGEX
    from dxt_core.backends.kwollect.experiment import Kwollect

    k = Kwollect(["nova-1.lyon.grid5000.fr"], api_url="http://api.test/stable")
    k.job = {"types": types}
    assert k.monitored == expected


def test_the_wattmetre_high_rate_is_promoted_by_an_unanchored_match():
    # kwollect 1.3.1 kwollector_wattmetre.py, get_highfreq_node: a node's wattmetre is read
    # at 20 ms when 'wattmetre_power_watt' ~ metric_id (PostgreSQL: unanchored); the other
    # optional metrics when re.compile(metric_id).match(name) (kwollector.py)
    assert catalog.promotes("power", {"name": "wattmetre_power_watt"})
    assert not catalog.promotes("power", {"name": "pdu_power_watt"})
    assert catalog.promotes("pdu", {"name": "pdu_power_watt"})


def test_the_simulator_promotes_as_kwollect_does():
    from dxt_core.backends.kwollect.simulator.model import _promotes

    assert _promotes("monitor", "bmc_fan_speed_rpm")  # plain monitor: '.*'
    assert _promotes("monitor=bmc_", "bmc_fan_speed_rpm")  # re.match: a prefix is enough
    assert not _promotes("monitor=fan", "bmc_fan_speed_rpm")  # ... anchored at the start
    assert _promotes("monitor=power", "wattmetre_power_watt")  # the wattmetre: unanchored
    assert _promotes("monitor='wattmetre_power_watt'", "wattmetre_power_watt")
    assert not _promotes("deploy", "wattmetre_power_watt")
    assert not _promotes("monitor=[unclosed", "bmc_fan_speed_rpm")
