"""The native provider: connection forms declared (conn-fields), the "Test" button
(test_connection) against real servers, and the [dxt] configuration section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core.airflow.provider import get_provider_info
from dxt_core.backends import backends
from tests.airflow.conftest import base_env, run_dagbag_script
from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.airflow


def test_provider_info_is_derived_from_the_registry_and_valid():
    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    types = {c["connection-type"]: c for c in info["connection-types"]}
    # one connection type per registered backend, the three that ship among them
    assert set(types) == {b.spec.conn_type for b in backends()}
    assert set(types) >= {"examon", "kwollect", "collectd_es"}
    for b in backends():
        entry = types[b.spec.conn_type]
        assert entry["hook-class-name"] == b.hook
        assert set(entry["conn-fields"]) == {e.name for e in b.spec.extras}
    assert types["examon"]["conn-fields"]["timeout"]["schema"]["default"] == 120.0
    options = info["config"]["dxt"]["options"]
    assert "archive_root" in options and "examon_retries" in options
    assert options["collectd_es_families"]["default"] == "disk,cpu,memory"
    assert options["examon_catchup"]["type"] == "boolean"


SCRIPT = """
import json
from dxt_core.airflow.hooks import ExamonHook, KwollectHook, CollectdEsHook
print(json.dumps({{
    "examon": ExamonHook().test_connection(),
    "examon_legacy_kwarg": ExamonHook(examon_conn_id="examon_bad").test_connection(),
    "examon_no_jobs": ExamonHook("examon_no_jobs").test_connection(),
    "kwollect": KwollectHook().test_connection(),
    "collectd_es": CollectdEsHook().test_connection(),
    "typo": CollectdEsHook("es_typo").test_connection(),
}}))
"""


def test_connection_button_against_the_simulators(examon_sim, noida_es, tmp_path):
    kw = KwollectSimProcess()
    try:
        env = base_env(tmp_path / "home", tmp_path / "archive", examon_sim.url, None)
        env["AIRFLOW_CONN_EXAMON_BAD"] = json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": 9}
        )
        kairos_host, kairos_port = examon_sim.url.split("://", 1)[1].rsplit(":", 1)
        env["AIRFLOW_CONN_EXAMON_NO_JOBS"] = json.dumps(
            {
                "conn_type": "examon",
                "host": kairos_host,
                "port": int(kairos_port),
                "extra": {"jobs_url": "http://127.0.0.1:9"},
            }
        )
        env["AIRFLOW_CONN_KWOLLECT_DEFAULT"] = json.dumps({"conn_type": "kwollect", "host": kw.url})
        host, port = noida_es.url.split("://", 1)[1].rsplit(":", 1)
        env["AIRFLOW_CONN_ELASTICSEARCH_DEFAULT"] = json.dumps(
            {"conn_type": "collectd_es", "host": host, "port": int(port)}
        )
        env["AIRFLOW_CONN_ES_TYPO"] = json.dumps(
            {"conn_type": "collectd_es", "host": host, "extra": {"indx": "x"}}
        )
        got = run_dagbag_script(env, SCRIPT)
    finally:
        kw.stop()
    ok, msg = got["examon"]
    assert ok and "KairosDB" in msg and "the jobs service answers at" in msg, msg
    # KairosDB answers, the jobs service does not: said (the Test said OK and nothing else)
    ok, msg = got["examon_no_jobs"]
    assert ok and "the jobs service at http://127.0.0.1:9 does not answer" in msg, msg
    ok, msg = got["examon_legacy_kwarg"]
    assert not ok and "127.0.0.1:9" in msg
    ok, msg = got["kwollect"]
    assert ok and "sites" in msg, msg
    ok, msg = got["collectd_es"]
    assert ok and "8." in msg, msg
    ok, msg = got["typo"]
    assert not ok and "unknown extra" in msg and "indx" in msg


SETTINGS_SCRIPT = """
import json
from dxt_core.airflow import dag_settings
print(json.dumps(dag_settings("examon")))
"""


def test_settings_come_from_the_environment_then_the_dxt_section(tmp_path):
    env = base_env(tmp_path / "home", tmp_path / "archive", "http://127.0.0.1:1", None)
    env["AIRFLOW__DXT__EXAMON_RETRIES"] = "7"
    env["AIRFLOW__DXT__EXAMON_POOL"] = "from_airflow_cfg"
    env["DXT_EXAMON_POOL"] = "from_env"
    env.pop("DXT_EXAMON_RETRIES", None)
    got = run_dagbag_script(env, SETTINGS_SCRIPT)
    assert got["retries"] == 7 and got["pool"] == "from_env"
    assert got["start_date"] == "2020-03-09"
    env["DXT_EXAMON_RETRIES"] = "two"
    out = subprocess.run(
        [sys.executable, "-c", SETTINGS_SCRIPT], env=env, capture_output=True, text=True
    )
    assert out.returncode != 0 and "DXT_EXAMON_RETRIES='two' is not a whole number" in out.stderr
