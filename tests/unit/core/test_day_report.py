"""A metric-day's one-line summary counts in words that agree with their numbers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from dxt_core.archive import DayKey
from dxt_core.archive_day import DayReport
from dxt_core.http import RequestStats


def _report(rows: int, **kw: Any) -> DayReport:
    """An archived metric-day's report, as the Examon backend makes one."""
    return DayReport(
        key=DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9)),
        status="archived",
        rows=rows,
        bytes=10,
        path=None,
        manifest=Path("m.json"),
        seconds=0.5,
        **kw,
    )


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        ((1, 1, 1), "1 request, 1 retry, 1 split"),
        ((3, 0, 2), "3 requests, 0 retries, 2 splits"),
    ],
)
def test_the_summary_counts_in_singular_and_plural(counts, words):
    requests, retries, splits = counts
    report = _report(1, stats=RequestStats(requests=requests, retries=retries, splits=splits))
    assert report.summary() == (
        f"examon/ipmi_pub/ambient 2020-03-09: archived, 1 row, 10 bytes, 0.50 s, {words}"
    )


def test_a_day_with_holes_replacements_or_not_over_says_so_in_its_summary_and_event():
    """The summary line and the asset event's extra said a day with holes, or one that
    replaced archived files, was plainly archived (the XCom alone had them)."""
    from dxt_core.archive_day import caveats

    extra = {
        "holes": 1,
        "replaced": [{"file": "2020-03-09.csv.gz"}],
        "day_not_over": {"ends": "2020-03-10T00:00:00+01:00", "zone": "Europe/Rome"},
    }
    report = _report(287, extra=extra)
    assert report.summary().startswith(
        "examon/ipmi_pub/ambient 2020-03-09: archived (with 1 hole, replacing 1 archived file, "
        "before the day ended), 287 rows"
    )
    assert caveats(report.as_dict()) == {
        "holes": 1,
        "replaced": 1,
        "day_not_over": extra["day_not_over"],
    }
    assert caveats({"status": "archived", "holes": 0, "replaced": []}) == {}
    # a data file no manifest named, removed by the day's commit, is not a replacement
    stray = {"file": "2020-03-09.parquet", "unnamed": True}
    assert caveats({"replaced": [stray]}) == {"strays_removed": 1}
    assert caveats({"replaced": [stray, *extra["replaced"]]}) == {
        "replaced": 1,
        "strays_removed": 1,
    }
