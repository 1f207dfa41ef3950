"""The Examon DAG with an S3 archive root: ``airflow dags test`` archives a metric-day into
a moto_server bucket, credentials and endpoint from the standard AWS environment or from an
Airflow connection (``DXT_S3_CONN_ID``)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.airflow.conftest import airflow, base_env, fresh_home
from tests.conftest import SimulatorProcess
from tests.s3_fixtures import bucket, s3_env, s3_server  # noqa: F401

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.mark.parametrize("credentials", ["environment", "connection"])
def test_the_examon_dag_archives_into_s3(
    migrated_home,
    tmp_path,
    bucket,  # noqa: F811
    s3_server,  # noqa: F811
    s3_env,  # noqa: F811
    credentials,
):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2"])
    try:
        env = base_env(
            fresh_home(migrated_home, tmp_path / "home"), tmp_path / "x", sim.url, catalog
        )
        env.update(s3_env)
        if credentials == "connection":  # the Amazon provider's fields, no AWS_* variables
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
                env.pop(k)
            env["AIRFLOW_CONN_DXT_S3"] = json.dumps(
                {
                    "conn_type": "aws",
                    "login": s3_env["AWS_ACCESS_KEY_ID"],
                    "password": s3_env["AWS_SECRET_ACCESS_KEY"],
                    "extra": {"endpoint_url": s3_server.url, "region_name": "us-east-1"},
                }
            )
            env["DXT_S3_CONN_ID"] = "dxt_s3"
        env["DXT_ARCHIVE_ROOT"] = f"s3://{bucket}/af"
        conf = json.dumps({"day": "2020-03-09"})  # the day param: archive that day
        out = airflow(
            env, "dags", "test", "dxt_examon", "2020-03-10", "-c", conf, check=False, timeout=400
        )
    finally:
        sim.stop()
    c = s3_server.client()
    key = "af/examon/ipmi_pub/ambient/2020-03-09"
    try:
        manifest = json.loads(
            c.get_object(Bucket=bucket, Key=f"{key}.manifest.json")["Body"].read()
        )
    except c.exceptions.NoSuchKey:
        keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])]
        pytest.fail(f"no manifest in the bucket ({keys}): {out.stderr[-1500:]}")
    data = c.get_object(Bucket=bucket, Key=f"{key}.csv.gz")["Body"].read()
    assert manifest["status"] == "archived" and manifest["rows"] == 2 * 4320
    assert hashlib.sha256(data).hexdigest() == manifest["sha256"]
    assert not (tmp_path / "x").exists()  # nothing went to a local archive
    text = out.stdout + out.stderr
    assert f"into s3://{bucket}/af" in text
    if credentials == "connection":
        return
    # The coverage view of the same archive, served by Airflow's API server.
    from tests.browser.stack import Stack, stack_env
    from tests.conftest import free_port

    home = tmp_path / "home"
    view_env = stack_env(home, tmp_path / "x", "http://127.0.0.1:1", catalog, free_port())
    view_env.update({**s3_env, "DXT_ARCHIVE_ROOT": f"s3://{bucket}/af"})
    stack = Stack(view_env, tmp_path / "api-server.log", command="api-server")
    try:
        stack.wait_up()
        doc = stack.get("/dxt-archive/api/grid?source=examon&start=2020-03-09&end=2020-03-10")
        assert doc["units"] == ["ipmi_pub/ambient"] and doc["archive"] == ["AM"], doc
        cell = stack.get("/dxt-archive/api/cell?source=examon&unit=ipmi_pub/ambient&day=2020-03-09")
        assert cell["manifest"]["rows"] == 2 * 4320, cell
    finally:
        stack.stop()
