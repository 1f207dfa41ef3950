"""Where and how to reach Examon: the connection and how it is read from connection fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dxt_core.connection import (
    ConnectionFields,
    ConnectionSpec,
    Extra,
    probe_once,
    time_zone_extra,
    timeout_extra,
    verify_tls_extra,
)
from dxt_core.errors import ConfigError
from dxt_core.urls import (
    check_no_query,
    normalise_base_url,
    redact_url,
    redacted_repr,
    split_credentials,
)

if TYPE_CHECKING:
    from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.windows import DEFAULT_TIME_ZONE, zone

#: Handlers of the Examon server's job accounting endpoint (ExamonHPC/examon
#: ``web/examon-server/server.py``): ``v1`` is what examon-client 0.4 calls.
JOBS_APIS = ("v1", "v2")


@dataclass
class ExamonConnection:
    """Where and how to reach Examon.

    Attributes:
        url: KairosDB base URL (``http://host:8083``), or Grafana's URL with ``grafana_proxy``.
        user, password: HTTP Basic credentials (Grafana needs them; KairosDB may not).
        grafana_proxy: reach KairosDB through Grafana's ``/api/datasources/proxy/<id>``.
        time_zone: zone of the archive's days and of the CSV timestamps.
        cluster: value of the ``cluster`` tag filter.
        jobs_url: base URL of the Examon jobs service; default the same host on port 5000.
        jobs_api: which handler of the jobs service to call: ``v1`` (the default, what
            examon-client calls: the body is a JSON string holding the query) or ``v2``
            (the query object itself).
    """

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    grafana_proxy: bool = False
    time_zone: str = DEFAULT_TIME_ZONE
    cluster: str | None = None
    jobs_url: str | None = None
    jobs_api: str = "v1"
    timeout_s: float = 120.0
    verify_tls: bool = True

    def __repr__(self) -> str:  # its URLs without credentials
        return redacted_repr(self)

    def __post_init__(self) -> None:
        self.url = normalise_base_url(self.url, "Examon URL")
        zone(self.time_zone)
        if self.jobs_url:
            # a query (a token) would be dropped from the requests and quoted in the
            # commands dxt prints: refused, as the server's URL's is
            check_no_query(self.jobs_url, "the Examon jobs URL")
            self.jobs_url = normalise_base_url(self.jobs_url, "Examon jobs URL")
        if self.jobs_api not in JOBS_APIS:
            raise ConfigError(
                f"jobs_api must be one of {', '.join(JOBS_APIS)}, not {self.jobs_api!r}"
            )

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    def default_jobs_url(self) -> str:
        from urllib.parse import urlsplit

        p = urlsplit(split_credentials(self.url)[0])
        host = p.hostname or ""
        return f"{p.scheme}://{host}:5000"


def _build(f: ConnectionFields) -> ExamonConnection:
    f.check_choice("jobs_api", JOBS_APIS)
    extras = ("grafana_proxy", "time_zone", "cluster", "jobs_url", "jobs_api", "timeout")
    return ExamonConnection(**f.as_kwargs(*extras, "verify_tls"))


def probe(conn: ExamonConnection) -> str:
    """KairosDB's version, through Grafana's proxy when the connection goes that way, and
    whether the jobs service (the job-table units') answers."""
    from dxt_core.backends.examon.source import KairosDBSource

    def ask(source: KairosDBSource) -> str:
        return f"{source.version()} at {conn.safe_url}; {_jobs_answer(source, conn)}"

    return probe_once(KairosDBSource, conn, ask)


def _jobs_answer(source: KairosDBSource, conn: ExamonConnection) -> str:
    """Whether anything answers HTTP at the jobs service's address (any status will do:
    the service has no cheap request of its own)."""
    from dxt_core.errors import DxtError, QueryRejected, SourceUnavailable

    url = conn.jobs_url or conn.default_jobs_url()
    try:
        source.jobs_http().request("GET", "/")
    except QueryRejected:
        pass  # an answer (404 ...): the service is there
    except SourceUnavailable as exc:
        return (
            f"the jobs service at {redact_url(url)} does not answer ({exc.message}): the job-table "
            "units will fail; set the jobs_url extra (not needed without job tables)"
        )
    except DxtError as exc:
        return f"the jobs service at {redact_url(url)}: {exc}"
    return f"the jobs service answers at {redact_url(url)}"


#: The Examon connection: KairosDB directly, or through Grafana's data source proxy.
SPEC: ConnectionSpec[ExamonConnection] = ConnectionSpec(
    backend="examon",
    hook_name="Examon (KairosDB)",
    build=_build,
    probe=probe,
    other_schema="ignore",
    labels={"host": "Host or URL (KairosDB, or Grafana with grafana_proxy)"},
    extras=(
        Extra("grafana_proxy", bool, False, "Through Grafana", "go through Grafana's proxy"),
        time_zone_extra(DEFAULT_TIME_ZONE),
        Extra("cluster", str, None, "Cluster", "cluster tag value (default marconi100)"),
        Extra(
            "jobs_url",
            str,
            None,
            "Jobs service URL",
            "Examon jobs service URL (default: same host, port 5000)",
            check=lambda url: normalise_base_url(url, "Examon jobs URL"),
        ),
        Extra(
            "jobs_api",
            str,
            "v1",
            "Jobs service handler",
            "v1 (what examon-client calls: the query as a JSON string) or v2 (the query object)",
        ),
        timeout_extra(120.0),
        verify_tls_extra(),
    ),
)


#: The name before connection specs: ``examon_connection_from_fields(conn_id=..., host=..., ...)``.
examon_connection_from_fields = SPEC.from_fields
