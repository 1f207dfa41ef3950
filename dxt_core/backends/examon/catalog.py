"""Metric catalogs: which (metric, plugin) pairs to archive, and per-plugin options.

A catalog is a CSV file with a header ``metric,plugin`` (the older Marconi100 catalog uses
``name,plugin``; both are accepted). Blank lines and lines starting with ``#`` are ignored.
Every problem is reported with the file and line, and loading stops at the first one so that
a half-read catalog never drives a run.
"""

from __future__ import annotations

import csv
import difflib
import io
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from dxt_core.errors import CatalogError, ConfigError
from dxt_core.paths import check_unit_name

#: Name of the catalog shipped with the package (Marconi100, 811 metrics, 9 plugins).
DEFAULT_CATALOG = "M100_metrics.csv"

_METRIC_HEADERS = ("metric", "name")

#: Parquet value types a plugin may declare (``value_type`` in the plugin options).
VALUE_TYPES = ("double", "int64", "string")
#: Parquet column types a job table may declare (``column_types`` in the plugin options).
COLUMN_TYPES = ("bool", "double", "int64", "string")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One metric to archive: ``metric`` as the backend names it, under ``plugin``."""

    metric: str
    plugin: str

    @property
    def key(self) -> str:
        """Stable identifier, used as the Airflow map index label."""
        return f"{self.plugin}/{self.metric}"


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """How to query one Examon plugin.

    Attributes:
        cluster_tag: the plugin's series carry a ``cluster`` tag, so queries filter on it.
        job_table: the plugin is a job accounting table served by the Examon jobs endpoint,
            not KairosDB; the catalog's metric name is the table name.
        value_type: type of the Parquet ``value`` column of the plugin's metrics:
            ``double``, ``int64`` or ``string``. Unset (the default): ``string`` for a
            metric whose series hold text, ``double`` for every numeric one, whether the
            server prints a value as ``24`` or ``24.5`` (see docs/examon.md).
        column_types: of a job table, the Parquet type of named columns (``bool``,
            ``double``, ``int64`` or ``string``), as ``(column, type)`` pairs; every other
            column is ``string``, so a table's schema never depends on one day's values.
    """

    cluster_tag: bool = False
    job_table: bool = False
    value_type: str | None = None
    column_types: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ExamonOptions:
    """Per-deployment Examon settings: the cluster name and per-plugin options.

    The defaults describe Marconi100 as dxt_examon saw it: only ganglia, ipmi, nagios and
    slurm carry the ``cluster`` tag; ``job_table`` is the job accounting table.
    """

    cluster: str = "marconi100"
    plugins: Mapping[str, PluginOptions] = field(
        default_factory=lambda: {
            "ganglia_pub": PluginOptions(cluster_tag=True),
            "ipmi_pub": PluginOptions(cluster_tag=True),
            "nagios_pub": PluginOptions(cluster_tag=True),
            "slurm_pub": PluginOptions(cluster_tag=True),
            "job_table": PluginOptions(job_table=True),
        }
    )

    #: the plugins the options file names (:meth:`from_toml`), and the file
    named: tuple[str, ...] = ()
    source: str = ""

    def for_plugin(self, plugin: str) -> PluginOptions:
        """Options of ``plugin``; plugins not listed get no cluster filter."""
        return self.plugins.get(plugin, PluginOptions())

    def with_cluster(self, cluster: str | None) -> ExamonOptions:
        """A copy with another cluster name (``None`` keeps this one)."""
        return self if not cluster else replace(self, cluster=cluster)

    @classmethod
    def from_toml(cls, path: str | Path) -> ExamonOptions:
        """Read options from a TOML file, on top of the Marconi100 defaults.

        Example::

            cluster = "marconi100"
            [plugins.ganglia_pub]
            cluster_tag = true
            [plugins.my_jobs]
            job_table = true
            [plugins.slurm_pub]
            value_type = "int64"
        """
        p = Path(path)
        try:
            doc = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{p}: cannot read plugin options (TOML, UTF-8): {exc}") from exc
        unknown_top = sorted(set(doc) - {"cluster", "plugins"})
        if unknown_top:
            # a typo ('clustr', '[plugin.x]') must not leave the defaults in silence: a
            # cluster left at marconi100 archives every cluster-tagged metric-day as empty
            raise ConfigError(
                f"{p}: unknown key(s) {unknown_top}; allowed: cluster, and [plugins.<name>] tables"
            )
        base = cls()
        plugins = dict(base.plugins)
        raw_plugins = doc.get("plugins", {})
        if not isinstance(raw_plugins, dict):
            raise ConfigError(f"{p}: 'plugins' must be a table of [plugins.<name>] sections")
        for name, opts in raw_plugins.items():
            if not isinstance(opts, dict):
                raise ConfigError(f"{p}: [plugins.{name}] must be a table")
            unknown = set(opts) - {"cluster_tag", "job_table", "value_type", "column_types"}
            if unknown:
                raise ConfigError(
                    f"{p}: [plugins.{name}] has unknown key(s) {sorted(unknown)}; "
                    "allowed: cluster_tag, job_table, value_type, column_types"
                )
            value_type = opts.get("value_type")
            if value_type is not None and value_type not in VALUE_TYPES:
                raise ConfigError(
                    f"{p}: plugins.{name}.value_type must be one of {', '.join(VALUE_TYPES)}, "
                    f"not {value_type!r}"
                )
            job_table = _bool(opts.get("job_table", False), p, f"plugins.{name}.job_table")
            plugins[name] = PluginOptions(
                cluster_tag=_bool(opts.get("cluster_tag", False), p, f"plugins.{name}.cluster_tag"),
                job_table=job_table,
                value_type=value_type,
                column_types=_column_types(opts.get("column_types"), job_table, p, name),
            )
        cluster = doc.get("cluster", base.cluster)
        if not isinstance(cluster, str) or not cluster:
            raise ConfigError(f"{p}: 'cluster' must be a non-empty string")
        return cls(cluster=cluster, plugins=plugins, named=tuple(raw_plugins), source=str(p))

    def unused_plugins(self, entries: Sequence[CatalogEntry]) -> str:
        """What to warn of the plugins the options file names that no metric of ``entries``
        (the whole catalog) belongs to, with the closest plugins it has; "" when none: a
        typo (``[plugins.ganglia_pb]``) left the plugin's defaults in silence."""
        have = sorted({e.plugin for e in entries})
        unused = [n for n in self.named if n not in have]
        if not unused:
            return ""
        said = []
        for n in unused:
            close = difflib.get_close_matches(n, have, n=3, cutoff=0.6)
            said.append(f"{n!r}" + (f" (closest: {', '.join(close)})" if close else ""))
        return (
            f"{self.source}: no catalog metric belongs to plugin(s) {'; '.join(said)}: "
            "their options are not used; check the [plugins.<name>] spelling"
        )


def _column_types(raw: Any, job_table: bool, p: Path, name: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    where = f"{p}: plugins.{name}.column_types"
    if not job_table:
        raise ConfigError(f"{where}: only a job table (job_table = true) has columns to type")
    if not isinstance(raw, dict):
        raise ConfigError(f'{where} must be a table, e.g. {{ job_id = "int64" }}')
    for column, kind in raw.items():
        if kind not in COLUMN_TYPES:
            raise ConfigError(
                f"{where}.{column} must be one of {', '.join(COLUMN_TYPES)}, not {kind!r}"
            )
    return tuple(sorted(raw.items()))


def _bool(value: Any, path: Path, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {key} must be true or false, not {value!r}")
    return value


def parse_catalog(text: str, source: str = "<catalog>") -> list[CatalogEntry]:
    """Parse catalog CSV text. ``source`` names the file in error messages."""
    # A byte-order mark (spreadsheets write one) belongs to the file, not to its first
    # line, which may then be a comment as well as the header.
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    header: list[str] | None = None
    header_line = 0
    metric_col = plugin_col = -1
    seen: dict[tuple[str, str], int] = {}
    entries: list[CatalogEntry] = []
    ended = 0  # the line the previous row ended on
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL...
            raise CatalogError(source, reader.line_num, f"not a CSV line: {exc}") from exc
        line, ended = ended + 1, reader.line_num  # a quoted field may span lines
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip().lower() for c in row]
            header_line = line
            metric_col = next((header.index(h) for h in _METRIC_HEADERS if h in header), -1)
            plugin_col = header.index("plugin") if "plugin" in header else -1
            if metric_col < 0 or plugin_col < 0:
                raise CatalogError(
                    source,
                    line,
                    f"header {row!r} must name a 'metric' (or 'name') column and a 'plugin' "
                    "column, e.g. 'metric,plugin'",
                )
            continue
        if len(row) <= max(metric_col, plugin_col):
            spans = (
                f"; the '\"' that opens line {line} is not closed (the field runs to line {ended})"
                if ended > line
                else ""
            )
            raise CatalogError(
                source,
                line,
                f"expected {len(header)} columns ({','.join(header)}), got {len(row)}{spans}",
            )
        metric, plugin = row[metric_col], row[plugin_col]
        for value, what in ((metric, "metric name"), (plugin, "plugin name")):
            problem = check_unit_name(value, what)
            if problem:
                raise CatalogError(source, line, problem)
        key = (metric, plugin)
        if key in seen:
            raise CatalogError(
                source, line, f"duplicate of line {seen[key]}: {metric},{plugin}; remove one"
            )
        seen[key] = line
        entries.append(CatalogEntry(metric=metric, plugin=plugin))
    if header is None:
        raise CatalogError(source, None, "empty catalog: expected a 'metric,plugin' header")
    if not entries:
        raise CatalogError(source, header_line, "the catalog has a header but no metrics")
    return entries


def load_catalog(path: str | Path | None = None) -> list[CatalogEntry]:
    """Load a catalog file; ``None`` loads the shipped Marconi100 catalog."""
    if path is None:
        text = resources.files("dxt_core.data").joinpath(DEFAULT_CATALOG).read_text("utf-8")
        return parse_catalog(text, f"<dxt_core>/data/{DEFAULT_CATALOG}")
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise CatalogError(str(p), None, f"cannot read the catalog: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CatalogError(str(p), line, "not valid UTF-8; save the catalog as UTF-8") from exc
    return parse_catalog(text, str(p))


def select(
    entries: Iterable[CatalogEntry],
    plugins: Iterable[str] | None = None,
    metrics: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[CatalogEntry]:
    """Filter a catalog by plugin and metric names, keeping catalog order."""
    plugin_set = set(plugins) if plugins else None
    metric_set = set(metrics) if metrics else None
    out = [
        e
        for e in entries
        if (plugin_set is None or e.plugin in plugin_set)
        and (metric_set is None or e.metric in metric_set)
    ]
    return out[:limit] if limit is not None else out
