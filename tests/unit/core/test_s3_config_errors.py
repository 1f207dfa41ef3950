"""An S3 archive's connection and endpoint are checked before boto3 sees them: an unknown
extra (``endpoint`` for ``endpoint_url``: ignored, the client went to AWS with the access key
id) and an endpoint without http(s) scheme (boto3's bare "Invalid endpoint", or a botocore
traceback on the command line) are errors naming the connection extra or the variable, never
the credentials."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dxt_core import store
from dxt_core.airflow.s3 import connection_kwargs
from dxt_core.cli import main
from dxt_core.errors import ConfigError
from dxt_core.store.client import make_client
from dxt_core.store.sigv4 import environment_credentials

KEY, SECRET = "AKIAEXAMPLEKEYID", "s3cretValue"


def test_an_unknown_extra_is_refused_naming_the_connection_the_key_and_the_known_ones():
    with pytest.raises(ConfigError) as err:
        connection_kwargs("archive_s3", KEY, SECRET, {"endpoint": "http://127.0.0.1:9000"})
    message = str(err.value)
    assert message.startswith("connection 'archive_s3': unknown extra field(s) ['endpoint']")
    assert "endpoint_url" in message and "region_name" in message
    assert KEY not in message and SECRET not in message


@pytest.mark.parametrize("endpoint", ["rgw.example.org:7480", "127.0.0.1:9000", "ftp://h:1"])
def test_an_endpoint_without_http_scheme_names_the_connection_extra(endpoint):
    with pytest.raises(ConfigError) as err:
        connection_kwargs("archive_s3", KEY, SECRET, {"endpoint_url": endpoint})
    message = str(err.value)
    assert message.startswith(
        f"connection 'archive_s3': extra 'endpoint_url'={endpoint!r} is not an http(s) URL"
    )
    assert KEY not in message and SECRET not in message


def test_an_endpoint_with_a_password_is_refused_without_showing_it():
    with pytest.raises(ConfigError) as err:
        connection_kwargs("c", None, None, {"endpoint_url": f"https://{KEY}:{SECRET}@rgw.org"})
    message = str(err.value)
    assert "extra 'endpoint_url' holds a user name or password" in message
    assert KEY not in message and SECRET not in message


def test_good_fields_become_the_clients_arguments():
    extra = {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-3"}
    assert connection_kwargs("c", KEY, SECRET, extra) == {
        "aws_access_key_id": KEY,
        "aws_secret_access_key": SECRET,
        "endpoint_url": "http://127.0.0.1:9000",
        "region_name": "eu-west-3",
    }
    assert connection_kwargs("c", None, None, None) == {}


@pytest.mark.parametrize("name", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
def test_an_endpoint_variable_without_scheme_names_the_variable(monkeypatch, name):
    # what every boto3 client of the environment is made through (a command, a task without
    # an S3 connection, dxt publish)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv(name, "127.0.0.1:9000")
    with pytest.raises(ConfigError, match=rf"^{name}='127\.0\.0\.1:9000' is not an http\(s\)"):
        make_client()
    monkeypatch.setenv(name, f"http://u:{SECRET}@127.0.0.1:9000")
    for make in (make_client, environment_credentials):
        with pytest.raises(ConfigError, match=rf"^{name} holds a user name or password") as err:
            make()
        assert SECRET not in str(err.value)


def test_the_command_line_says_which_variable_instead_of_a_botocore_traceback(monkeypatch, capsys):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # the command line has no Airflow connection lookup (dxt_core.airflow sets one when imported)
    monkeypatch.setattr(store, "_client_factory", None)
    assert main(["index", "rebuild", "--archive", "s3://bucket/prefix"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dxt: error: AWS_ENDPOINT_URL='127.0.0.1:9000' is not an http(s) URL")
    assert KEY not in err and SECRET not in err


CONNECTION_SCRIPT = """
from dxt_core.airflow.s3 import client_from_connection
for conn_id in ("typo", "noscheme"):
    import os
    os.environ["DXT_S3_CONN_ID"] = conn_id
    try:
        client_from_connection("s3://bucket/prefix")
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


@pytest.mark.slow  # a fresh Python importing Airflow: 2.5-7 s on the shared 2-core machine
def test_an_airflow_connection_with_a_typo_or_no_scheme_is_refused(tmp_path):
    pytest.importorskip("airflow")

    def conn(extra: dict[str, str]) -> str:
        return json.dumps({"conn_type": "aws", "login": KEY, "password": SECRET, "extra": extra})

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DXT_", "AWS_"))}
    env["AIRFLOW_HOME"] = str(tmp_path)
    env["AIRFLOW_CONN_TYPO"] = conn({"endpoint": "http://127.0.0.1:9000"})
    env["AIRFLOW_CONN_NOSCHEME"] = conn({"endpoint_url": "rgw.example.org:7480"})
    out = subprocess.run(
        [sys.executable, "-c", CONNECTION_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = out.stdout.splitlines()
    assert lines == [
        "ConfigError connection 'typo': unknown extra field(s) ['endpoint']; known: "
        "['aws_session_token', 'endpoint_url', 'region_name']",
        "ConfigError connection 'noscheme': extra 'endpoint_url'='rgw.example.org:7480' is "
        "not an http(s) URL: write it http://host:port or https://host[:port], e.g. "
        "http://127.0.0.1:9000 or https://rgw.example.org",
    ], out.stderr
    assert KEY not in out.stdout + out.stderr and SECRET not in out.stdout + out.stderr
