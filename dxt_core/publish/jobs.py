"""The job table of a month: typed columns, node lists expanded, people pseudonymised.

A job table is small beside the metrics (one row per job), so a month of it is held in
memory. Column types are decided once over every day of the published range, from the
values: ISO 8601 times -> ``timestamp[ms, UTC]`` (a time without a zone, as the Examon jobs
service writes them, is UTC), whole numbers -> ``int64``, other numbers -> ``double``, the
rest ``string``; ``nodes`` becomes ``list<string>`` (Slurm host lists expanded). Identity
columns hold pseudonyms (or raw values with ``--keep-identities``), and every other text
column has the raw identities found in it replaced by the same pseudonyms.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import atomic_file
from dxt_core.publish.archive_scan import DayFile
from dxt_core.publish.hostlist import expand_hostlist
from dxt_core.publish.monthfile import ZSTD_LEVEL
from dxt_core.publish.pseudonym import IDENTITY_COLUMNS, EmbeddedScrubber, Pseudonymiser

NODE_LIST_COLUMN = "nodes"
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
_INT = re.compile(r"^[+-]?\d+$")
_NUM = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_WHOLE = re.compile(r"^[+-]?\d+\.0*$")


def read_job_day(day: DayFile, path: Path) -> list[dict[str, Any]]:
    """A day of the job table (``path``: a local copy of ``day``) as records (None for
    empty CSV cells)."""
    if day.fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(path).to_pylist())
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(fh)]


def _kind_of(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "string"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        # pandas writes an integer column with nulls as floats (4404215.0): still a count
        return "int64" if v.is_integer() else "double"
    if isinstance(v, dt.datetime):
        return "timestamp"
    s = str(v).strip()
    if _INT.match(s):
        return "int64"
    if _NUM.match(s):
        return "int64" if _WHOLE.match(s) else "double"
    if _ISO.match(s):
        return "timestamp"
    return "string"


def _merge_kind(a: str | None, b: str | None) -> str | None:
    if a is None or a == b:
        return b if a is None else a
    if b is None:
        return a
    if {a, b} == {"int64", "double"}:
        return "double"
    return "string"


@dataclass(slots=True)
class JobSchema:
    """Column types of the job table over the range, and the identity columns present."""

    kinds: dict[str, str] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)  # column -> kind of person
    raw_identities: set[tuple[str, str]] = field(default_factory=set)
    extra_identities: tuple[str, ...] = ()

    def observe(self, records: Iterable[dict[str, Any]]) -> None:
        seen: dict[str, str | None] = dict(self.kinds)
        for r in records:
            for k, v in r.items():
                if k not in seen and (k in IDENTITY_COLUMNS or k in self.extra_identities):
                    self.identities[k] = IDENTITY_COLUMNS.get(k, "person")
                seen[k] = _merge_kind(seen.get(k), _kind_of(v))
                if k in self.identities and v is not None:
                    self.raw_identities.add((self.identities[k], str(v)))
        self.kinds = {k: v or "string" for k, v in seen.items()}

    def column_type(self, column: str) -> str:
        if column == NODE_LIST_COLUMN:
            return "list<string>"
        if column in self.identities:
            return "string"
        return self.kinds.get(column, "string")


def _timestamp(v: Any, where: str) -> dt.datetime | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.UTC)
    s = str(v).strip().replace("Z", "+00:00")
    try:
        t = dt.datetime.fromisoformat(s)
    except ValueError as exc:
        raise ArchiveError(f"{where}: {v!r} is not an ISO 8601 time") from exc
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def write_job_month(
    records: list[dict[str, Any]],
    schema: JobSchema,
    out: Path,
    pseudo: Pseudonymiser | None,
    where: str,
) -> int:
    """Write a month of jobs to ``out`` (sorted by start time, then job id); returns rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = sorted(schema.kinds)
    scrub = EmbeddedScrubber(pseudo, schema.raw_identities) if pseudo else None
    sort_key = next((c for c in ("start_time", "submit_time") if c in columns), None)
    id_key = next((c for c in ("job_id", "id") if c in columns), None)

    def order(r: dict[str, Any]) -> tuple[Any, ...]:
        t = _timestamp(r.get(sort_key), where) if sort_key else None
        job = r.get(id_key) if id_key else None
        return (t is None, t or dt.datetime.min.replace(tzinfo=dt.UTC), str(job))

    records = sorted(records, key=order)
    arrays, fields = [], []
    for c in columns:
        kind = schema.column_type(c)
        vals = [r.get(c) for r in records]
        if c in schema.identities:
            ident = schema.identities[c]
            col: list[Any] = [
                None if v is None else (pseudo.pseudonym(ident, str(v)) if pseudo else str(v))
                for v in vals
            ]
            typ = pa.dictionary(pa.int32(), pa.string())
        elif kind == "list<string>":
            col = [None if v is None else expand_hostlist(str(v)) for v in vals]
            typ = pa.list_(pa.string())
        elif kind == "timestamp":
            col = [_timestamp(v, f"{where} column {c}") for v in vals]
            typ = pa.timestamp("ms", tz="UTC")
        elif kind == "int64":
            col = [None if v is None else _to_int(v) for v in vals]
            typ = pa.int64()
        elif kind == "double":
            col = [None if v is None else float(v) for v in vals]
            typ = pa.float64()
        else:
            col = [None if v is None else _text(v) for v in vals]
            if scrub is not None:
                col = [None if v is None else scrub.scrub(v) for v in col]
            typ = pa.string()
        if pa.types.is_dictionary(typ):
            arr = pa.array(col, pa.string()).dictionary_encode()
        else:
            try:
                arr = pa.array(col, typ)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise ArchiveError(f"{where}: column {c} does not fit {kind}: {exc}") from exc
        arrays.append(arr)
        fields.append(pa.field(c, arr.type))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    with atomic_file(out) as fh:
        pq.write_table(
            table,
            fh,
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=True,
            write_statistics=True,
            version="2.6",
            row_group_size=max(1, min(table.num_rows, 262_144)),
            store_schema=False,  # identities read as plain strings (monthfile.py says why)
        )
    rows: int = table.num_rows
    return rows


def _to_int(v: Any) -> int:
    if isinstance(v, int | float):
        return int(v)  # a whole float (checked when the column was typed)
    return int(str(v).strip().split(".")[0])  # "4404215.0": exact, not through a float


def _text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


#: Opens a day file as a local path (the publisher's, which fetches from an object store).
DayOpener = Callable[[DayFile], AbstractContextManager[Path | None]]


def iter_month_records(days: Sequence[DayFile], open_day: DayOpener) -> Iterator[dict[str, Any]]:
    """The job records of ``days``; a day the opener finds bad (None) gives none."""
    for d in days:
        with open_day(d) as path:
            if path is not None:
                yield from read_job_day(d, path)


def refuse_without_choice(identities: dict[str, str], pseudo: object, keep: bool) -> None:
    if identities and pseudo is None and not keep:
        cols = ", ".join(sorted(identities))
        raise ConfigError(
            f"the job table holds identities of people ({cols}): publishing them needs a "
            "choice. Pass --pseudonymise-key-file FILE (a secret of at least 16 bytes, kept "
            "out of the dataset; the same person gets the same pseudonym in every month) or, "
            "if the site may publish them, --keep-identities"
        )
