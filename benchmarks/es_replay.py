"""A scroll-only Elasticsearch stand-in that answers from memory: it measures the client.

noida-db spends 92-113 us of CPU per document it serves (``python -m benchmarks.noida_probe``),
so through it any client runs at the server's pace. This server holds the documents of a
saved pytokio export in memory, renders each hit's JSON once per ``_source`` filter, and
answers the scroll API the way Elasticsearch does for our queries:

* ``POST /{index}/_search?scroll=..`` with ``query`` (``constant_score``/``bool`` of
  ``range``, ``term``, ``prefix``, ``regexp``), ``sort`` on ``@timestamp``, ``size`` and
  ``_source`` (a list of fields); the client's slices are ``@timestamp`` ranges in the
  query (a ``slice`` is still taken: a document's slice is its ``@timestamp`` in ms modulo
  ``max``);
* ``POST /_search/scroll`` and ``DELETE /_search/scroll``;
* ``GET /`` (and every answer carries ``X-Elastic-Product``, which elasticsearch-py checks).

Anything else is a 400 in Elasticsearch's error shape: it has no point in time, so the
client reads it with ``use_pit=False`` (``--no-pit``). It reports itself as Elasticsearch
8.15.0 and, as Elasticsearch 8 does, refuses requests whose ``compatible-with`` is not 7 or
8 (``RestCompatibleVersionHelper.java``). Matching a query costs one pass over the documents, once
per distinct query (cached), and hits are rendered once per ``_source`` filter (the last
filter's are kept), so a warmed-up run pays only for joining each page's hits.

``python -m benchmarks.es_replay --input saved.json --port 0`` prints ``listening on URL``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.server
import itertools
import re
import sys
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from dxt_core.backends.collectd_es.source import iter_saved_pages, parse_timestamp_ms

PRODUCT = {"X-Elastic-Product": "Elasticsearch"}


class Store:
    def __init__(self, hits: list[dict[str, Any]]) -> None:
        stamped = [(parse_timestamp_ms(h["_source"]["@timestamp"]), h) for h in hits]
        stamped.sort(key=lambda p: p[0])  # stable: documents of one instant keep their order
        self.ts = [t for t, _ in stamped]
        self.hits = [h for _, h in stamped]
        self._matches: dict[bytes, list[int]] = {}
        self._rendered: dict[tuple[str, ...] | None, list[bytes]] = {}
        self._lock = threading.Lock()

    def rendered(self, fields: tuple[str, ...] | None) -> list[bytes]:
        with self._lock:
            out = self._rendered.get(fields)
            if out is None:
                self._rendered.clear()  # one filter at a time: the hits of a day take GBs
                out = []
                for ts, h in zip(self.ts, self.hits, strict=True):
                    src = h["_source"]
                    if fields is not None:
                        src = {k: src[k] for k in fields if k in src}
                    hit = {"_index": h["_index"], "_id": h["_id"], "_score": None,
                           "_source": src, "sort": [ts]}  # fmt: skip
                    out.append(orjson.dumps(hit))
                self._rendered[fields] = out
            return out

    def matching(self, query: dict[str, Any]) -> list[int]:
        key = orjson.dumps(query, option=orjson.OPT_SORT_KEYS)
        with self._lock:
            found = self._matches.get(key)
        if found is None:
            test = compile_query(query)
            found = [i for i, (t, h) in enumerate(zip(self.ts, self.hits, strict=True))
                     if test(t, h["_source"])]  # fmt: skip
            with self._lock:
                self._matches[key] = found
        return found


def compile_query(q: dict[str, Any]) -> Any:
    """A predicate (ts_ms, _source) -> bool for the query DSL our client sends."""
    ((kind, body),) = q.items()
    if kind == "match_all":
        return lambda t, s: True
    if kind == "constant_score":
        return compile_query(body["filter"])
    if kind == "bool":
        parts = [compile_query(c) for k in ("must", "filter") for c in _as_list(body.get(k))]
        return lambda t, s: all(p(t, s) for p in parts)
    ((name, arg),) = body.items()
    if kind == "range":
        if name != "@timestamp":
            raise ValueError(f"range on {name}: only @timestamp is supported")
        lo, hi = arg.get("gte"), arg.get("lt")
        return lambda t, s: (lo is None or t >= int(lo)) and (hi is None or t < int(hi))
    value = arg["value"] if isinstance(arg, dict) else arg
    if kind == "term":
        return lambda t, s: s.get(name) == value
    if kind == "prefix":
        return lambda t, s: isinstance(s.get(name), str) and s[name].startswith(value)
    if kind == "regexp":
        rx = re.compile(value)
        return lambda t, s: isinstance(s.get(name), str) and rx.fullmatch(s[name]) is not None
    raise ValueError(f"query {kind!r} is not supported by the replay server")


def _as_list(v: Any) -> list[Any]:
    return [] if v is None else v if isinstance(v, list) else [v]


class Scroll:
    def __init__(self, order: list[int], size: int, rendered: list[bytes]) -> None:
        self.order, self.size, self.rendered, self.pos = order, size, rendered, 0

    def page(self, scroll_id: str) -> bytes:
        chunk = self.order[self.pos : self.pos + self.size]
        self.pos += len(chunk)
        r = self.rendered
        head = orjson.dumps(
            {"_scroll_id": scroll_id, "took": 1, "timed_out": False,
             "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}
        )[:-1]  # fmt: skip
        total = b'"hits":{"total":{"value":%d,"relation":"eq"},"max_score":null,"hits":[' % len(
            self.order
        )
        return head + b"," + total + b",".join([r[i] for i in chunk]) + b"]}}"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store: Store
    scrolls: dict[str, Scroll] = {}
    ids = itertools.count(1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in PRODUCT.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, kind: str, reason: str) -> None:
        err = {"type": kind, "reason": reason}
        self._send(status, orjson.dumps({"error": {**err, "root_cause": [err]}, "status": status}))

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return orjson.loads(self.rfile.read(n)) if n else {}

    def _headers_refused(self) -> bool:
        """Elasticsearch 8's media-type rule (RestCompatibleVersionHelper.java), in short."""
        for name in ("Accept", "Content-Type"):
            value = self.headers.get(name) or ""
            m = re.search(r"compatible-with=(\d+)", value)
            if m and m.group(1) not in ("7", "8"):
                self._error(
                    400,
                    "media_type_header_exception",
                    f"Invalid media-type value on headers [Accept, Content-Type] ({name}={value})",
                )
                return True
        return False

    def do_GET(self) -> None:
        if self._headers_refused():
            return
        if urlsplit(self.path).path == "/":
            self._send(200, orjson.dumps({"name": "es-replay", "cluster_name": "replay",
                                          "version": {"number": "8.15.0"},
                                          "tagline": "You Know, for Search"}))  # fmt: skip
        else:
            self._error(400, "illegal_argument_exception", f"GET {self.path} is not supported")

    def do_HEAD(self) -> None:
        self._send(200, b"")

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        body = self._body()
        if self._headers_refused():
            return
        if url.path == "/_search/scroll":
            sid = body.get("scroll_id", "")
            scroll = self.scrolls.get(sid)
            if scroll is None:
                self._error(404, "search_context_missing_exception", f"No search context [{sid}]")
                return
            self._send(200, scroll.page(sid))
            return
        if not url.path.endswith("/_search") or "scroll" not in parse_qs(url.query):
            self._error(400, "illegal_argument_exception", f"POST {url.path}: only scrolls")
            return
        try:
            order = self.store.matching(body.get("query", {"match_all": {}}))
        except (ValueError, KeyError) as exc:
            self._error(400, "parsing_exception", str(exc))
            return
        slice_doc = body.get("slice")
        if slice_doc:
            sid_, smax = int(slice_doc["id"]), int(slice_doc["max"])
            ts = self.store.ts
            order = [i for i in order if ts[i] % smax == sid_]
        src = body.get("_source")
        fields = tuple(src) if isinstance(src, list) else None
        sid = f"scroll{next(self.ids)}"
        scroll = self.scrolls[sid] = Scroll(order, int(body.get("size", 10)),
                                            self.store.rendered(fields))  # fmt: skip
        self._send(200, scroll.page(sid))

    def do_DELETE(self) -> None:
        body = self._body()
        sids = _as_list(body.get("scroll_id"))
        freed = sum(self.scrolls.pop(s, None) is not None for s in sids)
        self._send(200, orjson.dumps({"succeeded": True, "num_freed": freed}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.es_replay", description=__doc__)
    p.add_argument("--input", required=True, help="saved pytokio export (list of pages)")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    t0 = dt.datetime.now(dt.UTC)
    hits = [h for page in iter_saved_pages(a.input) for h in page]
    Handler.store = Store(hits)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    took = (dt.datetime.now(dt.UTC) - t0).total_seconds()
    print(f"loaded {len(hits)} documents in {took:.1f} s", flush=True)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
