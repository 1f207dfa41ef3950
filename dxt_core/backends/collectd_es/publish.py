"""``dxt publish collectd-es``: the collectd archive as a dataset, one Parquet file per family
and month::

    year_month=YY-MM/family=<family>/a_0.parquet

Read from the archive's raw hits (``collectd_es/<family>/<day>.jsonl.gz``, one
``{"_index", "_id", "_source"}`` a line, dxt_core/writers/jsonl_gzip.py), not from the HDF5
beside them (a resampled grid). Days are UTC days. Each document becomes a row per value it
carries: collectd's multi-valued types (``disk_octets``, ``disk_ops``: ``read`` and
``write``) give one row per data source, told apart by ``dsname`` (``value``, ``read``,
``write``, as collectd's types.db names them); a document without any value gives one row
with ``dsname`` and ``value`` null, so no document is dropped unseen. Columns: ``timestamp``
(``@timestamp``, UTC ms), ``value`` (double), ``node`` (``hostname``), ``plugin``,
``plugin_instance``, ``type`` (``collectd_type``), ``type_instance``, ``dsname``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dxt_core.errors import ArchiveError
from dxt_core.publish.archive_scan import DayFile
from dxt_core.publish.readers import gz_line_chunks, read_json_lines
from dxt_core.publish.role import PartitionedPublish

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

NAME = "collectd_es"
#: The value fields of a collectd document, as its data source names (types.db).
DATA_SOURCES = ("value", "read", "write")
#: _source field -> published column
TAGS = (
    ("hostname", "node"),
    ("plugin", "plugin"),
    ("plugin_instance", "plugin_instance"),
    ("collectd_type", "type"),
    ("type_instance", "type_instance"),
)


def _schema() -> Any:
    import pyarrow as pa

    source = pa.struct(
        [
            ("@timestamp", pa.timestamp("ms", tz="UTC")),
            *((f, pa.string()) for f, _ in TAGS),
            *((f, pa.float64()) for f in DATA_SOURCES),
        ]
    )
    return pa.schema([("_source", source)])


def read_collectd_day(path: Path) -> Iterator[Any]:
    """A day of hits as tables, one row per (document, data source)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _schema()
    for piece in gz_line_chunks(path):
        src = read_json_lines(path, piece, schema).column("_source").combine_chunks()
        if src.null_count:
            raise ArchiveError(f"{path}: {src.null_count} hits without _source")
        ts = src.field("@timestamp")
        if ts.null_count:
            raise ArchiveError(f"{path}: {ts.null_count} hits without @timestamp")
        tags = {col: src.field(f) for f, col in TAGS}
        valued = None
        for ds in DATA_SOURCES:
            vals = src.field(ds)
            has = pc.is_valid(vals)
            valued = has if valued is None else pc.or_(valued, has)
            if not pc.any(has).as_py():
                continue
            yield _rows(pc, pa, has, ts, vals, tags, ds)
        none = pc.invert(valued)
        if pc.any(none).as_py():
            yield _rows(pc, pa, none, ts, pa.nulls(len(ts), pa.float64()), tags, None)


def _rows(pc: Any, pa: Any, keep: Any, ts: Any, vals: Any, tags: dict[str, Any], ds: Any) -> Any:
    n = pc.sum(pc.cast(keep, pa.int64())).as_py()
    cols = {"timestamp": pc.filter(ts, keep), "value": pc.filter(vals, keep)}
    for col, arr in tags.items():
        cols[col] = pc.filter(arr, keep)
    cols["dsname"] = pa.array([ds] * n, pa.string()).dictionary_encode()
    return pa.table(cols)


class CollectdEsPublish(PartitionedPublish):
    """The publish role of collectd in Elasticsearch."""

    backend = NAME
    keys = ("family",)
    series_order = (
        "node",
        "plugin",
        "plugin_instance",
        "type",
        "type_instance",
        "dsname",
    )
    dataset_name = "collectd-dataset"
    title = "collectd telemetry"
    description = "collectd metrics stored in Elasticsearch"
    source = "collectd documents in Elasticsearch (the raw hits pytokio's archive_collectdes reads)"
    example_glob = "year_month=*/family=disk/a_0.parquet"
    columns_note = (
        "Family files: `timestamp` (`@timestamp`), `value` (double), then dictionary-encoded "
        "strings `dsname` (the data source: `value`, or `read` and `write` of collectd's "
        "two-valued types such as `disk_octets`, one row each; null with a null value for "
        "a document without any), `node` (`hostname`), `plugin`, `plugin_instance`, `type` "
        "(`collectd_type`) and `type_instance`."
    )

    def day_file(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        from dxt_core.manifests import manifest_files

        found = [f for f in manifest_files(manifest) if str(f.get("file")).endswith(".jsonl.gz")]
        return found[0] if found else None

    def read_day(self, day: DayFile, path: Path) -> Iterator[Any]:
        if day.fmt != "jsonl":
            raise ArchiveError(f"{path}: a {day.fmt} file; the raw hits are JSON Lines")
        return read_collectd_day(path)


PUBLISH: PublishRole = CollectdEsPublish()
