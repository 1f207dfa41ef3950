"""Airflow hooks: turn an Airflow connection into a dxt_core source."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from dxt_core.backends.examon.catalog import ExamonOptions
from dxt_core.backends.examon.connection import ExamonConnection, examon_connection_from_fields
from dxt_core.backends.examon.source import KairosDBSource


class ExamonHook(BaseHook):
    """Examon (KairosDB, optionally through Grafana) from an Airflow connection.

    Any connection type works (``http`` included): host, port, schema (http/https), login,
    password; extras ``grafana_proxy``, ``time_zone``, ``cluster``, ``jobs_url``,
    ``timeout``, ``verify_tls``.
    """

    conn_name_attr = "examon_conn_id"
    default_conn_name = "examon_default"
    conn_type = "examon"
    hook_name = "Examon (KairosDB)"

    def __init__(self, examon_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.examon_conn_id = examon_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"host": "Host or URL (KairosDB, or Grafana with grafana_proxy)"},
            "placeholders": {
                "host": "examon.example.org",
                "port": "8083",
                "extra": '{"grafana_proxy": false, "time_zone": "Europe/Rome", '
                '"cluster": "marconi100", "jobs_url": "http://examon.example.org:5000"}',
            },
        }

    def connection(self) -> ExamonConnection:
        c = self.get_connection(self.examon_conn_id)
        return examon_connection_from_fields(
            conn_id=self.examon_conn_id,
            host=c.host,
            port=c.port,
            schema=c.schema,
            login=c.login,
            password=c.password,
            extra=c.extra_dejson,
        )

    def get_conn(self, options: ExamonOptions | None = None) -> KairosDBSource:
        return KairosDBSource(self.connection(), options=options)
