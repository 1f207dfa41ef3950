"""Fault injection of the Examon simulator: what can go wrong, switched on at runtime.

The faults live in :class:`Faults`, a mutable dataclass that ``POST /_sim/faults`` updates
all-or-nothing (see :meth:`ExamonSimulator.update_faults`); the query engine and the HTTP
handler read it on every request. Each refusal is worded as the real server words it, with
the upstream file named next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from dxt_core.errors import ConfigError

#: What KairosDB 1.2.2 answers (HTTP 500, ``{"errors": [text]}``) when a query is too big,
#: by ``Faults.refusal``:
REFUSALS: Final = {
    # datastore/cassandra/QueryMonitor.java builds "Query exceeded limit of N data points";
    # CassandraDatastore.cqlQueryWithRowKeys and KairosDatastore...execute each wrap it in a
    # DatastoreException, whose message is the cause's toString().
    "query_limit": "org.kairosdb.core.exception.DatastoreException: "
    "org.kairosdb.core.exception.DatastoreException: Query exceeded limit of {limit} data points",
    # util/MemoryMonitorException.getMessage(), caught in MetricsResource.runQuery.
    "memory": "Insufficient memory to perform request",
    # MetricsResource.runQuery catches OutOfMemoryError and answers its message (the JVM's).
    "heap": "Java heap space",
}

#: nginx's error page for a ``limit_req`` refusal (src/http/ngx_http_special_response.c;
#: the status is ``limit_req_status``, 503 unless set, 429 a common choice).
NGINX_PAGES: Final = {
    429: "429 Too Many Requests",
    503: "503 Service Temporarily Unavailable",
}

#: Ways to spoil the first point of every datapoints answer (``Faults.corrupt_values``).
CORRUPTIONS: Final = {"trailing_comma": b"", "bad_number": b"1-2e"}


def nginx_page(status: int) -> bytes:
    """The body nginx sends for ``status`` (CRLF line ends, ``server_tokens on``)."""
    title = NGINX_PAGES[status]
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
        "</body>\r\n</html>\r\n"
    ).encode()


@dataclass
class Faults:
    """Faults the simulator injects; mutable while it runs (see ``POST /_sim/faults``).

    Attributes:
        delay_s: sleep this long before answering every request (``/_sim/*`` excepted).
        fail_next: answer the next N requests (``/_sim/*`` excepted) with ``fail_status``
            and ``{"errors": [fail_message]}``; decremented on each failure.
        fail_status: HTTP status used by ``fail_next`` and ``fail_metrics``.
        fail_message: error text used by ``fail_next`` and ``fail_metrics``.
        max_points: a datapoints query whose answer would exceed N points is refused with
            HTTP 500 and the ``refusal`` text, like a KairosDB with ``query_limit`` set or
            short of memory.
        refusal: which KairosDB text the ``max_points`` refusal carries: ``query_limit``,
            ``memory`` or ``heap`` (see :data:`REFUSALS`).
        slow_points: a datapoints query answering more than N points sleeps
            ``slow_delay_s`` first, to provoke client read timeouts.
        slow_delay_s: see ``slow_points``.
        fail_metrics: datapoints queries (values or tags) naming one of these metrics
            always fail with ``fail_status``, to simulate a metric the server cannot read.
        rate_limit_next: answer the next N requests as a reverse proxy's rate limit does
            (nginx ``limit_req``): ``rate_limit_status`` with nginx's HTML page.
        rate_limit_status: 429 or 503 (nginx's default ``limit_req_status``).
        retry_after_s: send ``Retry-After`` with the rate limit (nginx sends none unless
            configured with ``add_header Retry-After ... always``).
        grafana_timeout_s: Grafana's ``[dataproxy] timeout`` (``conf/defaults.ini``: 30 s).
            A datapoints query through the proxy path that takes longer is answered, after
            that time, 504 with an empty body (``pkg/util/proxyutil/reverse_proxy.go``).
        grafana_proxy_timeout: Grafana 8 and later end a slow proxied query with a 504 after
            ``grafana_timeout_s``; Grafana 7 (false here; the version Examon's images ship)
            has no response timeout on its data proxy: ``[dataproxy] timeout`` is only the
            dial timeout of its transport (grafana/grafana v7.x ``pkg/models/
            datasource_cache.go`` ``GetHttpTransport``: ``net.Dialer{Timeout: ...}``, no
            ``ResponseHeaderTimeout``), so the client hears nothing until KairosDB answers.
        slow_tags_span_s: a ``query/tags`` whose time range is longer than this (a metric's
            whole history: KairosDB reads every row key of it) sleeps ``slow_delay_s`` first.
        corrupt_values: spoil the first point of each datapoints answer with an invalid
            JSON number: ``trailing_comma`` (``[ts,]``) or ``bad_number`` (``[ts,1-2e]``).
        stray_points: each datapoints answer also holds, first in its first series, a
            point one hour before the queried window, as a misbehaving proxy might return.
    """

    delay_s: float = 0.0
    fail_next: int = 0
    fail_status: int = 503
    fail_message: str = "simulated outage"
    max_points: int | None = None
    refusal: str = "query_limit"
    slow_points: int | None = None
    slow_delay_s: float = 0.0
    fail_metrics: list[str] = field(default_factory=list)
    rate_limit_next: int = 0
    rate_limit_status: int = 429
    retry_after_s: float | None = None
    grafana_timeout_s: float = 30.0
    grafana_proxy_timeout: bool = True
    slow_tags_span_s: float | None = None
    corrupt_values: str | None = None
    stray_points: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field, so that a bad ``/_sim/faults`` update is refused whole.

        Raises:
            ConfigError: a field has the wrong type or an out-of-range value.
        """
        for name in ("delay_s", "slow_delay_s", "grafana_timeout_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ConfigError(f"faults.{name} must be a finite number >= 0, got {value!r}")
        for name in ("fail_next", "fail_status", "rate_limit_next"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"faults.{name} must be an integer >= 0, got {value!r}")
        if not 100 <= self.fail_status <= 599:
            raise ConfigError(f"faults.fail_status must be an HTTP status, got {self.fail_status}")
        if not isinstance(self.fail_message, str):
            raise ConfigError(f"faults.fail_message must be a string, got {self.fail_message!r}")
        for name in ("max_points", "slow_points"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(f"faults.{name} must be null or an integer >= 0, got {value!r}")
        if self.refusal not in REFUSALS:
            raise ConfigError(
                f"faults.refusal must be one of {', '.join(REFUSALS)}, got {self.refusal!r}"
            )
        if not isinstance(self.fail_metrics, list) or not all(
            isinstance(m, str) for m in self.fail_metrics
        ):
            raise ConfigError(
                f"faults.fail_metrics must be a list of metric names, got {self.fail_metrics!r}"
            )
        if self.rate_limit_status not in NGINX_PAGES:
            raise ConfigError(
                f"faults.rate_limit_status must be 429 or 503, got {self.rate_limit_status!r}"
            )
        value = self.retry_after_s
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise ConfigError(f"faults.retry_after_s must be null or a number >= 0, got {value!r}")
        if self.corrupt_values is not None and self.corrupt_values not in CORRUPTIONS:
            raise ConfigError(
                f"faults.corrupt_values must be null or one of {', '.join(CORRUPTIONS)}, "
                f"got {self.corrupt_values!r}"
            )
        if not isinstance(self.grafana_proxy_timeout, bool):
            raise ConfigError(
                f"faults.grafana_proxy_timeout must be true or false, got "
                f"{self.grafana_proxy_timeout!r}"
            )
        value = self.slow_tags_span_s
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise ConfigError(
                f"faults.slow_tags_span_s must be null or a number >= 0, got {value!r}"
            )
        if not isinstance(self.stray_points, bool):
            raise ConfigError(
                f"faults.stray_points must be true or false, got {self.stray_points!r}"
            )


class _MetricFault(Exception):
    """A queried metric is listed in ``faults.fail_metrics``."""


class _QueryLimit(Exception):
    """The answer would exceed ``faults.max_points``: answered with HTTP 500."""
