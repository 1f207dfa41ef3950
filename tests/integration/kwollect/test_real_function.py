"""Our Kwollect client against Kwollect's own ``api.get_metrics`` on PostgreSQL (issue 11).

Contract: kwollect 1.3.1 ``kwollect/db/kwollect_setup_db.py`` (schema, ``metrics_by_device``
views, ``api.get_metrics``), loaded from the package at test time by ``kwollect_pg``, served
over HTTP as Grid'5000 does by ``pg_adapter`` (a separate process). The data are stored as
Kwollect's collectors store them: wattmetre ports and switch ports under their own device id
with ``labels._device_alias = <node>`` (``kwollector_wattmetre.py``, refrepo
``kwollect-network.erb``), BMC readings under the node.

The same requests are then sent to our simulator, which must answer the same way.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dxt_core import Archive, ConfigError, procs
from dxt_core.backends.kwollect.archive_day import archive_kwollect_day
from dxt_core.backends.kwollect.experiment import Kwollect
from dxt_core.backends.kwollect.simulator.query import pg_number
from dxt_core.backends.kwollect.source import KwollectClient, parse_nodes
from dxt_core.windows import day_window, zone
from tests.integration.kwollect.kwollect_pg import KwollectDatabase, Unavailable
from tests.kwollect_sim import KwollectSimProcess
from tests.services import require_service

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

UTC = dt.UTC
T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)
WATT = "wattmetre_power_watt"
REFREPO = Path(__file__).parents[2] / "unit/kwollect/data/refrepo_metrics.json"

DATA_SQL = """
INSERT INTO metrics (timestamp, device_id, metric_id, value, labels)
SELECT t, 'wattmetre1-port' || n, 'wattmetre_power_watt',
       100 + 7 * n + (extract(epoch FROM t)::bigint % 600) / 10.0,
       jsonb_build_object('_device_alias', 'nova-' || n)
FROM generate_series(1, 2) n,
     generate_series(TIMESTAMPTZ '2024-11-26 13:00:00+00', '2024-11-26 15:00:00+00', '1 second') t;
INSERT INTO metrics (timestamp, device_id, metric_id, value, labels)
SELECT t, 'nova-' || n, 'bmc_ambient_temp_celsius', 20 + n, '{}'
FROM generate_series(1, 2) n,
     generate_series(TIMESTAMPTZ '2024-11-26 13:00:00+00', '2024-11-26 15:00:00+00', '5 second') t;
INSERT INTO metrics (timestamp, device_id, metric_id, value, labels)
SELECT t, 'gw-port-' || n, 'network_ifacein_bytes_total',
       1e9 * n + 125000 * extract(epoch FROM t - TIMESTAMPTZ '2024-11-26 13:00:00+00'),
       jsonb_build_object('interface', 'eth0', '_device_alias', 'nova-' || n)
FROM generate_series(1, 2) n,
     generate_series(TIMESTAMPTZ '2024-11-26 13:00:00+00', '2024-11-26 15:00:00+00', '10 second') t;
INSERT INTO test_jobs VALUES
  (1930000, '2024-11-26 14:00:00+00', '2024-11-26 14:30:00+00', 'nova-1'),
  (1930000, '2024-11-26 14:00:00+00', '2024-11-26 14:30:00+00', 'nova-2');
"""


@pytest.fixture(scope="module")
def kwdb():
    try:
        db = KwollectDatabase()
    except Unavailable as exc:
        require_service(exc.service, f"Kwollect's api.get_metrics cannot run here: {exc.reason}")
    try:
        db.execute(DATA_SQL)
        yield db
    finally:
        db.drop()


@pytest.fixture(scope="module")
def api(kwdb, tmp_path_factory):
    catalog = tmp_path_factory.mktemp("catalog") / "catalog.json"
    refrepo = json.loads(REFREPO.read_text())
    catalog.write_text(json.dumps({"lyon/nova": refrepo["lyon/nova"]}))
    proc = procs.start(
        [sys.executable, "-m", "tests.integration.kwollect.pg_adapter", "--dsn",
         kwdb.dsn(kwdb.user), "--role", kwdb.ro, "--catalog", str(catalog)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3],
    )  # fmt: skip
    line = proc.stdout.readline()
    assert "listening on" in line, line
    yield line.split()[-1].strip() + "/stable"
    procs.stop(proc)


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def get(base: str, **params: str) -> httpx.Response:
    return httpx.get(f"{base}/sites/lyon/metrics", params=params, timeout=30)


# -- our client against the real function ---------------------------------------------------


def test_daily_archive_from_the_real_function_has_every_point_once(api, tmp_path):
    archive = Archive(tmp_path / "a")
    client = KwollectClient(api, max_points=3_000)
    nodes = ["nova-1.lyon", "nova-2.lyon"]
    r = archive_kwollect_day(client, "lyon", WATT, nodes, dt.date(2024, 11, 26), archive)
    points = [json.loads(x) for x in gzip.decompress(r.path.read_bytes()).splitlines()]
    assert r.stats.requests >= 5  # several windows: each boundary instant in one of them only
    assert r.rows == len(points) == 2 * 7_201  # 13:00:00 .. 15:00:00 inclusive, two nodes
    assert len({(p["device_id"], p["timestamp"]) for p in points}) == r.rows
    stamps = [dt.datetime.fromisoformat(p["timestamp"]) for p in points]
    assert stamps == sorted(stamps)
    assert points[0]["timestamp"] == "2024-11-26T14:00:00+01:00"
    assert points[0]["labels"] == {"_device_orig": ["wattmetre1-port1"]}
    # issue 19: the function has no count (its summary rows hold no count either, see
    # test_summary_is_five_minute_buckets_by_their_start): the count is the points read
    doc = json.loads(r.manifest.read_text())
    assert doc["source_count"]["count"] == r.rows
    assert doc["source_count"]["method"].startswith("Kwollect has no count")
    window = day_window(dt.date(2024, 11, 26), zone("Europe/Paris"))
    stop = window.end - dt.timedelta(microseconds=1)
    assert client.count_points("lyon", parse_nodes(nodes), WATT, window.start, stop).count == r.rows
    again = archive_kwollect_day(client, "lyon", WATT, nodes, dt.date(2024, 11, 26), archive)
    assert again.path.read_bytes() == r.path.read_bytes()
    with pytest.raises(ConfigError, match="closest known: wattmetre_power_watt"):
        archive_kwollect_day(client, "lyon", "wattmetre_power_wat", nodes, r.key.day, archive)
    client.close()


def test_experiment_metrics_from_the_real_function(api):
    k = Kwollect(["nova-1.lyon"], api_url=api).start(T0).stop(T0 + dt.timedelta(minutes=10))
    points = k.get_metrics()["nova-1.lyon.grid5000.fr"]
    by_metric: dict[str, list[dict]] = {}
    for p in points:
        by_metric.setdefault(p["metric_id"], []).append(p)
    assert {m: len(v) for m, v in by_metric.items()} == {
        WATT: 601,
        "bmc_ambient_temp_celsius": 121,
        "network_ifacein_bytes_total": 61,
    }
    net = by_metric["network_ifacein_bytes_total"][0]
    assert net["labels"] == {"interface": "eth0", "_device_orig": ["gw-port-1"]}
    assert k.energy()["nova-1.lyon.grid5000.fr"]["samples"] == 601
    k.close()


# -- what the real function answers, and the simulator with it --------------------------------


def _shape(r: httpx.Response, expected: tuple[int, object]) -> tuple[int, object]:
    doc = r.json()
    if r.status_code != 200:
        return r.status_code, (doc["code"], doc["message"])
    return 200, None if expected[1] is None else len(doc)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        # unknown nodes: no rows, not an error
        ({"nodes": "nova-77", "start_time": "1732629600", "end_time": "1732629660"}, (200, 0)),
        # no nodes, devices or job_id: plpy.error, SQLSTATE XX000, HTTP 500
        (
            {"start_time": "1732629600"},
            (500, ("XX000", "plpy.Error: Missing 'devices', 'nodes' or 'job_id' argument")),
        ),
        # an unknown job: the job query has no row
        ({"job_id": "42"}, (500, ("38000", "IndexError: list index out of range"))),
        # only a start: five minutes, both ends included
        ({"nodes": "nova-1", "metrics": WATT, "start_time": "1732629600"}, (200, 301)),
        # node names are cut at the first dot
        (
            {
                "nodes": "nova-1.lyon.grid5000.fr",
                "metrics": WATT,
                "start_time": "2024-11-26T15:00",
                "end_time": "2024-11-26T15:00:10",
            },
            (200, 11),
        ),
        # PostgreSQL time literals: "yesterday" is one (rows depend on the data: any count)
        ({"nodes": "nova-1", "start_time": "yesterday", "end_time": "today"}, (200, None)),
    ],
)
def test_the_simulator_answers_as_the_real_function(api, sim, params, expected):
    real = get(api, **params)
    assert _shape(real, expected) == expected, real.text[:300]
    ours = get(sim.url, **params)
    assert _shape(ours, expected) == expected, ours.text[:300]


def test_bad_times_are_400_with_sqlstate_22007(api, sim):
    for base in (api, sim.url):
        r = get(base, nodes="nova-1", start_time="garbage")
        assert r.status_code == 400 and r.json()["code"] == "22007", (base, r.text)
        assert (
            'invalid input syntax for type timestamp with time zone: "garbage"'
            in (r.json()["message"])
        )


def test_job_id_gives_the_jobs_nodes_and_times_inclusive(api, sim):
    for base in (api, sim.url):
        points = get(base, job_id="1930000", metrics=WATT).json()
        assert {p["device_id"] for p in points} == {"nova-1", "nova-2"}
        assert len(points) == 2 * 1801, base
        assert points[0]["timestamp"] == "2024-11-26T15:00:00+01:00"
        assert points[-1]["timestamp"] == "2024-11-26T15:30:00+01:00"


def test_summary_is_five_minute_buckets_by_their_start(api, sim):
    window = {"start_time": "2024-11-26T15:02:00", "end_time": "2024-11-26T15:10:00"}
    for base in (api, sim.url):
        rows = get(base, nodes="nova-1", metrics=WATT, summary="true", **window).json()
        # buckets starting 15:05 and 15:10 (the 15:00 bucket starts before start_time)
        assert [r["timestamp"] for r in rows] == [
            "2024-11-26T15:05:00+01:00",
            "2024-11-26T15:10:00+01:00",
        ], base
        assert set(rows[0]) == {"timestamp", "device_id", "metric_id", "value", "labels"}
        raw = get(
            base, nodes="nova-1", metrics=WATT,
            start_time="2024-11-26T15:05:00", end_time="2024-11-26T15:09:59.999999",
        ).json()  # fmt: skip
        assert rows[0]["value"] == pytest.approx(sum(p["value"] for p in raw) / len(raw)), base
        counters = get(
            base, nodes="nova-1", metrics="network_ifacein_bytes_total", summary="true", **window
        ).json()
        raw = get(
            base, nodes="nova-1", metrics="network_ifacein_bytes_total",
            start_time="2024-11-26T15:05:00", end_time="2024-11-26T15:09:59.999999",
        ).json()  # fmt: skip
        # a *_total counter's bucket is its largest value, not the mean
        assert counters[0]["value"] == max(p["value"] for p in raw), base


def test_as_rate_starts_each_series_with_null(api, sim):
    for base in (api, sim.url):
        rows = get(
            base, nodes="nova-1", metrics="network_ifacein_bytes_total", as_rate="true",
            start_time="2024-11-26T15:00:00", end_time="2024-11-26T15:01:00",
        ).json()  # fmt: skip
        raw = get(
            base, nodes="nova-1", metrics="network_ifacein_bytes_total",
            start_time="2024-11-26T15:00:00", end_time="2024-11-26T15:01:00",
        ).json()  # fmt: skip
        assert rows[0]["value"] is None, base
        t = [dt.datetime.fromisoformat(p["timestamp"]) for p in raw]
        expected = (raw[1]["value"] - raw[0]["value"]) / (t[1] - t[0]).total_seconds()
        assert rows[1]["value"] == pytest.approx(expected), base


def test_numbers_are_printed_as_postgresql_prints_them(api, sim):
    # float8 whole numbers have no ".0" (kwollect's value column is double precision)
    for base in (api, sim.url):
        text = get(base, nodes="nova-1", metrics=WATT, start_time="1732629600",
                   end_time="1732629600").text  # fmt: skip
        assert re.search(r'"value":\s*\d+\s*[,}]', text), (base, text)


def test_pg_number_follows_float8out():
    for value, text in [
        (104.0, "104"), (0.1, "0.1"), (1e15, "1e+15"), (1.5e-05, "1.5e-05"),
        (123456789012345.0, "123456789012345"), (float("nan"), '"NaN"'), (-2.5, "-2.5"),
        (0.0001, "0.0001"), (104.25, "104.25"), (1234567.0, "1234567"),
    ]:  # fmt: skip
        assert pg_number(value) == text, (value, pg_number(value))
