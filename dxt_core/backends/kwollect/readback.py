"""An experiment's backup read back (:func:`read_backup`): the DataFrame that
:meth:`~dxt_core.backends.kwollect.experiment.Kwollect.get_metrics_pandas` gave for the same
window, rebuilt from ``<backup_dir>/manifest.json`` and the files it lists, checked on the way.

The manifest vouches for the backup: a backup stopped by Ctrl-C lists only its complete sites
and says ``"complete": false``; it is refused unless asked for (``allow_incomplete``), so that
a notebook never analyses half an experiment by accident. Each file is read whole once, its
bytes checked against the manifest's sha256 and its points against its row count.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dxt_core.backends.kwollect.backup import BACKUP_MANIFEST, BACKUP_SCHEMA, POINT_COLUMNS
from dxt_core.backends.kwollect.frame import PointColumns, to_frame
from dxt_core.backends.kwollect.requests import parse_nodes
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import archive_io

#: Points handed to the frame's columns at once (one batch's strings and arrays in memory).
BATCH = 50_000


def read_backup(
    path: str | Path,
    *,
    metrics: Sequence[str] | str | None = None,
    nodes: Iterable[object] | None = None,
    allow_incomplete: bool = False,
) -> Any:
    """The points of a backup (``path``: its directory or its ``manifest.json``) as
    :meth:`~dxt_core.backends.kwollect.experiment.Kwollect.get_metrics_pandas` gives them:
    node, timestamp (UTC, microseconds), device_id, metric_id, value (float64), labels
    (dicts); each node's points together, nodes in the backup's order, oldest first.

    ``metrics`` and ``nodes`` (as :class:`Kwollect` takes them: ``nova-1.lyon``, FQDNs,
    EnOSlib hosts) choose among what the backup holds. A CSV backup's
    labels come back as strings (lists joined with ``;``): CSV kept no types.

    Raises:
        ConfigError: no backup manifest there, or another tool's; an incomplete backup
            (interrupted) without ``allow_incomplete``; a metric or node it does not hold.
        ArchiveError: a listed file missing, or not the bytes or rows the manifest says.
    """
    manifest_path = Path(path)
    if manifest_path.is_dir() or manifest_path.name != BACKUP_MANIFEST:
        manifest_path = manifest_path / BACKUP_MANIFEST
    doc = _manifest(manifest_path)
    _check_shape(manifest_path, doc)
    if doc.get("complete") is not True and not allow_incomplete:
        raise ConfigError(f"{manifest_path}: {_incomplete(doc)}")
    files = _chosen(manifest_path, doc, metrics, nodes)
    order = list(doc["nodes"])
    parts = []
    for entry in files:
        part = PointColumns({})
        for batch in _points(manifest_path.parent, entry, doc["format"]):
            part.names = {str(p.get("device_id", "")): str(entry["node"]) for p in batch}
            part.add(batch)
        parts.append(part)
    df = to_frame(parts, order + sorted({str(f["node"]) for f in files} - set(order)))
    # each node's points oldest first (the files are per metric; a stable sort keeps the
    # order of equal times: the metrics' files in name order)
    rank = df["node"].map({n: i for i, n in enumerate(df["node"].unique())}).to_numpy()
    times = np.asarray(df["timestamp"].array.asi8)
    return df.take(np.lexsort((times, rank))).reset_index(drop=True)


def _manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(
            f"{path}: no backup manifest there (a backup writes it last: is this the "
            "directory k.backup() returned, and did the backup finish?)"
        )
    with archive_io(path, "read"):
        raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        at = f" (line {line})" if line else ""
        raise ConfigError(f"{path}{at}: not JSON ({exc}): not a backup manifest") from None
    if not isinstance(doc, dict) or doc.get("schema") != BACKUP_SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise ConfigError(
            f"{path}: not a dxt Kwollect backup manifest (schema {found!r}, expected "
            f"{BACKUP_SCHEMA!r})"
        )
    return doc


#: A listed file's keys and their types, as a backup writes them (backup.SiteBackup.close).
_ENTRY = {"file": str, "node": str, "metric": str, "rows": int, "sha256": str}


def _check_shape(path: Path, doc: dict[str, Any]) -> None:
    """The manifest's fields this reader relies on, of the types a backup writes: a
    ConfigError naming the field (and the file entry) otherwise, never a KeyError later."""

    def bad(what: str) -> ConfigError:
        return ConfigError(f"{path}: {what}: not a manifest a backup wrote (edited by hand?)")

    if doc.get("format") not in ("jsonl", "csv"):
        raise bad(f"format {doc.get('format')!r} is neither 'jsonl' nor 'csv'")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise bad("nodes is not a list of node names")
    metrics = doc.get("metrics")
    if metrics is not None and not (
        isinstance(metrics, list) and all(isinstance(m, str) for m in metrics)
    ):
        raise bad("metrics is neither null (every metric) nor a list of names")
    files = doc.get("files")
    if not isinstance(files, list):
        raise bad("files is not a list")
    seen: set[str] = set()
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            raise bad(f"files[{i}] is not an object")
        for key, kind in _ENTRY.items():
            value = entry.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) or value == "":
                raise bad(f"files[{i}].{key} is {value!r}, not a {kind.__name__}")
        if entry["file"] in seen:
            raise bad(f"files[{i}] lists {entry['file']!r} again")
        seen.add(entry["file"])


def _incomplete(doc: dict[str, Any]) -> str:
    """Why a backup is not complete, from its ``interrupted`` entry."""
    entry = doc.get("interrupted")
    gone: dict[str, Any] = entry if isinstance(entry, dict) else {}
    sites = gone.get("sites_not_backed_up")
    nodes = gone.get("nodes_not_backed_up")
    said = ", ".join(f"{s} ({how})" for s, how in sites.items()) if isinstance(sites, dict) else ""
    count = f", {len(nodes)} node(s)" if isinstance(nodes, list) else ""
    lacks = f"; not backed up: {said}{count}" if said else ""
    return (
        f"the backup is incomplete (interrupted{lacks}): its points would miss those. Run the "
        "backup again, or pass allow_incomplete=True to read the files it lists"
    )


def _chosen(
    manifest: Path,
    doc: dict[str, Any],
    metrics: Sequence[str] | str | None,
    nodes: Iterable[object] | None,
) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = doc["files"]
    for want, key in ((metrics, "metric"), (nodes, "node")):
        if want is None:
            continue
        if not isinstance(want, str) and not isinstance(want, Iterable):
            raise ConfigError(f"{key}s={want!r}: give a name or a list of names")
        asked = [want] if isinstance(want, str) else list(want)
        if key == "node":  # as the experiment takes them: nova-1.lyon, EnOSlib hosts too
            asked = [n.fqdn for n in parse_nodes(asked)]
        # what the backup was of (a node or metric without points is in it, empty), and
        # what it has points of
        listed = doc.get(f"{key}s") or []
        held = sorted({*listed, *(str(f[key]) for f in files)})
        unknown = [a for a in asked if a not in held]
        if unknown:
            raise ConfigError(
                f"{manifest}: the backup holds no {key} {', '.join(map(repr, unknown))}; it "
                f"holds {', '.join(held) or 'none'}"
            )
        files = [f for f in files if f.get(key) in asked]
    return files


def _points(root: Path, entry: dict[str, Any], fmt: object) -> Iterator[list[dict[str, Any]]]:
    """A listed file's points in batches, once its bytes and rows are checked."""
    name = str(entry.get("file"))
    path = root / name
    if ".." in Path(name).parts or Path(name).is_absolute():
        raise ArchiveError(f"{root / BACKUP_MANIFEST}: lists {name!r}, outside the backup")
    if not path.is_file():
        raise ArchiveError(
            f"{path}: listed in {BACKUP_MANIFEST} but missing: restore it, or run the backup again"
        )
    with archive_io(path, "read"):
        raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != entry.get("sha256"):
        raise ArchiveError(
            f"{path}: not the bytes {BACKUP_MANIFEST} lists (sha256 {sha[:12]}..., listed "
            f"{str(entry.get('sha256'))[:12]}...): changed or damaged since the backup; "
            "restore it, or run the backup again"
        )
    try:  # the bytes listed, yet not a backup's (a manifest rewritten over other bytes)
        text = gzip.decompress(raw)
        points = _csv_points(text) if fmt == "csv" else map(orjson.loads, text.splitlines())
        count, batch = 0, []
        for p in points:
            batch.append(p)
            if len(batch) == BATCH:
                count += len(batch)
                yield batch
                batch = []
    except (OSError, EOFError, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ArchiveError(
            f"{path}: not {fmt} points as a backup writes them ({exc}): restore it, or run "
            "the backup again"
        ) from None
    count += len(batch)
    if count != entry.get("rows"):
        raise ArchiveError(f"{path}: {count:,} points, {BACKUP_MANIFEST} lists {entry.get('rows')}")
    if batch:
        yield batch


def _number(text: str) -> Any:
    """A CSV cell as the frame's value: a number, NaN when empty, else the text."""
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return text


def _csv_points(text: bytes) -> Iterator[dict[str, Any]]:
    """A CSV backup's rows as points: labels from its ``label:<key>`` columns (strings; an
    empty cell is no label), values as numbers (an empty cell is NaN)."""
    rows = csv.reader(io.StringIO(text.decode()))
    header = next(rows, [])
    keys = [(i, h.removeprefix("label:")) for i, h in enumerate(header) if h.startswith("label:")]
    missing = [c for c in POINT_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"no column {', '.join(missing)} in its header")
    at = {c: header.index(c) for c in POINT_COLUMNS}
    for row in rows:
        value = row[at["value"]]
        yield {
            "timestamp": row[at["timestamp"]],
            "device_id": row[at["device_id"]],
            "metric_id": row[at["metric_id"]],
            "value": _number(value),
            "labels": {k: row[i] for i, k in keys if row[i]},
        }
