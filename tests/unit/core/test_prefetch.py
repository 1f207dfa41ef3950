import threading

import pytest

from dxt_core.prefetch import Background, one_ahead, prefetched


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


@pytest.mark.parametrize(("ahead", "most_made"), [(one_ahead, 2), (prefetched, 3)])
def test_how_far_the_producer_runs_ahead(ahead, most_made):
    """one_ahead: the item worked on and the one being fetched; prefetched: one more
    waiting."""
    made: list[int] = []
    more = threading.Event()

    def gen():
        for i in range(20):
            made.append(i)
            more.set()
            yield i

    it = ahead(gen())
    assert next(it) == 0
    for _ in range(50):  # give the producer every chance to run further than it may
        more.clear()
        if not more.wait(0.02):
            break
    assert len(made) == most_made
    assert list(it) == list(range(1, 20))
    it.close()
