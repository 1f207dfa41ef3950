"""How Prometheus and VictoriaMetrics refuse a query as too large, as measured on the real
servers: the rules (:data:`REFUSAL_RULES`, each citing the upstream file whose wording it
matches), the test of an error answer, and the error when splitting ends."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dxt_core.errors import WindowTooLarge


@dataclass(frozen=True, slots=True)
class RefusalRule:
    """One way a server refuses a query as too large, as measured on the real servers."""

    status: int
    pattern: str
    upstream: str
    #: the server's setting that sets the limit (named in the error when splitting ends)
    limit: str


#: How the servers say "too large": split the window (then the series), never retry as is.
#: Status and text measured on Prometheus 2.42 and VictoriaMetrics 1.79 (Debian), started
#: with small limits in tests/integration/prometheus/test_limits.py.
REFUSAL_RULES: tuple[RefusalRule, ...] = (
    RefusalRule(
        422,
        r"query processing would load too many samples into memory",
        "prometheus/prometheus promql/engine.go ErrTooManySamples (--query.max-samples); "
        "web/api/v1/api.go answers errorExec as 422",
        "Prometheus --query.max-samples",
    ),
    RefusalRule(
        503,
        r"query timed out",
        "prometheus/prometheus promql/engine.go ErrQueryTimeout (--query.timeout); "
        "web/api/v1/api.go answers errorTimeout as 503",
        "Prometheus --query.timeout",
    ),
    RefusalRule(
        0,
        r"cannot select more than -search\.maxSamplesPerQuery",
        "VictoriaMetrics lib/storage/search.go (-search.maxSamplesPerQuery): export answers "
        "400 text, query 422 JSON",
        "VictoriaMetrics -search.maxSamplesPerQuery",
    ),
    RefusalRule(
        0,
        r"the number of matching timeseries exceeds \d+",
        "VictoriaMetrics lib/storage/index_db.go (-search.maxUniqueTimeseries, "
        "-search.maxExportSeries; -search.maxSeries for /api/v1/series)",
        "VictoriaMetrics -search.maxUniqueTimeseries / -search.maxExportSeries / -search.maxSeries",
    ),
    RefusalRule(
        0,
        r"timeout exceeded|-search\.maxQueryDuration|-search\.maxExportDuration",
        "VictoriaMetrics app/vmselect/searchutils (deadline of -search.maxQueryDuration, "
        "-search.maxExportDuration); app/vmselect/netstorage/netstorage.go: 'timeout "
        "exceeded before starting the query processing', 'while fetching data block'",
        "VictoriaMetrics -search.maxQueryDuration / -search.maxExportDuration",
    ),
)
_RULES = [(r.status, re.compile(r.pattern)) for r in REFUSAL_RULES]


def refused_limit(message: str) -> str:
    """The server setting a refusal's text names (:data:`REFUSAL_RULES`), for the error
    that ends the splitting; a generic hint when the text does not tell."""
    for rule, (_, pattern) in zip(REFUSAL_RULES, _RULES, strict=True):
        if pattern.search(message):
            return rule.limit
    return "the server's query limits"


def refused_at_the_end(
    what: str,
    exc: WindowTooLarge,
    tried: str = "even for one series and a window at the floor",
    also: str = " or lower the window floor (--min-window-s)",
) -> WindowTooLarge:
    """The error of a query refused at every size (``tried``: how small it was asked):
    which limit, and what to change."""
    text = str(exc).split(" | HTTP ", 1)[0]
    return WindowTooLarge(
        f"{what}: refused {tried} ({text}); raise {refused_limit(text)} on the server{also}",
        url=exc.url,
        status=exc.status,
    )


def names_a_limit(text: str) -> bool:
    """Whether ``text`` is one of :data:`REFUSAL_RULES`' refusals, whatever its status."""
    return any(p.search(text) for _, p in _RULES)


def too_large(status: int, body: bytes) -> bool:
    """Whether an error answer is a "too large" refusal (see :data:`REFUSAL_RULES`)."""
    if status < 400:
        return False
    # whole: VictoriaMetrics quotes the query's filters before the reason (``cannot fetch
    # time series for "filters=[...]": ... exceeds N``); 1.79 shortens a long value
    # (measured: a 546-byte answer for a 12 KB selector), other versions may not
    head = body if len(body) <= 1 << 20 else body[:8000] + body[-8000:]
    text = head.decode("utf-8", "replace")
    return any((s == 0 or s == status) and p.search(text) for s, p in _RULES)
