"""Energy from power samples: the trapezoidal integral of a node's best power metric
(wattmetre > PDU outlet > BMC), with the gaps that make it an estimate."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dxt_core.backends.kwollect.source import POWER_METRICS, Point, point_time
from dxt_core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class EnergyResult:
    """Trapezoidal integral of a power series.

    ``mean_watts`` is time-weighted (joules / covered seconds). ``gaps`` lists intervals
    between consecutive samples longer than ``gap_factor`` times the expected period; the
    integral bridges them linearly, so a long gap makes ``joules`` an estimate. With a
    window, ``uncovered`` gives the seconds of it before the first sample and after the
    last, which the integral does not cover (nothing is extrapolated).
    """

    joules: float
    mean_watts: float | None
    max_watts: float | None
    samples: int
    covered_seconds: float
    gaps: list[dict[str, Any]]
    uncovered: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "joules": self.joules,
            "mean_watts": self.mean_watts,
            "max_watts": self.max_watts,
            "samples": self.samples,
            "covered_seconds": self.covered_seconds,
            "gaps": self.gaps,
        }
        if self.uncovered is not None:
            out["uncovered"] = self.uncovered
        return out


def integrate_power(
    times: Iterable[dt.datetime],
    watts: Iterable[float],
    period_s: float | None = None,
    gap_factor: float = 3.0,
    window: tuple[dt.datetime, dt.datetime] | None = None,
) -> EnergyResult:
    """Energy of samples ``watts`` at ``times`` (oldest first) by the trapezoidal rule.

    Args:
        period_s: expected sampling period; default the median interval.
        gap_factor: an interval longer than ``gap_factor * period_s`` is reported as a gap.
        window: the interval the energy is asked for: its seconds before the first sample
            and after the last are reported as ``uncovered``.

    ``times`` and ``watts`` may be lists, pandas Series (by position, whatever their index)
    or NumPy arrays; times are aware datetimes (pandas Timestamps included), or NumPy
    ``datetime64`` values, read as UTC (as pandas holds an aware column's ``.values``).

    Raises:
        ConfigError: lengths differ, a time is naive or not a time, a value is not a number,
            or the samples are not in chronological order.
    """
    times = [_aware(t, i) for i, t in enumerate(times)]
    try:
        watts = [float(w) for w in watts]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"power values must be numbers ({exc})") from None
    if len(times) != len(watts):
        raise ConfigError(f"{len(times)} timestamps but {len(watts)} values")
    n = len(watts)
    uncovered = _uncovered(times, window)
    if n == 0:
        return EnergyResult(0.0, None, None, 0, 0.0, [], uncovered)
    if n == 1:
        return EnergyResult(0.0, float(watts[0]), float(watts[0]), 1, 0.0, [], uncovered)
    deltas = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    if any(d < 0 for d in deltas):
        raise ConfigError("power samples are not in chronological order")
    if period_s is None:
        period_s = sorted(deltas)[len(deltas) // 2] or 1.0
    joules = math.fsum((watts[i] + watts[i + 1]) / 2.0 * deltas[i] for i in range(n - 1))
    covered = (times[-1] - times[0]).total_seconds()
    gaps = [
        {
            "start": times[i].isoformat(),
            "end": times[i + 1].isoformat(),
            "seconds": deltas[i],
        }
        for i in range(n - 1)
        if deltas[i] > gap_factor * period_s
    ]
    return EnergyResult(
        joules,
        joules / covered if covered > 0 else float(watts[0]),
        float(max(watts)),
        n,
        covered,
        gaps,
        uncovered,
    )


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _aware(t: object, i: int) -> dt.datetime:
    """Sample ``i``'s time as an aware datetime (see :func:`integrate_power`)."""
    if isinstance(t, dt.datetime):
        if t.tzinfo is None:
            raise ConfigError(
                f"time {i} ({t.isoformat()}) is naive: give aware times (e.g. "
                "pandas.to_datetime(..., utc=True), or tzinfo=datetime.UTC)"
            )
        return t
    if type(t).__name__ == "datetime64":
        microseconds = int(t.astype("datetime64[us]").astype("int64"))  # type: ignore[attr-defined]
        return _EPOCH + dt.timedelta(microseconds=microseconds)
    raise ConfigError(f"time {i} ({t!r}) is not a datetime")


def _uncovered(
    times: Sequence[dt.datetime], window: tuple[dt.datetime, dt.datetime] | None
) -> dict[str, float] | None:
    """Seconds of ``window`` before the first sample and after the last (the whole window
    before "the first" when there is none)."""
    if window is None:
        return None
    start, stop = window
    if not times:
        return {"before_first_s": max(0.0, (stop - start).total_seconds()), "after_last_s": 0.0}
    return {
        "before_first_s": max(0.0, (times[0] - start).total_seconds()),
        "after_last_s": max(0.0, (stop - times[-1]).total_seconds()),
    }


def node_energy(
    points: Sequence[Point],
    period_s: Callable[[str], float | None],
    window: tuple[dt.datetime, dt.datetime] | None = None,
) -> dict[str, Any]:
    """One node's energy from its best power metric among ``points`` (its samples of the
    :data:`POWER_METRICS`, oldest first); ``window``: see :func:`integrate_power`.

    The metric is the first of :data:`POWER_METRICS` that has samples; a BMC series that reads
    0 throughout is skipped (some BMCs do). ``period_s(metric)`` is the metric's expected
    sampling period (None: the median interval).
    """
    per_metric: dict[str, list[Point]] = {}
    for p in points:
        per_metric.setdefault(p["metric_id"], []).append(p)
    skipped: list[str] = []
    result: dict[str, Any] = {
        "metric": None,
        "joules": None,
        "mean_watts": None,
        "max_watts": None,
        "samples": 0,
        "gaps": [],
    }
    for metric in POWER_METRICS:
        samples = per_metric.get(metric)
        if not samples:
            continue
        values = [float(p["value"]) for p in samples]
        if metric == "bmc_node_power_watt" and all(v == 0 for v in values):
            skipped.append(f"{metric} reads 0 throughout")
            continue
        e = integrate_power(
            [point_time(p) for p in samples], values, period_s(metric), window=window
        )
        result = {"metric": metric, **e.as_dict()}
        break
    if skipped:
        result["skipped"] = skipped
    if result["metric"] is None:
        if window is not None:
            result["uncovered"] = _uncovered([], window)
        result["reason"] = "no usable power metric (" + ", ".join(POWER_METRICS) + ") in the window"
    return result
