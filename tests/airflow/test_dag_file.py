"""The DAG file itself: imports cleanly, parses fast, maps the catalogs as documented."""

from __future__ import annotations

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home, run_dagbag_script
from tests.conftest import ROOT

pytestmark = pytest.mark.airflow

PARSE = """
import json, time
from airflow.dag_processing.dagbag import DagBag
t = time.perf_counter(); DagBag(dag_folder={path!r})  # warm: what a task process has imported
times = []
for _ in range(5):
    t = time.perf_counter(); bag = DagBag(dag_folder={path!r}); times.append(time.perf_counter() - t)
dag = bag.dags["dxt_examon"]
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
                  "dags": sorted(bag.dags), "tasks": sorted(dag.task_dict),
                  "best_ms": min(times) * 1000, "catchup": dag.catchup,
                  "pool": dag.task_dict["archive_metric_day"].pool,
                  "docs": {{d: bag.dags[d].doc_md for d in bag.dags}}}}))
"""


def test_dagbag_has_no_import_errors_and_parses_fast(migrated_home, tmp_path):
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "a", "http://x:1", None)
    doc = run_dagbag_script(env, PARSE)
    assert doc["errors"] == {}
    assert "dxt_examon" in doc["dags"]  # other DAGs (dxt_kwollect, ...) have their own tests
    assert doc["tasks"] == [
        "archive_metric_day",
        "catalog",
        "reconcile_recent_days",
        "wait_for_day_end",
    ]
    assert doc["catchup"] is True and doc["pool"] == "examon"
    # each DAG's documentation comes from the package (the files are written by dxt dags write)
    from dxt_core import backends
    from dxt_core.airflow.publish import DAG_DOC

    for name in backends.BUILTIN:
        b = backends.get(name)
        assert doc["docs"][b.dag_id] == b.dag_tasks().dag_doc != "", name
    assert doc["docs"]["dxt_publish"] == DAG_DOC
    print(f"dxt_examon.py parse time: {doc['best_ms']:.1f} ms")
    assert doc["best_ms"] < 100


ONE_XCOM = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
tasks = {{"dxt_examon": "archive_metric_day", "dxt_kwollect": "archive_site_metric_day",
          "dxt_collectd_es": "archive_family_day"}}
print(json.dumps({{d: bag.dags[d].task_dict[t].multiple_outputs for d, t in tasks.items()}}))
"""


def test_archive_tasks_push_their_report_as_one_xcom(migrated_home, tmp_path):
    # A task annotated '-> dict' pushes each key as its own XCom unless told otherwise:
    # a dozen extra Execution API calls and XCom rows per metric-day.
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "a", "http://x:1", None)
    doc = run_dagbag_script(env, ONE_XCOM)
    assert doc == {"dxt_examon": False, "dxt_kwollect": False, "dxt_collectd_es": False}


def test_catalog_above_max_map_length_fails_clearly_then_maps_when_configured(
    migrated_home, tmp_path
):
    big = ROOT / "dxt_core" / "data" / "M100_metrics_1891.csv"
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "a", "http://x:1", big)
    out = airflow(env, "tasks", "test", "dxt_examon", "catalog", "2024-05-01", check=False)
    text = out.stdout + out.stderr
    # 'airflow tasks test' exits 0 whatever the task did: read the task's own log.
    assert "Task failed with exception" in text
    assert "1891 metrics, more than Airflow's [core] max_map_length of 1024" in text
    assert "AIRFLOW__CORE__MAX_MAP_LENGTH=2048" in text
    env["AIRFLOW__CORE__MAX_MAP_LENGTH"] = "2048"
    out = airflow(env, "tasks", "test", "dxt_examon", "catalog", "2024-05-01", check=False)
    text = out.stdout + out.stderr
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Task failed" not in text
    assert "M100_metrics_1891.csv: 1891 metrics" in text


SHAPE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
tasks = {{"dxt_examon": "archive_metric_day", "dxt_kwollect": "archive_site_metric_day",
          "dxt_collectd_es": "archive_family_day"}}
out = {{}}
for d, t in tasks.items():
    task = bag.dags[d].task_dict[t]
    out[d] = {{"timeout_min": task.execution_timeout.total_seconds() / 60, "pool": task.pool,
              "retries": task.retries, "params": sorted(bag.dags[d].params.keys()),
              "max_active_runs": bag.dags[d].max_active_runs,
              "reconcile": sorted(bag.dags[d].task_dict["reconcile_recent_days"].upstream_task_ids)
                           if "reconcile_recent_days" in bag.dags[d].task_dict else None}}
print(json.dumps(out))
"""


def test_every_dag_has_the_shared_shape_and_reads_its_settings(migrated_home, tmp_path):
    """One DAG shape (dxt_core/airflow/dags.py) for the three backends: each archive task has
    an execution_timeout, its backend's pool and retries, the day and replace Params; the
    settings come from DXT_<KEY> (issue 12.13's per-task timeout included)."""
    env = base_env(fresh_home(migrated_home, tmp_path / "h"), tmp_path / "a", "http://x:1", None)
    env.update(
        {
            "DXT_KWOLLECT_TASK_TIMEOUT_MINUTES": "7",
            "DXT_KWOLLECT_POOL": "g5k",
            "DXT_COLLECTD_ES_RETRIES": "5",
            "DXT_EXAMON_MAX_ACTIVE_RUNS": "9",
        }
    )
    doc = run_dagbag_script(env, SHAPE)
    assert doc["dxt_examon"]["timeout_min"] == 180 and doc["dxt_examon"]["pool"] == "examon"
    assert doc["dxt_examon"]["max_active_runs"] == 9
    assert doc["dxt_kwollect"]["timeout_min"] == 7 and doc["dxt_kwollect"]["pool"] == "g5k"
    assert doc["dxt_collectd_es"]["retries"] == 5
    assert doc["dxt_examon"]["params"] == ["day", "format", "replace"]
    assert doc["dxt_kwollect"]["params"] == ["day", "replace"]
    assert doc["dxt_collectd_es"]["params"] == ["day", "formats", "replace"]
    # every backend with the reconcile role gets the generic task, after the wait
    assert all(v["reconcile"] == ["wait_for_day_end"] for v in doc.values()), doc
