"""The end of a split series listing: the server's answers are faked (a listing refused at
every size, as a proxy's or a cluster's own limit could); the splitting code is the real one.
The split itself is tested on the real VictoriaMetrics (tests/integration/prometheus/
test_limits.py, ``-search.maxSeries``)."""

from __future__ import annotations

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
    assert "refuses to list its series even narrowed to one value of every label" in text
    assert "raise VictoriaMetrics" in text and "-search.maxSeries" in text
    # split once by instance (its value, then the series without it): the first part has
    # nothing left to split by (__name__ has one value), and ends it
    assert stats.splits == 1
    series = [m for p, m in asked if p == "api/v1/series"]
    assert series == ["m", 'm{instance=~"a"}']
    # a non-classic label name is not split by (its values' path needs escaping)
    assert not any("odd.name" in p for p, _ in asked)
