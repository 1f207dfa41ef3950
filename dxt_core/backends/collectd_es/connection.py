"""Where the collectd indices are: the Elasticsearch connection spec.

The connection object itself (:class:`CollectdEsConnection`) lives with the source that uses
it; this module declares how it is read from connection fields, the CLI and the environment.
"""

from __future__ import annotations

from dxt_core.backends.collectd_es.source import (
    DEFAULT_HOST_PREFIX,
    DEFAULT_INDEX,
    ENV_PASSWORD,
    ENV_USER,
    CollectdEsConnection,
)
from dxt_core.connection import ConnectionFields, ConnectionSpec, Extra


def _build(f: ConnectionFields) -> CollectdEsConnection:
    x = f.extras
    return CollectdEsConnection(
        url=f.url,
        user=f.login,
        password=f.password,
        index=x["index"],
        host_prefix=x["host_prefix"],
        verify_certs=x["verify_certs"],
        timeout_s=x["timeout"],
    )


def probe(conn: CollectdEsConnection) -> str:
    """The server's name and version from ``GET /``."""
    from dxt_core.http import HttpClient, RetryPolicy

    with HttpClient(
        conn.url,
        user=conn.user,
        password=conn.password,
        timeout_s=conn.timeout_s,
        verify_tls=conn.verify_certs,
        retry=RetryPolicy(attempts=1),
    ) as http:
        root = http.get_json("/")
    version = root.get("version", {}) if isinstance(root, dict) else {}
    product = version.get("distribution") or "Elasticsearch"
    return f"{product} {version.get('number', '?')} at {conn.safe_url}"


#: Elasticsearch (or OpenSearch) holding collectd documents.
SPEC: ConnectionSpec[CollectdEsConnection] = ConnectionSpec(
    backend="collectd_es",
    default_conn_id="elasticsearch_default",
    hook_name="collectd in Elasticsearch (dxt-archive)",
    hook_kwarg="elasticsearch_conn_id",
    build=_build,
    probe=probe,
    default_scheme="http",
    default_port=9200,
    other_schema="error",
    user_env=ENV_USER,
    password_env=ENV_PASSWORD,
    host_example="es.example.org",
    labels={"schema": "Scheme (http or https)"},
    extras=(
        Extra("index", str, DEFAULT_INDEX, "Index pattern", "index pattern", flag=""),
        Extra("host_prefix", str, DEFAULT_HOST_PREFIX, "Host prefix", "hostname prefix", flag=""),
        Extra("verify_certs", bool, True, "Verify TLS", "verify TLS certificates", flag=""),
        Extra("timeout", float, 60.0, "Timeout (s)", "request timeout, seconds", flag=""),
    ),
)

__all__ = ["SPEC", "CollectdEsConnection"]
