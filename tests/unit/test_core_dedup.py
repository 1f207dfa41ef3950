"""Code that once stood twice and now stands once: reconcile's per-day comparison, and the
collectd-es output formats (one list, one check, for the setting, the run's Param, the export
and ``dxt extract collectd-es --format``)."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.backends.collectd_es import archive_day, tasks
from dxt_core.backends.collectd_es import cli as collectd_cli
from dxt_core.backends.collectd_es.tasks import TASKS, check_formats
from dxt_core.errors import ConfigError, SourceError
from dxt_core.reconcile import SourceCount, reconcile
from tests.unit.core.test_reconcile import archived

DAY = dt.date(2024, 5, 4)


def test_reconcile_compares_every_unit_day_in_order_from_one_pass_iterables(
    tmp_path: Path,
) -> None:
    """Units and days may be iterators (read once); rows come units first, then days, each
    state with its counts, a failed count said and not stopping the others."""
    archive = Archive(tmp_path)
    a, b = ("p", "a"), ("p", "b")
    d1, d2 = DAY, DAY + dt.timedelta(days=1)
    for parts, day, rows in ((a, d1, 10), (a, d2, 10), (b, d1, 10)):
        archived(archive, parts, day, rows)
    counts = {(a, d1): 10, (a, d2): 12, (b, d1): 7}

    def count(parts: tuple[str, ...], day: dt.date) -> SourceCount:
        if (parts, day) not in counts:
            raise SourceError("HTTP 500", url="http://source")
        return SourceCount(counts[(parts, day)], "faked")

    rows = reconcile(archive, "toy", iter([a, b]), iter([d1, d2]), count, record_kept=False)
    assert [(r.parts, r.day, r.state, r.archive_count, r.source_count) for r in rows] == [
        (a, d1, "equal", 10, 10),
        (a, d2, "more", 10, 12),
        (b, d1, "fewer", 10, 7),
        (b, d2, "missing", None, None),
    ]
    assert {r.method for r in rows[:3]} == {"faked"} and rows[3].method == ""
    assert not archive.kept_path(DayKey("toy", b, d1)).exists()  # record_kept=False
    counts.pop((a, d2))
    rows = reconcile(archive, "toy", [a], [d1, d2], count, record_kept=False)
    assert [r.state for r in rows] == ["equal", "error"]
    assert "HTTP 500" in rows[1].detail


def test_the_formats_are_one_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert archive_day.OUTPUT_FORMATS is tasks.OUTPUT_FORMATS
    assert TASKS.params()["formats"]["items"]["enum"] == list(tasks.OUTPUT_FORMATS)
    parser = argparse.ArgumentParser()
    collectd_cli.add_extract_parser(parser.add_subparsers())
    base = ["collectd-es", "A", "B", "--out", "x", "--format"]
    for fmt in tasks.OUTPUT_FORMATS:
        assert parser.parse_args([*base, fmt]).format == fmt
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "csv"])
    assert "invalid choice: 'csv'" in capsys.readouterr().err


def test_a_bad_format_names_where_it_came_from_and_the_formats() -> None:
    assert check_formats([" hdf5", "jsonl", ""], "formats") == ["hdf5", "jsonl"]
    with pytest.raises(ConfigError) as err:
        TASKS.output_formats({"formats": ["jsonl", "xml"]})
    assert str(err.value) == (
        "the run's 'formats' param='jsonl,xml': unknown 'xml'; choose from jsonl, hdf5"
    )
    with pytest.raises(ConfigError) as err:
        TASKS.output_formats({"formats": [" "]})
    assert str(err.value) == "the run's 'formats' param='': none given; choose from jsonl, hdf5"
    assert TASKS.output_formats({"formats": "jsonl"}) == ["jsonl"]


def test_the_run_without_a_formats_param_takes_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DXT_COLLECTD_ES_FORMATS", "hdf5")
    assert TASKS.output_formats({}) == ["hdf5"]
    monkeypatch.setenv("DXT_COLLECTD_ES_FORMATS", "parquet")
    with pytest.raises(ConfigError) as err:
        TASKS.output_formats({})
    assert str(err.value) == (
        "DXT_COLLECTD_ES_FORMATS='parquet': unknown 'parquet'; choose from jsonl, hdf5 "
        "(comma-separated)"
    )


def test_the_export_refuses_an_unknown_format_before_reading(tmp_path: Path) -> None:
    provider = archive_day.saved_pages([], "bb", "saved")
    with pytest.raises(ConfigError) as err:
        archive_day.archive_collectd_es_day(
            provider, "disk", DAY, Archive(tmp_path), formats=["csv"]
        )
    assert str(err.value) == "formats='csv': unknown 'csv'; choose from jsonl, hdf5"
    assert not list(tmp_path.rglob("*"))
