"""Settings, read one way: a declared :class:`Setting`, then :func:`read`.

Every setting has a key (``examon_retries``), a type, a default and one line of help. Its value
comes from, in order: the environment variable ``DXT_<KEY>`` (``DXT_EXAMON_RETRIES``), then, under
Airflow, the ``[dxt]`` section of Airflow's configuration (``AIRFLOW__DXT__EXAMON_RETRIES`` or
airflow.cfg), then the default. The core settings are declared here, each backend's in its
package (``dxt_core.backends.<name>.SETTINGS``); the provider info lists them all as its
configuration section. A bad value is an error that names the variable and what it should be.

Nothing here imports Airflow: the Airflow adapters register the ``[dxt]`` lookup with
:func:`set_fallback`.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dxt_core.errors import ConfigError

ENV_ARCHIVE_ROOT = "DXT_ARCHIVE_ROOT"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: ``key`` is its name in ``[dxt]``; ``DXT_<KEY>`` is its variable.

    ``minimum``: the smallest value a number takes (``None``: any); ``check``: a test of the
    parsed value that raises :class:`ValueError` saying how to write it (:func:`check_day`).
    """

    key: str
    kind: type
    default: Any
    help: str
    minimum: int | float | None = None
    check: Callable[[Any], Any] | None = None

    @property
    def env(self) -> str:
        return "DXT_" + self.key.upper()

    def parse(self, raw: str, where: str | None = None) -> Any:
        """``raw`` as the setting's kind, checked; an error begins with ``where`` (default:
        the variable)."""
        where = where or self.env
        raw = raw.strip()
        value: Any = raw
        if self.kind is bool:
            return as_bool(raw, where)
        if self.kind is int:
            try:
                value = int(raw)
            except ValueError as exc:
                raise ConfigError(f"{where}={raw!r} is not a whole number") from exc
        elif self.kind is float:
            try:
                value = float(raw)
            except ValueError as exc:
                raise ConfigError(f"{where}={raw!r} is not a number") from exc
        elif self.kind is list:
            value = [part.strip() for part in raw.split(",") if part.strip()]
        if self.minimum is not None and not value >= self.minimum:
            raise ConfigError(f"{where}={raw!r}: must be {self.minimum} or more")
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                raise ConfigError(f"{where}={raw!r}: {exc}") from None
        return value


def check_day(value: str) -> None:
    """A :attr:`Setting.check`: ``value`` is a day written ``YYYY-MM-DD``."""
    try:
        ok = len(value) == 10 and bool(dt.date.fromisoformat(value))
    except ValueError:
        ok = False
    if not ok:
        raise ValueError("write YYYY-MM-DD, e.g. 2020-03-09")


_fallback: Callable[[str], str | None] | None = None


def set_fallback(lookup: Callable[[str], str | None] | None) -> None:
    """Where a setting comes from when its variable is unset (Airflow's ``[dxt]`` section)."""
    global _fallback
    _fallback = lookup


def read(setting: Setting, env: Mapping[str, str] | None = None) -> Any:
    """The value of ``setting``: ``DXT_<KEY>``, else ``[dxt] <key>``, else its default."""
    env = os.environ if env is None else env
    raw = env.get(setting.env)
    where = None
    if raw is None and _fallback is not None:
        raw = _fallback(setting.key)
        where = f"[dxt] {setting.key}"
    if raw is None or (raw.strip() == "" and setting.kind is not str):
        return setting.default
    return setting.parse(raw, where)


def read_all(settings: Sequence[Setting], prefix: str = "") -> dict[str, Any]:
    """Every setting's value, keyed by its key without ``prefix``."""
    return {s.key.removeprefix(prefix): read(s) for s in settings}


ARCHIVE_ROOT = Setting(
    "archive_root", str, "", "archive root: a directory or s3://bucket/prefix (required)"
)


S3_CONN_ID = Setting(
    "s3_conn_id",
    str,
    "",
    "Airflow connection of an s3:// archive root (default: aws_default when it exists, "
    "else the AWS environment)",
)


def archive_root(env: Mapping[str, str] | None = None) -> Path | str:
    """The archive root from ``DXT_ARCHIVE_ROOT``: a path, or an ``s3://bucket/prefix`` URL
    as given; a clear error when it is unset or names an unknown scheme."""
    root = str(read(ARCHIVE_ROOT, env)).strip()
    if not root:
        raise ConfigError(
            f"{ENV_ARCHIVE_ROOT} is not set: export {ENV_ARCHIVE_ROOT}=/path/to/archive in the "
            "environment of the Airflow workers"
        )
    from dxt_core.store import parse_root

    try:
        where = parse_root(root)
    except ConfigError as exc:
        error = ConfigError(f"{ENV_ARCHIVE_ROOT}: {exc}")
        error.run_wide = exc.run_wide  # boto3 missing: no unit of the run would do better
        raise error from None
    return where if isinstance(where, Path) else root


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
        name = host.split("/", 1)[0]
        # "host:port" (or "[v6]:port") already names its port: the default is not added
        named = name.count(":") == 1 or (name.startswith("[") and "]:" in name)
        return f"{scheme}://{host}" + (f":{port}" if port and not named else "")
    url = host.rstrip("/")
    if port and ":" not in url.split("://", 1)[1].split("/", 1)[0]:
        head, rest = url.split("://", 1)
        hostpart, _, path = rest.partition("/")
        url = f"{head}://{hostpart}:{port}" + (f"/{path}" if path else "")
    return url
