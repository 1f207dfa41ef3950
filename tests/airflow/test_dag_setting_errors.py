"""A bad setting is the DAG file's import error, saying which variable and what to write (before:
a raw ValueError traceback for a start date, Airflow's "required params without default
values" for a format, a DAG parsed fine with an unknown family or max_active_runs=0)."""

from __future__ import annotations

import pytest

from tests.airflow.conftest import base_env, run_dagbag_script

pytestmark = pytest.mark.airflow

ERRORS = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={path!r})
print(json.dumps({{"dags": sorted(bag.dags),
                  "errors": {{k.rsplit("/", 1)[-1]: str(v) for k, v in bag.import_errors.items()}}}}))
"""


def test_bad_settings_are_import_errors_naming_the_variable(tmp_path):
    env = base_env(tmp_path / "home", tmp_path / "archive", "http://127.0.0.1:1", None)
    env["DXT_EXAMON_START_DATE"] = "yesterday"
    env["DXT_PROMETHEUS_FORMAT"] = "xml"
    env["DXT_COLLECTD_ES_FAMILIES"] = "bogus"
    env["DXT_KWOLLECT_MAX_ACTIVE_RUNS"] = "0"
    doc = run_dagbag_script(env, ERRORS)
    errors = doc["errors"]
    assert "DXT_EXAMON_START_DATE='yesterday': write YYYY-MM-DD" in errors["dxt_examon.py"]
    assert "ValueError" not in errors["dxt_examon.py"]
    assert "DXT_PROMETHEUS_FORMAT='xml': choose one of csv, parquet" in errors["dxt_prometheus.py"]
    assert "DXT_COLLECTD_ES_FAMILIES='bogus': unknown 'bogus'" in errors["dxt_collectd_es.py"]
    assert "DXT_KWOLLECT_MAX_ACTIVE_RUNS='0': must be 1 or more" in errors["dxt_kwollect.py"]
    assert "dxt_publish" in doc["dags"]  # the other DAG files are not affected
