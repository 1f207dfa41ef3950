"""A metric-day's one-line summary counts in words that agree with their numbers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from dxt_core.archive import DayKey
from dxt_core.archive_day import DayReport
from dxt_core.http import RequestStats


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        ((1, 1, 1), "1 request, 1 retry, 1 split"),
        ((3, 0, 2), "3 requests, 0 retries, 2 splits"),
    ],
)
def test_the_summary_counts_in_singular_and_plural(counts, words):
    requests, retries, splits = counts
    report = DayReport(
        key=DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9)),
        status="archived",
        rows=1,
        bytes=10,
        path=None,
        manifest=Path("m.json"),
        seconds=0.5,
        stats=RequestStats(requests=requests, retries=retries, splits=splits),
    )
    assert report.summary() == (
        f"examon/ipmi_pub/ambient 2020-03-09: archived, 1 row, 10 bytes, 0.50 s, {words}"
    )
