"""A small stand-in for Prometheus or VictoriaMetrics, for the faults the real servers cannot
be made to show on demand: a 503 from a proxy or a starting server, an answer slower than the
client's timeout, an export cut in the middle of a line or ended by an error line, a
bearer-token check.

Everything else is tested against the real servers (tests/integration/prometheus). What this
answers follows them:

* ``GET /api/v1/query`` with ``<metric>[<d>ms]`` (a matrix of raw samples, Prometheus 2's
  ``[t - d, t]``; prometheus/prometheus web/api/v1/api.go ``query``, promql/engine.go) or
  ``count_over_time(<metric>[<d>ms])`` (a vector, one count per series), values as text;
* ``GET /api/v1/series``, ``/api/v1/label/__name__/values``, ``/api/v1/status/buildinfo``
  (``{"status": "success", "data": ...}``, web/api/v1/api.go);
* VictoriaMetrics (``--flavor victoriametrics``): ``GET /health`` answers ``OK`` and
  ``GET /api/v1/export`` one JSON line per series with both bounds included
  (VictoriaMetrics app/vmselect/prometheus/export.qtpl, prometheus.go ``ExportHandler``);
* a 503 is Prometheus's own while it is not ready, ``Service Unavailable`` in text
  (prometheus/prometheus web/web.go ``testReady``), and what a proxy sends.

Faults are set with ``POST /_sim/faults`` (JSON: ``fail_next``; ``slow_next`` sample or count
requests wait ``delay_s``;
``cut_next``; ``error_next``: an export's error written after its first line, as
VictoriaMetrics 1.79 does once its answer has begun; ``count_extra`` adds to every count, as
samples still arriving would) and counted at ``GET /_sim/stats``.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from dxt_core.simulate.serving import Served, SimHandler, add_listen_arguments, count

STEP_MS = 15_000
_RANGE = re.compile(r"^(count_over_time\()?([a-zA-Z_:][a-zA-Z0-9_:]*)\[(\d+)ms\]\)?$")


class PromSimApp:
    """Series ``sim_metric{instance="node-<i>"}`` every 15 s at every time: value
    ``i + (t / 15 s) mod 100``."""

    verbose = False

    def __init__(self, series: int, flavor: str, bearer_token: str | None) -> None:
        self.series = series
        self.flavor = flavor
        self.bearer_token = bearer_token
        self.lock = threading.Lock()
        self.faults: dict[str, Any] = {
            "fail_next": 0,
            "slow_next": 0,
            "delay_s": 0.0,
            "cut_next": 0,
            "error_next": 0,
            "count_extra": 0,
        }
        self.stats: dict[str, int] = dict.fromkeys(
            ("requests", "failed", "slow", "cut", "error"), 0
        )

    def labels(self, i: int) -> dict[str, str]:
        return {"__name__": "sim_metric", "instance": f"node-{i}", "job": "sim"}

    def samples(self, first_ms: int, last_ms: int) -> list[int]:
        """Sample times in ``[first_ms, last_ms]``."""
        t = -(-first_ms // STEP_MS) * STEP_MS
        return list(range(t, last_ms + 1, STEP_MS))

    def take(self, fault: str) -> bool:
        with self.lock:
            if self.faults[fault] > 0:
                self.faults[fault] -= 1
                return True
            return False


def _ms(text: str) -> int:
    """API time (decimal seconds) as ms, as Prometheus parses it (web/api/v1/api.go
    ``parseTime``: a float of seconds)."""
    return round(float(text) * 1000)


class Handler(SimHandler):
    app: PromSimApp

    def _error(self, status: int, kind: str, text: str) -> None:
        self.send_json(status, {"status": "error", "errorType": kind, "error": text})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/_sim/faults":
            changes = orjson.loads(self.read_body() or b"{}")
            with self.app.lock:
                self.app.faults.update(changes)
                doc = dict(self.app.faults)
            self.send_json(200, doc)
            return
        sent = self.read_body()  # read before any answer: the connection is kept alive
        if url.path.startswith("/api/v1/label/") and self.app.flavor != "victoriametrics":
            # Prometheus registers label values for GET only (web/api/v1/api.go ``Register``;
            # measured on 2.42: 405, text)
            self.send(405, b"Method Not Allowed\n", "text/plain; charset=utf-8")
            return
        # the API's parameters as a form: Go's ``Request.ParseForm`` puts the body's values
        # before the URL's, and ``FormValue`` takes the first (both servers read ``r.Form``)
        body, query = parse_qs(sent.decode()), parse_qs(url.query)
        self._answer(url.path, {k: (body.get(k, []) + query.get(k, []))[0] for k in body | query})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/_sim/stats":
            self.send_json(200, self.app.stats)
            return
        self._answer(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})

    def _answer(self, path: str, q: dict[str, str]) -> None:
        app = self.app
        with app.lock:
            app.stats["requests"] += 1
        token = app.bearer_token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            # Prometheus behind an authenticating proxy: 401, plain text
            self.send(401, b"Unauthorized\n", "text/plain; charset=utf-8")
            return
        if app.take("fail_next"):
            with app.lock:
                app.stats["failed"] += 1
            self.send(503, b"Service Unavailable\n", "text/plain; charset=utf-8")
            return
        if path in ("/api/v1/query", "/api/v1/export") and app.take("slow_next"):
            with app.lock:
                app.stats["slow"] += 1
            time.sleep(float(app.faults["delay_s"]))
        if path == "/health" and app.flavor == "victoriametrics":
            self.send(200, b"OK", "text/plain; charset=utf-8")
        elif path == "/api/v1/status/buildinfo":
            info = {} if app.flavor == "victoriametrics" else {"version": "2.42.0"}
            self.send_json(200, {"status": "success", "data": info})
        elif path == "/api/v1/label/__name__/values":
            self.send_json(200, {"status": "success", "data": ["sim_metric"]})
        elif path == "/api/v1/series":
            found = [app.labels(i) for i in range(app.series)]
            self.send_json(200, {"status": "success", "data": found})
        elif path == "/api/v1/query":
            self._query(q)
        elif path == "/api/v1/export" and app.flavor == "victoriametrics":
            self._export(q)
        else:
            self.send(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def _query(self, q: dict[str, str]) -> None:
        app = self.app
        m = _RANGE.match(q.get("query", "").replace(" ", ""))
        if not m or m.group(2) != "sim_metric":
            self._error(400, "bad_data", f"the simulator answers sim_metric only: {q!r}")
            return
        t = _ms(q.get("time", "0"))
        times = app.samples(t - int(m.group(3)), t)  # both ends: Prometheus 2
        if m.group(1):
            result: list[dict[str, Any]] = [
                {
                    "metric": {k: v for k, v in app.labels(i).items() if k != "__name__"},
                    "value": [t / 1000, str(len(times) + int(app.faults["count_extra"]))],
                }
                for i in range(app.series)
                if times
            ]
            self.send_json(
                200, {"status": "success", "data": {"resultType": "vector", "result": result}}
            )
            return
        result = [
            {
                "metric": app.labels(i),
                "values": [[x / 1000, str(i + (x // STEP_MS) % 100)] for x in times],
            }
            for i in range(app.series)
            if times
        ]
        self.send_json(
            200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
        )

    def _export(self, q: dict[str, str]) -> None:
        app = self.app
        times = app.samples(_ms(q.get("start", "0")), _ms(q.get("end", "0")))
        lines = [
            orjson.dumps(
                {
                    "metric": app.labels(i),
                    "values": [i + (x // STEP_MS) % 100 for x in times],
                    "timestamps": times,
                }
            )
            + b"\n"
            for i in range(app.series)
            if times
        ]
        body = b"".join(lines)
        if app.take("cut_next") and body:
            with app.lock:
                app.stats["cut"] += 1
            # the connection closes in the middle of a line (a proxy's cut, a crash): no
            # Content-Length, so the client sees a clean end of a shorter body
            self.send_response(200)
            self.send_header("Content-Type", "application/stream+json; charset=utf-8")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2 + 7])
            self.close_connection = True
            return
        if app.take("error_next") and body:
            with app.lock:
                app.stats["error"] += 1
            # VictoriaMetrics 1.79 once its 200 and some lines are out: lib/httpserver
            # Errorf writes "remoteAddr: ...; requestURI: ...; <error>" with http.Error,
            # which only adds the text and a newline to the body; here the export's
            # deadline, -search.maxExportDuration (app/vmselect/netstorage)
            error = (
                'remoteAddr: "127.0.0.1:40000"; requestURI: /api/v1/export; error when '
                "exporting data: timeout exceeded during query execution: 30.000 seconds; "
                "the timeout can be adjusted with `-search.maxExportDuration` command-line "
                "flag\n"
            )
            self.send(200, lines[0] + error.encode(), "application/stream+json; charset=utf-8")
            return
        self.send(200, body, "application/stream+json; charset=utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="dxt simulate prometheus",
        description="A small Prometheus / VictoriaMetrics stand-in for fault tests.",
    )
    add_listen_arguments(p, 9090)
    p.add_argument("--series", type=count, default=3, help="series of sim_metric (default 3)")
    p.add_argument("--flavor", choices=("prometheus", "victoriametrics"), default="prometheus")
    p.add_argument("--bearer-token", help="answer 401 unless this bearer token comes")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    app = PromSimApp(args.series, args.flavor, args.bearer_token)
    app.verbose = args.verbose
    try:
        served = Served("prometheus", app, Handler, args.host, args.port)
    except OSError as exc:  # the port taken (a real Prometheus on 9090), an unknown host
        print(f"dxt-simulate-prometheus: {exc}", file=sys.stderr)
        return 2
    return served.run_until_signal()


if __name__ == "__main__":
    raise SystemExit(main())
