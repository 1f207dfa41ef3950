"""The coverage plugin inside a real Airflow API server: who may see what, and what it says.

Two manual runs of dxt_examon are made with ``airflow dags test`` against the Examon simulator
(pcie fails there; no data before 2024-05-01): one with the ``day`` param 2024-05-01, one
without, of logical date 2024-04-30, which archives that day (an empty day). Then
``airflow api-server`` serves the plugin with three signed-in users: admin, viewer (read
only) and nobody (no role).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from tests.airflow.conftest import airflow, fresh_home
from tests.browser.stack import start_api_server
from tests.conftest import ROOT, SimulatorProcess

pytestmark = pytest.mark.airflow

D0, DAY, D2 = "2024-04-30", "2024-05-01", "2024-05-02"
UNITS = ["ipmi_pub/ambient", "ipmi_pub/pcie", "nagios_pub/state"]


@pytest.fixture(scope="module")
def server(migrated_home, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plugin")
    catalog = tmp / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\nstate,nagios_pub\n")
    args = ["--catalog", str(catalog), "--nodes", "2", "--fail-metric", "pcie"]
    sim = SimulatorProcess([*args, "--data-start", DAY])
    home = fresh_home(migrated_home, tmp / "home")
    archive = tmp / "archive"
    stack = None
    try:
        from tests.browser.stack import stack_env

        env = stack_env(home, archive, sim.url, catalog, 1)
        # a manual run: the 'day' param makes it archive DAY (else the day before)
        conf = json.dumps({"day": DAY})
        # (another logical date: 'dags test' replaces a run of the same logical date)
        out = airflow(
            env, "dags", "test", "dxt_examon", "2024-06-01", "-c", conf, check=False, timeout=300
        )
        assert (archive / f"examon/ipmi_pub/ambient/{DAY}.manifest.json").is_file(), out.stderr[
            -3000:
        ]
        # no 'day': a manual run of logical date D0 archives D0
        out = airflow(env, "dags", "test", "dxt_examon", D0, check=False, timeout=300)
        m = archive / f"examon/ipmi_pub/ambient/{D0}.manifest.json"
        assert json.loads(m.read_text())["status"] == "empty", out.stderr[-3000:]
        (archive / f"examon/nagios_pub/state/{DAY}.csv.gz").unlink()  # corrupt from now on
        stack = start_api_server(home, archive, catalog, tmp / "api-server.log", sim.url)
        stack.sim = sim
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
    ("POST", "/dxt-archive/api/reconcile", {"source": "examon"}),
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
    doc = server.get(f"/dxt-archive/api/grid?source=examon&start={D0}&end={D2}")
    assert doc["units"] == UNITS and doc["days"] == [D0, DAY, D2]
    assert doc["groups"] == ["ipmi_pub", "ipmi_pub", "nagios_pub"]
    # D0 empty (no data yet), D1 archived, corrupt (data file deleted) and missing (its task
    # failed on both days), D2 never ran
    assert doc["archive"] == ["EAM", "MMM", "ECM"]
    assert doc["airflow"] == ["ssn", "ffn", "ssn"]
    assert doc["details"] == {"2:1": f"data file {DAY}.csv.gz is missing"}
    assert doc["counts"] == {"archived": 1, "empty": 2, "missing": 5, "corrupt": 1, "kept": 0}
    assert set(doc["runs"]) == {D0, DAY}
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
        "POST", "/dxt-archive/api/refill/plan", json={"source": "examon", "start": D0, "end": D2}
    )
    plan = r.json()

    def task(unit, day):
        return server.get(f"/dxt-archive/api/cell?source=examon&unit={unit}&day={day}")["task"]

    pcie0, pcie1, state1 = (
        task("ipmi_pub/pcie", D0),
        task("ipmi_pub/pcie", DAY),
        task("nagios_pub/state", DAY),
    )
    assert pcie0["run_id"] != pcie1["run_id"] == state1["run_id"]
    cells = {c["dag_run_id"]: sorted(map(tuple, c.pop("cells"))) for c in plan["clears"]}
    assert cells == {
        pcie1["run_id"]: [("ipmi_pub/pcie", DAY), ("nagios_pub/state", DAY)],
        pcie0["run_id"]: [("ipmi_pub/pcie", D0)],
    }
    assert sorted(plan["clears"], key=lambda c: c["dag_run_id"]) == sorted(
        [
            {
                "dag_run_id": pcie1["run_id"],
                "task_ids": sorted(
                    [
                        ["archive_metric_day", pcie1["map_index"]],
                        ["archive_metric_day", state1["map_index"]],
                    ]
                ),
                "only_failed": False,
            },
            {
                "dag_run_id": pcie0["run_id"],
                "task_ids": [["archive_metric_day", pcie0["map_index"]]],
                "only_failed": False,
            },
        ],
        key=lambda c: c["dag_run_id"],
    )
    assert plan["backfill"]["days"] == [D2]
    assert sorted(map(tuple, plan["backfill"]["cells"])) == [(u, D2) for u in UNITS]
    assert plan["backfill"]["reprocess_behavior"] == "none"
    assert plan["cells"] == 3 + 3  # pcie twice and state (corrupt), then all of D2
    one = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "cells": [["ipmi_pub/pcie", DAY]]},
    ).json()
    assert one["clears"][0]["task_ids"] == [["archive_metric_day", pcie1["map_index"]]]
    assert one["backfill"] is None
    # "Select all missing and failed" with a filter on: the rows shown only (the page sends
    # them); before, every unit of the range was planned
    shown = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "start": D0, "end": D2, "units": ["nagios_pub/state"]},
    ).json()
    assert shown["cells"] == 2  # state (corrupt) on DAY, and D2 without a run
    assert [c["cells"] for c in shown["clears"]] == [[["nagios_pub/state", DAY]]]
    assert shown["backfill"]["cells"] == [["nagios_pub/state", D2]]
    unknown = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "start": D0, "end": D2, "units": ["ipmi_pub/nope"]},
    )
    assert unknown.status_code == 404 and "ipmi_pub/nope" in unknown.text


def test_the_run_note_says_what_the_reconcile_found(server):
    runs = server.get("/api/v2/dags/dxt_examon/dagRuns")["dag_runs"]
    notes = {r["logical_date"][:10]: r["note"] for r in runs}
    # 'dags test' starts its run without the "Archives <day>" note (the scheduler's listener
    # writes that); when the run ends the reconcile's note is added. The run that archived
    # DAY reconciled the three days before it, none archived then.
    assert notes["2024-06-01"] == (
        "Reconcile 2024-04-28..2024-04-30 (9 metric-days, counts at the source): 9 missing "
        "(not archived when counted)."
    )
    # the next run (no 'day', logical date D0) archives D0 and reconciles the three days before
    assert notes[D0].startswith("Reconcile 2024-04-27..2024-04-29 (9 metric-days")


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


def test_reconcile_counts_a_range_at_the_source_with_the_users_rights(server):
    import httpx

    def reconcile(user="admin"):
        return server.request(
            "POST",
            "/dxt-archive/api/reconcile",
            user=user,
            json={"source": "examon", "start": D0, "end": DAY},
        )

    def by_cell(doc):
        return {(c["unit"], c["day"]): c for c in doc["cells"]}

    assert reconcile("nobody").status_code == 403
    r = reconcile()
    assert r.status_code == 200, r.text
    doc = r.json()
    cells = by_cell(doc)
    rows = server.get(f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}")[
        "manifest"
    ]["rows"]
    ambient = cells[("ipmi_pub/ambient", DAY)]
    assert (ambient["state"], ambient["archive_count"], ambient["source_count"]) == (
        "equal",
        rows,
        rows,
    ), doc
    assert rows > 0
    # the failing metric's day was never archived (not asked); the others are counted
    # its data file was deleted (corrupt): not compared, never "equal" from its manifest
    state = cells[("nagios_pub/state", DAY)]
    assert state["state"] == "error" and "the archived day is damaged" in state["detail"]
    assert ("ipmi_pub/pcie", DAY) not in cells  # never archived: not asked
    assert doc["kept_recorded"] is True and doc["can_clear"] is True
    compared = [c for c in doc["cells"] if c["state"] in ("equal", "more", "fewer")]
    assert compared and doc["checks_recorded"] == len(compared)  # in the archive's records
    check = server.get(f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}")[
        "check"
    ]  # the cell's panel shows the last comparison
    assert (check["state"], check["source_count"]) == ("equal", rows) and check["checks"] >= 1
    # late data: two points arrive in DAY after it was archived
    noon = int(dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC).timestamp() * 1000)
    httpx.post(
        f"{server.sim.url}/_sim/points",
        json={"metric": "ambient", "tags": {"node": "r201n01"}, "points": [[noon + 900, 20.5]]},
        timeout=10,
    ).raise_for_status()
    try:
        doc = reconcile("viewer").json()  # a viewer may count too; nothing is recorded
        late = by_cell(doc)[("ipmi_pub/ambient", DAY)]
        assert (late["state"], late["archive_count"], late["source_count"]) == (
            "more",
            rows,
            rows + 1,
        )
        assert doc["kept_recorded"] is False and doc["can_clear"] is False
        assert doc["checks_recorded"] == 0  # a viewer's count writes nothing
        assert "1 more" in doc["note"] and "counts only, nothing refetched" in doc["note"]
        manifest = server.get(
            f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}"
        )["manifest"]
        assert manifest["rows"] == rows  # counts only: the archive is unchanged
    finally:
        httpx.delete(f"{server.sim.url}/_sim/points", timeout=10).raise_for_status()
    # a range too long to count at once is refused before the source is asked
    r = server.request(
        "POST",
        "/dxt-archive/api/reconcile",
        json={"source": "examon", "start": "2024-01-01", "end": DAY},
    )
    assert r.status_code == 400 and "at most 31" in r.text


def test_refill_plans_have_a_size_cap_and_skip_days_before_the_start_date(server):
    many = [["ipmi_pub/pcie", f"{2000 + i // 365}-01-01"] for i in range(100_001)]
    r = server.request(
        "POST", "/dxt-archive/api/refill/plan", json={"source": "examon", "cells": many}
    )
    assert r.status_code == 400 and "at most 100,000 at once" in r.json()["detail"], r.text
    days = [
        ["ipmi_pub/pcie", (dt.date(2000, 1, 1) + dt.timedelta(days=i)).isoformat()]
        for i in range(4000)
    ]
    r = server.request(
        "POST", "/dxt-archive/api/refill/plan", json={"source": "examon", "cells": days}
    )
    assert r.status_code == 400 and "4,000 distinct days" in r.json()["detail"], r.text
    # the DAG starts 2020-03-09: a day before it is not planned, and says why
    early = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "cells": [["ipmi_pub/pcie", "2020-03-08"]]},
    ).json()
    assert early["clears"] == [] and early["backfill"] is None
    assert early["skipped"][0]["reason"].startswith(
        "before the start date of dxt_examon (2020-03-09)"
    )
    assert server.get("/dxt-archive/api/sources")["sources"][0]["start_date"] == "2020-03-09"


def _cancelled_backfill(server, first: str, last: str):
    """A backfill of ``first..last`` created and cancelled at once (its queued runs fail);
    Airflow's answer to the cancel."""
    r = server.request(
        "POST",
        "/api/v2/backfills",
        json={
            "dag_id": "dxt_examon",
            "from_date": f"{first}T00:00:00Z",
            "to_date": f"{last}T00:00:00Z",
            "reprocess_behavior": "none",
        },
    )
    assert r.status_code == 200, r.text
    return server.request("PUT", f"/api/v2/backfills/{r.json()['id']}/cancel")


def test_a_cancelled_backfill_is_refilled_by_a_backfill_that_reprocesses_its_failed_runs(server):
    """Airflow never starts a queued run of a paused (cancelled) backfill: clearing one would
    leave it queued for ever. Its failed runs go into a new backfill (reprocess 'failed')."""
    first, last = "2024-05-10", "2024-05-11"
    cancel = _cancelled_backfill(server, first, last)
    assert cancel.status_code == 200, cancel.text
    plan = server.request(
        "POST",
        "/dxt-archive/api/refill/plan",
        json={"source": "examon", "start": first, "end": last},
    ).json()
    assert plan["clears"] == [] and plan["skipped"] == [], plan
    assert plan["backfill"]["reprocess_behavior"] == "failed"
    assert plan["backfill"]["rerun_days"] == [first, last]
    assert sorted(map(tuple, plan["backfill"]["cells"])) == sorted(
        (u, d) for u in UNITS for d in (first, last)
    )


def _plan(server, cells):
    r = server.request(
        "POST", "/dxt-archive/api/refill/plan", json={"source": "examon", "cells": cells}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_a_day_whose_run_has_not_ended_is_skipped_not_backfilled(server):
    """Airflow 3.3.2 makes a backfill run only for a data interval that ended before now
    (models/backfill.py, _get_info_list): a day not over would be dropped without a word."""
    today = dt.datetime.now(dt.UTC).date()
    yesterday, tomorrow = today - dt.timedelta(days=1), today + dt.timedelta(days=1)
    plan = _plan(
        server, [["ipmi_pub/ambient", str(yesterday)], ["ipmi_pub/ambient", str(tomorrow)]]
    )
    b = plan["backfill"]
    assert b["days"] == [str(yesterday)] and b["cells"] == [["ipmi_pub/ambient", str(yesterday)]]
    assert (b["from_date"], b["to_date"]) == (f"{yesterday}T00:00:00Z", f"{yesterday}T00:00:00Z")
    # the DAG's timetable: the run of D has the interval [D, D+1) UTC
    [skipped] = plan["skipped"]
    assert (skipped["unit"], skipped["day"]) == ("ipmi_pub/ambient", str(tomorrow))
    assert skipped["reason"].startswith(
        f"not over: the data interval of its run ends {tomorrow + dt.timedelta(days=1)} 00:00 UTC"
    ), skipped
    alone = _plan(server, [["ipmi_pub/pcie", str(tomorrow)]])
    assert alone["backfill"] is None and len(alone["skipped"]) == 1, alone


def test_on_sqlite_the_backfill_spans_at_most_31_days(server):
    """Days without a run over three years were one backfill over three years."""
    first = dt.date(2021, 1, 4)
    days = [str(first + dt.timedelta(days=i)) for i in range(32)] + ["2024-01-04"]
    plan = _plan(server, [["ipmi_pub/ambient", d] for d in days])
    b = plan["backfill"]
    assert b["days"] == days[:31], b
    assert (b["from_date"][:10], b["to_date"][:10]) == ("2021-01-04", "2021-02-03")
    assert [(s["unit"], s["day"]) for s in plan["skipped"]] == [
        ("ipmi_pub/ambient", d) for d in days[31:]
    ]
    for s in plan["skipped"]:
        assert s["reason"].startswith(
            "later: on SQLite one refill backfills at most 31 days (2021-01-04 to 2021-02-03 now)"
        ), s


def test_a_backfill_makes_runs_for_the_chosen_days_only(server):
    """Two chosen days with days between that have no run (archived by dxt extract, say):
    one backfill over both made a run for every day between, 11 runs for 2 chosen days, while
    the plan said 2. Now the backfill takes the first day, and the other waits, named."""
    plan = _plan(server, [["ipmi_pub/ambient", "2021-03-02"], ["ipmi_pub/ambient", "2021-03-12"]])
    b = plan["backfill"]
    assert b["days"] == ["2021-03-02"], b
    assert (b["from_date"][:10], b["to_date"][:10]) == ("2021-03-02", "2021-03-02")
    [skipped] = plan["skipped"]
    assert (skipped["unit"], skipped["day"]) == ("ipmi_pub/ambient", "2021-03-12")
    assert skipped["reason"] == (
        "later: one backfill covers consecutive days, and 2021-03-03 (not chosen) has no run: "
        "a backfill over it would make runs for days nobody chose (2021-03-02 to 2021-03-02 "
        "now); refill again once that backfill is done"
    ), skipped
    dry = server.request(
        "POST",
        "/api/v2/backfills/dry_run",
        json={k: b[k] for k in ("dag_id", "from_date", "to_date", "reprocess_behavior")},
    )
    assert dry.status_code == 200, dry.text
    assert dry.json()["total_entries"] == 1, dry.json()


def test_a_backfill_that_reprocesses_failed_runs_names_the_other_failed_runs_it_reruns(server):
    """Airflow clears every failed run of a reprocess-'failed' backfill's range whole
    (models/backfill.py, _handle_clear_run), not only the chosen cells' runs."""
    first, last, no_run = "2024-05-20", "2024-05-22", "2024-05-23"
    cancel = _cancelled_backfill(server, first, last)
    assert cancel.status_code == 200, cancel.text  # its queued runs fail
    runs = {
        x["logical_date"][:10]: x
        for x in server.get("/api/v2/dags/dxt_examon/dagRuns?limit=100")["dag_runs"]
    }
    assert all(runs[d]["state"] == "failed" for d in ("2024-05-20", "2024-05-21", "2024-05-22"))
    plan = _plan(server, [["ipmi_pub/ambient", first], ["ipmi_pub/ambient", no_run]])
    b = plan["backfill"]
    assert b["reprocess_behavior"] == "failed" and b["rerun_days"] == [first], b
    assert (b["from_date"][:10], b["to_date"][:10]) == (first, no_run)
    assert b["other_failed_runs"] == [
        {"run_id": runs[d]["dag_run_id"], "logical_date": d, "day": d}
        for d in ("2024-05-21", "2024-05-22")
    ]
    # only days with no run: nothing failed is rerun, nothing to name
    assert _plan(server, [["ipmi_pub/ambient", no_run]])["backfill"]["other_failed_runs"] == []


def test_on_a_paused_dag_the_plan_says_runs_wait_for_the_unpause(server):
    """Airflow starts no queued run of a paused DAG, backfill runs included
    (models/dagrun.py, get_queued_dag_runs_to_set_running): such a backfill stays open, and a
    later refill says why its days are not refilled."""
    was = server.get("/api/v2/dags/dxt_examon")["is_paused"]
    r = server.request("PATCH", "/api/v2/dags/dxt_examon", json={"is_paused": True})
    assert r.status_code == 200, r.text
    bid = None
    try:
        r = server.request(
            "POST",
            "/api/v2/backfills",
            json={
                "dag_id": "dxt_examon",
                "from_date": "2024-07-01T00:00:00Z",
                "to_date": "2024-07-02T00:00:00Z",
                "reprocess_behavior": "none",
            },
        )
        assert r.status_code == 200, r.text
        bid = r.json()["id"]
        plan = _plan(
            server, [["ipmi_pub/ambient", "2024-07-01"], ["ipmi_pub/ambient", "2024-07-05"]]
        )
        assert plan["paused"] is True and plan["backfill"] is None and plan["clears"] == []
        reasons = {s["day"]: s["reason"] for s in plan["skipped"]}
        assert reasons["2024-07-01"].endswith(
            "has not expanded this unit yet; the DAG is paused: Airflow schedules none of its "
            "runs until it is unpaused"
        ), reasons
        assert reasons["2024-07-05"].startswith(
            f"backfill {bid} of dxt_examon is not completed, and its runs wait for dxt_examon "
            "to be unpaused"
        ), reasons
    finally:
        if bid is not None:
            server.request("PUT", f"/api/v2/backfills/{bid}/cancel")
        server.request("PATCH", "/api/v2/dags/dxt_examon", json={"is_paused": was})


def test_reconcile_errors_name_paths_relative_to_the_archive(server):
    archive = server.env["DXT_ARCHIVE_ROOT"]
    manifest = f"{archive}/examon/ipmi_pub/ambient/{DAY}.manifest.json"
    with open(manifest, "rb") as fh:
        kept = fh.read()
    try:
        with open(manifest, "wb") as fh:
            fh.write(b"{damaged")
        r = server.request(
            "POST",
            "/dxt-archive/api/reconcile",
            json={"source": "examon", "start": DAY, "end": DAY},
        )
        assert r.status_code == 200, r.text
        cell = next(c for c in r.json()["cells"] if c["unit"] == "ipmi_pub/ambient")
        assert cell["state"] == "error", cell
        assert cell["detail"].startswith(
            f"<archive>/examon/ipmi_pub/ambient/{DAY}.manifest.json: unreadable manifest"
        ), cell
        assert archive not in r.text
    finally:
        with open(manifest, "wb") as fh:
            fh.write(kept)


def test_select_all_plans_days_archived_before_they_ended_once_over(server):
    """'Select all missing and failed' plans a cell archived before its day ended, once that
    day is over, as ``dxt coverage`` does (it planned none of them: they stayed partial)."""
    from pathlib import Path

    archive = Path(server.env["DXT_ARCHIVE_ROOT"])
    m = archive / f"examon/ipmi_pub/ambient/{DAY}.manifest.json"
    before = m.read_text()
    doc = json.loads(before)
    ambient = server.get(f"/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day={DAY}")

    def rewrite(text):  # renamed in place, as a commit does: the directory's index is redone
        tmp = m.with_name(".rewrite.tmp")
        tmp.write_text(text)
        tmp.replace(m)

    body = {"source": "examon", "start": D0, "end": D2, "units": ["ipmi_pub/ambient"]}
    try:
        for ends, planned in (
            ("2024-05-02T00:00:00+00:00", True),
            ("2999-01-01T00:00:00+00:00", False),
        ):
            rewrite(json.dumps({**doc, "day_not_over": {"ends": ends}}))
            plan = server.request("POST", "/dxt-archive/api/refill/plan", json=body).json()
            cleared = [c for clear in plan["clears"] for c in clear["cells"]]
            assert (["ipmi_pub/ambient", DAY] in cleared) is planned, plan
            if planned:
                assert plan["cells"] == 2, plan  # and D2, which has no run
                [clear] = [c for c in plan["clears"] if ["ipmi_pub/ambient", DAY] in c["cells"]]
                assert clear["task_ids"] == [["archive_metric_day", ambient["task"]["map_index"]]]
            else:
                assert plan["cells"] == 1, plan  # D2 only: the day is not over
    finally:
        rewrite(before)
