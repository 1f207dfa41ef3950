"""HTTP serving: the threaded server, authentication, the ``/_sim`` admin endpoints, stats."""

from __future__ import annotations

import base64
import binascii
import hmac
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from dxt_core.backends.kwollect.simulator.faults import TOO_MUCH_DATA, Faults
from dxt_core.backends.kwollect.simulator.model import SimModel, SimSettings
from dxt_core.backends.kwollect.simulator.query import ApiError, PgError, QueryEngine
from dxt_core.simulate.serving import Served, SimHandler


class KwollectSimulator:
    """The simulated API over ``http.server`` (threaded)."""

    def __init__(self, settings: SimSettings, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self.model = SimModel(settings)
        self.query = QueryEngine(self.model)
        self.faults = Faults(settings)
        self._stats: dict[str, Any] = {}
        self.reset_stats()
        self.served = Served("kwollect", self, _Handler, host, port)

    @property
    def clusters(self) -> dict[str, dict[str, list[str]]]:
        return self.model.clusters

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.served.url

    def start(self) -> None:
        self.served.start()

    def stop(self) -> None:
        self.served.stop()

    # -- stats ---------------------------------------------------------------------------

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = {
                "requests": 0,
                "metrics_requests": {},
                "points_served": 0,
                "too_much_data": 0,
                "in_flight": 0,
                "max_in_flight": 0,
            }

    @property
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._stats, "metrics_requests": dict(self._stats["metrics_requests"])}

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] += amount

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        self.faults.configure(changes)
        return self.settings_doc()

    def settings_doc(self) -> dict[str, Any]:
        s = self.settings
        return {
            "delay_s": s.delay_s,
            "site_delay_s": s.site_delay_s,
            "max_points": s.max_points,
            "timeout_delay_s": s.timeout_delay_s,
            "stray_offset_s": s.stray_offset_s,
            "expired_before_s": s.expired_before_s,
            "slow_requests": s.slow_requests,
            "slow_delay_s": s.slow_delay_s,
            "nodes_per_cluster": s.nodes_per_cluster,
            "zero_bmc_node": s.zero_bmc_node,
            "sites": self.clusters,
        }


class _Handler(SimHandler):
    # the Grid'5000 API closes each connection after its answer
    protocol_version = "HTTP/1.0"

    @property
    def sim(self) -> KwollectSimulator:
        app: KwollectSimulator = self.app
        return app

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _authorized(self) -> bool:
        s = self.sim.settings
        if s.user is None:
            return True
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(user, s.user) and hmac.compare_digest(password, s.password or "")

    def _handle(self, method: str) -> None:
        sim = self.sim
        sim._count("requests")
        parts_url = urlsplit(self.path)
        path = parts_url.path.rstrip("/")
        try:
            if path.startswith("/_sim/"):
                self._admin(method, path)
                return
            if not self._authorized():
                raise ApiError(401, "Authentication required (HTTP Basic, Grid'5000 login)")
            if path.startswith("/stable/"):
                path = path[len("/stable") :]
            parts = [p for p in path.split("/") if p]
            if method != "GET":
                raise ApiError(405, "use GET")
            if len(parts) == 3 and parts[0] == "sites" and parts[2] == "metrics":
                self._metrics(parts[1], parse_qs(parts_url.query))
                return
            if not parts or parts[0] != "sites":
                raise ApiError(404, f"Not found: {path or '/'}")
            self._json(200, sim.query.reference(parts))
        except PgError as exc:
            self._json(exc.status, exc.doc())
        except ApiError as exc:
            self._json(exc.status, {"code": exc.status, "message": exc.message})

    def _admin(self, method: str, path: str) -> None:
        sim = self.sim
        if path == "/_sim/stats" and method == "GET":
            self._json(200, sim.stats)
        elif path == "/_sim/stats/reset" and method == "POST":
            sim.reset_stats()
            self._json(200, sim.stats)
        elif path == "/_sim/config" and method == "GET":
            self._json(200, sim.settings_doc())
        elif path == "/_sim/config" and method == "POST":
            self._json(200, sim.configure(self._body()))
        elif path == "/_sim/points" and method == "POST":
            # late data: {"site", "node", "metric", "points": [[time, value], ...]}
            doc = self._body()
            with sim._lock:
                added = sim.query.add_points(
                    str(doc.get("site")),
                    str(doc.get("node")),
                    str(doc.get("metric")),
                    list(doc.get("points") or []),
                )
            self._json(200, {"added": added})
        elif path == "/_sim/points" and method == "DELETE":
            with sim._lock:
                sim.model.extra.clear()
            self._json(200, {"added": 0})
        else:
            raise ApiError(404, f"Not found: {path}")

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            doc = orjson.loads(self.rfile.read(length) or b"{}")
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ApiError(400, "expected a JSON object")
        return doc

    def _metrics(self, site: str, params: dict[str, list[str]]) -> None:
        sim = self.sim
        with sim._lock:
            st = sim._stats
            st["in_flight"] += 1
            st["max_in_flight"] = max(st["max_in_flight"], st["in_flight"])
            st["metrics_requests"][site] = st["metrics_requests"].get(site, 0) + 1
        try:
            series, start_us, end_us, summary, as_rate = sim.query.plan_metrics(site, params)
            start_us = sim.faults.retained(start_us, end_us)
            sim.faults.delay(site)
            points = sim.query.count_points(series, start_us, end_us, summary)
            if sim.faults.too_much_data(points):
                sim._count("too_much_data")
                raise PgError(500, "38000", TOO_MUCH_DATA)
            try:  # a client that timed out has gone: nothing to answer
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.end_headers()
                stray = sim.faults.stray_point_us(start_us)
                pieces = sim.query.render(series, start_us, end_us, summary, as_rate, stray)
                for piece in pieces:
                    self.wfile.write(piece)
            except (ConnectionError, TimeoutError):
                return
            sim._count("points_served", points)
        finally:
            sim._count("in_flight", -1)

    def _json(self, status: int, doc: Any) -> None:
        body = orjson.dumps(doc)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="Grid5000"')
            self.end_headers()
            self.wfile.write(body)
        except (ConnectionError, TimeoutError):
            pass
