"""Time windows: days in a zone, splitting, and adaptive sizing. Pure functions.

A day is ``[local midnight, next local midnight)`` in the configured zone: half-open, so a
sample at exactly midnight belongs to exactly one day, and DST days last 23 or 25 hours.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dxt_core.errors import ConfigError

DEFAULT_TIME_ZONE = "Europe/Rome"
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)


def zone(name: str, where: str | None = None) -> ZoneInfo:
    """The IANA zone ``name``, or a ConfigError saying how to fix it; the error begins with
    ``where`` the name came from (a variable, a connection's extra, a file's key)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigError(
            (f"{where}: " if where else "")
            + f"unknown time zone {name!r}: use an IANA name such as 'Europe/Rome' or 'UTC'"
        ) from exc


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time interval ``[start, end)`` with timezone-aware ends."""

    start: dt.datetime
    end: dt.datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ConfigError(f"window ends must be timezone-aware: {self.start!r}, {self.end!r}")
        if self.end <= self.start:
            raise ConfigError(f"empty window: end {self.end} is not after start {self.start}")

    @property
    def start_ms(self) -> int:
        """Start as epoch milliseconds."""
        return to_ms(self.start)

    @property
    def end_ms(self) -> int:
        """End (exclusive) as epoch milliseconds."""
        return to_ms(self.end)

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms

    def iso(self) -> tuple[str, str]:
        return self.start.isoformat(), self.end.isoformat()


def to_ms(t: dt.datetime) -> int:
    """Epoch milliseconds of an aware datetime (exact, no float rounding)."""
    if t.tzinfo is None:
        raise ConfigError(f"naive datetime {t!r}: attach a time zone")
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int, tz: dt.tzinfo = _UTC) -> dt.datetime:
    """Aware datetime of epoch milliseconds in ``tz``."""
    return (_EPOCH + dt.timedelta(milliseconds=ms)).astimezone(tz)


def day_window(day: dt.date, tz: str | ZoneInfo = DEFAULT_TIME_ZONE) -> Window:
    """The window of calendar ``day`` in zone ``tz``: local midnight to next local midnight."""
    z = zone(tz) if isinstance(tz, str) else tz
    start = dt.datetime.combine(day, dt.time(0), tzinfo=z).astimezone(_UTC)
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0), tzinfo=z).astimezone(_UTC)
    if end <= start:
        # Pacific/Apia 2011-12-30, Pacific/Kiritimati 1994-12-31: the zone moved across the
        # date line and its clocks went from the day before to the day after
        raise ConfigError(
            f"{day} does not exist in {z}: its clocks went from {day - dt.timedelta(days=1)} "
            f"to {day + dt.timedelta(days=1)}, so no sample has that date there; leave the day "
            "out of the range"
        )
    # Normalised to UTC, so that arithmetic on the ends is absolute time, not wall time.
    return Window(start, end)


def days(first: dt.date, last: dt.date) -> Iterator[dt.date]:
    """Every day from ``first`` to ``last``, both included."""
    if last < first:
        raise ConfigError(f"end day {last} is before start day {first}")
    d = first
    while d <= last:
        yield d
        d += dt.timedelta(days=1)


def check_day_order(first: dt.date, last: dt.date) -> None:
    """``--start-day`` and ``--end-day`` in order, else a ConfigError naming both options."""
    if last < first:
        raise ConfigError(
            f"--end-day {last} is before --start-day {first}: give the first day first"
        )


#: The days :func:`parse_day` takes.
FIRST_DAY, LAST_DAY = dt.date(1970, 1, 2), dt.date(9999, 12, 30)


def parse_day(text: str) -> dt.date:
    """A ``YYYY-MM-DD`` day, or a ConfigError showing the expected form."""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
            raise ValueError(text)  # fromisoformat takes 20200309 and 2020-W11-1 too
        day = dt.date.fromisoformat(text.strip())
    except ValueError as exc:
        raise ConfigError(f"bad day {text!r}: expected YYYY-MM-DD, e.g. 2020-03-09") from exc
    if not FIRST_DAY <= day <= LAST_DAY:
        # before 1970 no monitoring database holds data (and epoch times go negative); the
        # ends of Python's calendar overflow when a day's zone is applied
        raise ConfigError(f"bad day {text!r}: give a day from {FIRST_DAY} to {LAST_DAY}")
    return day


def check_window_sizes(initial_s: int, min_s: int, max_s: int, target_points: int) -> None:
    """A backend's query window policy: ``0 < min_s <= initial_s <= max_s`` and a point
    budget of at least one; the message names the command-line options."""
    if not 0 < min_s <= initial_s <= max_s:
        raise ConfigError(
            f"query windows: the first ({initial_s} s, --window-s) must be from the smallest "
            f"({min_s} s, --min-window-s, above 0) to {max_s} s"
        )
    if target_points < 1:
        raise ConfigError(f"target_points (--target-points) must be 1 or more, not {target_points}")


def next_window_ms(
    previous_ms: int,
    previous_points: int,
    target_points: int,
    min_ms: int,
    max_ms: int,
) -> int:
    """Size the next query window from the density of the previous one.

    Aims for ``target_points`` points per request so that memory stays bounded by one
    window whatever the metric's rate, while sparse metrics use few, long requests. Growth is
    capped at 4x per step so that a burst after a quiet spell is not fetched in one go.
    """
    if previous_points <= 0:
        size = previous_ms * 4
    else:
        size = previous_ms * target_points // previous_points
        size = min(size, previous_ms * 4)
    return max(min_ms, min(max_ms, size))
