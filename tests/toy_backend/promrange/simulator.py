"""A stand-in Prometheus answering ``/api/v1/query_range`` with one series per instance."""

from __future__ import annotations

import argparse
import math
from urllib.parse import parse_qs, urlsplit

from dxt_core.simulate.serving import Served, SimHandler

INSTANCES = ("node-1:9100", "node-2:9100", "node-3:9100")


class PromApp:
    verbose = False

    def query_range(self, query: str, start: float, end: float, step: float) -> dict[str, object]:
        n = math.floor((end - start) / step) + 1  # both ends inclusive
        result = [
            {
                "metric": {"__name__": query, "instance": inst, "job": "node"},
                "values": [[start + i * step, f"{(i % 7) + k:g}"] for i in range(n)],
            }
            for k, inst in enumerate(INSTANCES)
        ]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class Handler(SimHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/api/v1/query_range":
            self.send_json(404, {"status": "error", "errorType": "not_found", "error": url.path})
            return
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
        except (KeyError, ValueError) as exc:
            self.send_json(400, {"status": "error", "errorType": "bad_data", "error": str(exc)})
            return
        self.send_json(200, self.app.query_range(q.get("query", ""), start, end, step))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dxt simulate promrange")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9090)
    args = p.parse_args(argv)
    return Served("promrange", PromApp(), Handler, args.host, args.port).run_until_signal()


if __name__ == "__main__":
    raise SystemExit(main())
