"""The query: one metric over one window, ``GET /api/v1/query_range``.

Prometheus evaluates the expression at ``start, start + step, ...`` up to ``end`` inclusive
(web/api/v1/api.go, ``queryRange``) and answers
``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {labels},
"values": [[unix_seconds, "value"], ...]}]}}``; values are strings. More than 11,000 points
per series is refused with HTTP 400 ("exceeded maximum resolution"): the window is split in
two and each half asked again. A metric it does not know gives an empty result, so the
metric is first looked up in ``/api/v1/label/__name__/values``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dxt_core.errors import ConfigError, SourceError, WindowTooLarge
from dxt_core.http import HttpClient, RequestStats
from dxt_core.windows import Window
from tests.toy_backend.promrange.connection import PromConnection


def _refused_as_too_large(status: int, body: bytes) -> bool:
    return status == 400 and b"exceeded maximum resolution" in body


class PromRangeSource:
    def __init__(self, conn: PromConnection) -> None:
        self.conn = conn
        self.http = HttpClient(conn.url, user=conn.user, password=conn.password)
        self._names: set[str] | None = None

    def __enter__(self) -> PromRangeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def check_metric(self, metric: str, stats: RequestStats) -> None:
        if self._names is None:
            doc = self.http.get_json("/api/v1/label/__name__/values", stats=stats)
            self._names = set(doc.get("data") or []) if isinstance(doc, dict) else set()
        if metric not in self._names:
            raise ConfigError(
                f"metric {metric!r} is unknown to {self.conn.url} (not in "
                "/api/v1/label/__name__/values): check the metric's name"
            )

    def records(self, metric: str, window: Window, stats: RequestStats) -> Iterator[dict[str, Any]]:
        """One record per sample of ``[window.start, window.end)``: time, value, labels."""
        self.check_metric(metric, stats)
        yield from self._records(metric, window.start_ms, window.end_ms, stats)

    def _records(
        self, metric: str, start_ms: int, end_ms: int, stats: RequestStats
    ) -> Iterator[dict[str, Any]]:
        step_ms = self.conn.step_s * 1000
        params = {
            "query": metric,
            "start": f"{start_ms / 1000:.3f}",
            # the range is inclusive: stop one step before the window's end
            "end": f"{(end_ms - step_ms) / 1000:.3f}",
            "step": str(self.conn.step_s),
        }
        try:
            doc = self.http.get_json(
                "/api/v1/query_range", params=params, stats=stats, too_large=_refused_as_too_large
            )
        except WindowTooLarge:
            if end_ms - start_ms <= 2 * step_ms:
                raise
            stats.splits += 1
            mid = start_ms + (end_ms - start_ms) // 2 // step_ms * step_ms
            yield from self._records(metric, start_ms, mid, stats)
            yield from self._records(metric, mid, end_ms, stats)
            return
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise SourceError(f"query_range of {metric} failed: {doc!r:.200}", url=self.conn.url)
        for series in doc["data"]["result"]:
            labels = series["metric"]
            for ts, value in series["values"]:
                ts_ms = round(float(ts) * 1000)
                if start_ms <= ts_ms < end_ms:
                    yield {"timestamp_ms": ts_ms, "value": value, **labels}
