"""Injected faults: delays per request and per site, and the "too much data" refusal."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Final

from dxt_core.backends.kwollect.simulator.model import SimSettings
from dxt_core.backends.kwollect.simulator.query import ApiError

#: ``api.get_metrics`` after the statement timeout (kwollect ``kwollect_setup_db.py``:
#: ``raise Exception("Request timeout, too much data to process.")``, SQLSTATE 38000).
TOO_MUCH_DATA: Final = "Exception: Request timeout, too much data to process."
#: Settings that ``POST /_sim/config`` may change.
CONFIGURABLE: Final = frozenset(
    {
        "delay_s",
        "site_delay_s",
        "max_points",
        "timeout_delay_s",
        "stray_offset_s",
        "expired_before_s",
        "slow_requests",
        "slow_delay_s",
    }
)


def _seconds(value: Any, *, optional: bool = False, signed: bool = False) -> bool:
    if value is None:
        return optional
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and (signed or value >= 0)


def _check_setting(key: str, value: Any) -> None:
    """Refuse a ``POST /_sim/config`` value of the wrong kind, before any is applied (the
    settings change all together or not at all)."""
    if key in ("delay_s", "timeout_delay_s", "slow_delay_s"):
        ok, want = _seconds(value), "a finite number of seconds >= 0"
    elif key == "stray_offset_s":
        ok, want = _seconds(value, optional=True, signed=True), "null or a finite number"
    elif key == "expired_before_s":
        ok, want = _seconds(value, optional=True), "null or epoch seconds >= 0"
    elif key == "site_delay_s":
        ok = isinstance(value, dict) and all(
            isinstance(site, str) and _seconds(v) for site, v in value.items()
        )
        want = "an object of site: seconds >= 0"
    elif key == "slow_requests":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        want = "an integer >= 0"
    else:  # max_points
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        ok = ok and (value is None or value >= 0)
        want = "null or an integer >= 0"
    if not ok:
        raise ApiError(400, f"{key} must be {want}, got {value!r}")


class Faults:
    """Applies the run-time fault settings of :class:`SimSettings` to one metrics request."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()

    def configure(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - CONFIGURABLE
        if unknown:
            allowed = sorted(CONFIGURABLE)
            raise ApiError(400, f"unknown settings {sorted(unknown)}; allowed {allowed}")
        for key, value in changes.items():
            _check_setting(key, value)
        for key, value in changes.items():
            setattr(self.settings, key, value)

    def delay(self, site: str) -> None:
        s = self.settings
        delay = s.delay_s + s.site_delay_s.get(site, 0.0)
        with self._lock:
            if s.slow_requests > 0:
                s.slow_requests -= 1
                delay += s.slow_delay_s
        if delay:
            time.sleep(delay)

    def stray_point_us(self, start_us: int) -> int | None:
        """The time of a point from outside the window to add first (a proxy's mistake), or
        None: ``stray_offset_s`` seconds before the window's start."""
        offset = self.settings.stray_offset_s
        return None if offset is None else start_us - round(offset * 1_000_000)

    def retained(self, start_us: int, end_us: int) -> int:
        """The start of a window's rows still kept (``expired_before_s``, retention), at
        most its end (nothing kept)."""
        cut = self.settings.expired_before_s
        return start_us if cut is None else min(max(start_us, round(cut * 1_000_000)), end_us)

    def too_much_data(self, points: int) -> bool:
        """Whether an answer of ``points`` points is refused (after ``timeout_delay_s``)."""
        s = self.settings
        if s.max_points is not None and points > s.max_points:
            if s.timeout_delay_s:
                time.sleep(s.timeout_delay_s)
            return True
        return False
