"""What a notebook hands the Kwollect API (a review as a researcher in Jupyter): pandas and
NumPy values, a ``start()`` cell run again, bad arguments said when the object is made, and
a password kept out of variable inspectors."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from dxt_core import ConfigError
from dxt_core.backends.kwollect.energy import integrate_power
from dxt_core.backends.kwollect.experiment import Kwollect
from dxt_core.backends.kwollect.requests import parse_time
from dxt_core.http import HttpClient

UTC = dt.UTC
T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)


def frame(n: int = 11) -> pd.DataFrame:
    times = pd.date_range(T0, periods=n, freq="1s", tz="UTC")
    return pd.DataFrame({"timestamp": times, "value": np.full(n, 100.0)})


def test_integrate_power_takes_pandas_columns_and_numpy_arrays():
    """``integrate_power(df.timestamp, df.value)`` raised KeyError: -1 (labels, not
    positions), a filtered frame KeyError: 0, and ``.values`` an AttributeError."""
    df = frame()
    want = integrate_power(list(df.timestamp), list(df.value)).joules
    assert want == pytest.approx(1000.0)
    assert integrate_power(df.timestamp, df.value).joules == want
    kept = df[df.index >= 5]  # index 5..10: no label 0
    assert integrate_power(kept.timestamp, kept.value).joules == pytest.approx(500.0)
    assert integrate_power(df.timestamp.values, df.value.values).joules == want
    window = (T0 - dt.timedelta(seconds=2), T0 + dt.timedelta(seconds=12))
    got = integrate_power(df.timestamp.values, df.value.values, window=window)
    assert got.uncovered == {"before_first_s": 2.0, "after_last_s": 2.0}
    naive = pd.date_range("2024-11-26 14:00", periods=3, freq="1s")
    with pytest.raises(ConfigError, match=r"time 0 .* is naive"):
        integrate_power(naive, [1.0, 2.0, 3.0])
    with pytest.raises(ConfigError, match="must be numbers"):
        integrate_power(df.timestamp[:2], ["1", None])


def test_times_from_pandas_and_numpy():
    """A Timestamp's nanoseconds were sent to the API (9-digit fractions) and the point at
    the boundary was dropped as "outside the window"; NumPy integers were refused as epochs."""
    t = pd.Timestamp("2024-11-26T14:00:00.123456789", tz="Europe/Paris")
    got = parse_time(t, "start")
    assert type(got) is dt.datetime and got.isoformat() == "2024-11-26T13:00:00.123456+00:00"
    assert parse_time(np.int64(1732629600), "start") == dt.datetime(2024, 11, 26, 14, tzinfo=UTC)
    assert parse_time(np.float64(1732629600.5), "start").microsecond == 500000
    with pytest.raises(ConfigError, match="datetime64, which has no time zone"):
        parse_time(np.datetime64("2024-11-26T14:00"), "start")


def test_start_run_again_keeps_the_stop():
    """start(t1), stop(t2), then the start cell again: the stop was dropped, so the 30 s
    window became "until now", without a word."""
    k = Kwollect(["nova-1.lyon"])
    k.start(T0).stop(T0 + dt.timedelta(seconds=30)).start(T0)
    assert k.window() == (T0, T0 + dt.timedelta(seconds=30))
    # a start after the recorded stop cannot keep it: dropped, and said
    k.start(T0 + dt.timedelta(minutes=5))
    assert k.stop_time is None


def test_a_new_phase_on_the_same_object_warns_only_when_its_stop_is_missing(caplog):
    """start(t1).stop(t2), then start(t3).stop(t4) for the next phase: start(t3) warned
    "the stop is dropped" although stop(t4) followed at once. The warning now comes with
    the window that ends now, once."""
    now = dt.datetime.now(dt.UTC)
    k = Kwollect(["nova-1.lyon"])
    k.start(now - dt.timedelta(hours=2)).stop(now - dt.timedelta(hours=1))
    k.start(now - dt.timedelta(minutes=30)).stop(now - dt.timedelta(minutes=10))
    assert k.window() == (now - dt.timedelta(minutes=30), now - dt.timedelta(minutes=10))
    assert "dropped" not in caplog.text
    k.start(now - dt.timedelta(minutes=5))  # no stop() this time: the window ends now
    start, stop = k.window()
    assert start == now - dt.timedelta(minutes=5) and stop >= now
    assert caplog.text.count("the stop was dropped and the window ends now") == 1
    k.window()
    assert caplog.text.count("the stop was dropped") == 1, caplog.text  # said once


def test_bad_arguments_are_said_when_the_object_is_made():
    with pytest.raises(ConfigError, match="api_url must be"):
        Kwollect(["nova-1.lyon"], api_url=None)  # type: ignore[arg-type]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="max_workers"):
            Kwollect(["nova-1.lyon"], max_workers=bad)  # type: ignore[arg-type]


def test_a_password_is_masked_in_reprs_and_variable_inspectors():
    c = HttpClient("https://api.example.org", user="jdoe", password="s3cr3tPW!")
    assert "s3cr3tPW!" not in repr(vars(c)) and "s3cr3tPW!" not in repr(c)
    assert str(c.password) == "s3cr3tPW!"  # the value itself is the secret
    k = Kwollect(["nova-1.lyon"], auth=("jdoe", "s3cr3tPW!"))
    assert "s3cr3tPW!" not in repr(vars(k.client.http))
