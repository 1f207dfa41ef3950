"""``dxt coverage``'s text table: one line per unit (those with a day neither archived nor
empty, or all with ``--all``), one mark per day; over a range longer than
:data:`DAYS_AT_MOST` days one mark per week (Monday to Sunday), and over more than
:data:`WEEKS_AT_MOST` weeks one per month, each the mark of its worst day (:data:`WORST_FIRST`),
so that a line stays readable (three years were 1,157 characters a line, 811 lines)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dxt_core.manifests import NOT_OVER_DETAIL

#: Longest range shown one mark per day (a quarter), then per week up to WEEKS_AT_MOST.
DAYS_AT_MOST = 92
WEEKS_AT_MOST = 78
NAME_WIDTH = 60

MARK = {
    "archived": "#",
    "empty": "o",
    "missing": ".",
    "corrupt": "X",
    "kept": "K",
    "holes": "h",
    "not over": "~",
}
#: The mark of a week or month is its worst day's: the first of these its days have.
WORST_FIRST = ("corrupt", "missing", "not over", "kept", "holes", "empty", "archived")
_RANK = {s: i for i, s in enumerate(WORST_FIRST)}

LEGEND = (
    "legend: # archived  h archived with holes (unreadable points, retried)  o empty  "
    "~ archived before its day ended (what the source held then)  . missing  X corrupt  "
    "K kept (the source once had fewer rows; the archive was kept)   "
)


def not_over(r: Any) -> bool:
    """Whether row ``r`` is a day archived (or found empty) before it ended."""
    return r.status in ("archived", "empty") and r.detail.startswith(NOT_OVER_DETAIL)


def mark(r: Any) -> str:
    """What the table shows of row ``r`` (a key of :data:`MARK`)."""
    if r.kept:
        return "kept"
    if r.status == "archived" and r.detail.startswith("holes:"):
        return "holes"
    return "not over" if not_over(r) else str(r.status)


def scale(days: Sequence[dt.date]) -> tuple[str, Callable[[dt.date], dt.date]]:
    """``("day" | "week" | "month", the first day of a day's column)`` for a range."""
    if len(days) <= DAYS_AT_MOST:
        return "day", lambda d: d

    def monday(d: dt.date) -> dt.date:
        return d - dt.timedelta(days=d.weekday())

    if (monday(days[-1]) - monday(days[0])).days // 7 < WEEKS_AT_MOST:
        return "week", monday  # the weeks the days touch (a column each), not days / 7
    return "month", lambda d: d.replace(day=1)


def _ruler(starts: Sequence[dt.date], first: dt.date) -> str:
    """Each year written from its first column. A column's year is that of its first day in
    the range (``first`` or later: a week from Monday 2024-12-30 of a range from 2025-01-01 is
    2025's); a year of fewer columns than its label needs gives way to the next (the week
    of 2025-12-29 before 2026's: 2026 is written, not 2025 alone), and a label that would be
    cut at the line's end is left out."""
    runs: list[list[int]] = []  # [year, first column, past its last]
    for i, s in enumerate(starts):
        year = max(s, first).year
        if runs and runs[-1][0] == year:
            runs[-1][2] = i + 1
        else:
            runs.append([year, i, i + 1])
    out = [" "] * len(starts)
    free = 0
    for k, (year, a, b) in enumerate(runs):
        label = str(year)
        at = max(a, free)
        short = b - at < len(label) + 1 and k + 1 < len(runs)
        if short or at + len(label) > len(starts):
            continue
        out[at : at + len(label)] = label
        free = at + len(label) + 1
    return "".join(out).rstrip()


def table_lines(rows: Sequence[Any], days: Sequence[dt.date], show_all: bool) -> Iterator[str]:
    """The legend, (over weeks or months) what a mark stands for and a ruler of years, then
    one line per unit: its name and its marks."""
    unit, column_of = scale(days)
    starts = sorted({column_of(d) for d in days})
    col = {s: i for i, s in enumerate(starts)}
    yield LEGEND + f"days {days[0]}..{days[-1]}"
    if unit != "day":
        yield (
            f"one mark per {unit}{' (Monday to Sunday)' if unit == 'week' else ''}: the mark "
            f"of its worst day (X . ~ K h o #); --json, or a range of at most {DAYS_AT_MOST} "
            "days, for each day"
        )
        yield f"{'':<{NAME_WIDTH}} {_ruler(starts, days[0])}"
    by_unit: dict[tuple[str, ...], list[str]] = {}
    for r in rows:
        by_unit.setdefault(r.parts, []).append(mark(r))
    day_col = [col[column_of(d)] for d in days]
    for parts, marks in by_unit.items():
        if not show_all and all(s in ("archived", "empty") for s in marks):
            continue
        worst = [len(WORST_FIRST)] * len(starts)
        for d, s in enumerate(marks):
            c = day_col[d]
            worst[c] = min(worst[c], _RANK[s])
        text = "".join(MARK[WORST_FIRST[w]] if w < len(WORST_FIRST) else " " for w in worst)
        yield f"{'/'.join(parts):<{NAME_WIDTH}} {text}"
