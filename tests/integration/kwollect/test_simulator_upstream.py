"""The Kwollect simulator's reference API answers, checked against the real ones.

grid5000/reference-repository ``data/grid5000/sites/nancy/clusters/gros/gros.json`` (the
``metrics`` catalogue) and grid5000/g5k-api ``lib/oar/job.rb`` (a job's document). The
simulator runs as a separate process, over real HTTP.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import httpx
import pytest

from dxt_core.backends.kwollect import catalog
from dxt_core.backends.kwollect.experiment import Kwollect
from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sim() -> Iterator[KwollectSimProcess]:
    started = int(time.time()) - 600
    process = KwollectSimProcess([
        "--job", "lyon:1:nova-1,nova-2:1732629600:1732631400",
        "--job", f"nancy:77:gros-1:{started}:",
        "--job", f"nancy:78:gros-2:{started}:0",
        "--job", f"nancy:79:gros-3:{started - 10 * 86400}:",  # running for 10 days
    ])  # fmt: skip
    yield process
    process.stop()


def get(sim: KwollectSimProcess, path: str) -> httpx.Response:
    return httpx.get(f"{sim.url}{path}", timeout=30)


def test_catalogue_entries_look_like_the_reference_repository(sim: KwollectSimProcess) -> None:
    gros = get(sim, "/sites/nancy/clusters/gros").json()["metrics"]
    for entry in gros:
        assert list(entry) == sorted(entry)  # the generator writes keys sorted
        assert entry.get("labels", True)  # no "labels": {} where there are none
        protocol = entry["source"]["protocol"]
        listed = protocol in ("snmp", "ipmisensor") or entry["name"] == "prom_default_metrics"
        assert ("id" in entry["source"]) == listed  # prom_all_metrics: every exporter name
    by_name = {e["name"]: e for e in gros}
    # node exporter's bundles, as gros.json has them (the default list cut to what is served)
    assert by_name["prom_default_metrics"] == {
        "name": "prom_default_metrics",
        "optional_period": 15000,
        "period": 0,
        "source": {"id": ["node_load1"], "port": 9100, "protocol": "prometheus"},
    }
    assert by_name["prom_all_metrics"] == {
        "name": "prom_all_metrics",
        "optional_period": 15000,
        "period": 0,
        "source": {"port": 9100, "protocol": "prometheus"},
    }
    assert "prom_node_load1" not in by_name  # a stored name, not a catalogue entry
    assert by_name["wattmetre_power_watt"]["source"] == {"protocol": "wattmetre"}
    assert by_name["network_ifacein_bytes_total"]["source"] == {"protocol": "network_equipment"}
    assert by_name["network_ifacein_bytes_total"]["labels"] == {"interface": "eth0"}
    assert "labels" not in by_name["bmc_node_power_watt"]
    fans = [e for e in gros if e["name"] == "bmc_fan_speed_rpm"]
    assert [e["labels"] for e in fans] == [{"fan": "1a"}, {"fan": "1b"}]
    assert {(e["period"], e["optional_period"]) for e in fans} == {(0, 5000)}
    taurus = get(sim, "/sites/lyon/clusters/taurus").json()["metrics"]
    pdu = next(e for e in taurus if e["name"] == "pdu_outlet_power_watt")
    assert pdu["source"] == {"protocol": "pdu"} and pdu["only_for"] == ["taurus-1", "taurus-2"]


def test_client_catalogue_logic_reads_the_repeated_period_zero_entries(
    sim: KwollectSimProcess,
) -> None:
    k = Kwollect(["gros-1.nancy"], api_url=sim.url)
    entries = k.available_metrics()["gros-1.nancy.grid5000.fr"]
    fans = [e for e in entries if e["name"] == "bmc_fan_speed_rpm"]
    assert [catalog.entry_period_ms(e) for e in fans] == [5000.0, 5000.0]
    # two series (one per fan label) at 5 s
    assert catalog.node_rate(entries, ["bmc_fan_speed_rpm"], False) == pytest.approx(0.4)
    assert catalog.unknown_metrics(["bmc_fan_speed_rpm", "prom_node_load1"], entries) == []
    # no monitor job names them: no rows
    start = dt.datetime(2024, 11, 26, 14, tzinfo=dt.UTC)
    k.start(start).stop(start + dt.timedelta(seconds=30))
    assert k.get_metrics(["bmc_fan_speed_rpm"]) == {"gros-1.nancy.grid5000.fr": []}
    assert k.get_metrics(["prom_node_load1"]) == {"gros-1.nancy.grid5000.fr": []}
    k.close()


@pytest.mark.parametrize("uid", [77, 78])
def test_a_running_job_has_no_stopped_at(sim: KwollectSimProcess, uid: int) -> None:
    # lib/oar/job.rb: stopped_at is nil while stop_time == 0; to_reservation drops nils.
    doc = get(sim, f"/sites/nancy/jobs/{uid}").json()
    assert "stopped_at" not in doc and doc["state"] == "running"
    k = Kwollect.from_job("nancy", uid, api_url=sim.url)
    try:
        assert k.stop_time is None  # experiment.py: "if stopped:" not taken
        start, end = k.window()
        assert end - start >= dt.timedelta(minutes=10)
        points = k.get_metrics(["bmc_node_power_watt"])[f"gros-{uid - 76}.nancy.grid5000.fr"]
        assert len(points) >= 600 // 5 - 1
    finally:
        k.close()
    done = get(sim, "/sites/lyon/jobs/1").json()
    assert done["stopped_at"] == 1732631400 and done["state"] == "terminated"


def test_a_job_running_for_longer_than_seven_days_ends_now(sim: KwollectSimProcess) -> None:
    """The 7-day refusal of a window that ends "now" (a mistyped start) took an OAR job's
    start for a mistyped one: a job running for 10 days could not be backed up without
    typing the current time. A start typed over it is checked again."""
    from dxt_core.errors import ConfigError

    k = Kwollect.from_job("nancy", 79, api_url=sim.url)
    try:
        start, end = k.window()  # no request
        assert end - start > dt.timedelta(days=10) and k.stop_time is None
        k.start(start)  # typed: the check applies
        with pytest.raises(ConfigError, match=r"--end now or --end TIME on the command line"):
            k.window()
    finally:
        k.close()


def test_the_command_line_takes_end_now(sim: KwollectSimProcess, tmp_path) -> None:
    """``--end now``, as the 7-day refusal advises: it was refused as "bad stop 'now'"."""
    import json

    from dxt_core.cli import main

    t0 = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)
    rc = main([
        "extract", "kwollect", "--api-url", sim.url, "--nodes", "nova-1.lyon",
        "--metrics", "wattmetre_power_watt", "--start", t0.isoformat(), "--end", "now",
        "--backup", str(tmp_path / "b"),
    ])  # fmt: skip
    assert rc == 0
    doc = json.loads((tmp_path / "b" / "manifest.json").read_text())
    stop = dt.datetime.fromisoformat(doc["stop"])
    assert t0 + dt.timedelta(seconds=30) <= stop <= dt.datetime.now(dt.UTC)
