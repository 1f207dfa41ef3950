"""Helpers that now serve several backends: the one-try probe, the series backend
declaration, and collectd-es option defaults taken from the DAG's settings."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from dxt_core.backends import common_settings, get, series_backend, series_format_setting
from dxt_core.backends.collectd_es import cli as collectd_cli
from dxt_core.config import Setting
from dxt_core.connection import probe_once


class _Client:
    def __init__(self, conn: str, *, retry: Any) -> None:
        self.conn, self.retry, self.closed = conn, retry, False

    def close(self) -> None:
        self.closed = True


def test_probe_once_tries_once_and_closes_the_client_even_on_failure() -> None:
    opened: list[_Client] = []

    def open_client(conn: str, **kw: Any) -> _Client:
        opened.append(_Client(conn, **kw))
        return opened[-1]

    assert probe_once(open_client, "c", lambda c: f"{c.conn} {c.retry.attempts}") == "c 1"

    def fail(c: _Client) -> str:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError, match="down"):
        probe_once(open_client, "c", fail)
    assert [c.closed for c in opened] == [True, True]


def test_series_backend_settings_are_common_then_own_then_format() -> None:
    own = Setting("toy_catalog", str, "", "catalog")
    b = series_backend("toy", "Toy", own, alias="t", start_date="2024-01-01", pool="p")
    common = common_settings("toy", start_date="2024-01-01", pool="p", reconcile=True)
    assert b.settings == (*common, own, series_format_setting("toy"))
    assert (b.aliases, b.task_id) == (("t",), "archive_metric_day")


def test_collectd_es_extract_defaults_are_the_dag_settings() -> None:
    parser = argparse.ArgumentParser()
    collectd_cli.add_extract_parser(parser.add_subparsers())
    args = parser.parse_args(["collectd-es", "2024-01-01", "2024-01-02", "--out", "x"])
    backend = get("collectd_es")
    for key in ("timestep", "num_nodes", "ssds_per_node", "slices", "page_size"):
        assert getattr(args, key) == backend.setting(key).default
