"""Connections as data: one declarative spec per backend.

A :class:`ConnectionSpec` says what a backend's connection holds (host, port, scheme, login,
password, typed extras with defaults) and how to build the backend's connection object from
it. Everything else follows from the spec, so the three ways in read a connection the same way:

* the Airflow hook (``dxt_core.airflow.hooks``) passes an Airflow connection's fields to
  :meth:`ConnectionSpec.from_fields`;
* the provider info's ``conn-fields`` and ``ui-field-behaviour`` (the connection form) come
  from :meth:`ConnectionSpec.provider_entry`;
* the CLI's ``--url/--user/--password`` and extra options come from
  :meth:`ConnectionSpec.add_cli_arguments`, with the password from the spec's environment
  variable (never from a flag in shell history, unless given).

Nothing here imports Airflow.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from dxt_core.config import as_bool, check_extras, url_from_host
from dxt_core.errors import ConfigError
from dxt_core.masking import hide
from dxt_core.urls import check_no_query, redact_url
from dxt_core.windows import zone

T = TypeVar("T")

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True, slots=True)
class Extra:
    """One typed connection extra.

    Attributes:
        name: key in the connection's extra JSON.
        kind: ``str``, ``int``, ``float`` or ``bool``.
        default: value when absent (``None``: unset).
        label: the form's label.
        help: one line for the form and ``--help``.
        flag: the CLI option (``--name-with-dashes`` by default; ``""`` for none).
        negate: a ``bool`` extra whose flag turns it off (``--no-verify-tls``: ``verify_tls``
            false); the flag's destination is ``no_<name>``.
    """

    name: str
    kind: type
    default: Any = None
    label: str = ""
    help: str = ""
    flag: str | None = None
    #: a number that must be above zero (a timeout)
    positive: bool = False
    negate: bool = False
    #: a test of a text extra's value (a time zone, a URL) that raises a ConfigError or a
    #: ValueError saying what is wrong; the error is prefixed with the connection and extra
    check: Callable[[str], Any] | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag if self.flag is not None else "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The ``argparse`` destination of :attr:`cli_flag`."""
        return f"no_{self.name}" if self.negate else f"conn_{self.name}"

    def parse(self, value: Any, conn_id: str) -> Any:
        if value is None or value == "":
            return self.default
        where = f"connection {conn_id!r}: extra {self.name!r}"
        also = f" ({self.cli_flag} on the command line)" if self.cli_flag else ""
        if self.kind is bool:
            return as_bool(value, where)
        if self.kind in (int, float):
            number = self._number(value, where)
            if self.positive and not number > 0:
                raise ConfigError(f"{where}{also} must be above 0, not {value!r}")
            return number
        text = str(value)
        if self.check is not None:
            try:
                self.check(text)
            except (ConfigError, ValueError) as exc:
                raise ConfigError(f"{where}{also}: {exc}") from None
        return text

    def _number(self, value: Any, where: str) -> int | float:
        """``value`` as a finite number of :attr:`kind`: a whole one for ``int`` (2.5 is
        refused, not cut to 2); ``true``, ``inf`` and ``nan`` are refused."""
        whole = self.kind is int
        if isinstance(value, bool):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where} must be a number, not {value!r}") from exc
        if not math.isfinite(number):
            raise ConfigError(f"{where} must be a finite number, not {value!r}")
        if not whole:
            return number
        if isinstance(value, int):
            return value
        if not number.is_integer():
            raise ConfigError(f"{where} must be a whole number, not {value!r}")
        try:
            return int(str(value).strip())
        except ValueError:
            return int(number)


def time_zone_extra(default: str) -> Extra:
    """The ``time_zone`` extra: the zone whose midnights bound the archive's days (``--tz``)."""
    return Extra(
        "time_zone", str, default, "Time zone", "time zone of days", flag="--tz", check=zone
    )


def timeout_extra(
    default: float | None, help: str = "HTTP read timeout, seconds", flag: str | None = None
) -> Extra:
    """The ``timeout`` extra, seconds (``--timeout`` unless ``flag`` says otherwise)."""
    return Extra("timeout", float, default, "Timeout (s)", help, flag=flag, positive=True)


def verify_tls_extra(
    default: bool | None = True, name: str = "verify_tls", flag: str = "--no-verify-tls"
) -> Extra:
    """The extra that turns TLS certificate checks off; on the command line ``flag`` (``""``:
    none, the CLI has its own)."""
    return Extra(name, bool, default, "Verify TLS", "verify TLS certificates", flag, negate=True)


def compression_extra() -> Extra:
    """The ``compression`` extra (``--compression``): how the server's answers travel."""
    return Extra(
        "compression",
        str,
        "auto",
        "Compression",
        "gzip answers (gzip), answers as they are (none), or auto: none from a server on "
        "this machine (loopback), gzip from any other",
    )


@dataclass(frozen=True, slots=True)
class ConnectionFields:
    """A connection's generic fields after the spec's checks: a base URL, login, typed extras."""

    conn_id: str
    url: str
    login: str | None
    password: str | None = field(repr=False)
    extras: dict[str, Any]

    def __post_init__(self) -> None:
        hide(self.password, self.login)

    def check_choice(self, key: str, allowed: tuple[str, ...]) -> None:
        """A :class:`ConfigError` unless the extra ``key`` is one of ``allowed``."""
        if self.extras[key] not in allowed:
            raise ConfigError(
                f"connection {self.conn_id!r}: extra {key!r} must be one of {', '.join(allowed)}, "
                f"not {self.extras[key]!r}"
            )

    def as_kwargs(self, *extras: str) -> dict[str, Any]:
        """``url``, ``user`` (the login), ``password`` and the named extras, ``timeout`` as
        ``timeout_s``: the keyword arguments of a connection object with those fields."""
        named = {"timeout_s" if k == "timeout" else k: self.extras[k] for k in extras}
        return {"url": self.url, "user": self.login, "password": self.password, **named}


@dataclass(frozen=True)
class ConnectionSpec(Generic[T]):
    """What one backend's connection is, and how to build the backend's connection object.

    Attributes:
        backend: the backend's name.
        hook_name: the connection type's name in the UI.
        conn_type: Airflow connection type registered by the provider (default: backend).
        default_conn_id: the connection id the DAG uses (default ``<backend>_default``).
        hook_kwarg: the hook's keyword for the connection id (default ``<backend>_conn_id``).
        default_scheme: scheme of a bare host name.
        default_port: port of a bare host name (``None``: the scheme's).
        other_schema: what a ``schema`` other than http/https means: ``"path"`` (the URL's
            path, Grid'5000's ``stable``), ``"ignore"`` (the default scheme) or ``"error"``.
        url_extra: an extra whose value, when set, is the whole base URL.
        extras: the typed extras.
        build: turns checked fields into the backend's connection object.
        user_env, password_env: environment variables the CLI reads credentials from.
        host_example: shown in errors and form placeholders (default
            ``<backend>.example.org``).
        labels: form relabelling of the standard fields.
    """

    backend: str
    hook_name: str
    build: Callable[[ConnectionFields], T]
    conn_type: str = ""
    default_conn_id: str = ""
    hook_kwarg: str = ""
    extras: tuple[Extra, ...] = ()
    default_scheme: str = "http"
    default_port: int | None = None
    other_schema: str = "error"
    url_extra: str | None = None
    user_env: str | None = None
    password_env: str | None = None
    host_example: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Extra keys that only the CLI sets (e.g. the URL of a sibling service): not in the form.
    hidden_fields: tuple[str, ...] = ()
    #: One cheap request that shows the connection works (the UI's "Test" button); returns
    #: what the server said, raises :class:`~dxt_core.errors.DxtError` otherwise.
    probe: Callable[[T], str] | None = None

    def __post_init__(self) -> None:
        # The usual names follow from the backend's: examon, examon_default, examon_conn_id.
        if not self.conn_type:
            object.__setattr__(self, "conn_type", self.backend)
        if not self.default_conn_id:
            object.__setattr__(self, "default_conn_id", f"{self.backend}_default")
        if not self.hook_kwarg:
            object.__setattr__(self, "hook_kwarg", f"{self.backend}_conn_id")
        if self.password_env is None:
            object.__setattr__(self, "password_env", f"DXT_{self.backend.upper()}_PASSWORD")
        if not self.host_example:
            host = self.backend.replace("_", "-")
            object.__setattr__(self, "host_example", f"{host}.example.org")

    # ------------------------------------------------------------------ reading fields

    def extra_names(self) -> set[str]:
        return {e.name for e in self.extras}

    def parse_extras(self, conn_id: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        """Typed extras with defaults; an unknown key (a typo) is an error naming it.

        Keys written by Airflow's connection form (``extra__<type>__<name>``) are accepted.
        """
        prefix = f"extra__{self.conn_type}__"
        given = {key.removeprefix(prefix): value for key, value in (extra or {}).items()}
        check_extras(conn_id, given, self.extra_names())
        return {e.name: e.parse(given.get(e.name), conn_id) for e in self.extras}

    def base_url(self, conn_id: str, host: str | None, port: int | None, schema: str | None) -> str:
        if not host:
            raise ConfigError(
                f"connection {conn_id!r} has no host: set it, e.g. "
                f'AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "{self.conn_type}", '
                f'"host": "{self.host_example}"}}\''
            )
        if "://" in host:
            return url_from_host(host, port, self.default_scheme)
        scheme = (schema or self.default_scheme).lower()
        path = ""
        if scheme not in ("http", "https"):
            if self.other_schema == "error":
                raise ConfigError(
                    f"connection {conn_id!r}: schema {schema!r} must be http or https "
                    "(it selects the URL scheme, not a database)"
                )
            if self.other_schema == "path":
                path = (schema or "").strip("/")
            scheme = self.default_scheme
        url = url_from_host(host, port or self.default_port, scheme)
        return url + (f"/{path}" if path else "")

    def from_fields(
        self,
        *,
        conn_id: str,
        host: str | None,
        port: int | None = None,
        schema: str | None = None,
        login: str | None = None,
        password: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """The backend's connection from generic connection fields (an Airflow connection's,
        or the CLI's)."""
        extras = self.parse_extras(conn_id, extra)
        if self.url_extra and extras.get(self.url_extra):
            url = str(extras[self.url_extra])
        else:
            url = self.base_url(conn_id, host, port, schema)
        # a query or fragment was dropped in silence (and a token in it stayed in manifests)
        check_no_query(url, f"connection {conn_id!r}: the server's URL")
        fields = ConnectionFields(conn_id, url, login or None, password or None, extras)
        return self.build(fields)

    # ------------------------------------------------------------------ Airflow provider

    def provider_entry(self, hook_class_name: str) -> dict[str, Any]:
        """This connection type in the provider info: form fields declared, not coded."""
        conn_fields: dict[str, Any] = {}
        for e in self.extras:
            if e.name in self.hidden_fields:
                continue
            schema: dict[str, Any] = {"type": [_JSON_TYPES[e.kind], "null"]}
            if e.default is not None:
                schema["default"] = e.default
            conn_fields[e.name] = {
                "label": e.label or e.name.replace("_", " ").capitalize(),
                "schema": schema,
                **({"description": e.help} if e.help else {}),
            }
        placeholders = {"host": self.host_example}
        if self.default_port:
            placeholders["port"] = str(self.default_port)
        return {
            "hook-class-name": hook_class_name,
            "hook-name": self.hook_name,
            "connection-type": self.conn_type,
            "conn-fields": conn_fields,
            "ui-field-behaviour": {
                "hidden-fields": ["extra"] if conn_fields else [],
                "relabeling": dict(self.labels),
                "placeholders": placeholders,
            },
        }

    # ------------------------------------------------------------------ CLI

    def add_cli_arguments(
        self, parser: argparse.ArgumentParser, url_flag: str = "--url", url_help: str = ""
    ) -> None:
        """``--url``, ``--user``, ``--password`` and one option per extra."""
        parser.add_argument(url_flag, dest="url", help=url_help or "base URL")
        parser.add_argument("--user", help="HTTP Basic user")
        env = f" (better: environment {self.password_env})" if self.password_env else ""
        parser.add_argument("--password", help=f"HTTP Basic password{env}")
        for e in self.extras:
            if not e.cli_flag:
                continue
            if e.kind is bool:
                text = f"do not {e.help}" if e.negate else e.help
                parser.add_argument(e.cli_flag, dest=e.dest, action="store_true", help=text)
            else:
                parser.add_argument(
                    e.cli_flag,
                    dest=e.dest,
                    type=e.kind,
                    default=None,
                    help=e.help + (f" (default {e.default})" if e.default is not None else ""),
                )

    def cli_words(
        self,
        args: argparse.Namespace,
        url_flag: str = "--url",
        skip: tuple[str, ...] = (),
        recorded_url: object = None,
    ) -> list[str]:
        """The options of :meth:`add_cli_arguments` that ``args`` gave, as words of a command
        to print (a refetch, a refill): the URL without its credentials (the one given, else
        ``recorded_url``: a manifest's ``source_url``), ``--user`` when given, never the
        password (the command reads it from the environment, as documented); the extras
        named in ``skip`` are left for the caller to give."""
        url = getattr(args, "url", None) or (
            recorded_url if isinstance(recorded_url, str) else None
        )
        words = [url_flag, redact_url(url) if url else "URL"]
        if getattr(args, "user", None):
            words += ["--user", str(args.user)]
        for e in self.extras:
            if not e.cli_flag or e.name in skip:
                continue
            value = getattr(args, e.dest, None)
            if value is True:
                words.append(e.cli_flag)
            elif value is not None and value is not False:
                # a URL (jobs_url, say) without credentials nor a query (a token), as the
                # server's URL above
                shown = str(value)
                words += [e.cli_flag, redact_url(shown) if "://" in shown else shown]
        return words

    def credentials(
        self,
        user: str | None = None,
        password: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> tuple[str | None, str | None]:
        """The user and password given, else those of the spec's environment variables."""
        env = os.environ if env is None else env
        if user is None and self.user_env:
            user = env.get(self.user_env) or None
        if password is None and self.password_env:
            password = env.get(self.password_env) or None
        hide(password, user)
        return user, password

    def from_cli(self, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> T:
        """The connection from the CLI options; credentials may come from the environment."""
        user, password = self.credentials(args.user, args.password, env)
        extra = {}
        for e in self.extras:
            value = getattr(args, e.dest, None) if e.cli_flag else None
            # ``is``: a 0 given (``--timeout 0``) is a value, checked, not "not given"
            if value is True and e.negate:
                extra[e.name] = False
            elif isinstance(value, str) and not value.strip():
                # in a connection an empty extra is one not set; typed, it is a mistake
                # (``--tz ""`` ran with Europe/Rome)
                raise ConfigError(f"{e.cli_flag} is empty: give a value, or leave it out")
            elif value is not None and value is not False:
                extra[e.name] = value
        if not args.url:
            raise ConfigError(f"{self.backend}: give the server's address with --url")
        return self.from_fields(
            conn_id=f"{self.backend} (command line)",
            host=args.url,
            login=user,
            password=password,
            extra=extra,
        )


class _Client(Protocol):
    def close(self) -> None: ...


#: A client a probe opens (:func:`probe_once`), and what the probe learns from it.
K = TypeVar("K", bound=_Client)
R = TypeVar("R")


def probe_once(open_client: Callable[..., K], conn: Any, ask: Callable[[K], R]) -> R:
    """For a :attr:`ConnectionSpec.probe`: what ``ask`` learns from a client of ``conn``'s server,
    ``open_client(conn, retry=...)``, that sends each request once (a server that does not
    answer is said at once, not retried); the client is closed after."""
    from dxt_core.http import RetryPolicy

    client = open_client(conn, retry=RetryPolicy(attempts=1))
    try:
        return ask(client)
    finally:
        client.close()
