"""Which manifests say their day was archived before it ended: the mark, or (written before
the mark existed) a ``written_at`` before the day's window end."""

from __future__ import annotations

import pytest

from dxt_core.manifests import not_over_detail, not_over_mark

END = "2024-05-02T00:00:00+02:00"


@pytest.mark.parametrize(
    ("doc", "ends"),
    [
        ({"day_not_over": {"ends": END, "zone": "Europe/Rome"}}, END),
        # older manifests: Examon, Prometheus, Kwollect (query_window), collectd-es (window)
        ({"written_at": "2024-05-01T12:00:00+02:00", "query_window": {"end": END}}, END),
        ({"written_at": "2024-05-01T09:00:00+00:00", "window": {"end": END}}, END),
        (
            {
                "status": "empty",
                "written_at": "2024-05-01T23:59:59+02:00",
                "query_window": {"end": END},
            },
            END,
        ),
        # written once the day was over, at its end or later: complete
        ({"written_at": END, "query_window": {"end": END}}, None),
        ({"written_at": "2024-05-03T00:00:00+00:00", "window": {"end": END}}, None),
        # an index entry saying it was over, times missing or without an offset
        ({"day_not_over": None, "written_at": "2024-05-01T00:00:00+00:00"}, None),
        ({"query_window": {"end": END}}, None),
        ({"written_at": "2024-05-01T12:00:00", "query_window": {"end": END}}, None),
    ],
)
def test_not_over_mark(doc, ends):
    mark = not_over_mark(doc)
    assert (mark or {}).get("ends") == ends
    assert not_over_detail(doc).startswith("not over:") is (ends is not None)
