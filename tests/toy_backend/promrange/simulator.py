"""A stand-in Prometheus answering ``/api/v1/query_range`` with one series per instance, and
``/api/v1/label/__name__/values`` with its metric names.

Followed: prometheus/prometheus web/api/v1/api.go. ``queryRange`` evaluates at ``start,
start + step, ...`` up to ``end`` inclusive and refuses more than 11,000 points per series
with HTTP 400 ``{"status": "error", "errorType": "bad_data", "error": "exceeded maximum
resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}``
(``--max-points`` lowers that limit for tests); a metric it has no samples of gives an empty
``result``, not an error. ``labelValues`` answers ``{"status": "success", "data": [...]}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from urllib.parse import parse_qs, urlsplit

from dxt_core.simulate.serving import Served, SimHandler

INSTANCES = ("node-1:9100", "node-2:9100", "node-3:9100")
METRICS = ("up", "node_load1", "node_cpu", "node_memory_free")
MAX_POINTS = 11_000  # web/api/v1/api.go: "For safety, limit the number of returned points"


class PromApp:
    verbose = False

    def __init__(self, max_points: int = MAX_POINTS, data_start_s: float | None = None) -> None:
        self.max_points = max_points
        self.data_start_s = data_start_s

    def too_many_points(self, start: float, end: float, step: float) -> bool:
        return (end - start) / step > self.max_points

    def query_range(self, query: str, start: float, end: float, step: float) -> dict[str, object]:
        n = math.floor((end - start) / step) + 1  # both ends inclusive
        first = 0
        if self.data_start_s is not None and start < self.data_start_s:
            first = min(n, math.ceil((self.data_start_s - start) / step))
        result = []
        if query in METRICS and first < n:
            result = [
                {
                    "metric": {"__name__": query, "instance": inst, "job": "node"},
                    "values": [[start + i * step, f"{(i % 7) + k:g}"] for i in range(first, n)],
                }
                for k, inst in enumerate(INSTANCES)
            ]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class Handler(SimHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/v1/label/__name__/values":
            self.send_json(200, {"status": "success", "data": list(METRICS)})
            return
        if url.path != "/api/v1/query_range":
            self.send_json(404, {"status": "error", "errorType": "not_found", "error": url.path})
            return
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
        except (KeyError, ValueError) as exc:
            self.send_json(400, {"status": "error", "errorType": "bad_data", "error": str(exc)})
            return
        if self.app.too_many_points(start, end, step):
            error = (
                f"exceeded maximum resolution of {self.app.max_points:,} points per timeseries."
                " Try decreasing the query resolution (?step=XX)"
            )
            self.send_json(400, {"status": "error", "errorType": "bad_data", "error": error})
            return
        self.send_json(200, self.app.query_range(q.get("query", ""), start, end, step))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dxt simulate promrange")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9090)
    p.add_argument("--max-points", type=int, default=MAX_POINTS, help="points per series")
    p.add_argument("--data-start", help="YYYY-MM-DD: no samples before this UTC midnight")
    args = p.parse_args(argv)
    start = None
    if args.data_start:
        start = dt.datetime.fromisoformat(args.data_start).replace(tzinfo=dt.UTC).timestamp()
    app = PromApp(args.max_points, start)
    return Served("promrange", app, Handler, args.host, args.port).run_until_signal()


if __name__ == "__main__":
    raise SystemExit(main())
