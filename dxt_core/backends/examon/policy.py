"""How a day is cut into KairosDB queries and how a refusal is read.

KairosDB has no paging and refuses or times out on over-large queries, so a day is fetched in
windows (:class:`WindowPolicy`) sized to a point budget; the refusals that mean "too large"
(split the window), "rate limited" (wait, same window) or "rejected" (fail at once) are one
table, :data:`REFUSAL_RULES`, each rule citing the upstream file whose wording it matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dxt_core.windows import check_window_sizes


@dataclass(frozen=True, slots=True)
class RefusalRule:
    """How one kind of refusal is read: what the server sends, what it means, what we do.

    Attributes:
        status: HTTP status the rule applies to.
        pattern: a regular expression the error text must match (``None``: any text;
            ``""``: an empty body).
        meaning: ``too_large`` (split the window), ``rate_limited`` (wait and retry the same
            window), or ``rejected`` (fail at once).
        proxy_only: the rule applies only when going through Grafana's data-source proxy.
        upstream: the source of the rule (repository and file).
    """

    status: int
    pattern: str | None
    meaning: str
    action: str
    upstream: str
    proxy_only: bool = False


#: The one table of how KairosDB, Grafana's proxy and a reverse proxy refuse a query, and
#: what we do. Only wording the real servers use is matched (docs/compatibility.md shows
#: it). The HTTP client (dxt_core.http) retries 429 and 5xx, honouring ``Retry-After``, and
#: fails other 4xx at once; the rules marked ``too_large`` are checked first and split the
#: window instead; 429s that outlast the retries become :class:`RateLimited`.
REFUSAL_RULES: tuple[RefusalRule, ...] = (
    RefusalRule(
        500,
        r"Query exceeded limit of \d+ data points",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 src/main/java/org/kairosdb/datastore/cassandra/"
        "QueryMonitor.java (kairosdb.datastore.cassandra.query_limit), wrapped twice in "
        "DatastoreException",
    ),
    RefusalRule(
        500,
        r"Insufficient memory to perform request",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 src/main/java/org/kairosdb/util/MemoryMonitorException.java, "
        "caught in core/http/rest/MetricsResource.java runQuery",
    ),
    RefusalRule(
        500,
        r"Java heap space|GC overhead limit exceeded",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 core/http/rest/MetricsResource.java runQuery: catch "
        "(OutOfMemoryError e) answers the JVM's message",
    ),
    RefusalRule(
        504,
        "",
        "too_large",
        "split the window",
        "grafana/grafana pkg/util/proxyutil/reverse_proxy.go (errorHandler: 504 on a timeout, "
        "no body); conf/defaults.ini [dataproxy] timeout = 30",
        proxy_only=True,
    ),
    RefusalRule(
        429,
        None,
        "rate_limited",
        "wait Retry-After (else back off) and retry the same window; never split",
        "nginx/nginx src/http/modules/ngx_http_limit_req_module.c (limit_req_status 429), "
        "page from src/http/ngx_http_special_response.c",
    ),
    RefusalRule(
        503,
        None,
        "rate_limited",
        "wait Retry-After (else back off) and retry the same window; never split",
        "nginx/nginx src/http/modules/ngx_http_limit_req_module.c (limit_req's default status "
        "is 503, no Retry-After unless added)",
    ),
    RefusalRule(
        403,
        None,
        "rejected",
        "fail at once (permission or quota): no retry, no split",
        "RFC 9110 section 15.5.4 (403 Forbidden: the server refuses to authorize it)",
    ),
)

_TOO_LARGE_RULES = [
    (r.status, re.compile(r.pattern) if r.pattern else None, r.proxy_only, r.pattern == "")
    for r in REFUSAL_RULES
    if r.meaning == "too_large"
]


def too_large(status: int, body: bytes, *, proxy: bool = False) -> bool:
    """Whether an error answer is a "window too large" refusal (see :data:`REFUSAL_RULES`)."""
    text = body[:4000].decode("utf-8", "replace")
    for rule_status, pattern, proxy_only, empty in _TOO_LARGE_RULES:
        if status != rule_status or (proxy_only and not proxy):
            continue
        if empty and not body.strip():
            return True
        if pattern is not None and pattern.search(text):
            return True
    return False


@dataclass(slots=True)
class QueryCounts:
    """What a metric-day's queries dropped, reported with it.

    Attributes:
        dropped_outside_window: points the server sent outside the queried window.
    """

    dropped_outside_window: int = 0
    #: Windows the server could not serialise (one series, at most :data:`HOLE_MS`), each
    #: ``{"series", "start", "end", "start_ms", "end_ms", "message", "points"}``.
    holes: list[dict[str, Any]] = field(default_factory=list)


#: The smallest unreadable window a stored NaN costs: one series, at most a minute.
HOLE_MS = 60_000

# KairosDB 1.2.2 core/datapoints/DoubleDataPoint.java writeValueToJson throws
# IllegalStateException("NaN or Infinity:" + value + " data point=" + this); MetricsResource
# runQuery's catch (Exception e) answers it as HTTP 500 {"errors": [message]}.
_NOT_FINITE = re.compile(rb"NaN or Infinity:")


def unserialisable(status: int, body: bytes) -> bool:
    """Whether an error answer is KairosDB failing to serialise a stored NaN or Infinity."""
    return status == 500 and _NOT_FINITE.search(body[:4000]) is not None


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How a day is cut into queries.

    Attributes:
        initial_s: length of the first query window.
        target_points: aim for this many points per query (bounds memory per window).
        min_s: never split below this; a refusal at this size is an error. Every window
            is a whole number of ``min_s`` blocks from the day start, and the writers group
            rows by these blocks, so the files do not depend on how a day was windowed.
        max_s: never query more than this at once.
    """

    initial_s: int = 900
    target_points: int = 100_000
    min_s: int = 300
    max_s: int = 86_400 + 3600

    def __post_init__(self) -> None:
        check_window_sizes(self.initial_s, self.min_s, self.max_s, self.target_points)


def blocks(size_ms: int, block_ms: int) -> int:
    """``size_ms`` rounded down to a whole number of blocks, at least one."""
    return max(block_ms, size_ms // block_ms * block_ms)
