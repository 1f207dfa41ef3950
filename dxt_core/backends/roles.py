"""A backend's roles as interfaces mypy checks: its DAG without Airflow
(:class:`BackendTasks`), its CLI (:class:`CliRole`) and its simulator (:class:`SimulatorRole`).

The Airflow half (``dxt_core.airflow``) is generic: one hook built from the backend's
connection spec, one day-end wait, one units task, one archive task, one coverage grid. Each
backend says what differs by subclassing :class:`BackendTasks` in its ``tasks`` module, as
``TASKS`` (its :class:`~dxt_core.backends.Backend` declaration's ``tasks`` role, unless that
names another object). mypy checks the subclass against this interface.

A *unit* is what one mapped archive task gets: a JSON-able value (a string, or a dict of
strings and lists), since Airflow passes it through XCom. A backend maps it to its display
name (equal to the task's rendered map index), its asset group and its archive call.
"""

from __future__ import annotations

import argparse
import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from dxt_core import masking
from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from pathlib import Path

    from dxt_core.archive import Archive
    from dxt_core.archive_day import DayReport
    from dxt_core.publish.archive_scan import DayFile, UnitMonth
    from dxt_core.publish.tree import ArchiveTree
    from dxt_core.reconcile import RecentReport, Recount

log = masking.logger("dxt_core.airflow")

#: The backend's connection object (what its ``connection.SPEC`` builds).
C = TypeVar("C")

#: One unit of a DAG run: JSON-able (a ``str`` or a ``dict`` of plain values).
Unit = Any


class BackendTasks(ABC, Generic[C]):
    """A backend's DAG, minus Airflow: its units, its day's zone, its archive call.

    Class attributes (read at DAG parse time; keep them constants):
        backend: the registry name (``examon``), as in the package's ``Backend``.
        group: what the first archive path part is (``plugin``, ``site``): the coverage grid's
            row groups and the asset group's kind.
        units_task_id: the task that lists the units at run time (``catalog``); ``None``
            when the units are known at parse time (:meth:`configured_units`, no network).
        map_index_template: the mapped instances' names in the UI; it must render what
            :meth:`unit_name` returns (``unit`` is the task's argument).
        pooled: whether the archive task runs in the backend's pool.
        tags: the DAG's tags besides ``dxt``.
        counts: whether each manifest records the source's own count of the unit-day
            (``source_count``; the contract suite checks it).

    A backend that can count at the source overrides :meth:`recount`: the DAG then has a
    ``reconcile_recent_days`` task that calls :meth:`reconcile` for the previous
    ``DXT_<NAME>_RECONCILE_DAYS`` days (``common_settings(..., reconcile=True)``, in
    :mod:`dxt_core.backends`).

    Every method runs inside a task process (or the coverage view), never at import time;
    import the backend's heavy modules (its source, writers) inside them.
    """

    backend: ClassVar[str]
    group: ClassVar[str] = "group"
    units_task_id: ClassVar[str | None] = "units"
    map_index_template: ClassVar[str] = "{{ task.op_kwargs['unit'] }}"
    pooled: ClassVar[bool] = True
    tags: ClassVar[tuple[str, ...]] = ()
    counts: ClassVar[bool] = False
    #: the DAG's documentation (its Docs tab) when its file gives none (``dxt dags write``)
    dag_doc: ClassVar[str] = ""

    def settings(self) -> dict[str, Any]:
        """The backend's settings by short key (``DXT_<NAME>_<KEY>``, then ``[dxt]``)."""
        from dxt_core.backends import dag_settings

        return dag_settings(self.backend)

    def params(self) -> dict[str, dict[str, Any]]:
        """Params of a manual trigger besides ``day`` and ``replace``: name -> the keyword
        arguments of ``airflow.sdk.Param`` (``default`` included). Read at parse time."""
        return {}

    @abstractmethod
    def configured_units(self) -> list[Unit]:
        """The units the settings name, without asking the server (parse time when
        ``units_task_id`` is ``None``)."""

    def units(self, connect: Callable[[], C], max_map_length: int | None) -> list[Unit]:
        """The units of one run (the ``units_task_id`` task). ``connect()`` builds the
        connection from the DAG's Airflow connection. Default: :meth:`configured_units`."""
        found = self.configured_units()
        check_map_length(len(found), max_map_length, f"{self.backend} units")
        return found

    @abstractmethod
    def unit_name(self, unit: Unit) -> str:
        """The unit's name: its task's rendered map index and its coverage grid row."""

    @abstractmethod
    def asset_group(self, unit: Unit) -> str:
        """The asset group (``dxt-archive/<backend>/<group>``) the unit's day events go to."""

    def configured_parts(self) -> list[tuple[str, ...]]:
        """The archive path parts of the configured units, for the coverage grid; no
        network. Default: none (the grid shows the units the archive index holds)."""
        return []

    def time_zone(self, connect: Callable[[], C]) -> str:
        """The zone whose midnights bound the archive's days. Default UTC."""
        return "UTC"

    @abstractmethod
    def archive(
        self,
        unit: Unit,
        day: dt.date,
        archive: Archive,
        conn: C,
        params: Mapping[str, Any],
    ) -> DayReport:
        """Archive one unit-day from the server ``conn`` points at; ``params`` are the run's
        Params (the day and ``replace`` are already applied)."""

    def recount(
        self, archive: Archive, conn: C, params: Mapping[str, Any]
    ) -> AbstractContextManager[Recount]:
        """The reconcile role: a context that opens what counting needs (a client of
        ``conn``) and gives a :class:`~dxt_core.reconcile.Recount`: the units' archive parts,
        a counter that asks the source for counts only, and a refetch that archives a day
        again (in the format ``params`` or the day's manifest names). A backend that
        overrides it gets the DAG's ``reconcile_recent_days`` task and the coverage view's
        Reconcile button. Not overridden: the backend does not reconcile."""
        raise NotImplementedError(f"backend {self.backend!r} does not reconcile")

    def reconciles(self) -> bool:
        """Whether the backend declares the reconcile role (overrides :meth:`recount`)."""
        return type(self).recount is not BackendTasks.recount

    def reconcile(
        self,
        day: dt.date,
        n_days: int,
        archive: Archive,
        conn: C,
        params: Mapping[str, Any],
        *,
        refetch: bool = True,
        record_kept: bool = True,
    ) -> RecentReport:
        """Ask the source for the counts only of the ``n_days`` days before ``day``, compare
        them with the manifests and refetch the units whose day grew (late data; the replaced
        file is kept in ``.versions/``), through :meth:`recount` and
        :func:`dxt_core.reconcile.reconcile_recent`. With ``refetch=False`` it only counts
        (the coverage view's "Reconcile" button); with ``record_kept`` a day the source has
        fewer points of is recorded as kept."""
        with self.recount(archive, conn, params) as recount:
            return recount.run(day, n_days, refetch=refetch, record_kept=record_kept)

    #: The modules :meth:`archive` uses, relative to the backend's package: a Celery worker's
    #: main process imports them once (:meth:`preload`), not each task process.
    preload_modules: ClassVar[tuple[str, ...]] = (".archive_day",)

    def preload(self) -> None:
        """Import :attr:`preload_modules`, once, in a Celery worker's main process."""
        import importlib

        from dxt_core.backends import get

        package = get(self.backend).package
        for name in self.preload_modules:
            importlib.import_module(name, package)


class CliRole(Protocol):
    """``dxt extract <backend>`` and ``dxt coverage <backend>``: the backend's ``cli`` module
    satisfies it (mypy checks a module against a Protocol)."""

    def add_extract_parser(self, sub: Any) -> None:
        """Add ``dxt extract <backend>`` to the ``extract`` subparsers."""

    def coverage_units(self, args: argparse.Namespace) -> list[tuple[str, ...]]:
        """The archive path parts ``dxt coverage`` checks, from its options."""

    def describe_parts(self, parts: tuple[str, ...]) -> dict[str, str]:
        """A unit's parts by name (``{"site": ..., "metric": ...}``) for ``--json``."""

    def add_coverage_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dxt coverage`` that choose this backend's units."""


class SimulatorRole(Protocol):
    """A stand-in server run as ``dxt simulate <backend>`` (or ``python -m``)."""

    def main(self, argv: list[str] | None = None) -> int:
        """Serve until SIGTERM/SIGINT; print ``listening on <url>`` first."""


def check_map_length(n: int, max_map_length: int | None, what: str) -> None:
    """Airflow's ``[core] max_map_length`` caps how many mapped tasks one list may make."""
    if max_map_length is not None and n > max_map_length:
        raise ConfigError(
            f"{n} {what} exceed Airflow's [core] max_map_length ({max_map_length}): set "
            f"AIRFLOW__CORE__MAX_MAP_LENGTH={round_up_pow2(n)} on the scheduler, API server "
            "and workers, or archive fewer units"
        )


#: The formats of a backend that writes its series as gzip CSV or Parquet, a run's choice.
SERIES_FORMATS: tuple[str, ...] = ("csv", "parquet")


def format_param(
    default: Any, formats: tuple[str, ...], description: str, where: str = "the default format"
) -> dict[str, Any]:
    """The ``format`` Param of a backend that writes one of ``formats`` a run (the keyword
    arguments of ``airflow.sdk.Param``, for :meth:`BackendTasks.params`); a ``default`` not
    among them is an error naming ``where`` it came from (the setting's variable)."""
    check_choice(default, formats, where)
    return {
        "default": default,
        "enum": list(formats),
        "title": "Output format",
        "description": description,
    }


def check_choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    """``value`` if it is one of ``choices``, else an error naming ``where`` and them."""
    if value not in choices:
        raise ConfigError(f"{where}={value!r}: choose one of {', '.join(choices)}")
    return str(value)


def chosen_format(
    params: Mapping[str, Any],
    default: Any,
    formats: tuple[str, ...],
    where: str = "the default format",
) -> str:
    """The run's ``format`` param, else ``default`` (the backend's ``format`` setting, whose
    variable ``where`` names)."""
    if params.get("format"):
        return check_choice(params["format"], formats, "the run's 'format' param")
    return check_choice(default, formats, where)


class SeriesTasks(BackendTasks[C]):
    """A backend that writes each unit-day as gzip CSV or Parquet, the run's ``format``
    Param choosing (default: the backend's ``format`` setting, ``DXT_<NAME>_FORMAT``)."""

    #: the ``format`` Param's description in the trigger form
    format_description: ClassVar[str] = (
        "gzip CSV or Parquet: the archive's format (its setting); another is refused"
    )

    @property
    def format_setting(self) -> str:
        """The variable of the backend's ``format`` setting (``DXT_EXAMON_FORMAT``)."""
        from dxt_core.backends import get

        return get(self.backend).setting("format").env

    def params(self) -> dict[str, dict[str, Any]]:
        default = self.settings()["format"]
        fmt = format_param(default, SERIES_FORMATS, self.format_description, self.format_setting)
        return {"format": fmt}

    def output_format(self, params: Mapping[str, Any]) -> str:
        """The run's ``format`` param, else the ``format`` setting; a param other than the
        setting is refused (the whole run: every unit-day would fail the same way): the
        coverage view, its refills and ``dxt coverage`` read the setting's layout, so a day
        archived in the other one read "missing" for ever, and refills rewrote it again."""
        default = check_choice(self.settings()["format"], SERIES_FORMATS, self.format_setting)
        chosen = chosen_format(params, default, SERIES_FORMATS, self.format_setting)
        if chosen != default:
            error = ConfigError(
                f"the run's 'format' param is {chosen}, but this archive is kept as {default} "
                f"({self.format_setting}): the coverage view, its refills and 'dxt coverage' "
                f"read one layout; to archive as {chosen}, set {self.format_setting}={chosen} "
                "for the workers and the API server alike"
            )
            error.run_wide = True
            raise error
        if chosen == "parquet":  # without pyarrow every unit-day would fail alike
            from dxt_core.writers.parquet import require_pyarrow

            require_pyarrow("Parquet output")
        return chosen


def log_archiving(what: str, day: dt.date, zone: str | None, url: str, into: str) -> None:
    """The archive task's line naming the unit-day, its zone (``None``: UTC days, not
    named), the server and the archive."""
    if zone is None:
        log.info("archiving %s for %s from %s into %s", what, day, url, into)
    else:
        log.info("archiving %s for %s (%s) from %s into %s", what, day, zone, url, into)


def round_up_pow2(n: int) -> int:
    size = 1024
    while size < n:
        size *= 2
    return size


class PublishRole(Protocol):
    """``dxt publish <backend>``: what is backend-specific in turning its archive into a
    dataset (dxt_core/publish does the rest: manifests, typed sorted Parquet, the job table,
    pseudonyms, checksums, Data Package, Croissant, datacard, records). The backend's
    :class:`~dxt_core.backends.Backend` ``publish`` role: ``PUBLISH`` in its package's
    ``publish`` module unless ``publish=`` names another object.

    A *unit* is a tuple of the archive's partition values, one per :attr:`keys` (Examon's
    ``(plugin, metric)``, Prometheus' ``(metric,)``); a unit-month is
    :class:`~dxt_core.publish.archive_scan.UnitMonth`. ``tree`` is the archive being read,
    a directory or an object store (:class:`~dxt_core.publish.tree.ArchiveTree`).
    """

    @property
    def backend(self) -> str:
        """The registry name, as in the backend's ``Backend``."""

    @property
    def keys(self) -> tuple[str, ...]:
        """The unit's partition keys, as in the dataset's paths (``("plugin", "metric")``):
        the datacard's and Croissant's names for a unit."""

    @property
    def folder_columns(self) -> tuple[str, ...]:
        """The :attr:`keys` whose value every day file already holds in a column of that
        name (Examon's ``plugin`` tag): published as they are. A column named as another
        key, or ``year_month``, is published as ``exported_<key>``."""

    @property
    def series_order(self) -> tuple[str, ...]:
        """The tag columns a unit's rows are sorted by first (``("node",)``); then
        ``name``, then the other tags by name, then time."""

    @property
    def time_unit(self) -> str:
        """``ms`` or ``us``: the precision of the published timestamps (the source's)."""

    @property
    def dataset_name(self) -> str:
        """Default ``--name`` (records are named after it)."""

    @property
    def title(self) -> str:
        """Default ``--title``."""

    @property
    def description(self) -> str:
        """What the data is, for the Data Package (``Examon telemetry``)."""

    @property
    def layout_summary(self) -> str:
        """One clause on the layout (``one Parquet file per metric and month``)."""

    @property
    def source(self) -> str:
        """The datacard's Source sentence: which server(s) the data comes from."""

    @property
    def layout(self) -> tuple[str, ...]:
        """The datacard's layout lines (path patterns)."""

    @property
    def example_glob(self) -> str:
        """A glob of metric files for the datacard's DuckDB example."""

    @property
    def columns_note(self) -> str:
        """The datacard's sentence on the metric files' columns (what ``node``, ``name``
        and the tags are for this backend)."""

    def units(self, tree: ArchiveTree) -> list[tuple[str, ...]]:
        """Every unit with a directory in the archive (a clear ConfigError when the archive
        holds none of this backend): e.g.
        :func:`~dxt_core.publish.archive_scan.partition_units`."""

    def scan(self, tree: ArchiveTree, unit: tuple[str, ...], year: int, month: int) -> UnitMonth:
        """One unit-month's days, through :func:`~dxt_core.publish.archive_scan.scan_unit_month`
        with the unit's directories and :meth:`day_file` (set ``jobs`` on a job table)."""

    def day_file(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """Which file a day's manifest names is the one to publish (an entry of
        :func:`~dxt_core.archive.manifest_files`); None: none this role reads."""

    def read_day(self, day: DayFile, path: Path) -> Iterator[Any]:
        """The rows of one day file (``path``: a local copy of ``day``) as Arrow tables:
        ``timestamp`` (a zoned timestamp), ``value`` (integers, floats or text) and string
        columns (plain or dictionary): ``name`` if any, then the tags."""

    def data_path(self, um: UnitMonth) -> str:
        """The unit-month's Parquet file, relative to the dataset directory."""


def add_series_extract_arguments(
    parser: argparse.ArgumentParser, *, format_help: str, **window: Any
) -> None:
    """The options of ``dxt extract <backend>`` after what to extract, for a backend that asks
    for a day in query windows and writes it as gzip CSV or Parquet: the days, ``--archive``,
    ``--format`` (``format_help``), the window options (``window``: the keyword arguments of
    :func:`dxt_core.runner.add_window_arguments`), ``--refetch``, ``--replace`` and
    ``--quiet``."""
    from dxt_core.runner import add_arguments, add_day_arguments, add_window_arguments

    add_day_arguments(parser)
    parser.add_argument(
        "--archive", required=True, help="archive root: a directory or s3://bucket/prefix"
    )
    parser.add_argument("--format", choices=SERIES_FORMATS, default=None, help=format_help)
    add_window_arguments(parser, **window)
    add_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def check_series_extract_options(args: Any) -> None:
    """Refuse the numbers :func:`add_series_extract_arguments` took that cannot be meant
    (``--workers``, ``--retries``, the window options), for a command that asks its server
    something before :func:`dxt_core.runner.run_extract` (which checks ``--workers`` again):
    bad arguments are refused before any request, as ``dxt extract examon`` refuses them."""
    from dxt_core.runner import retry_policy, window_options

    window_options(args)
    retry_policy(args)
    if args.workers < 1:  # the words of run_extract's own check
        raise ConfigError(f"--workers {args.workers}: give 1 or more (metric-days at once)")


class ZonedConnection(Protocol):
    """What :class:`SourceSeriesTasks` reads of its connection."""

    @property
    def time_zone(self) -> str:
        """The zone whose midnights bound the archive's days."""

    @property
    def safe_url(self) -> str:
        """The server's URL without credentials."""


#: A :class:`SourceSeriesTasks`' connection.
Z = TypeVar("Z", bound=ZonedConnection)
#: A :class:`SourceSeriesTasks`' source: a client of the server its connection points at.
S = TypeVar("S")


class SourceSeriesTasks(SeriesTasks[Z], Generic[Z, S]):
    """A :class:`SeriesTasks` whose days are in its connection's ``time_zone`` and whose
    archive task reads a unit-day through one client of the server (:meth:`open_source`)."""

    @abstractmethod
    def open_source(self, conn: Z) -> AbstractContextManager[S]:
        """A client of the server ``conn`` points at, for one task."""

    @abstractmethod
    def archive_day(
        self, source: S, unit: Unit, day: dt.date, archive: Archive, fmt: str
    ) -> DayReport:
        """Archive one unit-day from ``source`` in the format ``fmt``."""

    def time_zone(self, connect: Callable[[], Z]) -> str:
        return connect().time_zone

    def archive(
        self,
        unit: Unit,
        day: dt.date,
        archive: Archive,
        conn: Z,
        params: Mapping[str, Any],
    ) -> DayReport:
        fmt = self.output_format(params)
        with self.open_source(conn) as source:
            log_archiving(self.unit_name(unit), day, conn.time_zone, conn.safe_url, archive.url)
            return self.archive_day(source, unit, day, archive, fmt)
