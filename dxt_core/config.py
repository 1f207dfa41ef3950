"""Settings from the environment and from connection fields, shared by the CLI and Airflow.

Nothing here imports Airflow: the Airflow hook passes a connection's fields in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dxt_core.errors import ConfigError

ENV_ARCHIVE_ROOT = "DXT_ARCHIVE_ROOT"
ENV_EXAMON_CATALOG = "DXT_EXAMON_CATALOG"
ENV_EXAMON_OPTIONS = "DXT_EXAMON_OPTIONS"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def archive_root(env: Mapping[str, str] | None = None) -> Path:
    """The archive root from ``DXT_ARCHIVE_ROOT``; a clear error when it is unset."""
    env = os.environ if env is None else env
    root = env.get(ENV_ARCHIVE_ROOT, "").strip()
    if not root:
        raise ConfigError(
            f"{ENV_ARCHIVE_ROOT} is not set: export {ENV_ARCHIVE_ROOT}=/path/to/archive in the "
            "environment of the Airflow workers"
        )
    return Path(root)


def as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ConfigError(f"{key} must be true or false, not {value!r}")


def check_extras(conn_id: str, extra: Mapping[str, Any] | None, known: set[str]) -> dict[str, Any]:
    """A connection's extras as a dict; an unknown key (a typo) is an error naming it."""
    out = dict(extra or {})
    unknown = set(out) - known
    if unknown:
        raise ConfigError(
            f"connection {conn_id!r}: unknown extra field(s) {sorted(unknown)}; "
            f"known: {sorted(known)}"
        )
    return out


def url_from_host(host: str, port: int | None, scheme: str) -> str:
    """A base URL from a connection's ``host``: a URL as given (with ``port`` added when it
    names none), or a bare name joined with ``scheme`` and ``port``."""
    if "://" not in host:
        return f"{scheme}://{host}" + (f":{port}" if port else "")
    url = host.rstrip("/")
    if port and ":" not in url.split("://", 1)[1].split("/", 1)[0]:
        head, rest = url.split("://", 1)
        hostpart, _, path = rest.partition("/")
        url = f"{head}://{hostpart}:{port}" + (f"/{path}" if path else "")
    return url
