"""The day a run archives, whatever made the run, with a real Airflow 3.3 (one SQLite home).

The rule (dxt_core.airflow.runs): the ``day`` param, else the UTC day of the logical date.
Airflow infers a manual run's data interval from another moment depending on how the run was
made (``dags trigger -l``: from the trigger time; the REST API, the trigger form and
``dags test``: from the logical date, the interval before it), so each way is made here and
the day checked where the user reads it: the run note the plugin's listener writes, the task
log, the XCom report, the coverage view's placement of the run, the archive's files.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home, run_dagbag_script
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.airflow

START = "2024-05-01"

#: Every run of dxt_examon, as the listener notes it and the coverage view places it. A run
#: is also made as the REST API (and so the trigger form) makes it, with a logical date before
#: the start date; nothing is committed but that run.
INSPECT = """
import datetime as dt, json
from airflow.models.dagbag import DBDagBag
from airflow.models.dagrun import DagRun
from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunTriggeredByType, DagRunType
from sqlalchemy import select
from dxt_core.airflow.plugin import note_run_day
from dxt_core.airflow.ui.grid import _runs

with create_session() as s:
    dag = DBDagBag().get_latest_version_of_dag("dxt_examon", session=s)
    for logical, run_id in (("2024-05-06T12:00:00+00:00", "rest_api_run"),
                            ("2024-04-20T00:00:00+00:00", "before_start")):
        body = TriggerDAGRunPostBody(dag_run_id=run_id, logical_date=logical, conf={{}})
        p = body.validate_context(dag)
        dag.create_dagrun(run_id=p["run_id"], logical_date=p["logical_date"],
                          data_interval=p["data_interval"], run_after=p["run_after"],
                          conf=p["conf"], run_type=DagRunType.MANUAL,
                          triggered_by=DagRunTriggeredByType.REST_API, state=DagRunState.QUEUED,
                          session=s)
    s.commit()
with create_session() as s:
    dag = DBDagBag().get_latest_version_of_dag("dxt_examon", session=s)
    placed = {{r.run_id: r.day.isoformat() for r in _runs(s, "dxt_examon", dt.date(2000, 1, 1),
                                                        dt.date(2100, 1, 1))}}
    out = {{}}
    for r in s.scalars(select(DagRun).where(DagRun.dag_id == "dxt_examon")):
        r.dag = dag
        r.note = None
        note_run_day(r)
        out[r.run_id] = {{
            "logical_date": r.logical_date.isoformat() if r.logical_date else None,
            "interval_start": r.data_interval_start.isoformat() if r.data_interval_start else None,
            "note": r.note, "state": str(getattr(r.state, "value", r.state)),
            "tis": len(r.get_task_instances(session=s)), "placed": placed.get(r.run_id),
        }}
    s.rollback()
print(json.dumps(out))
"""


def test_every_way_of_making_a_run_archives_the_same_day(migrated_home, tmp_path):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "1", "--interval", "3600"])
    try:
        archive = tmp_path / "archive"
        env = base_env(fresh_home(migrated_home, tmp_path / "home"), archive, sim.url, catalog)
        env["DXT_EXAMON_START_DATE"] = START
        airflow(env, "dags", "reserialize")

        # dags trigger -l: Airflow's data interval comes from now (the day before today)
        airflow(
            env, "dags", "trigger", "dxt_examon", "-r", "cli_run", "-l", "2024-05-03T12:00:00+00:00"
        )
        refused = airflow(
            env, "dags", "trigger", "dxt_examon", "-l", "2024-04-20T00:00:00+00:00", check=False
        )
        assert refused.returncode != 0
        assert "should be >= start_date" in refused.stderr + refused.stdout
        conf = json.dumps({"day": "2024-05-02"})
        airflow(
            env,
            "dags",
            "trigger",
            "dxt_examon",
            "-r",
            "day_param",
            "-l",
            "2024-06-01T00:00:00+00:00",
            "-c",
            conf,
        )
        airflow(
            env,
            "backfill",
            "create",
            "--dag-id",
            "dxt_examon",
            "--from-date",
            "2024-05-04",
            "--to-date",
            "2024-05-04",
        )

        # dags test: the data interval is the day before the logical date; 05-05 is archived
        out = airflow(env, "dags", "test", "dxt_examon", "2024-05-05T12:00:00+00:00", timeout=300)
        log = out.stdout + out.stderr
        assert "archiving ipmi_pub/ambient for 2024-05-05" in log, log[-3000:]
        manifests = sorted(p.name for p in archive.rglob("*.manifest.json"))
        assert manifests == ["2024-05-05.manifest.json"], manifests
        made = json.loads(next(archive.rglob("*.manifest.json")).read_text())["made_by"]
        assert made["tool"] == "airflow" and made["dag_id"] == "dxt_examon", made
        assert made["logical_date"].startswith("2024-05-05T12:00:00"), made

        # a day param before the start date, and a day not begun: failed with the reason
        early = json.dumps({"day": "2024-04-01"})
        out = airflow(
            env,
            "dags",
            "test",
            "dxt_examon",
            "2024-06-02T00:00:00+00:00",
            "-c",
            early,
            check=False,
            timeout=300,
        )
        assert (
            "2024-04-01 is before the start date of dxt_examon (2024-05-01)"
            in out.stdout + out.stderr
        )
        future = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=3)).isoformat()
        out = airflow(
            env, "dags", "test", "dxt_examon", f"{future}T00:00:00+00:00", check=False, timeout=300
        )
        assert f"{future} has not begun yet" in out.stdout + out.stderr
        assert sorted(p.name for p in archive.rglob("*.manifest.json")) == manifests
        # a day one after the start date: its reconcile asks the start date only (the two
        # days before it were counted "missing": never scheduled, never archived)
        conf = json.dumps({"day": "2024-05-02"})
        airflow(
            env, "dags", "test", "dxt_examon", "2024-06-03T00:00:00+00:00", "-c", conf, timeout=300
        )

        doc = run_dagbag_script(env, INSPECT)
        reports = run_dagbag_script(env, XCOM)
        reconciled = run_dagbag_script(env, XCOM.replace("archive_metric_day", RECONCILE_TASK))
    finally:
        sim.stop()

    def note(day: str, chosen: bool = False) -> str:
        how = "the day chosen when it was triggered" if chosen else "from its logical date"
        return f"Archives {day} ({how})."

    assert doc["cli_run"]["note"] == note("2024-05-03") and doc["cli_run"]["placed"] == "2024-05-03"
    # what Airflow set, and the old rule (data interval) would have archived instead
    assert not doc["cli_run"]["interval_start"].startswith("2024-05-0")
    assert doc["day_param"]["note"] == note("2024-05-02", chosen=True)
    assert doc["day_param"]["placed"] == "2024-05-02"
    backfill = next(v for k, v in doc.items() if k.startswith("backfill__"))
    assert backfill["note"] == note("2024-05-04") and backfill["placed"] == "2024-05-04"
    rest = doc["rest_api_run"]
    assert rest["interval_start"].startswith("2024-05-05")  # the interval before 05-06 12:00
    assert rest["note"] == note("2024-05-06") and rest["placed"] == "2024-05-06"
    tested = next(v for v in doc.values() if (v["logical_date"] or "").startswith("2024-05-05"))
    assert tested["interval_start"].startswith("2024-05-04")
    assert tested["note"] == note("2024-05-05") and tested["placed"] == "2024-05-05"
    assert reports == {"2024-05-05": ["2024-05-05"], "2024-06-03": ["2024-05-02"]}
    assert reconciled["2024-05-05"][0].startswith("reconcile 2024-05-02..2024-05-04 (3 metric-days")
    assert "left out" not in reconciled["2024-05-05"][0]
    (note,) = reconciled["2024-06-03"]
    assert note.startswith("reconcile 2024-05-01..2024-05-01 (1 metric-days"), note
    assert note.endswith("; 2 earlier days left out (before the DAG's start date)"), note
    # a REST/form run before the start date: Airflow makes no task; the listener fails it
    early_run = doc["before_start"]
    assert early_run["tis"] == 0 and early_run["state"] == "failed"
    assert early_run["note"].startswith(
        "Archives nothing: 2024-04-20 is before the start date of dxt_examon (2024-05-01)"
    )
    # a day param that cannot be archived: noted as such (it said "Archives 2024-04-01 (the
    # day chosen ...)" while its first task failed the run)
    early_param = next(
        v for v in doc.values() if (v["logical_date"] or "").startswith("2024-06-02")
    )
    assert early_param["note"].startswith(
        "Archives nothing: 2024-04-01 is before the start date of dxt_examon (2024-05-01)"
    ), early_param
    not_begun = next(v for v in doc.values() if (v["logical_date"] or "").startswith(future))
    assert not_begun["note"].startswith(f"Archives nothing: {future} has not begun yet"), not_begun


RECONCILE_TASK = "reconcile_recent_days"

#: The XCom report of each archive task, by its run's logical day.
XCOM = """
import json
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select
out = {{}}
with create_session() as s:
    rows = s.execute(select(DagRun.logical_date, XComModel.value).join(
        DagRun, DagRun.run_id == XComModel.run_id).where(
        XComModel.task_id == "archive_metric_day", XComModel.key == "return_value"))
    for logical, value in rows:
        v = XComModel.deserialize_value(type("R", (), {{"value": value}})())
        out.setdefault(logical.date().isoformat(), []).append(v.get("day") or v["note"])
print(json.dumps(out))
"""
