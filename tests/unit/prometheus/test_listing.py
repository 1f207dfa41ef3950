"""The end of a split series listing: the server's answers are faked (a listing refused at
every size, as a proxy's or a cluster's own limit could); the splitting code is the real one.
The split itself is tested on the real VictoriaMetrics (tests/integration/prometheus/
test_limits.py, ``-search.maxSeries``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from dxt_core.backends.prometheus.listing import list_series
from dxt_core.errors import WindowTooLarge
from dxt_core.http import RequestStats

REFUSAL = (
    "cannot fetch time series: cannot find metric names: error when searching tsids: "
    "the number of matching timeseries exceeds 0; either narrow down the search"
)


def test_a_listing_refused_at_every_split_names_the_limit() -> None:
    asked: list[tuple[str, str]] = []

    def get(path: str, params: Sequence[tuple[str, str]], context: str) -> Any:
        asked.append((path, dict(params)["match[]"]))
        if path == "api/v1/series":
            raise WindowTooLarge(REFUSAL, url="http://vm.test/api/v1/series", status=422)
        if path == "api/v1/labels":
            return ["__name__", "instance", "odd.name"]
        return {"api/v1/label/__name__/values": ["m"], "api/v1/label/instance/values": ["a"]}[path]

    stats = RequestStats()
    with pytest.raises(WindowTooLarge) as e:
        list_series(get, "m", [("start", "0.000"), ("end", "86399.999")], stats)
    text = str(e.value)
    assert 'series list of m{instance=~"a"}: refused even narrowed to one value of every label' in (
        text
    )
    assert "raise VictoriaMetrics" in text and "-search.maxSeries" in text
    # split once by instance (its value, then the series without it): the first part has
    # nothing left to split by (__name__ has one value), and ends it
    assert stats.splits == 1
    series = [m for p, m in asked if p == "api/v1/series"]
    assert series == ["m", 'm{instance=~"a"}']
    # a non-classic label name is not split by (its values' path needs escaping)
    assert not any("odd.name" in p for p, _ in asked)


#: A server's series: five instances and one series without the label
SERIES = [
    *({"__name__": "m", "instance": i, "job": "a" if i < "c" else "b"} for i in "abcde"),
    {"__name__": "m", "job": "b"},
]
_MATCHER = re.compile(r'(\w+)(=~|!~)"([^"]*)"')


def _matches(selector: str, series: dict[str, str]) -> bool:
    """The split matchers (``label=~"a|b"``, ``label!~"a|b"``) of ``m{...}``; the test's
    values need no quoting."""
    for label, op, alternatives in _MATCHER.findall(selector):
        hit = re.fullmatch(alternatives, series.get(label, "")) is not None
        if hit != (op == "=~"):
            return False
    return True


def test_a_split_listing_ends_and_lists_every_series_once_when_values_ignore_the_match() -> None:
    """VictoriaMetrics 1.79 sometimes answers a label's values outside the ``match[]``: the
    split must still end, and the parts (``=~`` half, ``!~`` rest) hold every series, the
    one without the label included, once."""
    asked: list[str] = []

    def get(path: str, params: Sequence[tuple[str, str]], context: str) -> Any:
        selector = dict(params)["match[]"]
        found = [s for s in SERIES if _matches(selector, s)]
        if path == "api/v1/series":
            asked.append(selector)
            if len(found) > 2:
                raise WindowTooLarge("the number of matching timeseries exceeds 2", status=422)
            return found
        if path == "api/v1/labels":
            return sorted({k for s in SERIES for k in s})  # the match ignored too
        label = path.split("/")[3]
        return sorted({s[label] for s in SERIES if label in s})  # every value, always

    stats = RequestStats()
    got = list_series(get, "m", [("start", "0.000"), ("end", "86399.999")], stats)
    assert sorted(map(sorted, map(dict.items, got))) == sorted(map(sorted, map(dict.items, SERIES)))
    assert stats.splits >= 2 and len(asked) < 20
    assert any("!~" in s for s in asked)
