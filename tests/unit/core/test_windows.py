import datetime as dt

import pytest

from dxt_core.errors import ConfigError
from dxt_core.windows import (
    Window,
    day_window,
    days,
    from_ms,
    next_window_ms,
    parse_day,
    to_ms,
)

H = 3_600_000


def test_ordinary_day_is_24h_from_local_midnight():
    w = day_window(dt.date(2020, 3, 9), "Europe/Rome")
    assert w.start == dt.datetime(2020, 3, 8, 23, 0, tzinfo=dt.UTC)
    assert w.duration_ms == 24 * H


@pytest.mark.parametrize(
    ("day", "hours"),
    [(dt.date(2020, 3, 29), 23), (dt.date(2020, 10, 25), 25), (dt.date(2021, 3, 28), 23)],
)
def test_dst_days(day, hours):
    assert day_window(day, "Europe/Rome").duration_ms == hours * H


def test_consecutive_days_tile_time_exactly():
    d = dt.date(2020, 3, 27)
    windows = [day_window(d + dt.timedelta(days=i), "Europe/Rome") for i in range(5)]
    for a, b in zip(windows, windows[1:]):
        assert a.end == b.start


def test_midnight_sample_belongs_to_exactly_one_day():
    midnight = dt.datetime(2020, 3, 10, 0, 0, tzinfo=dt.UTC).astimezone(
        dt.timezone(dt.timedelta(hours=1))
    )
    ms = to_ms(midnight.replace(hour=0, minute=0))
    owners = [
        d
        for d in (dt.date(2020, 3, 9), dt.date(2020, 3, 10))
        if day_window(d, "Europe/Rome").start_ms <= ms < day_window(d, "Europe/Rome").end_ms
    ]
    assert owners == [dt.date(2020, 3, 10)]


def test_ms_roundtrip_is_exact():
    for ms in (0, 1, 1583708400000, 1583708400001, 1700000000123):
        assert to_ms(from_ms(ms)) == ms


def test_naive_times_are_refused():
    with pytest.raises(ConfigError, match="aware"):
        Window(dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2))


def test_bad_zone_and_day():
    with pytest.raises(ConfigError, match="IANA"):
        day_window(dt.date(2020, 1, 1), "Mars/Olympus")
    with pytest.raises(ConfigError, match="YYYY-MM-DD"):
        parse_day("09/03/2020")
    with pytest.raises(ConfigError, match="before start"):
        list(days(dt.date(2020, 1, 2), dt.date(2020, 1, 1)))


def test_the_first_and_last_days_accepted_are_the_ones_the_error_names():
    assert parse_day("1970-01-02") == dt.date(1970, 1, 2)
    assert parse_day(" 9999-12-30 ") == dt.date(9999, 12, 30)
    for text in ("1970-01-01", "9999-12-31", "0001-01-01"):
        with pytest.raises(ConfigError, match=r"give a day from 1970-01-02 to 9999-12-30"):
            parse_day(text)


def test_next_window_sizing():
    # dense: shrink towards the point budget
    assert next_window_ms(H, 1_000_000, 250_000, 60_000, 25 * H) == H // 4
    # sparse: grow, but at most 4x per step
    assert next_window_ms(H, 10, 250_000, 60_000, 25 * H) == 4 * H
    assert next_window_ms(H, 0, 250_000, 60_000, 25 * H) == 4 * H
    # clamps
    assert next_window_ms(H, 10**9, 1, 60_000, 25 * H) == 60_000
    assert next_window_ms(20 * H, 1, 250_000, 60_000, 25 * H) == 25 * H
