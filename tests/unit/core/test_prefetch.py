import threading

import pytest

from dxt_core.prefetch import prefetched


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
