"""A version stand-in: a separate process in front of noida-db (which answers as
Elasticsearch 8.15 and accepts whatever headers it gets) that answers as another server would:
Elasticsearch 7.10/8.x/9.x or OpenSearch 1.x/2.x (``python -m
dxt_core.backends.collectd_es.simulator --upstream URL --as opensearch-2.11.1``).

GET / with that server's body, the headers it refuses, the endpoints it has and the sort
fields it knows, and optional faults (partial pages, hits outside the query, hits without
sort values, rotating PIT and scroll ids, credentials). Search results come from noida-db.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson

from dxt_core.errors import DxtError
from dxt_core.simulate.serving import Served, SimHandler

# --------------------------------------------------------------------------- version stand-in
#
# noida-db answers as Elasticsearch 8.15 and accepts whatever headers it gets. The stand-in
# below sits in front of it (a separate process) and answers as another server would:
# GET / with that server's body, the headers it refuses, the endpoints it has and the sort
# fields it knows, and optional faults (partial pages, hits outside the query, hits without
# sort values, rotating PIT and scroll ids, credentials). Search results come from noida-db.
#
# Where each rule comes from (elastic/elasticsearch and opensearch-project/OpenSearch):
# * compatible-with versions (ES >= 8: the server's major or the one before, on Accept and on
#   Content-Type, the same on both): server/src/main/java/org/elasticsearch/rest/
#   RestCompatibleVersionHelper.java; a refusal is HTTP 400 media_type_header_exception
#   "Invalid media-type value on headers [Accept, Content-Type]" caused by a status_exception
#   with the helper's message (RestRequest.java, MediaTypeHeaderException).
# * a Content-Type the server does not know (ES <= 7.10, OpenSearch: any
#   application/vnd.elasticsearch+json): HTTP 406 {"error": "Content-Type header [...] is
#   not supported", "status": 406} (RestController.java, sendContentTypeErrorMessage; seen
#   by elasticsearch-py 8 users against 7.9/7.10 and OpenSearch, elastic/elasticsearch-py#2422).
# * a path without handler: HTTP 400 {"error": "no handler found for uri [...] and method
#   [...]"} (RestController.java, handleBadRequest).
# * unknown query parameters: HTTP 400 illegal_argument_exception "request [...] contains
#   unrecognized parameter: [...]" (BaseRestHandler.java).
# * X-Elastic-Product: Elasticsearch on every answer from 7.14 (elasticsearch-py checks it).
# * PIT: ES POST /<index>/_pit from 7.10 (x-pack), _shard_doc from 7.12 (#66093, implicit
#   tiebreaker #68833); OpenSearch POST /<index>/_search/point_in_time from 2.4
#   (RestCreatePitAction.java: keep_alive, allow_partial_pit_creation; answer pit_id,
#   _shards, creation_time), DELETE /_search/point_in_time {"pit_id": [...]}
#   (RestDeletePitAction.java), _shard_doc from 3.3 (#18924); before that "No mapping found
#   for [_shard_doc] in order to sort on".
# * allow_partial_search_results=false: a shard failure fails the search ("Partial shards
#   failure", SearchPhaseExecutionException) instead of answering with _shards.failed > 0.

#: flavours the stand-in can play, as ``product-version``
STANDIN_FLAVOURS: tuple[str, ...] = (
    "elasticsearch-7.10.2",
    "elasticsearch-8.15.3",
    "elasticsearch-9.1.0",
    "opensearch-1.3.20",
    "opensearch-2.11.1",
)

_GLOBAL_PARAMS = frozenset({"pretty", "human", "error_trace", "filter_path", "format"})
_SEARCH_PARAMS = frozenset(
    {
        "scroll",
        "allow_partial_search_results",
        "size",
        "from",
        "sort",
        "_source",
        "track_total_hits",
        "search_type",
        "request_cache",
        "preference",
        "routing",
        "ignore_unavailable",
        "expand_wildcards",
        "allow_no_indices",
        "rest_total_hits_as_int",
        "typed_keys",
        "batched_reduce_size",
        "pre_filter_shard_size",
        "max_concurrent_shard_requests",
        "ccs_minimize_roundtrips",
        "q",
        "timeout",
        "terminate_after",
    }
)
_COUNT_PARAMS = frozenset(
    {
        "ignore_unavailable",
        "allow_no_indices",
        "expand_wildcards",
        "min_score",
        "preference",
        "routing",
        "q",
        "df",
        "analyzer",
        "analyze_wildcard",
        "default_operator",
        "lenient",
        "terminate_after",
    }
)
_SCROLL_PARAMS = frozenset({"scroll", "scroll_id", "rest_total_hits_as_int"})
_ES_PIT_PARAMS = frozenset(
    {"keep_alive", "routing", "preference", "expand_wildcards", "ignore_unavailable"}
)
_OS_PIT_PARAMS = frozenset(
    {"keep_alive", "allow_partial_pit_creation", "preference", "routing", "expand_wildcards"}
)
_KNOWN_TYPES = ("application/json", "application/x-ndjson", "application/smile")
_VND = "application/vnd.elasticsearch+"


class StandinError(Exception):
    def __init__(self, status: int, doc: Any) -> None:
        super().__init__(status)
        self.status = status
        self.doc = doc


def _es_error(status: int, kind: str, reason: str, **extra: Any) -> StandinError:
    err = {"type": kind, "reason": reason}
    return StandinError(status, {"error": {"root_cause": [err], **err, **extra}, "status": status})


class Flavour:
    """What one server version accepts and answers."""

    def __init__(self, name: str) -> None:
        product, _, number = name.partition("-")
        if name not in STANDIN_FLAVOURS:
            raise DxtError(f"unknown flavour {name!r}: choose from {', '.join(STANDIN_FLAVOURS)}")
        self.name, self.product, self.number = name, product, number
        self.version = tuple(int(x) for x in number.split("."))
        es = product == "elasticsearch"
        self.es = es
        self.product_header = es and self.version >= (7, 14, 0)
        self.compat_headers = es and self.version >= (8, 0, 0)
        self.es_pit = es and self.version >= (7, 10, 0)
        self.os_pit = not es and self.version >= (2, 4, 0)
        self.shard_doc = (es and self.version >= (7, 12, 0)) or (
            not es and self.version >= (3, 3, 0)
        )
        #: POST /{index}/{type} (removed in Elasticsearch 8 and OpenSearch 2)
        self.typed_routes = self.version < ((8, 0, 0) if es else (2, 0, 0))

    def main_body(self) -> dict[str, Any]:
        version: dict[str, Any] = {
            "number": self.number,
            "build_type": "tar",
            "build_hash": "standin",
            "build_date": "2024-01-01T00:00:00.000Z",
            "build_snapshot": False,
            "lucene_version": "9.7.0",
            "minimum_wire_compatibility_version": "7.10.0",
            "minimum_index_compatibility_version": "7.0.0",
        }
        body = {"name": "standin", "cluster_name": "standin", "cluster_uuid": "standin"}
        if self.es:
            version["build_flavor"] = "default"
            return {**body, "version": version, "tagline": "You Know, for Search"}
        version["distribution"] = "opensearch"
        tagline = "The OpenSearch Project: https://opensearch.org/"
        return {**body, "version": version, "tagline": tagline}

    def check_headers(self, accept: str | None, content_type: str | None, has_body: bool) -> None:
        """Refuse the media types this version refuses (see the sources above)."""
        if self.compat_headers:
            current = self.version[0]
            a = _compat_version(accept)
            c = _compat_version(content_type) if has_body else None
            a_v = current if a is None else a
            if a_v > current or a_v < current - 1:
                raise _media_type_error(
                    f"Accept version must be either version {current} or {current - 1}, but "
                    f"found {a_v}. Accept={accept}"
                )
            if has_body:
                c_v = current if c is None else c
                if c_v > current or c_v < current - 1:
                    raise _media_type_error(
                        f"Content-Type version must be either version {current} or "
                        f"{current - 1}, but found {c_v}. Content-Type={content_type}"
                    )
                if c_v != a_v:
                    raise _media_type_error(
                        "A compatible version is required on both Content-Type and Accept "
                        "headers if either one has requested a compatible version and the "
                        f"compatible versions must match. Accept={accept}, "
                        f"Content-Type={content_type}"
                    )
                if (c is None) != (a is None):
                    raise _media_type_error(
                        "A compatible version is required on both Content-Type and Accept "
                        "headers if either one has requested a compatible version. "
                        f"Accept={accept}, Content-Type={content_type}"
                    )
        if has_body:
            base = (content_type or "").split(";", 1)[0].strip().lower()
            # ES 7.11+ strips vnd.elasticsearch+ and compatible-with (XContentType.java,
            # removeVersionInMediaType); ES <= 7.10 and OpenSearch do not know it
            vnd_ok = self.es and self.version >= (7, 11, 0)
            known = base in _KNOWN_TYPES or (vnd_ok and base.startswith(_VND))
            if not known:
                raise StandinError(
                    406,
                    {
                        "error": f"Content-Type header [{content_type}] is not supported",
                        "status": 406,
                    },
                )


#: TimeValue.parseTimeValue (elastic/elasticsearch libs/core ... TimeValue.java)
_TIME_VALUE = re.compile(r"-1|0|\d+(nanos|micros|ms|s|m|h|d)")


def _time_value_error(name: str, value: Any) -> StandinError:
    return _es_error(
        400,
        "parse_exception",
        f"failed to parse setting [{name}] with value [{value}] as a time value: unit is "
        "missing or unrecognized",
    )


def _compat_version(header: str | None) -> int | None:
    if not header:
        return None
    for part in header.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "compatible-with":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def _media_type_error(reason: str) -> StandinError:
    cause = {"type": "status_exception", "reason": reason}
    top = {
        "type": "media_type_header_exception",
        "reason": "Invalid media-type value on headers [Accept, Content-Type]",
    }
    return StandinError(
        400, {"error": {"root_cause": [top], **top, "caused_by": cause}, "status": 400}
    )


class _Contexts:
    """Stand-in ids of PITs and scrolls -> upstream ids; with ``rotate``, every answer
    carries a new id and only the newest one is accepted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.upstream: dict[str, str] = {}
        self.current: dict[str, str] = {}  # stand-in id -> the newest id of its context
        self.counter = itertools.count(1)

    def new(self, kind: str, upstream: str) -> str:
        with self.lock:
            sid = f"{kind}{next(self.counter)}"
            self.upstream[sid] = upstream
            self.current[sid] = sid
            return sid

    def resolve(self, sid: str) -> str | None:
        """The upstream id, or None when ``sid`` is unknown or not the newest."""
        with self.lock:
            if self.current.get(sid) != sid:
                return None
            return self.upstream.get(sid)

    def rotate(self, sid: str, upstream: str, kind: str) -> str:
        with self.lock:
            new = f"{kind}{next(self.counter)}"
            self.upstream[new] = upstream
            self.current[new] = new
            self.current[sid] = new
            return new

    def drop(self, sid: str) -> str | None:
        with self.lock:
            self.current.pop(sid, None)
            return self.upstream.pop(sid, None)


class StandinState:
    def __init__(self, flavour: Flavour, upstream: str, user: str | None, password: str | None):
        self.flavour = flavour
        self.upstream = httpx.Client(base_url=upstream, timeout=600)
        self.auth = (
            "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if user else None
        )
        self.user = user
        self.lock = threading.Lock()
        self.faults: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self.pages_with_hits = 0
        #: _count requests seen since the faults were set (``slow_counts`` counts them)
        self.counts = 0
        self.pits = _Contexts()
        self.scrolls = _Contexts()


class StandinHandler(SimHandler):
    @property
    def state(self) -> StandinState:
        state: StandinState = self.app
        return state

    # -- plumbing -------------------------------------------------------------------------

    def _send(self, status: int, doc: Any, extra: dict[str, str] | None = None) -> None:
        body = b"" if doc is None else orjson.dumps(doc)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        # not on unauthenticated answers (elastic/elasticsearch#73434), and from 8.8 not on
        # 403 either: RestController.dispatchRequest adds the header, security's refusal
        # comes before it (issue 19; see connection.elasticsearch_refusal)
        fl = self.state.flavour
        if fl.product_header and status != 401 and not (status == 403 and fl.version >= (8, 8, 0)):
            self.send_header("X-Elastic-Product", "Elasticsearch")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        st = self.state
        entry: dict[str, Any] = {
            "method": self.command,
            "path": url.path,
            "params": params,
            "accept": self.headers.get("Accept"),
            "content_type": self.headers.get("Content-Type") if raw else None,
        }
        if url.path.startswith("/_standin/"):
            self._control(url.path, raw)
            return
        with st.lock:
            st.log.append(entry)
        try:
            if st.auth is not None and self.headers.get("Authorization") != st.auth:
                raise _es_error(
                    401,
                    "security_exception",
                    f"unable to authenticate user [{st.user}] for REST request [{url.path}]",
                )
            st.flavour.check_headers(
                self.headers.get("Accept"), self.headers.get("Content-Type"), bool(raw)
            )
            body = orjson.loads(raw) if raw else {}
            status, doc = self._route(url.path, params, body, entry)
        except StandinError as exc:
            extra = {}
            if exc.status == 401:
                extra["WWW-Authenticate"] = 'Basic realm="security" charset="UTF-8"'
            entry["status"] = exc.status
            self._send(exc.status, exc.doc, extra)
            return
        except orjson.JSONDecodeError as exc:
            entry["status"] = 400
            self._send(400, {"error": f"bad JSON: {exc}", "status": 400})
            return
        entry["status"] = status
        self._send(status, doc)

    do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _handle

    def _control(self, path: str, raw: bytes) -> None:
        st = self.state
        with st.lock:
            if path == "/_standin/faults":
                st.faults = orjson.loads(raw) if raw else {}
                st.pages_with_hits = 0
                st.counts = 0
                st.log.clear()
                self._send(200, {"faults": st.faults})
            elif path == "/_standin/log":
                self._send(200, {"log": st.log})
            else:
                self._send(404, {"error": "unknown control path"})

    def _no_handler(self, path: str) -> StandinError:
        return StandinError(
            400,
            {
                "error": f"no handler found for uri [{self.path}] and method [{self.command}]",
                "status": 400,
            },
        )

    def _params(self, path: str, params: dict[str, str], allowed: frozenset[str]) -> None:
        for p in sorted(params):
            if p not in allowed and p not in _GLOBAL_PARAMS:
                raise _es_error(
                    400,
                    "illegal_argument_exception",
                    f"request [{path}] contains unrecognized parameter: [{p}]",
                )

    def _up(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        r = self.state.upstream.request(method, path, **kw)
        return r.status_code, (r.json() if r.content else None)

    # -- routes ---------------------------------------------------------------------------

    def _route(
        self, path: str, params: dict[str, str], body: dict[str, Any], entry: dict[str, Any]
    ) -> tuple[int, Any]:
        fl = self.state.flavour
        m = self.command
        parts = [p for p in path.split("/") if p]
        if not parts and m in ("GET", "HEAD"):
            if self.state.faults.get("monitor_forbidden"):
                if not fl.es:
                    # opensearch-project/security PrivilegesEvaluator: "no permissions for
                    # [<action>] and User [name=..., backend_roles=[], requestedTenant=null]"
                    raise _es_error(
                        403,
                        "security_exception",
                        f"no permissions for [cluster:monitor/main] and User [name="
                        f"{self.state.user}, backend_roles=[], requestedTenant=null]",
                    )
                # x-pack AuthorizationService (Exceptions.authorizationError)
                raise _es_error(
                    403,
                    "security_exception",
                    f"action [cluster:monitor/main] is unauthorized for user [{self.state.user}]",
                )
            return 200, fl.main_body()
        if len(parts) == 2 and parts[1] == "_count" and m in ("GET", "POST"):
            # RestCountAction.java: a query (body or q=) and routing options, no search keys
            self._params(path, params, _COUNT_PARAMS)
            extra = set(body) - {"query"}
            if extra:
                raise _es_error(
                    400, "parsing_exception", f"request does not support [{sorted(extra)[0]}]"
                )
            self._slow_count()
            return self._up("POST", path, json=body or {"query": {"match_all": {}}})
        if parts == ["_search", "scroll"]:
            if m == "DELETE":
                return self._clear_scroll(body)
            self._params(path, params, _SCROLL_PARAMS)
            return self._scroll_next(params, body, entry)
        if parts == ["_pit"] and m == "DELETE" and fl.es_pit:
            return self._close_pit(body.get("id"), "es")
        if parts == ["_search", "point_in_time"] and m == "DELETE" and fl.os_pit:
            ids = body.get("pit_id") or []
            ids = ids if isinstance(ids, list) else [ids]
            if not ids:
                raise _es_error(400, "action_request_validation_exception", "no pit ids specified")
            results = [self._close_pit(i, "os")[1] for i in ids]
            return 200, {"pits": results}
        if parts == ["_search"] and m in ("GET", "POST"):
            self._params(path, params, _SEARCH_PARAMS)
            return self._search(None, params, body, entry)
        if len(parts) == 2 and parts[1] == "_search" and m in ("GET", "POST"):
            self._params(path, params, _SEARCH_PARAMS)
            return self._search(parts[0], params, body, entry)
        if len(parts) == 2 and parts[1] == "_pit" and m == "POST" and fl.es_pit:
            self._params(path, params, _ES_PIT_PARAMS)
            return self._open_pit(parts[0], params, "es")
        if len(parts) == 2 and m == "POST" and fl.typed_routes:
            # ES 7.x and OpenSearch 1.x route POST /{index}/{type} to the index API
            # (RestIndexAction): "_pit" is taken for a type name
            if not body:
                raise _es_error(400, "parse_exception", "request body is required")
            self._params(path, params, frozenset())
        if parts[1:] == ["_search", "point_in_time"] and m == "POST" and fl.os_pit:
            self._params(path, params, _OS_PIT_PARAMS)
            return self._open_pit(parts[0], params, "os")
        raise self._no_handler(path)

    def _open_pit(self, index: str, params: dict[str, str], api: str) -> tuple[int, Any]:
        if "keep_alive" in params and not _TIME_VALUE.fullmatch(params["keep_alive"]):
            raise _time_value_error("keep_alive", params["keep_alive"])
        if "keep_alive" not in params:
            raise _es_error(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: [keep_alive] is required;",
            )
        status, doc = self._up(
            "POST", f"/{index}/_pit", params={"keep_alive": params["keep_alive"]}
        )
        if status != 200:
            return status, doc
        sid = self.state.pits.new("pit", doc["id"])
        shards = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}
        if api == "es":
            return 200, {"id": sid, "_shards": shards}
        return 200, {"pit_id": sid, "_shards": shards, "creation_time": int(time.time() * 1000)}

    def _close_pit(self, sid: Any, api: str) -> tuple[int, Any]:
        upstream = self.state.pits.drop(str(sid))
        with self.state.lock:
            self.state.log.append({"closed_pit": sid})
        if upstream is not None:
            self._up("DELETE", "/_pit", json={"id": upstream})
        if api == "es":
            freed = int(upstream is not None)
            return (200 if freed else 404), {"succeeded": True, "num_freed": freed}
        return 200, {"succeeded": upstream is not None, "pitId": sid}

    def _search(
        self, index: str | None, params: dict[str, str], body: dict[str, Any], entry: dict[str, Any]
    ) -> tuple[int, Any]:
        fl = self.state.flavour
        sort = body.get("sort") or []
        names = [next(iter(s)) if isinstance(s, dict) else str(s) for s in sort]
        if "_shard_doc" in names and not fl.shard_doc:
            raise _es_error(
                400,
                "search_phase_execution_exception",
                "all shards failed",
                phase="query",
                caused_by={
                    "type": "query_shard_exception",
                    "reason": "No mapping found for [_shard_doc] in order to sort on",
                },
            )
        pit = body.get("pit")
        entry["slice"] = "slice" in body
        if "scroll" in params and body.get("track_total_hits") is False:
            # SearchRequest.validate
            raise _es_error(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: disabling [track_total_hits] is not allowed in a scroll "
                "context;",
            )
        for value in [params.get("scroll"), (pit or {}).get("keep_alive")]:
            if value is not None and not _TIME_VALUE.fullmatch(str(value)):
                raise _time_value_error("scroll" if pit is None else "keep_alive", value)
        up_body = dict(body)
        up_params = {k: v for k, v in params.items() if k in ("scroll",)}
        if pit is not None:
            if index is not None:
                raise _es_error(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: [indices] cannot be used with point in time;",
                )
            sid = str(pit.get("id"))
            entry["pit"] = sid
            upstream = self.state.pits.resolve(sid)
            if upstream is None:
                raise _es_error(
                    404,
                    "search_context_missing_exception",
                    f"No search context found for id [{sid}]",
                )
            up_body["pit"] = {**pit, "id": upstream}
            status, doc = self._up("POST", "/_search", params=up_params, json=up_body)
        else:
            status, doc = self._up(
                "POST", f"/{index or '_all'}/_search", params=up_params, json=up_body
            )
        if status != 200:
            return status, doc
        if pit is not None:
            sid = str(pit.get("id"))
            if self.state.faults.get("rotate_pit"):
                sid = self.state.pits.rotate(sid, str(doc.get("pit_id") or upstream), "pit")
            doc["pit_id"] = sid
        if "_scroll_id" in doc:
            doc["_scroll_id"] = self.state.scrolls.new("scroll", doc["_scroll_id"])
        return self._finish(doc, names, params, scroll_next=False)

    def _slow_count(self) -> None:
        """Fault ``slow_counts``: the n-th ``_count`` requests (1-based, since the faults
        were set) answer after ``slow_s`` seconds (default 2): a client's timeout tells."""
        st = self.state
        with st.lock:
            st.counts += 1
            n = st.counts
        if n in st.faults.get("slow_counts", []):
            time.sleep(float(st.faults.get("slow_s", 2.0)))

    def _scroll_next(
        self, params: dict[str, str], body: dict[str, Any], entry: dict[str, Any]
    ) -> tuple[int, Any]:
        sid = str(body.get("scroll_id") or params.get("scroll_id"))
        entry["scroll_id"] = sid
        upstream = self.state.scrolls.resolve(sid)
        if upstream is None:
            raise _es_error(
                404, "search_context_missing_exception", f"No search context found for id [{sid}]"
            )
        status, doc = self._up(
            "POST",
            "/_search/scroll",
            json={
                "scroll": body.get("scroll") or params.get("scroll", "1m"),
                "scroll_id": upstream,
            },
        )
        if status != 200:
            return status, doc
        new_up = str(doc.get("_scroll_id") or upstream)
        if self.state.faults.get("rotate_scroll"):
            doc["_scroll_id"] = self.state.scrolls.rotate(sid, new_up, "scroll")
        else:
            with self.state.scrolls.lock:
                self.state.scrolls.upstream[sid] = new_up
            doc["_scroll_id"] = sid
        return self._finish(doc, ["@timestamp"], params, scroll_next=True)

    def _clear_scroll(self, body: dict[str, Any]) -> tuple[int, Any]:
        ids = body.get("scroll_id") or []
        ids = ids if isinstance(ids, list) else [ids]
        freed = 0
        for sid in ids:
            with self.state.lock:
                self.state.log.append({"cleared_scroll": sid})
            upstream = self.state.scrolls.drop(str(sid))
            if upstream is not None:
                self._up("DELETE", "/_search/scroll", json={"scroll_id": [upstream]})
                freed += 1
        return 200, {"succeeded": True, "num_freed": freed}

    def _finish(
        self, doc: dict[str, Any], sort_names: list[str], params: dict[str, str], scroll_next: bool
    ) -> tuple[int, Any]:
        """Version rules and faults applied to a search answer."""
        st = self.state
        hits = doc.get("hits", {}).get("hits", [])
        if not (st.flavour.es and st.flavour.shard_doc):
            for h in hits:  # no implicit tiebreaker: as many sort values as sort fields
                if isinstance(h.get("sort"), list):
                    h["sort"] = h["sort"][: max(1, len(sort_names))]
        if not hits:
            return 200, doc
        with st.lock:
            st.pages_with_hits += 1
            n = st.pages_with_hits
        faults = st.faults
        if n in faults.get("partial_pages", []):
            strict = params.get("allow_partial_search_results") == "false" and not scroll_next
            if strict and not faults.get("partial_ignores_param"):
                raise _es_error(
                    503,
                    "search_phase_execution_exception",
                    "Partial shards failure",
                    phase="query",
                    grouped=True,
                    caused_by={
                        "type": "no_shard_available_action_exception",
                        "reason": "[standin][1] shard is not available",
                    },
                )
            doc["hits"]["hits"] = hits[::2]
            doc["_shards"] = {
                "total": 2,
                "successful": 1,
                "skipped": 0,
                "failed": 1,
                "failures": [
                    {
                        "shard": 1,
                        "index": "standin",
                        "reason": {
                            "type": "node_disconnected_exception",
                            "reason": "[standin-2] disconnected",
                        },
                    }
                ],
            }
        if n in faults.get("outside_pages", []):
            first = hits[0]
            stray = orjson.loads(orjson.dumps(first))
            stray["_id"] = f"stray-{n}"
            ts = int(first["sort"][0]) - int(faults.get("outside_offset_ms", 86_400_000))
            stray["sort"] = [ts, *first["sort"][1:]]
            src = stray.get("_source") or {}
            if "@timestamp" in src:
                src["@timestamp"] = (
                    dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
                    .isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z")
                )
            doc["hits"]["hits"] = [stray, *doc["hits"]["hits"]]
        if n in faults.get("no_sort_pages", []):
            doc["hits"]["hits"][0].pop("sort", None)
        return 200, doc


def serve_standin(
    upstream: str,
    flavour: str,
    port: int = 0,
    user: str | None = None,
    password: str | None = None,
) -> Served:
    state = StandinState(Flavour(flavour), upstream.rstrip("/"), user, password)
    return Served("collectd_es", state, StandinHandler, "127.0.0.1", port)


def spawn_es_standin(
    upstream: str,
    flavour: str,
    *,
    user: str | None = None,
    password: str | None = None,
    timeout: float = 30,
) -> tuple[subprocess.Popen[str], str]:
    """Start the stand-in (``python -m dxt_core.backends.collectd_es.simulator``) in front
    of ``upstream`` as ``flavour``; return the process and its URL."""
    from dxt_core.simulate import start_listening

    cmd = [sys.executable, "-m", "dxt_core.backends.collectd_es.simulator"]
    cmd += ["--upstream", upstream, "--as", flavour, "--port", "0"]
    env = dict(os.environ)
    if user is not None:
        cmd += ["--user", user]
        env["DXT_STANDIN_PASSWORD"] = password or ""
    what = f"the Elasticsearch stand-in ({flavour})"
    return start_listening(cmd, what=what, env=env, timeout=timeout)
