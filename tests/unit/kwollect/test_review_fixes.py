"""Kwollect client behaviours found in a review: planning with a catalogue that promises no
points, the health check after a read timeout, and a job read with the caller's options.
The server's answers are faked (httpx.MockTransport); the client code is the real one."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from dxt_core.backends.kwollect.experiment import Kwollect
from dxt_core.backends.kwollect.requests import MetricsRequest, plan_requests
from dxt_core.backends.kwollect.source import G5kNode, KwollectClient
from dxt_core.errors import SourceUnavailable
from dxt_core.http import RequestStats, RetryPolicy

DAY = dt.datetime(2024, 11, 26, tzinfo=dt.UTC)
NODES = [G5kNode("lyon", "nova-1"), G5kNode("lyon", "nova-2")]


def test_a_catalogue_that_promises_no_points_plans_one_window() -> None:
    # node_rate is 0 when a cluster lists only on-demand (period 0) entries: the window
    # was max_points / 1e-9 seconds long, and the planning died of an OverflowError
    plan = plan_requests(
        "lyon", NODES, None, DAY, DAY + dt.timedelta(days=1), dict.fromkeys(NODES, 0.0), 25_000, 50
    )
    assert len(plan) == 1 and plan[0][0].start == DAY


def test_an_error_answer_to_the_health_check_is_an_answer() -> None:
    """After a read timeout the client asks one node for one second: a 503 from a server
    still busy with the abandoned query is an answer (the big request was too big), not a
    server that does not answer."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(503, text="busy")

    client = KwollectClient("http://kwollect.test", transport=httpx.MockTransport(answer))
    req = MetricsRequest("lyon", tuple(NODES), None, DAY, DAY + dt.timedelta(hours=1))
    with client:
        client._check_alive(req, RequestStats())  # no SourceUnavailable: it answered
    assert len(asked) == 1 and "nodes=nova-1" in asked[0]


def test_a_job_is_read_with_the_options_given() -> None:
    """``from_job`` read the job with a client of default options (TLS check, timeout,
    retries) whatever the caller gave; here one attempt is asked for, and honoured."""
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(503, text="busy")

    with pytest.raises(SourceUnavailable):
        Kwollect.from_job(
            "lyon",
            1,
            api_url="http://kwollect.test",
            transport=httpx.MockTransport(answer),
            retry=RetryPolicy(attempts=1, backoff_s=0.0),
        )
    assert len(calls) == 1  # the default policy asks again


def test_a_split_window_lets_go_of_the_answer_it_refused() -> None:
    """An answer over ``max_answer_bytes`` is asked again in halves; while the halves were
    taken, each level's refused answer stayed alive in the traceback of the error that
    split it (an 80 s window split down to 10 s held three answers of 4 MB)."""
    import gc
    import tracemalloc

    def answer(request: httpx.Request) -> httpx.Response:
        start = dt.datetime.fromisoformat(request.url.params["start_time"])
        stop = dt.datetime.fromisoformat(request.url.params["end_time"])
        if (stop - start).total_seconds() > 10:
            return httpx.Response(200, content=b"[" + b" " * 4_000_000 + b"]")
        point = {"timestamp": start.isoformat(), "device_id": "nova-1", "metric_id": "m"}
        return httpx.Response(200, json=[{**point, "value": 1.0}])

    client = KwollectClient(
        "http://kwollect.test",
        transport=httpx.MockTransport(answer),
        max_answer_bytes=1_000_000,
        min_window_s=1.0,
    )
    req = MetricsRequest("lyon", (NODES[0],), ("m",), DAY, DAY + dt.timedelta(seconds=80))
    held = []
    tracemalloc.start()
    try:
        with client:
            for _ in client.iter_parts(req, RequestStats()):
                gc.collect()  # the faked answers' own cycles (a real answer has none)
                held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert len(held) == 8  # 80 s in parts of 10 s
    assert max(held) < 3_000_000, held  # not the 4 MB answers refused on the way down
