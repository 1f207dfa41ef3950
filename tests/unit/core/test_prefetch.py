import threading
import time

import pytest

from dxt_core.prefetch import Background, InFlight, prefetched


def test_yields_everything_in_order():
    assert list(prefetched(iter(range(100)))) == list(range(100))


def test_errors_reach_the_consumer_after_the_good_items():
    def gen():
        yield 1
        yield 2
        raise ValueError("boom at item 3")

    got = []
    with pytest.raises(ValueError, match="boom at item 3"):
        for x in prefetched(gen()):
            got.append(x)
    assert got == [1, 2]


def test_consumer_stopping_early_stops_the_producer():
    produced = []

    def gen():
        for i in range(10_000):
            produced.append(i)
            yield i

    it = prefetched(gen(), depth=1)
    assert next(it) == 0
    it.close()
    assert not any(t.name == "dxt-prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(produced) < 10


def test_background_returns_the_calls_value_and_raises_its_error() -> None:
    started = threading.Event()
    go = threading.Event()

    def slow() -> int:
        started.set()
        go.wait(10)
        return 42

    job = Background(slow)
    assert started.wait(10)  # it runs while the caller goes on
    go.set()
    assert job.result() == 42

    def fails() -> int:
        raise ValueError("the server cannot count")

    failing = Background(fails)
    failing.wait()  # waits whatever the outcome, raises nothing
    with pytest.raises(ValueError, match="cannot count"):
        failing.result()


def test_how_far_the_producer_runs_ahead():
    """prefetched(depth=1): the item worked on, one waiting and one being made."""
    made: list[int] = []
    more = threading.Event()

    def gen():
        for i in range(20):
            made.append(i)
            more.set()
            yield i

    it = prefetched(gen())
    assert next(it) == 0
    for _ in range(50):  # give the producer every chance to run further than it may
        more.clear()
        if not more.wait(0.02):
            break
    assert len(made) == 3
    assert list(it) == list(range(1, 20))
    it.close()


def test_in_flight_runs_calls_at_once_and_gives_them_back_in_order():
    running, most = 0, 0
    lock = threading.Lock()

    def call(i: int, delay: float):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(delay)
        with lock:
            running -= 1
        return i

    with InFlight(2, "dxt-test-flight") as flight:
        # the first is the slowest: taken first all the same
        for i, delay in enumerate((0.3, 0.05, 0.05)):
            flight.start(lambda i=i, delay=delay: call(i, delay))
        assert len(flight) == 3
        assert [flight.take() for _ in range(3)] == [0, 1, 2]
    assert most == 2  # two at once, never three


def test_in_flight_raises_a_calls_error_and_drops_what_was_not_taken():
    done: list[int] = []

    def fails():
        raise ValueError("window refused")

    started = threading.Event()

    def slow():
        started.set()
        time.sleep(0.2)
        done.append(1)
        return 1

    with pytest.raises(ValueError, match="window refused"):
        with InFlight(2, "dxt-test-flight") as flight:
            flight.start(fails)
            flight.start(slow)
            assert started.wait(10)
            flight.take()
    # the block waited for the call running before it ended; no thread is left
    assert done == [1]
    assert not any(t.name.startswith("dxt-test-flight") for t in threading.enumerate())
    with InFlight(1) as flight:
        flight.start(fails)
        flight.start(lambda: 7)
        assert flight.drop_all() in ([7], [])  # the failed call left out; 7 if it ran
        assert len(flight) == 0
        gate, holding = threading.Event(), threading.Event()

        def hold():
            holding.set()
            return gate.wait()

        flight.start(hold)  # runs, holding the one thread
        flight.start(lambda: done.append(2))  # waits for a thread: cancelled, never run
        assert holding.wait(10)
        threading.Timer(0.2, gate.set).start()
        assert flight.drop_all() == [True]
    assert done == [1]
    with pytest.raises(ValueError, match="at least one"):
        InFlight(0)
