"""A Kwollect API that accepts connections and never answers (issue 12.14).

Before: every read timeout was taken for "too much data", so the day was split again and again
(17 timed-out requests for a day, ~66 min at the default timeout) and the error then advised
``min_window_s``, which the command line did not have.
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dxt_core.backends.kwollect.source import G5kNode, KwollectClient
from dxt_core.errors import SourceUnavailable
from dxt_core.http import RetryPolicy

pytestmark = pytest.mark.integration

DXT = str(Path(sys.executable).parent / "dxt")
DAY = dt.datetime(2024, 11, 26, tzinfo=dt.UTC)


class SilentServer:
    """Accepts TCP connections and answers nothing; with ``reference=True`` it answers every
    path but ``/metrics`` at once (a reference API that works, a metrics service that hangs):
    the node list of cluster nova of lyon, a 404 for the rest."""

    def __init__(self, reference: bool = False) -> None:
        self.reference = reference
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self.metrics_requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)
            if self.reference:
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        line = data.split(b"\r\n", 1)[0]
        if b"/metrics" in line:
            self.metrics_requests += 1
            return  # never answered
        status, body = b"404 Not Found", b'{"code": 404, "message": "not found"}'
        if b" /sites/lyon/clusters/nova/nodes " in line:  # the node names check
            status, body = b"200 OK", b'{"items": [{"uid": "nova-1"}, {"uid": "nova-2"}]}'
        conn.sendall(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.accepted:
            c.close()
        self.sock.close()


@pytest.fixture(params=[False, True], ids=["all-silent", "metrics-silent"])
def silent(request):
    s = SilentServer(reference=request.param)
    yield s
    s.close()


@pytest.mark.slow  # 5 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_a_silent_api_costs_two_timeouts_and_says_so(silent):
    client = KwollectClient(
        silent.url, timeout_s=1.0, retry=RetryPolicy(attempts=5, backoff_s=0), max_points=10**9
    )
    nodes = [G5kNode("lyon", "nova-1"), G5kNode("lyon", "nova-2")]
    t0 = time.monotonic()
    with client, pytest.raises(SourceUnavailable) as err:
        list(
            client.iter_batches(
                client.plan(
                    "lyon", nodes, ["wattmetre_power_watt"], DAY, DAY + dt.timedelta(days=1)
                )
            )
        )
    elapsed = time.monotonic() - t0
    msg = str(err.value)
    assert "does not answer" in msg and silent.url in msg
    assert msg.count(" | from ") == 1, msg  # the URL once, not again inside the message
    assert "min_window" not in msg
    if silent.reference:
        # the metrics request, then a tiny probe; not a cascade of splits
        assert silent.metrics_requests == 2, silent.metrics_requests
        assert "--timeout" in msg and "one-node, one-second request" in msg
    else:
        # the reference API (metric catalogue) is asked first: its retries, once
        assert len(silent.accepted) == 5, len(silent.accepted)
    assert elapsed < 15, elapsed


@pytest.mark.slow  # 12 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_the_cli_fails_fast_with_advice_about_its_own_options(silent, tmp_path):
    out = subprocess.run(
        [
            DXT, "extract", "kwollect", "--api-url", silent.url, "--nodes", "nova-1.lyon",
            "--start", "2024-11-26T00:00:00+01:00", "--end", "2024-11-26T06:00:00+01:00",
            "--metrics", "wattmetre_power_watt", "--timeout", "1", "--backup", str(tmp_path / "b"),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 4, out.stderr  # the server did not answer: 4, every backend
    assert "does not answer" in out.stderr
    help_text = subprocess.run(
        [DXT, "extract", "kwollect", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "--min-window" in help_text and "--timeout" in help_text
