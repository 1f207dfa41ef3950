"""The backend contract under Airflow: each registered backend's DAG file parses, and one
``airflow dags test`` run archives its one configured unit and adds the day's event to the
unit's asset, into a local directory, and for the backends of :data:`S3_UNDER_AIRFLOW`
into an ``s3://`` root too (moto_server; credentials from the AWS environment). One Airflow
home for the package."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from dxt_core import backends as registry
from dxt_core.backends import ENV_EXTRA
from tests.airflow.conftest import airflow, base_env
from tests.contract.adapters import ROOT
from tests.contract.conftest import aws_env

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

#: The backends whose DAG also runs into an s3:// root here. A run costs 30-45 s (measured,
#: shared 2-core machine) whatever the root, so not every backend: Examon's S3 DAG run is
#: tests/airflow/test_s3_dag.py (with credentials from the environment and from a
#: connection); every backend's archive task runs on an s3:// root in test_contract.py.
S3_UNDER_AIRFLOW = ("kwollect", "collectd_es")

PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "dags": {d: sorted(bag.dags[d].task_dict) for d in bag.dags}}))
"""


def test_the_dag_parses_then_archives_one_unit_and_emits_its_asset_event(
    adapter, root, airflow_home, tmp_path
):
    if root.kind == "s3" and adapter.backend not in S3_UNDER_AIRFLOW:
        pytest.skip(
            f"{adapter.backend} on s3:// under Airflow: not run here (CI time; its archive task "
            "runs on s3:// in test_contract.py); S3_UNDER_AIRFLOW names those that are"
        )
    b = registry.get(adapter.backend)
    tasks = b.dag_tasks()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / adapter.dag_file().name).symlink_to(adapter.dag_file())
    env = base_env(airflow_home, tmp_path / "archive", adapter.url, None)
    conn_id = str(registry.dag_settings(b.name)["conn_id"])
    prefix = f"DXT_{b.name.upper()}_"
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            ENV_EXTRA: os.environ[ENV_EXTRA],
            f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(adapter.airflow_connection()),
            prefix + "SETTLE_SECONDS": "0",
            prefix + "RETRIES": "0",
            prefix + "POOL": "default_pool",
            **adapter.settings_env(),
            "DXT_ARCHIVE_ROOT": root.url,
            "DXT_S3_STAGING": str(tmp_path / "staging"),
            **aws_env(root),
        }
    )
    parsed = subprocess.run(
        [sys.executable, "-c", PARSE, str(dags)], env=env, capture_output=True, text=True
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    doc = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert doc["errors"] == {}
    expected = {
        b.task_id,
        "wait_for_day_end",
        *([tasks.units_task_id] if tasks.units_task_id else []),
        # the generic reconcile task, for a backend that declares the role
        *(["reconcile_recent_days"] if tasks.reconciles() else []),
    }
    assert set(doc["dags"][b.dag_id]) == expected

    group = tasks.asset_group(adapter.unit)

    def events() -> list[dict[str, object]]:
        with closing(sqlite3.connect(airflow_home / "airflow.db")) as db:
            rows = db.execute(
                "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE a.name = ? ORDER BY e.id",
                (f"dxt-archive/{b.name}/{group}",),
            ).fetchall()
        return [json.loads(extra) for (extra,) in rows]

    # a backend with several adapters (one per server kind) shares the home: count new events
    before = len(events()) if (airflow_home / "airflow.db").exists() else 0

    # `dags test DAG D` archives day D, the UTC date of its logical date (dxt_core/airflow/runs.py)
    run_date = adapter.day.isoformat()
    out = airflow(env, "dags", "test", b.dag_id, run_date, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    manifests = [
        json.loads(root.read(rel))
        for rel in root.find(f"{adapter.day.isoformat()}.manifest.json")
        if rel.startswith(f"{b.name}/")
    ]
    assert [m["status"] for m in manifests] == ["archived"], out.stdout[-3000:]
    assert manifests[0]["rows"] > 0

    extras = events()[before:]
    assert [(x["unit"], x["day"], x["status"]) for x in extras] == [
        (tasks.unit_name(adapter.unit), adapter.day.isoformat(), "archived")
    ]
    if root.kind != "s3":  # (the task's code is the same on both: CI time)
        # the same day again (another run, noon of the day): the same bytes, said so in the
        # task's XCom, and no second asset event (it said "archived" and emitted one)
        out = airflow(env, "dags", "test", b.dag_id, f"{run_date}T12:00:00+00:00", check=False)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "no asset event (the day is unchanged)" in out.stdout + out.stderr
        assert len(events()) == before + 1
