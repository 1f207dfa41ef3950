"""HTTP serving of the Examon simulator: routes, Basic auth, gzip, the response cache, the
``/_sim/*`` admin endpoints, and the :class:`ExamonSimulator` that runs it all in a thread.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, cast
from urllib.parse import parse_qs, urlsplit

import orjson

from dxt_core.backends.examon.simulator.faults import Faults, _MetricFault, _QueryLimit
from dxt_core.backends.examon.simulator.model import DataModel, SimConfig, node_names
from dxt_core.backends.examon.simulator.query import (
    QueryEngine,
    _BadRequest,
    _error,
    _json,
    _Response,
)
from dxt_core.errors import ConfigError

VERSION: Final = "KairosDB 1.2.2-1.20180201 (dxt simulator)"
GRAFANA_DATASOURCE_ID: Final = 1
GRAFANA_DATASOURCE_NAME: Final = "kairosdb"

_PROXY_PREFIX: Final = "/api/datasources/proxy/"
_MAX_BODY: Final = 16 * 1024 * 1024
# A day of one metric over 200 nodes is ~21 MB of JSON, fetched whole (one answer) or in
# ~10-100 windows: enough entries for either to repeat from cache in benchmarks, and a byte
# cap so memory does not grow without bound.
_CACHE_ENTRIES: Final = 256
_CACHE_BYTES: Final = 512 * 1024 * 1024


def _query_limit_error(limit: int) -> _Response:
    # KairosDB answers 500 (not 4xx) when query_limit is exceeded; clients must tell it apart
    # from an outage by the message, so keep the wording stable.
    return _error(
        500, f"Query exceeded the query_limit of {limit} data points; narrow the time range"
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sim: ExamonSimulator) -> None:
        self.sim = sim
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (read timeout) is part of the test, not a server error.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class ExamonSimulator:
    """A KairosDB + Examon jobs server over ``http.server``, serving deterministic data.

    Args:
        config: what to serve; ``config.faults`` may be changed while it runs.
        host: address to bind.
        port: port to bind; 0 picks a free one (see :attr:`url`).

    Example:
        >>> sim = ExamonSimulator(SimConfig(catalog=[("total_power", "ipmi_pub")]))
        >>> sim.start()
        >>> sim.url  # doctest: +SKIP
        'http://127.0.0.1:41234'
        >>> sim.stop()
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.verbose = False
        self._lock = threading.Lock()
        self.model = DataModel(config)
        self.engine = QueryEngine(self.model, config.faults)
        self._cache: OrderedDict[tuple[str, bytes, bool], _Response] = OrderedDict()
        self._cache_bytes = 0
        self._stats: dict[str, Any] = {}
        self.reset_stats()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8083``."""
        host, port = self._server.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else str(host)
        if ":" in host_text:
            host_text = f"[{host_text}]"
        return f"http://{host_text}:{port}"

    def start(self) -> None:
        """Serve in a background daemon thread; returns at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dxt-simulate-examon", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` is called from another one."""
        self._server.serve_forever()

    def __enter__(self) -> ExamonSimulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- stats and faults --------------------------------------------------------------------

    @property
    def stats(self) -> dict[str, Any]:
        """A snapshot of request counters (what ``GET /_sim/stats`` answers)."""
        with self._lock:
            snapshot = dict(self._stats)
            snapshot["requests"] = dict(self._stats["requests"])
            return snapshot

    def reset_stats(self) -> None:
        """Zero every counter."""
        with self._lock:
            self._stats = {
                "requests": {},
                "total": 0,
                "faults_served": 0,
                "refused_max_points": 0,
                "slow_served": 0,
                "unauthorized": 0,
                "bad_requests": 0,
                "points_served": 0,
                "cache_hits": 0,
            }

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] += amount

    def update_faults(self, changes: Mapping[str, Any]) -> Faults:
        """Apply a partial update to the faults, all or nothing.

        Args:
            changes: field name to new value.

        Returns:
            The faults now in force.

        Raises:
            ConfigError: an unknown field or a bad value; nothing is changed.
        """
        known = {f.name for f in fields(Faults)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(
                f"unknown fault field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        with self._lock:
            candidate = Faults(**{**asdict(self.config.faults), **changes})
            for name in known:
                setattr(self.config.faults, name, getattr(candidate, name))
            return Faults(**asdict(self.config.faults))

    def _take_failure(self) -> int | None:
        with self._lock:
            faults = self.config.faults
            if faults.fail_next <= 0:
                return None
            faults.fail_next -= 1
            self._stats["faults_served"] += 1
            return faults.fail_status

    # -- data model --------------------------------------------------------------------------

    def _cache_get(self, key: tuple[str, bytes, bool]) -> _Response | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._stats["cache_hits"] += 1
            return hit

    def _cache_put(self, key: tuple[str, bytes, bool], response: _Response) -> None:
        size = len(response.body) + len(key[1])
        if size > _CACHE_BYTES // 2:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = response
            self._cache_bytes += size
            while len(self._cache) > _CACHE_ENTRIES or self._cache_bytes > _CACHE_BYTES:
                old_key, old = self._cache.popitem(last=False)
                self._cache_bytes -= len(old.body) + len(old_key[1])


def _wants_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (``q=0`` refuses it)."""
    if not header:
        return False
    for part in header.split(","):
        token, *params = (piece.strip() for piece in part.split(";"))
        if token.lower() not in ("gzip", "x-gzip", "*"):
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm the body would
    # wait for the client's delayed ACK (~40 ms per request on a kept-alive connection),
    # a cost real servers do not have.
    disable_nagle_algorithm = True
    server_version = "dxt-simulate-examon/1"

    @property
    def sim(self) -> ExamonSimulator:
        return cast(_Server, self.server).sim

    def log_message(self, format: str, *args: Any) -> None:
        if self.sim.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- request reading ---------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > _MAX_BODY:
                    raise _BadRequest("request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise _BadRequest("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self) -> bool:
        config = self.sim.config
        if config.user is None:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        return hmac.compare_digest(user.encode(), config.user.encode()) and hmac.compare_digest(
            password.encode(), (config.password or "").encode()
        )

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        sim = self.sim
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        gzip_ok = _wants_gzip(self.headers.get("Accept-Encoding"))
        try:
            body = self._read_body()
        except (_BadRequest, ValueError) as exc:
            self.close_connection = True
            self._send(_error(400, str(exc)), gzip_ok)
            return
        if path.startswith("/_sim/") or path == "/_sim":
            self._send(self._admin(method, path, body), gzip_ok)
            return

        endpoint, ds_id = path, ""
        proxied = path.startswith(_PROXY_PREFIX)
        if proxied:
            ds_id, _, rest = path[len(_PROXY_PREFIX) :].partition("/")
            endpoint = "/" + rest
        with sim._lock:
            sim._stats["total"] += 1
            requests = sim._stats["requests"]
            requests[endpoint] = requests.get(endpoint, 0) + 1

        faults = sim.config.faults
        if faults.delay_s > 0:
            time.sleep(faults.delay_s)
        status = sim._take_failure()
        if status is not None:
            self._send(_error(status, "simulated outage"), gzip_ok)
            return
        if not self._authorized():
            sim._count("unauthorized")
            response = _error(401, "authentication required")
            response.headers["WWW-Authenticate"] = 'Basic realm="kairosdb"'
            self._send(response, gzip_ok)
            return
        if proxied and ds_id != str(GRAFANA_DATASOURCE_ID):
            self._send(_json(404, {"message": "Data source not found"}), gzip_ok)
            return

        cache_key = (f"{method} {endpoint}?{split.query}", body, gzip_ok)
        is_query = endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags")
        # Per-metric faults are decided on the parsed query, so skip the cache while any is set.
        if is_query and not faults.fail_metrics:
            cached = sim._cache_get(cache_key)
            if cached is not None:
                self._send_query(cached, gzip_ok)
                return
        try:
            response = self._route(method, endpoint, split.query, body)
        except _BadRequest as exc:
            sim._count("bad_requests")
            response = _error(400, str(exc))
        except _QueryLimit as exc:
            sim._count("refused_max_points")
            response = _query_limit_error(exc.args[0])
        except _MetricFault as exc:
            sim._count("faults_served")
            response = _error(
                sim.config.faults.fail_status, f"simulated outage for {', '.join(exc.args[0])}"
            )
        if is_query and response.status == 200:
            if gzip_ok:
                response.body = gzip.compress(response.body, compresslevel=1, mtime=0)
            if response.cacheable:
                sim._cache_put(cache_key, response)
            self._send_query(response, gzip_ok)
            return
        self._send(response, gzip_ok)

    def _route(self, method: str, endpoint: str, query_string: str, body: bytes) -> _Response:
        sim = self.sim
        gets: dict[str, Callable[[], _Response]] = {
            "/api/v1/version": lambda: _json(200, {"version": VERSION}),
            "/api/v1/health/check": lambda: _Response(204, b""),
            "/api/v1/health/status": lambda: _json(200, ["JVM-Thread-Deadlock: OK"]),
            "/api/v1/tagnames": sim.engine.tag_names,
            "/api/v1/tagvalues": sim.engine.tag_values,
            f"/api/datasources/id/{GRAFANA_DATASOURCE_NAME}": lambda: _json(
                200, {"id": GRAFANA_DATASOURCE_ID}
            ),
        }
        params = parse_qs(query_string)
        if endpoint in gets:
            return gets[endpoint]() if method == "GET" else _error(405, "use GET")
        if endpoint == "/api/v1/metricnames":
            if method != "GET":
                return _error(405, "use GET")
            return sim.engine.metric_names(params.get("prefix", [None])[0])
        if endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags"):
            tags_only = endpoint.endswith("/tags")
            if method == "GET":
                if "query" not in params:
                    raise _BadRequest("GET needs a ?query=<url-encoded JSON query> parameter")
                raw = params["query"][0].encode("utf-8")
            elif method == "POST":
                raw = body
            else:
                return _error(405, "use POST (or GET with ?query=)")
            return sim.engine.datapoints(_loads(raw), tags_only=tags_only)
        if endpoint == "/api/v1/examon/jobs/query":
            if method != "POST":
                return _error(405, "use POST")
            return sim.engine.jobs(_loads(body))
        if endpoint.startswith("/api/datasources/id/"):
            return _json(404, {"message": "Data source not found"})
        return _error(404, f"Not found: {endpoint}")

    def _admin(self, method: str, path: str, body: bytes) -> _Response:
        sim = self.sim
        if path == "/_sim/faults":
            if method == "GET":
                return _json(200, asdict(sim.config.faults))
            if method == "POST":
                try:
                    changes = _loads(body) if body.strip() else {}
                    if not isinstance(changes, dict):
                        raise _BadRequest("expected a JSON object of fault fields")
                    return _json(200, asdict(sim.update_faults(changes)))
                except (_BadRequest, ConfigError, TypeError) as exc:
                    return _error(400, str(exc))
        elif path == "/_sim/faults/reset" and method == "POST":
            return _json(200, asdict(sim.update_faults(asdict(Faults()))))
        elif path == "/_sim/stats":
            if method == "GET":
                return _json(200, sim.stats)
        elif path == "/_sim/stats/reset" and method == "POST":
            sim.reset_stats()
            return _json(200, sim.stats)
        elif path == "/_sim/config" and method == "GET":
            config = sim.config
            return _json(
                200,
                {
                    "nodes": node_names(config.nodes),
                    "interval_s": config.interval_s,
                    "cluster": config.cluster,
                    "auth": config.user is not None,
                    "data_start_ms": config.data_start_ms,
                    "metrics": len(sim.model.plugins),
                    "job_tables": sorted(sim.model.job_tables),
                },
            )
        else:
            return _error(404, f"Not found: {path}")
        return _error(405, f"method {method} not allowed on {path}")

    # -- response writing --------------------------------------------------------------------

    def _send_query(self, response: _Response, gzip_ok: bool) -> None:
        """Send a datapoints answer (body already encoded for ``gzip_ok``), faults first."""
        sim = self.sim
        faults = sim.config.faults
        if faults.max_points is not None and response.points > faults.max_points:
            # A cached answer may predate the limit; refuse it the same way.
            sim._count("refused_max_points")
            self._send(_query_limit_error(faults.max_points), gzip_ok)
            return
        if faults.slow_points is not None and response.points > faults.slow_points:
            sim._count("slow_served")
            time.sleep(faults.slow_delay_s)
        sim._count("points_served", response.points)
        self._write(response, gzip=gzip_ok)

    def _send(self, response: _Response, gzip_ok: bool) -> None:
        if gzip_ok and response.body:
            response = _Response(
                response.status,
                gzip.compress(response.body, compresslevel=1, mtime=0),
                response.headers,
            )
            self._write(response, gzip=True)
        else:
            self._write(response, gzip=False)

    def _write(self, response: _Response, *, gzip: bool) -> None:
        try:
            self.send_response(response.status)
            if response.status != 204:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                if gzip and response.body:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(response.body)))
            self.send_header("Vary", "Accept-Encoding")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if response.status != 204 and self.command != "HEAD":
                self.wfile.write(response.body)
        except (ConnectionError, TimeoutError):
            self.close_connection = True


def _loads(raw: bytes) -> Any:
    if not raw.strip():
        raise _BadRequest("request body is empty; expected a JSON query")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"invalid JSON in request body: {exc}") from exc
