"""``dxt publish kwollect``: Kwollect's archive as a dataset, one Parquet file per site,
metric and month::

    year_month=YY-MM/site=<site>/metric=<metric>/a_0.parquet

The archive's day files (``kwollect/<site>/<metric>/<day>.jsonl.gz``, days of the archive's
zone, Europe/Paris by default) hold the API's points as it sent them:
``{"timestamp", "device_id", "metric_id", "value", "labels"}``
(dxt_core/backends/kwollect/archive_day.py). Published: ``timestamp`` (UTC, microseconds:
PostgreSQL's precision), ``value``, ``name`` (``metric_id``), ``node`` (``device_id``) and
one string column ``label_<key>`` per label key, flattened as Kwollect's own CSV export does
(lists joined with ``;``, other values as JSON).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from dxt_core.errors import ArchiveError
from dxt_core.publish.archive_scan import DayFile
from dxt_core.publish.readers import gz_line_chunks, read_json_lines, whole_numbers
from dxt_core.publish.role import PartitionedPublish
from dxt_core.publish.series import np_values

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

NAME = "kwollect"
#: Prefix of the flattened label columns.
LABEL = "label_"
_LABELS = b'"labels":'


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("device_id", pa.string()),
            ("metric_id", pa.string()),
            ("value", pa.float64()),
        ]
    )


def flat_label(value: Any) -> str | None:
    """One label value as text: strings as they are, lists joined with ``;``, the rest as
    JSON (Kwollect's CSV export does the same)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ";".join(v if isinstance(v, str) else orjson.dumps(v).decode() for v in value)
    return orjson.dumps(value).decode()


def _label_texts(lines: list[bytes]) -> list[bytes]:
    """Each point's ``labels`` object as JSON text. The archive writes the API's points
    with ``labels`` last, so the text after the last ``"labels":`` is it; a line where
    that is not a JSON object is parsed whole."""
    out = []
    for line in lines:
        at = line.rfind(_LABELS)
        out.append(line[at + len(_LABELS) : -1] if at >= 0 else b"null")
    return out


def _labels_of(text: bytes, line: bytes, path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(text)
        if doc is None or isinstance(doc, dict):
            return doc or {}
    except orjson.JSONDecodeError:
        pass
    try:
        whole = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ArchiveError(f"{path}: a line is not JSON ({exc}): {line[:120]!r}") from exc
    labels = whole.get("labels") if isinstance(whole, dict) else None
    if labels is not None and not isinstance(labels, dict):
        raise ArchiveError(f"{path}: labels is not an object: {line[:120]!r}")
    return labels or {}


def read_kwollect_day(path: Path) -> Iterator[Any]:
    """A Kwollect day file as tables: timestamp, value, name, node, label_<key>..."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _schema()
    for piece in gz_line_chunks(path):
        table = read_json_lines(path, piece, schema)
        lines = piece.split(b"\n")[:-1]
        if len(lines) != table.num_rows:
            raise ArchiveError(f"{path}: {len(lines)} lines but {table.num_rows} points parsed")
        enc = pc.dictionary_encode(pa.array(_label_texts(lines), pa.binary()))
        idx = np_values(enc.indices, np.int32)
        first = np.empty(len(enc.dictionary), np.int64)
        first[idx[::-1]] = np.arange(len(idx) - 1, -1, -1)  # each text's first line
        docs = [
            _labels_of(t, lines[int(first[u])], path)
            for u, t in enumerate(enc.dictionary.to_pylist())
        ]
        keys = sorted({k for d in docs for k in d})
        cols: dict[str, Any] = {
            "timestamp": table.column("timestamp"),
            "value": whole_numbers(table.column("value").combine_chunks()),
            "name": table.column("metric_id"),
            "node": table.column("device_id"),
        }
        for k in keys:
            words = pa.array([flat_label(d.get(k)) for d in docs], pa.string())
            cols[LABEL + k] = pa.DictionaryArray.from_arrays(enc.indices, words)
        yield pa.table(cols)


class KwollectPublish(PartitionedPublish):
    """The publish role of Kwollect."""

    backend = NAME
    keys = ("site", "metric")
    time_unit = "us"
    title = "Kwollect telemetry (Grid'5000)"
    description = "Kwollect metrics of Grid'5000"
    source = "Kwollect, the metrics API of Grid'5000 (api.get_metrics)"
    example_glob = "year_month=*/site=*/metric=bmc_node_power_watt/a_0.parquet"
    columns_note = (
        "Metric files: `timestamp` (the point's time), `value` (typed per metric, see "
        "below), `name` (Kwollect's `metric_id`), `node` (its `device_id`), then one "
        "dictionary-encoded string column `label_<key>` per label key (lists joined with "
        "`;`, other values as JSON)."
    )

    def read_day(self, day: DayFile, path: Path) -> Iterator[Any]:
        if day.fmt != "jsonl":
            raise ArchiveError(f"{path}: a {day.fmt} file; Kwollect's archive is JSON Lines")
        return read_kwollect_day(path)


PUBLISH: PublishRole = KwollectPublish()
