"""Where and how to reach Examon: the connection and how it is read from connection fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dxt_core.config import as_bool, check_extras, url_from_host
from dxt_core.errors import ConfigError
from dxt_core.http import normalise_base_url, redact_url
from dxt_core.windows import DEFAULT_TIME_ZONE, zone

_EXAMON_EXTRAS = {
    "grafana_proxy",
    "time_zone",
    "cluster",
    "jobs_url",
    "jobs_api",
    "timeout",
    "verify_tls",
}

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

    def __post_init__(self) -> None:
        self.url = normalise_base_url(self.url, "Examon URL")
        zone(self.time_zone)
        if self.jobs_url:
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

        p = urlsplit(self.url)
        host = p.hostname or ""
        return f"{p.scheme}://{host}:5000"


def examon_connection_from_fields(
    *,
    conn_id: str,
    host: str | None,
    port: int | None = None,
    schema: str | None = None,
    login: str | None = None,
    password: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ExamonConnection:
    """Build an :class:`ExamonConnection` from generic connection fields.

    ``host`` may be a bare name or a URL (``https://grafana.example.org/sub``); ``schema`` is
    the scheme when ``host`` has none (http connections use it that way). Extras:
    ``grafana_proxy``, ``time_zone``, ``cluster``, ``jobs_url``, ``jobs_api`` (``v1`` or
    ``v2``), ``timeout``, ``verify_tls``.
    """
    extra = check_extras(conn_id, extra, _EXAMON_EXTRAS)
    if not host:
        raise ConfigError(
            f"connection {conn_id!r} has no host: set it, e.g. "
            f'AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "http", "host": '
            '"examon.example.org", "port": 8083}\''
        )
    url = url_from_host(host, port, schema if schema in ("http", "https") else "http")
    try:
        timeout = float(extra.get("timeout", 120))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"connection {conn_id!r}: extra 'timeout' must be seconds") from exc
    jobs_api = str(extra.get("jobs_api") or "v1")
    if jobs_api not in JOBS_APIS:
        raise ConfigError(
            f"connection {conn_id!r}: extra 'jobs_api' must be one of {', '.join(JOBS_APIS)}, "
            f"not {jobs_api!r}"
        )
    return ExamonConnection(
        url=url,
        user=login or None,
        password=password or None,
        grafana_proxy=as_bool(extra.get("grafana_proxy", False), "extra grafana_proxy"),
        time_zone=str(extra.get("time_zone") or "Europe/Rome"),
        cluster=str(extra["cluster"]) if extra.get("cluster") else None,
        jobs_url=str(extra["jobs_url"]) if extra.get("jobs_url") else None,
        jobs_api=jobs_api,
        timeout_s=timeout,
        verify_tls=as_bool(extra.get("verify_tls", True), "extra verify_tls"),
    )
