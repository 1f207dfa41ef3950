"""The coverage plugin inside a real Airflow API server: who may see what, and what it says.

One run of dxt_examon for 2024-05-01 is made with ``airflow dags test`` against the Examon
simulator (pcie fails there), then ``airflow api-server`` serves the plugin with three
signed-in users: admin, viewer (read only) and nobody (no role).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.airflow.conftest import airflow, fresh_home
from tests.browser.stack import start_api_server
from tests.conftest import ROOT, SimulatorProcess

pytestmark = pytest.mark.airflow

DAY = "2024-05-01"
UNITS = ["ipmi_pub/ambient", "ipmi_pub/ghost", "ipmi_pub/pcie", "nagios_pub/state"]


@pytest.fixture(scope="module")
def server(migrated_home, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plugin")
    sim_catalog = tmp / "sim.csv"
    sim_catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\nstate,nagios_pub\n")
    catalog = tmp / "catalog.csv"  # ghost: a metric the server does not have (an empty day)
    catalog.write_text(
        "metric,plugin\nambient,ipmi_pub\nghost,ipmi_pub\npcie,ipmi_pub\nstate,nagios_pub\n"
    )
    sim = SimulatorProcess(["--catalog", str(sim_catalog), "--nodes", "2", "--fail-metric", "pcie"])
    home = fresh_home(migrated_home, tmp / "home")
    archive = tmp / "archive"
    stack = None
    try:
        from tests.browser.stack import stack_env

        env = stack_env(home, archive, sim.url, catalog, 1)
        # a manual run: the 'day' param makes it archive DAY (else the day before)
        conf = json.dumps({"day": DAY})
        out = airflow(env, "dags", "test", "dxt_examon", DAY, "-c", conf, check=False, timeout=300)
        assert (archive / f"examon/ipmi_pub/ambient/{DAY}.manifest.json").is_file(), out.stderr[
            -3000:
        ]
        (archive / f"examon/nagios_pub/state/{DAY}.csv.gz").unlink()  # corrupt from now on
        stack = start_api_server(home, archive, catalog, tmp / "api-server.log")
        yield stack
    finally:
        if stack:
            stack.stop()
        sim.stop()


ENDPOINTS = [
    ("GET", "/dxt-archive/api/sources", None),
    ("GET", "/dxt-archive/api/grid?source=examon", None),
    ("GET", f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}", None),
    ("POST", "/dxt-archive/api/refill/plan", {"source": "examon"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_anonymous_requests_are_refused(server, method, path, body):
    r = server.request(method, path, user=None, json=body)
    assert r.status_code == 401, r.text
    assert "sign in" in r.json()["detail"]
    bad = server.request(method, path, user=None, json=body, headers={"Authorization": "Bearer x"})
    assert bad.status_code == 401


def test_the_page_sends_anonymous_visitors_to_the_login(server):
    r = server.request("GET", "/dxt-archive/coverage?dag_id=dxt_examon", user=None)
    assert r.status_code == 307
    assert r.headers["location"] == (
        "/auth/login?next=%2Fdxt-archive%2Fcoverage%3Fdag_id%3Ddxt_examon"
    )
    page = server.request("GET", "/dxt-archive/coverage?dag_id=dxt_examon", user="viewer")
    assert page.status_code == 200 and "Archive coverage" in page.text
    assert '"source": "examon"' in page.text  # the DAG tab opens on the DAG's source


def test_a_user_without_rights_on_the_dag_sees_nothing(server):
    assert server.get("/dxt-archive/api/sources", user="nobody") == {"sources": []}
    for method, path, body in ENDPOINTS[1:]:
        r = server.request(method, path, user="nobody", json={**(body or {})})
        assert r.status_code == 403, (path, r.text)


def test_grid_joins_archive_and_task_states(server):
    doc = server.get(f"/dxt-archive/api/grid?source=examon&start={DAY}&end=2024-05-02")
    assert doc["units"] == UNITS and doc["days"] == [DAY, "2024-05-02"]
    assert doc["groups"] == ["ipmi_pub", "ipmi_pub", "ipmi_pub", "nagios_pub"]
    # archived, empty, missing (its task failed), corrupt (data file deleted); day 2: no run
    assert doc["archive"] == ["AM", "EM", "MM", "CM"]
    assert doc["airflow"] == ["sn", "sn", "fn", "sn"]
    assert doc["details"] == {"3:0": f"data file {DAY}.csv.gz is missing"}
    assert doc["counts"] == {"archived": 1, "empty": 1, "missing": 5, "corrupt": 1, "kept": 0}
    assert doc["can_clear"] is True


def test_cell_shows_its_manifest_and_task_links(server):
    cell = server.get(f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}")
    assert cell["archive_state"] == "archived" and cell["airflow_state"] == "success"
    assert cell["manifest_path"] == f"examon/ipmi_pub/ambient/{DAY}.manifest.json"
    assert cell["data_path"] == f"examon/ipmi_pub/ambient/{DAY}.csv.gz"
    m = cell["manifest"]
    assert m["status"] == "archived" and m["rows"] > 0 and len(m["sha256"]) == 64
    assert cell["task"]["try_number"] == 1 and cell["task"]["state"] == "success"
    assert [r["state"] for r in cell["runs"]] == ["success"]
    assert str(ROOT) not in json.dumps(cell)  # paths are relative to the archive root


@pytest.mark.parametrize(
    ("unit", "day", "status"),
    [
        ("../../../etc", DAY, 404),
        ("ipmi_pub/../../x", DAY, 404),
        ("ipmi_pub/nonexistent", DAY, 404),
        ("ipmi_pub/ambient", "../x", 400),
    ],
)
def test_cells_outside_the_catalog_or_archive_do_not_exist(server, unit, day, status):
    r = server.request("GET", f"/dxt-archive/api/cell?source=examon&unit={unit}&day={day}")
    assert r.status_code == status, r.text


def test_refill_plan_clears_failed_tasks_and_backfills_days_without_runs(server):
    r = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "start": DAY, "end": "2024-05-02"},
    )
    plan = r.json()
    cell = server.get(f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/pcie&day={DAY}")
    run_id = cell["task"]["run_id"]
    corrupt = server.get(f"/dxt-archive/api/cell?source=examon&unit=nagios_pub/state&day={DAY}")
    assert plan["clears"] == [
        {
            "dag_run_id": run_id,
            "task_ids": sorted(
                [
                    ["archive_metric_day", cell["task"]["map_index"]],
                    ["archive_metric_day", corrupt["task"]["map_index"]],
                ]
            ),
            "only_failed": False,
        }
    ]
    assert plan["backfill"]["days"] == ["2024-05-02"]
    assert plan["backfill"]["reprocess_behavior"] == "none"
    assert plan["cells"] == 2 + 4  # pcie (failed) and state (corrupt) on day 1, all of day 2
    one = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "cells": [["ipmi_pub/pcie", DAY]]},
    ).json()
    assert one["clears"][0]["task_ids"] == [["archive_metric_day", cell["task"]["map_index"]]]
    assert one["backfill"] is None


def test_a_viewer_sees_the_grid_but_airflow_refuses_its_clear(server):
    doc = server.get(f"/dxt-archive/api/grid?source=examon&start={DAY}&end={DAY}", user="viewer")
    assert doc["archive"][0] == "A" and doc["can_clear"] is False
    plan = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        user="viewer",
        json={"source": "examon", "start": DAY, "end": DAY},
    ).json()
    assert plan["can_clear"] is False
    # What the page would send: Airflow's own API checks the viewer's rights and refuses.
    clear = plan["clears"][0]
    r = server.request(
        "POST",
        "/api/v2/dags/dxt_examon/clearTaskInstances",
        user="viewer",
        json={"dry_run": False, "dag_run_id": clear["dag_run_id"], "task_ids": clear["task_ids"]},
    )
    assert r.status_code == 403


def test_the_plugin_is_registered_once_from_entry_point_and_plugins_folder(server):
    plugins = server.get("/api/v2/plugins")["plugins"]
    ours = [p for p in plugins if p["name"] == "dxt_archive"]
    assert len(ours) == 1 and "EntryPoint" in ours[0]["source"]
    assert {v["destination"] for v in ours[0]["external_views"]} == {"nav", "dag"}
    assert ours[0]["listeners"] == ["dxt_core.airflow.plugin.RunNoteListener"]
    assert server.get("/api/v2/plugins/importErrors")["import_errors"] == []


FOLDER_ONLY = """
import importlib.metadata, importlib_metadata, json
# As if dxt_core were on the path without its distribution (no entry points), e.g. a checkout
# on PYTHONPATH: hide the dxt-archive distribution from both metadata readers.
for md in (importlib.metadata, importlib_metadata):
    def without_dxt(real=md.distributions, **kw):
        return [d for d in real(**kw) if d.metadata["Name"] != "dxt-archive"]
    md.distributions = without_dxt
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
print(json.dumps({"sources": [str(p.source) for p in plugins if p.name == "dxt_archive"],
                  "errors": errors}))
"""


def test_the_plugins_folder_registers_it_without_the_entry_point(server, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", FOLDER_ONLY],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["errors"] == {}
    assert doc["sources"] == ["$PLUGINS_FOLDER/dxt_archive.py"]
