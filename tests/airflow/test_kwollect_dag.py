"""dxt_kwollect under Airflow: DagBag, then two days with `airflow dags test` against the
Kwollect simulator process; a rerun of a day rewrites identical bytes."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home, run_dagbag_script
from tests.kwollect_sim import KwollectSimProcess

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAYS = ("2024-11-26", "2024-11-27")
# `airflow dags test DAG D` makes a manual run of logical date D: it archives day D, as every
# run without the day param does (dxt_core.airflow.runs).
TEST_DATES = {d: d for d in DAYS}
METRICS = ("wattmetre_power_watt", "bmc_node_power_watt")


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def kwollect_env(home, archive, sim_url):
    env = base_env(home, archive, sim_url, None)
    env.update(
        {
            "AIRFLOW_CONN_KWOLLECT_DEFAULT": json.dumps(
                {"conn_type": "kwollect", "host": sim_url, "extra": {"max_points": 50000}}
            ),
            "DXT_KWOLLECT_NODES": "nova-1.lyon.grid5000.fr,nova-2.lyon",
            "DXT_KWOLLECT_CLUSTERS": "nancy/gros",
            "DXT_KWOLLECT_METRICS": ",".join(METRICS),
            "DXT_KWOLLECT_SETTLE_SECONDS": "0",
            "DXT_KWOLLECT_RETRIES": "0",
        }
    )
    return env


PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
dag = bag.dags["dxt_kwollect"]
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
                  "tasks": sorted(dag.task_dict), "catchup": dag.catchup}}))
"""


def test_dagbag_parses_dxt_kwollect(migrated_home, tmp_path):
    env = kwollect_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "a", "http://x:1")
    doc = run_dagbag_script(env, PARSE)
    assert doc["errors"] == {}
    assert doc["tasks"] == [
        "archive_site_metric_day",
        "reconcile_recent_days",
        "units",
        "wait_for_day_end",
    ]
    assert doc["catchup"] is True


def test_two_days_then_identical_rerun(migrated_home, tmp_path, sim):
    archive = tmp_path / "archive"
    env = kwollect_env(fresh_home(migrated_home, tmp_path / "home"), archive, sim.url)
    for day in DAYS:
        airflow(env, "dags", "test", "dxt_kwollect", TEST_DATES[day])
    expected_nodes = {"lyon": 2, "nancy": 4}
    digests = {}
    for site, n in expected_nodes.items():
        for metric in METRICS:
            for day in DAYS:
                base = archive / "kwollect" / site / metric
                data = base / f"{day}.jsonl.gz"
                manifest = json.loads((base / f"{day}.manifest.json").read_text())
                raw = data.read_bytes()
                per_node = 86_400 if metric == "wattmetre_power_watt" else 86_400 // 5
                assert manifest["status"] == "archived"
                assert manifest["rows"] == n * per_node
                assert manifest["bytes"] == len(raw)
                assert manifest["source_url"] == sim.url
                assert manifest["first_timestamp"].startswith(f"{day}T00:00:0")
                assert manifest["last_timestamp"].startswith(f"{day}T23:59:5")
                assert manifest["software"]["name"] == "dxt-archive"
                lines = gzip.decompress(raw).splitlines()
                assert len(lines) == manifest["rows"]
                assert (
                    {json.loads(x)["device_id"] for x in lines[: n * 3]}
                    == {
                        *(f"nova-{i}" for i in range(1, 3)),
                    }
                    if site == "lyon"
                    else {f"gros-{i}" for i in range(1, 5)}
                )
                digests[(site, metric, day)] = manifest["sha256"]
    assert not list(archive.rglob("*.tmp"))
    # rerun the first day in a fresh metadata DB: same bytes
    env2 = kwollect_env(fresh_home(migrated_home, tmp_path / "home2"), archive, sim.url)
    airflow(env2, "dags", "test", "dxt_kwollect", TEST_DATES[DAYS[0]])
    for site in expected_nodes:
        for metric in METRICS:
            m = json.loads(
                (archive / "kwollect" / site / metric / f"{DAYS[0]}.manifest.json").read_text()
            )
            assert m["sha256"] == digests[(site, metric, DAYS[0])]
