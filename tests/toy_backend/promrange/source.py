"""The query: one metric over one window, ``GET /api/v1/query_range``.

Prometheus evaluates the expression at ``start, start + step, ...`` up to ``end`` inclusive
(web/api/v1/api.go, ``queryRange``) and answers
``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {labels},
"values": [[unix_seconds, "value"], ...]}]}}``; values are strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dxt_core.errors import SourceError
from dxt_core.http import HttpClient, RequestStats
from dxt_core.windows import Window
from tests.toy_backend.promrange.connection import PromConnection


class PromRangeSource:
    def __init__(self, conn: PromConnection) -> None:
        self.conn = conn
        self.http = HttpClient(conn.url, user=conn.user, password=conn.password)

    def __enter__(self) -> PromRangeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def records(self, metric: str, window: Window, stats: RequestStats) -> Iterator[dict[str, Any]]:
        """One record per sample of ``[window.start, window.end)``: time, value, labels."""
        step = self.conn.step_s
        params = {
            "query": metric,
            "start": f"{window.start_ms / 1000:.3f}",
            # the range is inclusive: stop one step before the next day's first point
            "end": f"{(window.end_ms - step * 1000) / 1000:.3f}",
            "step": str(step),
        }
        doc = self.http.get_json("/api/v1/query_range", params=params, stats=stats)
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise SourceError(f"query_range of {metric} failed: {doc!r:.200}", url=self.conn.url)
        for series in doc["data"]["result"]:
            labels = series["metric"]
            for ts, value in series["values"]:
                ts_ms = round(float(ts) * 1000)
                if window.start_ms <= ts_ms < window.end_ms:
                    yield {"timestamp_ms": ts_ms, "value": value, **labels}
