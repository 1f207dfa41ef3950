"""Generated test data for the Prometheus-family tests: a few labelled series at 15 s.

Every sample time is a multiple of 15 s since the epoch, so a sample falls exactly on each
local midnight of Europe/Rome (midnights are whole hours in UTC). The days covered include
both DST changes of 2024 (2024-03-31 lasts 23 hours, 2024-10-27 lasts 25 hours).

Values have at most two decimals and stay below 10**7: VictoriaMetrics stores a value as a
decimal mantissa and exponent (lib/decimal), exact for such numbers, so both servers give
back the same floats.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dxt_core.windows import day_window

TIME_ZONE = "Europe/Rome"
STEP_MS = 15_000
#: The days archived by the tests, each with its neighbours loaded too.
SPRING = (dt.date(2024, 3, 30), dt.date(2024, 3, 31), dt.date(2024, 4, 1))
AUTUMN = (dt.date(2024, 10, 27),)


@dataclass(frozen=True)
class SeriesSpec:
    name: str
    labels: tuple[tuple[str, str], ...]

    def value(self, ts_ms: int, k: int) -> float:
        i = ts_ms // STEP_MS
        if self.name.endswith("_total"):
            return float(i % 100_000 + k)  # whole numbers
        return round(20 + ((i * 7 + k * 13) % 1000) / 100, 2)  # 20.00 .. 29.99


SERIES: tuple[SeriesSpec, ...] = (
    SeriesSpec("node_temp_celsius", (("instance", "n1:9100"), ("job", "node"), ("node", "n1"))),
    SeriesSpec("node_temp_celsius", (("instance", "n2:9100"), ("job", "node"), ("node", "n2"))),
    # a series with one more label: the metric's columns are the union
    SeriesSpec(
        "node_temp_celsius",
        (("instance", "n3:9100"), ("job", "node"), ("node", "n3"), ("rack", "r7")),
    ),
    SeriesSpec("node_jobs_total", (("instance", "n1:9100"), ("job", "slurm"))),
    SeriesSpec("node_jobs_total", (("instance", "n2:9100"), ("job", "slurm"))),
    # another metric with exactly the labels of n1's temperature: a selector of both makes
    # count_over_time give two series of one label set (it drops __name__)
    SeriesSpec("node_temp_max_celsius", (("instance", "n1:9100"), ("job", "node"), ("node", "n1"))),
)
METRICS = tuple(sorted({s.name for s in SERIES}))


def spans(days: Sequence[dt.date] = SPRING + AUTUMN) -> list[tuple[int, int]]:
    """[start, end] ms spans loaded: each archived day plus one hour either side, so that
    the neighbours' midnight samples exist (both ends included)."""
    out = []
    for d in days:
        w = day_window(d, TIME_ZONE)
        out.append((w.start_ms - 3_600_000, w.end_ms + 3_600_000))
    out.sort()
    merged: list[tuple[int, int]] = []
    for a, b in out:
        if merged and a <= merged[-1][1] + STEP_MS:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def samples(spec: SeriesSpec, k: int) -> Iterator[tuple[int, float]]:
    for a, b in spans():
        for t in range(a, b + 1, STEP_MS):
            yield t, spec.value(t, k)


def expected_rows(metric: str, day: dt.date) -> int:
    w = day_window(day, TIME_ZONE)
    n = sum(1 for s in SERIES if s.name == metric)
    return n * ((w.end_ms - w.start_ms) // STEP_MS)


def _labels(spec: SeriesSpec) -> str:
    return ",".join(f'{k}="{v}"' for k, v in spec.labels)


def _value(v: float) -> str:
    return repr(v)


def openmetrics() -> str:
    """OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``: timestamps in
    seconds, one metric family at a time, ending ``# EOF``."""
    lines: list[str] = []
    for metric in METRICS:
        kind = "counter" if metric.endswith("_total") else "gauge"
        family = metric.removesuffix("_total") if kind == "counter" else metric
        lines.append(f"# TYPE {family} {kind}")
        for k, spec in enumerate(SERIES):
            if spec.name != metric:
                continue
            lab = _labels(spec)
            for t, v in samples(spec, k):
                lines.append(f"{metric}{{{lab}}} {_value(v)} {t // 1000}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def exposition(limit: int = 100_000) -> Iterator[str]:
    """Prometheus text format with millisecond timestamps for VictoriaMetrics'
    ``/api/v1/import/prometheus``, in chunks of ``limit`` lines."""
    lines: list[str] = []
    for k, spec in enumerate(SERIES):
        lab = _labels(spec)
        for t, v in samples(spec, k):
            lines.append(f"{spec.name}{{{lab}}} {_value(v)} {t}")
            if len(lines) >= limit:
                yield "\n".join(lines) + "\n"
                lines = []
    if lines:
        yield "\n".join(lines) + "\n"
