"""The S3 client of an ``s3://`` archive root in an Airflow task, from an Airflow connection.

The connection is ``DXT_S3_CONN_ID`` (``[dxt] s3_conn_id``), else ``aws_default`` when it
exists, else none: boto3's standard AWS environment of the worker. The fields follow the
Amazon provider's ``aws`` connection: ``login`` the access key id, ``password`` the secret
key, extras ``endpoint_url`` (Ceph RGW, MinIO), ``region_name``, ``aws_session_token``.
"""

from __future__ import annotations

import logging
from typing import Any

from dxt_core.config import S3_CONN_ID, read
from dxt_core.errors import ConfigError

log = logging.getLogger("dxt_core.airflow.s3")

DEFAULT_CONN_ID = "aws_default"


def client_from_connection(location: Any) -> Any | None:
    """A boto3 S3 client from the archive's Airflow connection, or None (no connection:
    the AWS environment)."""
    from airflow.sdk import BaseHook

    from dxt_core.store.client import make_client

    named = str(read(S3_CONN_ID) or "").strip()
    conn_id = named or DEFAULT_CONN_ID
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        if named:
            raise ConfigError(
                f"{S3_CONN_ID.env}={named!r}: no such Airflow connection ({type(exc).__name__}); "
                "create it (login: access key id, password: secret key, extra endpoint_url) or "
                "unset the setting to use the AWS environment"
            ) from None
        return None
    extra = conn.extra_dejson or {}
    kw: dict[str, Any] = {}
    if conn.login:
        kw["aws_access_key_id"] = conn.login
    if conn.password:
        kw["aws_secret_access_key"] = conn.password
    for key in ("endpoint_url", "region_name", "aws_session_token"):
        if extra.get(key):
            kw[key] = str(extra[key])
    log.info("S3 archive %s: credentials of the Airflow connection %r", location, conn_id)
    return make_client(**kw)
