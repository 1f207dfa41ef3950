"""Run an iterator one step ahead in a thread, so fetching overlaps writing; run one call
in the background (:class:`Background`), so its request overlaps the caller's work; keep a
few calls in flight on threads, taken in order (:class:`InFlight`).

The next window's HTTP request (which waits on the network and the server, without holding
the GIL) runs while the current window is formatted and compressed. At most ``depth`` items
wait in the queue, so memory stays bounded by a few windows.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from dxt_core.budget import holding_answers, release_answers

T = TypeVar("T")

_DONE = object()


def prefetched(source: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Yield the items of ``source``, produced by a background thread; errors are re-raised.
    The producer runs up to ``depth + 1`` items ahead of the consumer (``depth`` waiting and
    one being made)."""
    return _ahead(source, depth + 1, "dxt-prefetch")


def _ahead(source: Iterator[T], ahead: int, name: str) -> Iterator[T]:
    """``source`` produced on a thread at most ``ahead`` items before the consumer takes
    them: each item the producer makes takes a permit, each one the consumer takes gives
    one back."""
    ready: queue.SimpleQueue[object] = queue.SimpleQueue()
    permits = threading.Semaphore(ahead)
    stop = threading.Event()

    def produce() -> None:
        with holding_answers():  # the producer works for the consumer's unit
            try:
                while True:
                    permits.acquire()
                    if stop.is_set():
                        return
                    item = next(source, _DONE)
                    ready.put(item)
                    if item is _DONE:
                        return
                    del item  # the consumer's now
            except BaseException as exc:  # handed to the consumer, raised there
                ready.put(exc)

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            # The producer's fetch may wait for the answer budget: this thread's own answers
            # are out of it before this thread waits for the producer.
            release_answers()
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            permits.release()  # the next one is made while this one is worked on
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        permits.release()
        worker.join()
        with contextlib.suppress(queue.Empty):  # items made and never taken
            while True:
                ready.get_nowait()


class Background(Generic[T]):
    """One call run on its own thread, so its wait (a request the server works on) overlaps
    the caller's work; :meth:`result` joins it and returns its value or raises its error."""

    def __init__(self, call: Callable[[], T], name: str = "dxt-background") -> None:
        self._out: list[T] = []
        self._err: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._out.append(call())
        except BaseException as exc:  # handed to the caller of result(), raised there
            self._err.append(exc)

    def wait(self) -> None:
        """Wait for the call to end, whatever its outcome (a unit that failed)."""
        release_answers()
        self._thread.join()

    def result(self) -> T:
        # This thread's own answers leave the budget before it waits (see prefetched).
        release_answers()
        self._thread.join()
        if self._err:
            raise self._err[0]
        return self._out[0]


def _as_unit(call: Callable[[], T]) -> T:
    with holding_answers():  # the call's answers are given back when it returns
        return call()


class InFlight(Generic[T]):
    """Calls run on up to ``size`` threads at once, their results taken oldest first, so
    that the requests of a server that serves several at once overlap each other and the
    caller's work.

    Each call is a unit of work for the answer budget (its answers are given back when it
    returns); the caller's own answers leave the budget before it waits. When the block ends,
    calls not taken are dropped: cancelled if they have not begun, else waited for.
    """

    def __init__(self, size: int, name: str = "dxt-in-flight") -> None:
        if size < 1:
            raise ValueError(f"at least one call in flight, not {size}")
        self.size = size
        self._pool = ThreadPoolExecutor(size, thread_name_prefix=name)
        self._pending: deque[Future[T]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def __enter__(self) -> InFlight[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop_all()
        self._pool.shutdown(wait=True)

    def start(self, call: Callable[[], T]) -> None:
        """Start ``call`` on a thread of its own (at most ``size`` run at once)."""
        self._pending.append(self._pool.submit(_as_unit, call))

    def take(self) -> T:
        """The oldest call's result (waiting for it), or its error raised."""
        release_answers()
        return self._pending.popleft().result()

    def drop_all(self) -> list[T]:
        """Drop the calls not taken: cancel those not begun, wait for the others; the
        results of those that ran and succeeded."""
        release_answers()
        begun = [f for f in self._pending if not f.cancel()]  # all cancelled before any wait
        self._pending.clear()
        out: list[T] = []
        for fut in begun:
            with contextlib.suppress(Exception):
                out.append(fut.result())
        return out
