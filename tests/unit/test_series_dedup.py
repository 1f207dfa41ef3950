"""What the Examon and Prometheus backends share (dxt_core.backends.roles): the archive task
of a backend that reads a unit-day through one client of its server
(:class:`SourceSeriesTasks`) and the options of its ``dxt extract`` after what to extract
(:func:`add_series_extract_arguments`). No server: the day's archive call is replaced."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dxt_core.archive import Archive
from dxt_core.backends.examon.catalog import CatalogEntry as ExamonEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.backends.examon.tasks import TASKS as EXAMON
from dxt_core.backends.prometheus.catalog import CatalogEntry as PrometheusEntry
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.source import PrometheusSource
from dxt_core.backends.prometheus.tasks import TASKS as PROMETHEUS
from dxt_core.backends.roles import SourceSeriesTasks
from dxt_core.cli import build_parser
from dxt_core.errors import ConfigError

DAY = dt.date(2020, 3, 9)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def task_lines() -> Iterator[list[str]]:
    """The archive task's log lines, from a handler on its own logger: once a test in the
    same worker has imported Airflow, its structlog setup sends records to stdout, not to
    the root logger where caplog listens."""
    from dxt_core.backends.roles import log

    lines, level = _Lines(), log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    try:
        yield lines.messages
    finally:
        log.removeHandler(lines)
        log.setLevel(level)


DOWN = "http://127.0.0.1:9"  # nothing listens; no test here asks it anything


@dataclass
class Conn:
    time_zone: str = "Europe/Rome"
    safe_url: str = "http://server.example"


@dataclass
class Client:
    """A source client that says whether it is open."""

    conn: Conn
    events: list[str] = field(default_factory=list)

    def __enter__(self) -> Client:
        self.events.append("open")
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("closed")


class Tasks(SourceSeriesTasks[Conn, Client]):
    backend = "examon"  # its settings give the default format (csv)

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def configured_units(self) -> list[Any]:
        return []

    def unit_name(self, unit: Any) -> str:
        return f"{unit['plugin']}/{unit['metric']}"

    def asset_group(self, unit: Any) -> str:
        return str(unit["plugin"])

    def open_source(self, conn: Conn) -> Client:
        return Client(conn)

    def archive_day(
        self, source: Client, unit: Any, day: dt.date, archive: Archive, fmt: str
    ) -> Any:
        self.calls.append((list(source.events), unit, day, archive, fmt))
        return "report"


@pytest.mark.parametrize(("params", "fmt"), [({}, "csv"), ({"format": "parquet"}, "parquet")])
def test_the_archive_task_opens_a_client_logs_the_unit_day_and_closes_it(
    params: dict[str, str], fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks, archive = Tasks(), Archive(tmp_path)
    if params:  # a run's format is the archive's (another is refused: test_settings_errors)
        monkeypatch.setenv(tasks.format_setting, fmt)
    unit = {"plugin": "ipmi_pub", "metric": "ambient"}
    with task_lines() as messages:
        assert tasks.archive(unit, DAY, archive, Conn(), params) == "report"
    assert tasks.calls == [(["open"], unit, DAY, archive, fmt)]  # inside the open client
    assert messages == [
        f"archiving ipmi_pub/ambient for 2020-03-09 (Europe/Rome) from http://server.example "
        f"into {archive.url}"
    ]
    assert tasks.time_zone(lambda: Conn(time_zone="UTC")) == "UTC"


def test_a_bad_format_param_fails_before_the_client_opens(tmp_path: Path) -> None:
    tasks = Tasks()
    with pytest.raises(ConfigError, match="'format' param"):
        tasks.archive(
            {"plugin": "p", "metric": "m"}, DAY, Archive(tmp_path), Conn(), {"format": "x"}
        )
    assert tasks.calls == []


def test_examon_archives_a_catalog_unit_through_its_kairosdb_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dxt_core.backends.examon.archive_day as examon_day

    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        examon_day, "archive_examon_day", lambda *a, **kw: seen.append((*a, kw)) or "done"
    )
    conn, archive = ExamonConnection(url=DOWN, time_zone="UTC"), Archive(tmp_path)
    monkeypatch.setenv("DXT_EXAMON_FORMAT", "parquet")  # the archive's format
    with task_lines() as messages:
        unit = {"metric": "ambient", "plugin": "ipmi_pub"}
        assert EXAMON.archive(unit, DAY, archive, conn, {"format": "parquet"}) == "done"
    [(source, entry, day, into, kw)] = seen
    assert isinstance(source, KairosDBSource) and source.conn is conn
    assert (entry, day, into, kw) == (
        ExamonEntry("ambient", "ipmi_pub"),
        DAY,
        archive,
        {"fmt": "parquet"},
    )
    assert messages == [
        f"archiving ipmi_pub/ambient for 2020-03-09 (UTC) from {DOWN} into {archive.url}"
    ]
    assert EXAMON.time_zone(lambda: conn) == "UTC"


@pytest.mark.parametrize(
    ("unit", "entry"),
    [
        ({"metric": "up", "selector": "up"}, PrometheusEntry("up", "up")),
        ({"metric": "up"}, PrometheusEntry("up", "up")),  # no selector: the metric itself
        ({"metric": "gpu", "selector": '{job="dcgm"}'}, PrometheusEntry("gpu", '{job="dcgm"}')),
    ],
)
def test_prometheus_archives_a_unit_through_its_source(
    unit: dict[str, str],
    entry: PrometheusEntry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dxt_core.backends.prometheus.archive_day as prometheus_day

    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        prometheus_day, "archive_prometheus_day", lambda *a, **kw: seen.append((*a, kw)) or "done"
    )
    conn, archive = PrometheusConnection(url=DOWN), Archive(tmp_path)
    with task_lines() as messages:
        assert PROMETHEUS.archive(unit, DAY, archive, conn, {}) == "done"
    [(source, got, day, into, kw)] = seen
    assert isinstance(source, PrometheusSource) and source.conn is conn
    assert (got, day, into, kw) == (entry, DAY, archive, {"fmt": "csv"})
    zone = conn.time_zone
    assert messages == [
        f"archiving {entry.name} for 2020-03-09 ({zone}) from {DOWN} into {archive.url}"
    ]


def _extract_parser(backend: str) -> argparse.ArgumentParser:
    sub = next(
        a for a in build_parser(backend)._actions if isinstance(a, argparse._SubParsersAction)
    )
    extract = sub.choices["extract"]
    inner = next(a for a in extract._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = inner.choices[backend]
    return parser


SHARED = [
    "--start-day", "--end-day", "--archive", "--format", "--workers", "--retries", "--window-s",
    "--min-window-s", "--target-points", "--refetch", "--replace", "--quiet",
]  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "workers", "window_s", "target_points"),
    [("examon", 4, 900, 100_000), ("prometheus", 2, 3600, 500_000)],
)
def test_both_extract_commands_end_with_the_same_options(
    backend: str, workers: int, window_s: int, target_points: int
) -> None:
    parser = _extract_parser(backend)
    flags = [a.option_strings[-1] for a in parser._actions if a.option_strings]
    # dxt's -v/--verbose, taken after every command too, comes last
    assert flags.pop() == "--verbose"
    assert flags[-len(SHARED) :] == SHARED  # in this order, after what to extract
    fmt = next(a for a in parser._actions if "--format" in a.option_strings)
    # no default in the parser: each command chooses (csv; Examon: the archive's layout)
    assert (fmt.choices, fmt.default) == (("csv", "parquet"), None)
    args = parser.parse_args(["--url", DOWN, "--start-day", "2020-03-09", "--archive", "a", "-q"])
    assert (args.workers, args.window_s, args.min_window_s) == (workers, window_s, 300)
    assert (args.target_points, args.retries, args.format) == (target_points, 4, None)
    assert args.quiet and not args.refetch and not args.replace and args.end_day is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--url", DOWN, "--start-day", "2020-03-09"])  # --archive required
