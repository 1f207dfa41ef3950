"""Kwollect connection fields and archive configuration (no Airflow, no network)."""

from __future__ import annotations

import json

import pytest

from dxt_core.backends.kwollect.connection import (
    kwollect_connection_from_fields,
    load_archive_config,
)
from dxt_core.backends.kwollect.source import POWER_METRICS, G5kNode, KwollectClient
from dxt_core.errors import ConfigError


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "https://api.grid5000.fr/stable"}, "https://api.grid5000.fr/stable"),
        ({"host": "api.grid5000.fr", "schema": "stable"}, "https://api.grid5000.fr/stable"),
        ({"host": "localhost", "schema": "http", "port": 8084}, "http://localhost:8084"),
        ({"host": "http://localhost/stable", "port": 8084}, "http://localhost:8084/stable"),
        ({"host": "ignored", "extra": {"api_url": "http://sim:1/x"}}, "http://sim:1/x"),
    ],
)
def test_connection_url_forms(fields, url):
    c = kwollect_connection_from_fields(conn_id="kwollect_default", **fields)
    assert c.api_url == url and c.auth is None


def test_connection_auth_extras_and_errors():
    c = kwollect_connection_from_fields(
        conn_id="k",
        host="api.grid5000.fr",
        login="jdoe",
        password="pw",
        extra={"timeout": "60", "max_points": 5000, "verify_tls": "false"},
    )
    assert c.auth == ("jdoe", "pw")
    assert c.options == {"timeout_s": 60.0, "max_points": 5000, "verify_tls": False}
    assert "pw" not in repr(c)
    with pytest.raises(ConfigError, match=r"'k'.*unknown extra.*bogus"):
        kwollect_connection_from_fields(conn_id="k", host="h", extra={"bogus": 1})
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_K="):
        kwollect_connection_from_fields(conn_id="k", host=None)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("min_window_s", 0, r"min_window_s=0: give a number of seconds, 0\.001 or more"),
        ("min_window_s", 1e-7, r"min_window_s=1e-07: .*\(--min-window on the command line"),
        ("timeout_s", -1.0, r"timeout_s=-1\.0: give a number of seconds, above 0 \(--timeout"),
        ("timeout_s", float("nan"), r"timeout_s=nan: give a number of seconds, above 0"),
        ("max_points", 0, r"max_points=0: give a whole number of points, 1 or more"),
        ("max_nodes", 0, r"max_nodes=0: .*1 or more \(extra max_nodes of the connection\)"),
    ],
)
def test_client_options_out_of_range_are_refused_naming_where_they_are_set(option, value, message):
    # before: min_window_s=0 split a refused request for ever (RecursionError), timeout_s<0
    # failed in the socket layer (ValueError), max_points=0 failed every request later
    with pytest.raises(ConfigError, match=message):
        KwollectClient("http://kwollect.test", **{option: value})


def test_connection_extras_out_of_range_are_refused():
    for extra in ({"max_points": 0}, {"max_nodes": -1}, {"min_window": 0}, {"timeout": 0}):
        with pytest.raises(ConfigError, match=rf"'k': extra '{next(iter(extra))}'.*above 0"):
            kwollect_connection_from_fields(conn_id="k", host="h", extra=extra)
    with pytest.raises(ConfigError, match=r"min_window_s=0\.0001: .*extra min_window"):
        kwollect_connection_from_fields(
            conn_id="k", host="h", extra={"min_window": 0.0001}
        ).client()


@pytest.mark.slow  # 6-7 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_archive_config_from_env_and_file(tmp_path):
    cfg = load_archive_config({"DXT_KWOLLECT_NODES": "nova-1.lyon.grid5000.fr, gros-2.nancy"})
    assert cfg.nodes == (G5kNode("lyon", "nova-1"), G5kNode("nancy", "gros-2"))
    assert cfg.metrics == POWER_METRICS and cfg.time_zone == "Europe/Paris"
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"clusters": ["lyon/nova"], "metrics": ["m1"], "time_zone": "UTC"}))
    cfg = load_archive_config({"DXT_KWOLLECT_CONFIG": str(f), "DXT_KWOLLECT_METRICS": "m2,m3"})
    assert cfg.clusters == (("lyon", "nova"),) and cfg.metrics == ("m2", "m3")
    assert cfg.time_zone == "UTC"
    t = tmp_path / "k.toml"
    t.write_text('nodes = ["taurus-3.lyon"]\n')
    assert load_archive_config({"DXT_KWOLLECT_CONFIG": str(t)}).nodes == (
        G5kNode("lyon", "taurus-3"),
    )
    with pytest.raises(ConfigError, match="no nodes or clusters"):
        load_archive_config({})
    with pytest.raises(ConfigError, match="site/cluster"):
        load_archive_config({"DXT_KWOLLECT_CLUSTERS": "nova"})
    with pytest.raises(ConfigError, match="unknown time zone"):
        load_archive_config(
            {"DXT_KWOLLECT_NODES": "nova-1.lyon", "DXT_KWOLLECT_TIME_ZONE": "Mars/Base"}
        )
    t.write_text("nodez = []\n")
    with pytest.raises(ConfigError, match="unknown keys"):
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(t)})
