"""HTTP serving shared by every backend's simulator: the server, its lifecycle and ``main``.

A simulator supplies its data model and query semantics as an *app* object and a request
handler class (a :class:`SimHandler` subclass that answers from ``self.app``); this module
binds a threaded server, runs it in a background thread or in the foreground until SIGTERM or
SIGINT, and prints the one line that :func:`dxt_core.simulate.spawn_simulator` waits for::

    dxt-simulate-<name> listening on http://HOST:PORT
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

import orjson


class SimServer(ThreadingHTTPServer):
    """A threaded HTTP server that carries the simulator's app for its handlers."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: Any
    ) -> None:
        self.app = app
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (read timeout) is part of a test, not a server error.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class SimHandler(BaseHTTPRequestHandler):
    """Base of the simulators' handlers: HTTP/1.1, no Nagle delay, quiet unless verbose."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm the body would wait
    # for the client's delayed ACK (~40 ms per request), a cost real servers do not have.
    disable_nagle_algorithm = True

    @property
    def app(self) -> Any:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self.app, "verbose", False):
            super().log_message(format, *args)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, doc: Any, headers: Mapping[str, str] | None = None) -> None:
        self.send(status, orjson.dumps(doc), headers=headers)


class Served:
    """A simulator app served on ``host:port`` (0: a free port), in a thread or in front."""

    def __init__(
        self,
        name: str,
        app: Any,
        handler: type[BaseHTTPRequestHandler],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.name = name
        try:
            self.server = SimServer((host, port), handler, app)
        except OSError as exc:  # the address it could not listen on, for --host and --port
            raise OSError(exc.errno, f"{exc.strerror} (listening on {host}:{port})") from None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        text = host.decode() if isinstance(host, bytes) else str(host)
        if ":" in text:
            text = f"[{text}]"
        return f"http://{text}:{port}"

    def start(self) -> Served:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.server.serve_forever, name=f"dxt-simulate-{self.name}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.server.server_close()

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_until_signal(self, banner: str = "") -> int:
        """Serve until SIGTERM or SIGINT; print the line the spawner waits for first."""
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            print(f"dxt-simulate-{self.name} listening on {self.url}", flush=True)
            if banner:
                print(banner, flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            self.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)
        return 0


def seconds(text: str) -> float:
    """An ``argparse`` type: a delay in seconds, a finite number of 0 or more."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds, 0 or more")
    return value


def count(text: str) -> int:
    """An ``argparse`` type: a whole number of 0 or more."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: give 0 or more")
    return value


def port_number(text: str) -> int:
    """An ``argparse`` type: a TCP port, 0 (a free one) to 65535."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: 0 (a free one) to 65535")
    return port


def add_listen_arguments(parser: Any, port: int) -> None:
    """A simulator's ``--host`` and ``--port`` (``port`` its default; 0 picks a free one)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port",
        type=port_number,
        default=port,
        help="port (default %(default)s); 0 picks a free one",
    )
