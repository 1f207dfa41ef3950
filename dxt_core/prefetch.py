"""Run an iterator one step ahead in a thread, so fetching overlaps writing.

The next window's HTTP request (which waits on the network and the server, without holding
the GIL) runs while the current window is formatted and compressed. At most ``depth`` items
wait in the queue, so memory stays bounded by a few windows.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

from dxt_core.budget import holding_answers, release_answers

T = TypeVar("T")

_DONE = object()


def prefetched(source: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Yield the items of ``source``, produced by a background thread; errors are re-raised."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        with holding_answers():  # the producer works for the consumer's unit
            fill()

    def fill() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)

    worker = threading.Thread(target=produce, name="dxt-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            # The producer's fetch may wait for the answer budget: this thread's own answers
            # are out of it before this thread waits for the producer.
            release_answers()
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while worker.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                worker.join(0.05)
