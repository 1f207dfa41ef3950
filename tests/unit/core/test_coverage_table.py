"""``dxt coverage``'s text table over long ranges: one mark per day up to a quarter, then per
week, then per month, each its worst day's; a line of three years of a unit is 97 characters
(it was 1,157)."""

from __future__ import annotations

import datetime as dt

from dxt_core.coverage import CoverageRow
from dxt_core.coverage_table import DAYS_AT_MOST, NAME_WIDTH, table_lines
from dxt_core.windows import days

UNIT = ("ipmi_pub", "ambient")


def rows_of(day_list, bad):
    return [CoverageRow(UNIT, d, bad.get(d, "archived")) for d in day_list]


def test_three_years_are_one_mark_per_month_the_worst_days():
    day_list = list(days(dt.date(2022, 1, 1), dt.date(2024, 12, 31)))
    bad = {dt.date(2022, 3, 9): "missing", dt.date(2023, 6, 30): "corrupt",
           dt.date(2023, 6, 1): "missing", dt.date(2024, 12, 31): "empty"}  # fmt: skip
    lines = list(table_lines(rows_of(day_list, bad), day_list, show_all=False))
    assert lines[1].startswith("one mark per month: the mark of its worst day")
    assert (
        lines[2].rstrip() == " " * (NAME_WIDTH + 1) + "2022" + " " * 8 + "2023" + " " * 8 + "2024"
    )
    marks = lines[3][NAME_WIDTH + 1 :]
    assert len(lines[3]) == NAME_WIDTH + 1 + 36
    assert marks == "##." + "#" * 14 + "X" + "#" * 17 + "o"


def test_a_year_is_one_mark_per_week():
    day_list = list(days(dt.date(2024, 1, 1), dt.date(2024, 12, 31)))  # 2024-01-01: a Monday
    lines = list(table_lines(rows_of(day_list, {dt.date(2024, 1, 14): "missing"}), day_list, False))
    assert lines[1].startswith("one mark per week (Monday to Sunday)")
    assert lines[3][NAME_WIDTH + 1 :] == "#." + "#" * 51


def test_a_quarter_is_one_mark_per_day_as_before():
    day_list = list(days(dt.date(2024, 1, 1), dt.date(2024, 1, 1) + dt.timedelta(DAYS_AT_MOST - 1)))
    lines = list(table_lines(rows_of(day_list, {day_list[3]: "corrupt"}), day_list, False))
    assert len(lines) == 2 and lines[0].startswith("legend:")
    assert lines[1] == f"{'ipmi_pub/ambient':<{NAME_WIDTH}} ###X" + "#" * (DAYS_AT_MOST - 4)
    assert list(table_lines(rows_of(day_list, {}), day_list, False)) == lines[:1]


def ruler(first: dt.date, last: dt.date) -> str:
    day_list = list(days(first, last))
    lines = list(table_lines(rows_of(day_list, {}), day_list, show_all=True))
    return lines[2][NAME_WIDTH + 1 :]


def test_the_ruler_names_the_years_of_the_range():
    """A range from 2025-01-01 (a Wednesday) showed 2024 alone: its first week starts on
    Monday 2024-12-30. One from 2025-12-29 showed 2025 alone: the first week's label
    crowded out 2026's."""
    assert ruler(dt.date(2025, 1, 1), dt.date(2025, 5, 30)) == "2025"
    assert ruler(dt.date(2025, 12, 29), dt.date(2026, 5, 30)) == " 2026"
    assert ruler(dt.date(2025, 9, 1), dt.date(2026, 5, 30)) == "2025" + " " * 14 + "2026"
    assert ruler(dt.date(2025, 7, 1), dt.date(2026, 1, 2)) == "2025"  # 2026's would be cut
    assert (
        ruler(dt.date(2022, 1, 1), dt.date(2024, 12, 31))
        == "2022" + " " * 8 + "2023" + " " * 8 + "2024"
    )
