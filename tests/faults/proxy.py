"""A fault-injecting HTTP proxy to put in front of a simulator (or any HTTP server).

The proxy forwards every request to ``upstream`` and relays the answer untouched (bytes,
status, Content-Encoding), unless a fault is queued for it. Faults are consumed one per
request, in order, by the next request whose path contains the fault's ``match``:

- :class:`Answer`: answer with this status, headers and body instead of the server
  (5xx bursts, 429 with Retry-After, 403 quota, ...).
- :class:`Reset`: close the connection with a TCP RST, without a byte of answer.
- :class:`Trickle`: forward, then send the server's answer a few bytes at a time.
- :class:`GzipBomb`: a small gzip body that decodes to ``decoded_bytes``.
- :class:`Redirect`: answer with a redirect to ``location`` + the request's path and query.

A persistent ``rewrite`` hook sees every request (after the queued faults) and may change
its target or answer it itself: that is how a test makes a source "lose" data (retention).

It runs in a thread of the test process and speaks HTTP over real sockets; the client under
test cannot tell it from a misbehaving server.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Seen:
    """One request as the proxy received it."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)
    client: tuple[str, int] = ("", 0)  # the client's address: one per TCP connection


@dataclass
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    match: str = ""


@dataclass
class Reset:
    match: str = ""


@dataclass
class Trickle:
    interval_s: float = 0.2
    chunk: int = 1
    match: str = ""


@dataclass
class GzipBomb:
    decoded_bytes: int = 1 << 30
    match: str = ""


@dataclass
class Redirect:
    location: str  # scheme://host:port prefix; the request's path and query are appended
    status: int = 307
    match: str = ""


Fault = Answer | Reset | Trickle | GzipBomb | Redirect
#: A rewrite returns None (forward as is), a Seen (forward this instead) or an Answer.
Rewrite = Callable[[Seen], "Seen | Answer | None"]


def _matches(match: str, path: str) -> bool:
    """``match`` occurs in ``path``; with a trailing ``$``, the path (without its query)
    ends with it."""
    if match.endswith("$"):
        return path.split("?", 1)[0].endswith(match[:-1])
    return match in path


@functools.cache
def gzip_bomb(decoded_bytes: int) -> bytes:
    """Zeros, gzip-compressed: 1 GiB of them is about 1 MiB on the wire."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    out = []
    left = decoded_bytes
    while left > 0:
        n = min(left, len(block))
        out.append(z.compress(block[:n]))
        left -= n
    out.append(z.flush())
    return b"".join(out)


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.upstream_prefix = parts.path.rstrip("/")
        self.seen: list[Seen] = []
        self.rewrite: Rewrite | None = None
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(OSError):
                    super().handle()

            def _any(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # -- control ------------------------------------------------------------------------------
    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self.seen.clear()
        self.rewrite = None

    def pending(self) -> int:
        with self._lock:
            return len(self._faults)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------
    def _take(self, path: str) -> Fault | None:
        with self._lock:
            for i, f in enumerate(self._faults):
                if _matches(f.match, path):
                    return self._faults.pop(i)
        return None

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        req = Seen(h.command, h.path, dict(h.headers.items()), body, client=h.client_address[:2])
        with self._lock:
            self.seen.append(req)
        fault = self._take(req.path)
        if isinstance(fault, Reset):
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
            return
        if isinstance(fault, Answer):
            self._send(h, fault.status, fault.headers, fault.body)
            return
        if isinstance(fault, GzipBomb):
            self._send(
                h,
                200,
                {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                gzip_bomb(fault.decoded_bytes),
            )
            return
        if isinstance(fault, Redirect):
            self._send(h, fault.status, {"Location": fault.location + req.path}, b"")
            return
        target: Seen = req
        if self.rewrite is not None:
            out = self.rewrite(req)
            if isinstance(out, Answer):
                self._send(h, out.status, out.headers, out.body)
                return
            if out is not None:
                target = out
        status, headers, answer = self._forward(target)
        if isinstance(fault, Trickle):
            self._send(h, status, headers, answer, trickle=fault)
        else:
            self._send(h, status, headers, answer)

    def _forward(self, req: Seen) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in _HOP_BY_HOP}
            conn.request(
                req.method,
                self.upstream_prefix + req.path,
                body=req.body or None,
                headers=headers,
            )
            resp = conn.getresponse()
            answer = resp.read()
            out = {k: v for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP}
            return resp.status, out, answer
        finally:
            conn.close()

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str],
        body: bytes,
        trickle: Trickle | None = None,
    ) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if trickle is None:
            h.wfile.write(body)
            h.wfile.flush()
            return
        try:
            for i in range(0, len(body), trickle.chunk):
                h.wfile.write(body[i : i + trickle.chunk])
                h.wfile.flush()
                time.sleep(trickle.interval_s)
        except OSError:  # the client gave up: that is the point
            h.close_connection = True
