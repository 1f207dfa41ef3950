"""The S3 client of an ``s3://`` archive root in an Airflow task, from an Airflow connection.

The connection is ``DXT_S3_CONN_ID`` (``[dxt] s3_conn_id``), else ``aws_default`` when it
exists, else none: boto3's standard AWS environment of the worker. The fields follow the
Amazon provider's ``aws`` connection: ``login`` the access key id, ``password`` the secret
key, extras ``endpoint_url`` (Ceph RGW, MinIO), ``region_name``, ``aws_session_token``.
"""

from __future__ import annotations

from typing import Any

from dxt_core import masking
from dxt_core.config import S3_CONN_ID, check_extras, read
from dxt_core.errors import ConfigError

log = masking.logger("dxt_core.airflow.s3")

DEFAULT_CONN_ID = "aws_default"
#: The extras read (any other, a typo such as ``endpoint`` for ``endpoint_url``, is an error:
#: ignored, it would send the access key id to AWS instead of the intended endpoint).
EXTRAS = ("endpoint_url", "region_name", "aws_session_token")


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
    kw = connection_kwargs(conn_id, conn.login, conn.password, conn.extra_dejson)
    log.info("S3 archive %s: credentials of the Airflow connection %r", location, conn_id)
    return make_client(**kw)


def connection_kwargs(
    conn_id: str, login: str | None, password: str | None, extra: Any
) -> dict[str, Any]:
    """The boto3 client's keyword arguments of an ``aws`` connection's fields; an unknown
    extra or an endpoint that is not an http(s) URL is an error naming the connection and
    the extra (never the credentials)."""
    from dxt_core.store.sigv4 import check_endpoint

    if extra is not None and not isinstance(extra, dict):
        raise ConfigError(
            f"connection {conn_id!r}: its extra must be a JSON object such as "
            '{"endpoint_url": "https://rgw.example.org"}'
        )
    given = check_extras(conn_id, extra, set(EXTRAS))
    kw: dict[str, Any] = {}
    if login:
        kw["aws_access_key_id"] = login
    if password:
        kw["aws_secret_access_key"] = password
    for key in EXTRAS:
        if given.get(key):
            kw[key] = str(given[key])
    if "endpoint_url" in kw:
        kw["endpoint_url"] = check_endpoint(
            kw["endpoint_url"],
            f"connection {conn_id!r}: extra 'endpoint_url'",
            "give the credentials in the connection's login and password",
        )
    return kw
