import threading

import pytest

from dxt_core.prefetch import Background, prefetched


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
