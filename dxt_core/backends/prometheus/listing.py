"""The series a selector matches in a window (``/api/v1/series``), split by label values when
the server refuses to list them all at once.

VictoriaMetrics refuses a listing of more than ``-search.maxSeries`` series (30,000 by default
in 1.79): 422 ``... cannot find metric names: error when searching tsids: the number of
matching timeseries exceeds N ...`` (measured on 1.79.5; app/vmselect/prometheus/prometheus.go
``SeriesHandler`` asks the index for at most ``-search.maxSeries`` series, and
lib/storage/index_db.go refuses more). Halving the window does not help (its index is per
day), so the selector is narrowed instead: by the label with the most values
(``/api/v1/labels`` and ``/api/v1/label/<name>/values`` with the same ``match[]``, which that
limit does not apply to), in two halves of its values, the series without the label going
with the second, recursively. The parts are disjoint; their union is the listing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from dxt_core.backends.prometheus.policy import refused_limit
from dxt_core.backends.prometheus.promql import shown, with_matcher
from dxt_core.errors import SourceError, WindowTooLarge
from dxt_core.http import RequestStats

#: ``get(path, params, context)``: the ``data`` of the API's answer (too large: WindowTooLarge)
ApiGet = Callable[[str, Sequence[tuple[str, str]], str], Any]

_CLASSIC_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def list_series(
    get: ApiGet,
    selector: str,
    span: Sequence[tuple[str, str]],
    stats: RequestStats | None = None,
    url: str = "",
) -> list[dict[str, str]]:
    """Label sets of the series ``selector`` matches over ``span`` (the ``start`` and ``end``
    parameters), split by label values while the server refuses (``stats.splits`` counts
    the splits)."""
    return _listed(get, selector, list(span), stats, frozenset(), url)


def _labelsets(data: Any, url: str) -> list[dict[str, str]]:
    if not isinstance(data, list):
        raise SourceError("unexpected answer to series: not a list", url=url)
    return [{str(k): str(v) for k, v in s.items()} for s in data if isinstance(s, dict)]


def _strings(data: Any, what: str, url: str) -> list[str]:
    if not isinstance(data, list):
        raise SourceError(f"unexpected answer to {what}: not a list", url=url)
    return [str(v) for v in data]


def _listed(
    get: ApiGet,
    selector: str,
    span: list[tuple[str, str]],
    stats: RequestStats | None,
    pinned: frozenset[str],
    url: str,
) -> list[dict[str, str]]:
    try:
        return _labelsets(
            get("api/v1/series", [("match[]", selector), *span], f"series of {shown(selector)}"),
            url,
        )
    except WindowTooLarge as exc:
        refused = exc
    label, candidates = _split_label(get, selector, span, pinned, url)
    if label is None:
        text = str(refused).split(" | HTTP ", 1)[0]
        raise WindowTooLarge(
            f"{shown(selector)}: the server refuses to list its series even narrowed to one "
            f"value of every label ({text}); raise {refused_limit(text)} on the server",
            url=refused.url,
            status=refused.status,
        ) from refused
    if stats is not None:
        stats.splits += 1
    half = len(candidates) // 2
    found: list[dict[str, str]] = []
    for part in (candidates[half:], candidates[:half]):
        narrowed = pinned | {label} if len(part) == 1 else pinned
        found.extend(_listed(get, with_matcher(selector, label, part), span, stats, narrowed, url))
    return found


def _split_label(
    get: ApiGet,
    selector: str,
    span: list[tuple[str, str]],
    pinned: frozenset[str],
    url: str,
) -> tuple[str | None, list[str]]:
    """The label (not yet narrowed to one value) with the most values among the selector's
    series, and what to split it by: its values sorted, after "" (the series without it;
    every series has a ``__name__``); ``None`` when no label gives two parts."""
    match = [("match[]", selector), *span]
    names = _strings(
        get("api/v1/labels", match, f"label names of {shown(selector)}"), "labels", url
    )
    best: tuple[str | None, list[str]] = (None, [])
    for name in sorted(set(names) - pinned):
        if not _CLASSIC_LABEL.match(name):
            continue  # its values' path would need Prometheus 3's escaping; split by others
        path = f"api/v1/label/{name}/values"
        answer = get(path, match, f"values of {name} in {shown(selector)}")
        values = sorted(set(_strings(answer, path, url)))
        candidates = values if name == "__name__" else ["", *values]
        if len(candidates) >= 2 and len(candidates) > len(best[1]):
            best = (name, candidates)
    return best
