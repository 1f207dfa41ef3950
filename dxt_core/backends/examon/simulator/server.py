"""HTTP serving of the Examon simulator: routes, Basic auth, gzip, the response cache, the
``/_sim/*`` admin endpoints, and the :class:`ExamonSimulator` that runs it all in a thread.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields, replace
from typing import Any, Final, cast
from urllib.parse import parse_qs, urlsplit

import orjson

from dxt_core.backends.examon.simulator.faults import (
    REFUSALS,
    Faults,
    _MetricFault,
    _QueryLimit,
    nginx_page,
)
from dxt_core.backends.examon.simulator.jobs import (
    HTML,
    JobsEndpoint,
    unauthorized,
    werkzeug_page,
)
from dxt_core.backends.examon.simulator.model import DataModel, SimConfig, node_names
from dxt_core.backends.examon.simulator.query import (
    QueryEngine,
    _BadRequest,
    _error,
    _json,
    _NotFinite,
    _Response,
    _ServerError,
)
from dxt_core.errors import ConfigError
from dxt_core.simulate.serving import Served, SimHandler

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


_JOBS_PATHS: Final = {"/api/v1/examon/jobs/query": 1, "/api/v2/examon/jobs/query": 2}


def _query_limit_error(limit: int, refusal: str) -> _Response:
    # KairosDB answers 500 (not 4xx) when a query is too big; clients tell it apart from an
    # outage by the message, worded here as KairosDB 1.2.2 words it (faults.REFUSALS).
    return _error(500, REFUSALS[refusal].format(limit=limit))


class JobsPortUnavailable(OSError):
    """The jobs endpoints' own port could not be listened on (the main port could)."""


class ExamonSimulator:
    """A KairosDB + Examon jobs server over ``http.server``, serving deterministic data.

    The main port answers KairosDB (directly and as Grafana's proxy path) and the Examon
    jobs endpoints; ``jobs_port`` adds a second port with the jobs endpoints only, as the
    real Examon server has (port 5000, where clients look for it by default).

    Args:
        config: what to serve; ``config.faults`` may be changed while it runs.
        host: address to bind.
        port: port to bind; 0 picks a free one (see :attr:`url`).
        jobs_port: also serve the jobs endpoints on this port (0 picks a free one);
            ``None``: only on the main port.

    Raises:
        OSError: a port cannot be bound.

    Example:
        >>> sim = ExamonSimulator(SimConfig(catalog=[("total_power", "ipmi_pub")]))
        >>> sim.start()
        >>> sim.url  # doctest: +SKIP
        'http://127.0.0.1:41234'
        >>> sim.stop()
    """

    def __init__(
        self,
        config: SimConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        jobs_port: int | None = None,
    ) -> None:
        self.config = config
        self.verbose = False
        self._lock = threading.Lock()
        self.model = DataModel(config)
        self.engine = QueryEngine(self.model, config.faults)
        self.jobs = JobsEndpoint(self.model)
        self._cache: OrderedDict[tuple[str, bytes, bool], _Response] = OrderedDict()
        self._cache_bytes = 0
        #: answers repeated from the cache (a simulator's own device, for benchmarks of the
        #: client); off, every query is computed as a real KairosDB reads it from storage
        self.cache_answers = True
        self._stats: dict[str, Any] = {}
        self.reset_stats()
        # HTTP serving is shared by the simulators (dxt_core.simulate.serving).
        self.served = Served("examon", self, _Handler, host, port)
        self.jobs_served: Served | None = None
        if jobs_port is not None:
            try:
                self.jobs_served = Served("examon-jobs", self, _JobsHandler, host, jobs_port)
            except OSError as exc:
                self.served.stop()
                raise JobsPortUnavailable(exc.errno, exc.strerror) from None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8083``."""
        return self.served.url

    @property
    def jobs_url(self) -> str | None:
        """Base URL of the jobs-only port, e.g. ``http://127.0.0.1:5000``, if there is one."""
        return self.jobs_served.url if self.jobs_served is not None else None

    def start(self) -> None:
        """Serve in background daemon threads; returns at once."""
        self.served.start()
        if self.jobs_served is not None:
            self.jobs_served.start()

    def stop(self) -> None:
        """Stop serving and close the listening sockets."""
        self.served.stop()
        if self.jobs_served is not None:
            self.jobs_served.stop()

    def run_until_signal(self, banner: str = "") -> int:
        """Serve in the foreground until SIGTERM or SIGINT, the jobs port in a thread."""
        if self.jobs_served is not None:
            self.jobs_served.start()
        try:
            return self.served.run_until_signal(banner)
        finally:
            if self.jobs_served is not None:
                self.jobs_served.stop()

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
                "rate_limited": 0,
                "proxy_timeouts": 0,
                "not_finite_refused": 0,
                "bad_requests": 0,
                "points_served": 0,
                "cache_hits": 0,
                # The time range of the last tag-discovery query answered (not from cache).
                "last_tags_query": None,
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

    def _take_rate_limit(self) -> _Response | None:
        with self._lock:
            faults = self.config.faults
            if faults.rate_limit_next <= 0:
                return None
            faults.rate_limit_next -= 1
            self._stats["rate_limited"] += 1
            status, retry_after = faults.rate_limit_status, faults.retry_after_s
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        return _Response(status, nginx_page(status), headers, content_type="text/html")

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


class _Handler(SimHandler):
    server_version = "dxt-simulate-examon/1"
    #: The Examon server's own port (5000): only its routes, not KairosDB's.
    jobs_only = False

    @property
    def sim(self) -> ExamonSimulator:
        return cast(ExamonSimulator, self.app)

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
        accept = self.headers.get("Accept-Encoding")
        try:
            body = self._read_body()
        except (_BadRequest, ValueError) as exc:
            self.close_connection = True
            self._send(_error(400, str(exc)), accept)
            return
        if path.startswith("/_sim/") or path == "/_sim":
            self._send(self._admin(method, path, body), accept)
            return

        jobs_only = self.jobs_only
        endpoint, ds_id = path, ""
        proxied = path.startswith(_PROXY_PREFIX) and not jobs_only
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
        limited = sim._take_rate_limit()  # a reverse proxy in front refuses first
        if limited is not None:
            self._send(limited, accept)
            return
        status = sim._take_failure()
        if status is not None:
            self._send(_error(status, faults.fail_message), accept)
            return
        jobs_version = None if proxied else _JOBS_PATHS.get(endpoint)
        if jobs_version is not None or jobs_only:
            self._send(self._examon_server(method, endpoint, jobs_version, body), accept)
            return
        if not self._authorized():
            sim._count("unauthorized")
            response = _error(401, "authentication required")
            response.headers["WWW-Authenticate"] = 'Basic realm="kairosdb"'
            self._send(response, accept)
            return
        if proxied and ds_id != str(GRAFANA_DATASOURCE_ID):
            self._send(_grafana(404, {"message": "Data source not found"}), accept)
            return

        self._kairosdb(method, endpoint, split.query, body, proxied)

    def _kairosdb(self, method: str, endpoint: str, query: str, body: bytes, proxied: bool) -> None:
        """A KairosDB endpoint's answer; query answers cached unless a fault changes them."""
        sim = self.sim
        faults = sim.config.faults
        accept = self.headers.get("Accept-Encoding")
        gzip_ok = _wants_gzip(accept)
        cache_key = (f"{method} {endpoint}?{query}", body, gzip_ok)
        is_query = endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags")
        # Faults decided on the parsed query, or that change the answer, skip the cache.
        uncached = faults.fail_metrics or faults.corrupt_values or faults.stray_points
        if not sim.cache_answers:
            uncached = True
        if is_query and not uncached:
            cached = sim._cache_get(cache_key)
            if cached is not None:
                self._send_query(cached, gzip_ok, proxied)
                return
        response = self._routed(method, endpoint, query, body)
        if is_query and response.status == 200:
            if gzip_ok:
                response.body = gzip.compress(response.body, compresslevel=1, mtime=0)
            if response.cacheable and not uncached:
                sim._cache_put(cache_key, response)
            self._send_query(response, gzip_ok, proxied)
            return
        self._send(response, accept)

    def _routed(self, method: str, endpoint: str, query: str, body: bytes) -> _Response:
        """The route's answer, or the KairosDB error a refusal or a fault gives."""
        sim = self.sim
        faults = sim.config.faults
        try:
            return self._route(method, endpoint, query, body)
        except _BadRequest as exc:
            sim._count("bad_requests")
            return _bad_request(str(exc))
        except _ServerError as exc:
            return _server_error(str(exc))
        except _QueryLimit as exc:
            sim._count("refused_max_points")
            return _query_limit_error(exc.args[0], faults.refusal)
        except _NotFinite as exc:
            sim._count("not_finite_refused")
            return _error(500, exc.args[0])
        except _MetricFault as exc:
            sim._count("faults_served")
            return _error(faults.fail_status, f"{faults.fail_message} for {', '.join(exc.args[0])}")

    def _examon_server(
        self, method: str, endpoint: str, version: int | None, body: bytes
    ) -> _Response:
        """The Examon server (Flask): its routes, its 405 and 401, then the handlers."""
        if version is not None and method != "POST":
            # Flask's router answers 405 before the view (and its login_required) runs.
            return werkzeug_page(405, Allow="OPTIONS, POST")
        if not self._authorized():
            self.sim._count("unauthorized")
            return unauthorized()
        if version is None:
            if endpoint == "/" and method == "GET":
                return _Response(200, b"Examon Server", content_type=HTML, encoding="flask")
            return werkzeug_page(404)
        return self.sim.jobs.answer(version, body, self.headers.get("Content-Type"))

    def _route(self, method: str, endpoint: str, query_string: str, body: bytes) -> _Response:
        sim = self.sim
        gets: dict[str, Callable[[], _Response]] = {
            "/api/v1/version": lambda: _json(200, {"version": VERSION}),
            "/api/v1/health/check": lambda: _Response(204, b""),
            "/api/v1/health/status": lambda: _json(200, ["JVM-Thread-Deadlock: OK"]),
            "/api/v1/tagnames": sim.engine.tag_names,
            "/api/v1/tagvalues": sim.engine.tag_values,
            f"/api/datasources/id/{GRAFANA_DATASOURCE_NAME}": lambda: _grafana(
                200, {"id": GRAFANA_DATASOURCE_ID}
            ),
        }
        params = parse_qs(query_string, keep_blank_values=True)
        if endpoint in gets:
            return gets[endpoint]() if method == "GET" else _error(405, "use GET")
        if endpoint == "/api/v1/metricnames":
            if method != "GET":
                return _error(405, "use GET")
            return sim.engine.metric_names(params.get("prefix", [None])[0])
        if endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags"):
            tags_only = endpoint.endswith("/tags")
            if tags_only and method != "POST":
                # core/http/rest/MetricsResource.java has only @POST (and @OPTIONS) on
                # /datapoints/query/tags: Jersey 1.18.3's HttpMethodRule answers
                # Responses.methodNotAllowed().header("Allow", allow), no entity
                # (WebComponent.Writer.finish only sets the status), the Allow list in its
                # ResourceMethodMap (a HashMap) order under Java 8: POST, then OPTIONS.
                return _Response(
                    405, b"", {"Allow": "POST,OPTIONS"}, content_type="", encoding="none"
                )
            if method == "GET":
                if "query" not in params:
                    # MetricsResource.runQuery: "if (json == null) throw new
                    # BeanValidationException(new SimpleConstraintViolation("query json",
                    # "must not be null or empty"), "")" (empty context: no prefix).
                    raise _BadRequest("query json must not be null or empty")
                raw = params["query"][0].encode("utf-8")
            elif method == "POST":
                raw = body
            else:
                return _error(405, "use POST (or GET with ?query=)")
            # An empty body is Gson's JsonNull (JsonParser.parse of an empty document):
            # QueryParser's getAsJsonObject() then fails with "Not a JSON Object: null".
            query = _loads(raw) if raw.strip() else None
            if tags_only and isinstance(query, dict):
                span = sim.config.faults.slow_tags_span_s
                if span is not None and _span_ms(query) > span * 1000:
                    sim._count("slow_served")
                    time.sleep(sim.config.faults.slow_delay_s)
                with sim._lock:
                    sim._stats["last_tags_query"] = {
                        k: query.get(k)
                        for k in (
                            "start_absolute",
                            "end_absolute",
                            "start_relative",
                            "end_relative",
                        )
                    }
            return sim.engine.datapoints(query, tags_only=tags_only)
        if endpoint.startswith("/api/datasources/id/"):
            return _grafana(404, {"message": "Data source not found"})
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
        elif path == "/_sim/points":
            # Store points at runtime: late data, or a NaN KairosDB cannot serve.
            if method == "POST":
                try:
                    doc = _loads(body)
                    if not isinstance(doc, dict):
                        raise _BadRequest('expected {"metric": M, "tags": {...}, "points": [...]}')
                    with sim._lock:
                        added = sim.model.add_points(
                            str(doc.get("metric")),
                            dict(doc.get("tags") or {}),
                            list(doc.get("points") or []),
                        )
                        sim._cache.clear()
                        sim._cache_bytes = 0
                    return _json(200, {"added": added})
                except (_BadRequest, ConfigError, TypeError, ValueError) as exc:
                    return _error(400, str(exc))
            if method == "DELETE":
                with sim._lock:
                    sim.model.extra.clear()
                    sim._cache.clear()
                    sim._cache_bytes = 0
                return _json(200, {"added": 0})
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

    def _send_query(self, response: _Response, gzip_ok: bool, proxied: bool) -> None:
        """Send a datapoints answer (body already encoded for ``gzip_ok``), faults first."""
        sim = self.sim
        faults = sim.config.faults
        accept = self.headers.get("Accept-Encoding")
        if faults.max_points is not None and response.points > faults.max_points:
            # A cached answer may predate the limit; refuse it the same way.
            sim._count("refused_max_points")
            self._send(_query_limit_error(faults.max_points, faults.refusal), accept)
            return
        if faults.slow_points is not None and response.points > faults.slow_points:
            sim._count("slow_served")
            if (
                proxied
                and faults.grafana_proxy_timeout
                and faults.slow_delay_s > faults.grafana_timeout_s
            ):
                # Grafana's data proxy gives up after [dataproxy] timeout: 504, no body
                # (pkg/util/proxyutil/reverse_proxy.go errorHandler only writes the header).
                time.sleep(faults.grafana_timeout_s)
                sim._count("proxy_timeouts")
                self._send(_Response(504, b"", content_type="", encoding="none"), accept)
                return
            time.sleep(faults.slow_delay_s)
        sim._count("points_served", response.points if response.served is None else response.served)
        self._write(response, gzip=gzip_ok)

    def _send(self, response: _Response, accept: str | None) -> None:
        """Send ``response``, compressed as the server that made it would (see encoding)."""
        if response.encoding == "kairosdb":
            compress = _wants_gzip(accept) and bool(response.body)
        elif response.encoding == "flask":  # web/examon-server/flask_gzip.py
            compress = (
                200 <= response.status < 300
                and len(response.body) >= 500
                and "gzip" in (accept or "").lower()
            )
        else:
            compress = False
        if compress:
            level = 6 if response.encoding == "flask" else 1
            response = replace(
                response, body=gzip.compress(response.body, compresslevel=level, mtime=0)
            )
        self._write(response, gzip=compress)

    def _write(self, response: _Response, *, gzip: bool) -> None:
        try:
            self.send_response(response.status)
            if response.status != 204:
                if response.content_type:
                    self.send_header("Content-Type", response.content_type)
                if gzip and response.body:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(response.body)))
            if response.encoding == "kairosdb":
                self.send_header("Vary", "Accept-Encoding")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if response.status != 204 and self.command != "HEAD":
                self.wfile.write(response.body)
        except (ConnectionError, TimeoutError):
            self.close_connection = True


def _bad_request(message: str) -> _Response:
    """KairosDB's 400: kairosdb/kairosdb v1.2.2 ``core/http/rest/json/JsonResponseBuilder.java``
    ``build``: ``.header("Access-Control-Allow-Origin", "*")
    .type(MediaType.APPLICATION_JSON_TYPE)``, so ``application/json`` without the
    ``charset`` the 200 answers' ``@Produces`` gives."""
    response = _error(400, message)
    response.content_type = "application/json"
    response.headers["Access-Control-Allow-Origin"] = "*"
    return response


def _server_error(message: str) -> _Response:
    """KairosDB's 500 for a query that threw: ``MetricsResource.runQuery``'s ``catch
    (Exception e)`` returns ``setHeaders(Response.status(INTERNAL_SERVER_ERROR)
    .entity(new ErrorResponse(e.getMessage())))``: the ``@Produces`` type and
    ``setHeaders``' four headers."""
    response = _error(500, message)
    response.headers.update(
        {
            "Access-Control-Allow-Origin": "*",
            "Pragma": "no-cache",
            "Cache-Control": "no-cache",
            "Expires": "0",
        }
    )
    return response


def _grafana(status: int, obj: Any) -> _Response:
    """An answer of Grafana's own API: never gzipped (``[server] enable_gzip = false`` in
    grafana/grafana ``conf/defaults.ini``, left so by ExaMon's ``grafana.ini``)."""
    return _Response(status, orjson.dumps(obj), content_type="application/json", encoding="none")


def _span_ms(query: dict[str, Any]) -> float:
    """The time range of an absolute query (to now when it has no end)."""
    start = query.get("start_absolute")
    end = query.get("end_absolute")
    if not isinstance(start, int):
        return 0.0
    return float((end if isinstance(end, int) else time.time() * 1000) - start)


def _loads(raw: bytes) -> Any:
    if not raw.strip():
        raise _BadRequest("request body is empty; expected a JSON query")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"invalid JSON in request body: {exc}") from exc


class _JobsHandler(_Handler):
    jobs_only = True
