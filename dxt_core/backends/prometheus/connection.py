"""Where the Prometheus-compatible server is and how to log in: the connection and its spec.

One connection type for both servers: Prometheus and VictoriaMetrics answer the same query
API, and which one it is is detected from the server (``flavor = "auto"``) or named by the
connection's ``flavor`` extra. Basic auth takes the login and password; bearer auth
(``auth = "bearer"``) sends the password field as the token, so it is masked in Airflow's
form and read from ``DXT_PROMETHEUS_PASSWORD`` by the CLI like any password.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dxt_core.connection import (
    ConnectionFields,
    ConnectionSpec,
    Extra,
    compression_extra,
    probe_once,
    time_zone_extra,
    timeout_extra,
    verify_tls_extra,
)
from dxt_core.errors import ConfigError
from dxt_core.http import normalise_base_url, redact_url
from dxt_core.urls import COMPRESSIONS, redacted_repr
from dxt_core.windows import DEFAULT_TIME_ZONE, zone

FLAVORS = ("auto", "prometheus", "victoriametrics")
#: How ``m[d]`` at ``t`` ends: from the server's kind and version, ``[t - d, t]``
#: (Prometheus 2) or ``(t - d, t]`` (Prometheus 3, VictoriaMetrics).
RANGE_ENDS = ("auto", "closed", "left-open")
AUTHS = ("basic", "bearer")


@dataclass
class PrometheusConnection:
    """Where and how to reach a Prometheus-compatible server.

    Attributes:
        url: base URL (``http://host:9090``; a path prefix such as ``/prometheus`` is kept).
        user, password: HTTP Basic credentials; with ``auth="bearer"`` the password is the
            bearer token and ``user`` is not used.
        auth: ``basic`` or ``bearer``.
        flavor: ``auto`` (ask the server), ``prometheus`` or ``victoriametrics``.
        time_zone: zone of the archive's days and of the CSV timestamps.
        timeout_s: HTTP read timeout.
        verify_tls: verify the server's TLS certificate.
        in_flight: query windows of a metric-day asked for at once; 0 (the default): 2 on
            Prometheus, whose engine evaluates a query on one core, 1 on VictoriaMetrics.
            Under Airflow each running metric-day asks this many at once, so a server
            serving N worker slots sees up to N times as many queries.
        compression: ``auto`` (the default: answers as they are from a server on this
            machine, gzip from any other), ``gzip`` or ``none``. Prometheus compresses an
            answer on one core, at about 15 MB/s (Go's gzip): from a server close by,
            ``none`` is several times faster and spares the server's CPU.
        range_ends: ``auto`` (from the server's kind and version), ``closed`` (``m[d]`` at
            ``t`` holds ``[t - d, t]``: Prometheus 2) or ``left-open`` (``(t - d, t]``:
            Prometheus 3, VictoriaMetrics): for a server whose version does not tell (a
            proxy hiding ``buildinfo``, an engine with version numbers of its own).
    """

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    auth: str = "basic"
    flavor: str = "auto"
    time_zone: str = DEFAULT_TIME_ZONE
    timeout_s: float = 120.0
    verify_tls: bool = True
    in_flight: int = 0
    compression: str = "auto"
    range_ends: str = "auto"

    def __repr__(self) -> str:  # its URLs without credentials
        return redacted_repr(self)

    def __post_init__(self) -> None:
        self.url = normalise_base_url(self.url, "Prometheus URL")
        zone(self.time_zone)
        if self.flavor not in FLAVORS:
            raise ConfigError(
                f"flavor must be one of {', '.join(FLAVORS)}, not {self.flavor!r} "
                '(connection extra "flavor", CLI --flavor)'
            )
        if self.auth not in AUTHS:
            raise ConfigError(
                f"auth must be one of {', '.join(AUTHS)}, not {self.auth!r} "
                '(connection extra "auth", CLI --auth)'
            )
        if self.compression not in COMPRESSIONS:
            raise ConfigError(
                f"compression must be one of {', '.join(COMPRESSIONS)}, not "
                f'{self.compression!r} (connection extra "compression", CLI --compression)'
            )
        if self.range_ends not in RANGE_ENDS:
            raise ConfigError(
                f"range_ends must be one of {', '.join(RANGE_ENDS)}, not {self.range_ends!r} "
                '(connection extra "range_ends", CLI --range-ends)'
            )
        if self.in_flight < 0:
            raise ConfigError(
                f"in_flight must be 0 (chosen by the server) or more, not {self.in_flight} "
                '(connection extra "in_flight", CLI --in-flight)'
            )
        if self.auth == "bearer" and not self.password:
            raise ConfigError(
                "auth=bearer needs the token in the connection's password "
                "(CLI: environment DXT_PROMETHEUS_PASSWORD)"
            )
        if self.auth == "bearer" and any(c.isspace() or ord(c) < 32 for c in self.password or ""):
            # an HTTP header cannot carry it, and httpx's refusal would quote the token
            raise ConfigError(
                "the bearer token holds a space, tab, newline or control character: a token "
                "is one word (read from a file with its final newline?); remove it "
                "(connection password, CLI: environment DXT_PROMETHEUS_PASSWORD)"
            )

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)


def _build(f: ConnectionFields) -> PrometheusConnection:
    f.check_choice("flavor", FLAVORS)
    f.check_choice("auth", AUTHS)
    f.check_choice("compression", COMPRESSIONS)
    f.check_choice("range_ends", RANGE_ENDS)
    extras = (
        *("auth", "flavor", "time_zone", "timeout", "verify_tls", "in_flight", "compression"),
        "range_ends",
    )
    return PrometheusConnection(**f.as_kwargs(*extras))


def probe(conn: PrometheusConnection) -> str:
    """Which server answers, its version, and how many metric names it knows."""
    from dxt_core.backends.prometheus.source import PrometheusSource

    def ask(source: PrometheusSource) -> str:
        server = source.server()
        return f"{server.describe()} at {conn.safe_url}: {len(source.metric_names())} metric names"

    return probe_once(PrometheusSource, conn, ask)


#: The connection of a Prometheus or VictoriaMetrics server.
SPEC: ConnectionSpec[PrometheusConnection] = ConnectionSpec(
    backend="prometheus",
    hook_name="Prometheus / VictoriaMetrics",
    build=_build,
    probe=probe,
    default_port=9090,
    other_schema="ignore",
    labels={"host": "Host or URL (Prometheus or VictoriaMetrics)", "password": "Password/token"},
    extras=(
        Extra(
            "flavor",
            str,
            "auto",
            "Server",
            "auto (ask the server), prometheus or victoriametrics",
        ),
        Extra("auth", str, "basic", "Auth", "basic (login/password) or bearer (password = token)"),
        time_zone_extra(DEFAULT_TIME_ZONE),
        timeout_extra(120.0),
        verify_tls_extra(),
        Extra(
            "in_flight",
            int,
            0,
            "Windows in flight",
            "query windows asked for at once per metric-day, ahead of the one being written "
            "(0: 2 on Prometheus, 1 on VictoriaMetrics); they share the samples in hand "
            "(dxt extract's --target-points)",
        ),
        compression_extra(),
        Extra(
            "range_ends",
            str,
            "auto",
            "Range ends",
            "auto (from the server's version), closed (m[d] at t holds [t-d, t]: Prometheus "
            "2) or left-open ((t-d, t]: Prometheus 3, VictoriaMetrics); set it when the "
            "version does not tell (a proxy hiding buildinfo, Thanos, Mimir)",
        ),
    ),
)
