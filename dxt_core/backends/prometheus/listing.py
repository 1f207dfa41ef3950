"""The series a selector matches in a window (``/api/v1/series``), split by label values when
the server refuses to list them all at once.

VictoriaMetrics refuses a listing of more than ``-search.maxSeries`` series (30,000 by default
in 1.79): 422 ``... cannot find metric names: error when searching tsids: the number of
matching timeseries exceeds N ...`` (measured on 1.79.5; app/vmselect/prometheus/prometheus.go
``SeriesHandler`` asks the index for at most ``-search.maxSeries`` series, and
lib/storage/index_db.go refuses more). Halving the window does not help (its index is per
day), so the selector is narrowed instead: by the label with the most values
(``/api/v1/labels`` and ``/api/v1/label/<name>/values`` with the same ``match[]``, which that
limit does not apply to), into the series with one half of its values (``=~``) and all the
others (``!~``: the other half, the series without the label, and any value the answer did
not list), recursively. The parts are disjoint and their union is every series, whatever the
value lists hold; what each part already rules in or out is kept, so a server that answers
values outside the ``match[]`` (VictoriaMetrics 1.79 sometimes does) cannot make the
splitting go round in circles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dxt_core import masking
from dxt_core.backends.prometheus.policy import refused_at_the_end
from dxt_core.backends.prometheus.promql import shown, with_matcher
from dxt_core.errors import SourceError, WindowTooLarge
from dxt_core.http import RequestStats

#: ``get(path, params, context)``: the ``data`` of the API's answer (too large: WindowTooLarge)
ApiGet = Callable[[str, Sequence[tuple[str, str]], str], Any]

log = masking.logger("dxt_core.prometheus")

_CLASSIC_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def list_series(
    get: ApiGet,
    selector: str,
    span: Sequence[tuple[str, str]],
    stats: RequestStats | None = None,
    url: str = "",
    victoriametrics: bool = False,
) -> list[dict[str, str]]:
    """Label sets of the series ``selector`` matches over ``span`` (the ``start`` and ``end``
    parameters), split by label values while the server refuses (``stats.splits`` counts
    the splits); ``victoriametrics``: the split's label names as MetricsQL takes them."""

    def narrowed(sel: str, label: str, values: list[str], negate: bool = False) -> str:
        return with_matcher(sel, label, values, negate, victoriametrics)

    return _listed(get, selector, list(span), stats, {}, url, narrowed)


@dataclass(frozen=True, slots=True)
class _Known:
    """What a part's selector already says of a label: its values among ``within`` (None:
    any), and none of ``without``."""

    within: frozenset[str] | None = None
    without: frozenset[str] = frozenset()

    def left(self, values: Iterable[str]) -> list[str]:
        """The values still to tell apart, sorted."""
        return sorted(
            v for v in set(values) - self.without if self.within is None or v in self.within
        )


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
    known: dict[str, _Known],
    url: str,
    narrowed: Callable[..., str] = with_matcher,
) -> list[dict[str, str]]:
    try:
        return _labelsets(
            get("api/v1/series", [("match[]", selector), *span], f"series of {shown(selector)}"),
            url,
        )
    except WindowTooLarge as exc:
        refused = exc
    label, values = _split_label(get, selector, span, known, url)
    if label is None:
        raise refused_at_the_end(
            f"series list of {shown(selector)}",
            refused,
            tried="even narrowed to one value of every label",
            also="",
        ) from refused
    if stats is not None:
        stats.splits += 1
    log.info(
        "series list of %s: refused; splitting by %s (%d values)",
        shown(selector),
        label,
        len(values),
    )
    was = known.get(label, _Known())
    chosen = values[: max(1, len(values) // 2)]
    inside = {**known, label: _Known(frozenset(chosen), was.without)}
    rest = {**known, label: _Known(was.within, was.without | set(chosen))}
    return [
        *_listed(get, narrowed(selector, label, chosen), span, stats, inside, url, narrowed),
        *_listed(
            get, narrowed(selector, label, chosen, negate=True), span, stats, rest, url, narrowed
        ),
    ]


def _split_label(
    get: ApiGet,
    selector: str,
    span: list[tuple[str, str]],
    known: dict[str, _Known],
    url: str,
) -> tuple[str | None, list[str]]:
    """The label with the most values still to tell apart among the selector's series, and
    those values, sorted; ``None`` when no label splits the series in two."""
    match = [("match[]", selector), *span]
    names = _strings(
        get("api/v1/labels", match, f"label names of {shown(selector)}"), "labels", url
    )
    best: tuple[str | None, list[str]] = (None, [])
    for name in sorted(set(names)):
        if not _CLASSIC_LABEL.match(name):
            continue  # its values' path would need Prometheus 3's escaping; split by others
        if name == "__name__" and not selector.lstrip().startswith("{"):
            continue  # a metric name's selector: one name, and PromQL refuses a second
        was = known.get(name, _Known())
        if was.within is not None and len(was.within) < 2:
            continue  # one value: nothing left to tell apart (no need to ask)
        path = f"api/v1/label/{name}/values"
        answer = get(path, match, f"values of {name} in {shown(selector)}")
        values = was.left(_strings(answer, path, url))
        # two parts that may both hold series: within a set (or of names, which every
        # series has), two values at least; else one (the rest: the series without it)
        need = 2 if was.within is not None or name == "__name__" else 1
        if len(values) >= need and len(values) > len(best[1]):
            best = (name, values)
    return best
