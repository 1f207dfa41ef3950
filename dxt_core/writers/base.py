"""The one record-to-bytes interface: ``header``, then ``rows`` as often as rows come, then
``close`` for the totals (dlt's ``DataWriter``: write_header / write_data / close).

Every format and backend writes a file through a :class:`RecordWriter`: the Examon and
Prometheus series (:class:`SeriesWriter`: gzip CSV, Parquet), job tables (gzip CSV, Parquet),
raw documents and points as gzip JSON Lines (collectd, Kwollect), Kwollect's CSV backups and
the TOKIO HDF5 time series. A writer streams: ``rows`` takes one window, page or answer at a
time and keeps at most what its format needs to order or finish the file (each says what in
its docstring), never a whole day of records.

The file object is owned by the caller (the archive's atomic commit): a writer only writes to
it and never closes it. After a failure the caller calls :meth:`RecordWriter.abort` and
discards the file; :func:`write_stream` does both.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Generic, TypeVar

from dxt_core.records import SeriesBatch, SeriesSchema

#: What ``header`` takes: the file's columns (a schema, column names, a time grid).
H = TypeVar("H")
#: What ``rows`` takes: one window's, page's or answer's records.
R = TypeVar("R")


@dataclass(slots=True)
class WriteResult:
    """What a writer wrote: rows, columns, compressed bytes, sha256 and time span."""

    rows: int = 0
    columns: list[str] = field(default_factory=list)
    bytes: int = 0
    sha256: str = ""
    first_ms: int | None = None
    last_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def widen(self, first_ms: int, last_ms: int) -> None:
        """Widen the time span to take in ``first_ms`` .. ``last_ms``."""
        self.first_ms = first_ms if self.first_ms is None else min(self.first_ms, first_ms)
        self.last_ms = last_ms if self.last_ms is None else max(self.last_ms, last_ms)

    def add(self, rows: int, first_ms: int, last_ms: int) -> None:
        """Count ``rows`` more rows, spanning ``first_ms`` .. ``last_ms``."""
        self.rows += rows
        self.widen(first_ms, last_ms)


def block_row_order(block_ms: int) -> str:
    """The ``row_order`` a writer records when it orders rows in blocks of ``block_ms``."""
    return (
        f"blocks of {block_ms // 1000} s from the day start; "
        "series by series within a block; by time within a series"
    )


class RecordWriter(abc.ABC, Generic[H, R]):
    """Writes one file to a binary file object: ``header(head)``, ``rows(rows)``...,
    ``close()``."""

    #: File name suffix, e.g. ``"csv.gz"``.
    extension: str = ""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    @abc.abstractmethod
    def header(self, head: H) -> None:
        """Start the file for these columns (a format without a header line records them)."""

    @abc.abstractmethod
    def rows(self, rows: R) -> None:
        """Append one window's (page's, answer's) records."""

    @abc.abstractmethod
    def close(self) -> WriteResult:
        """Finish the file (footer, flush) and return the totals."""

    def abort(self) -> None:
        """Release what the writer holds after a failure; the caller discards the file."""


def write_stream(writer: RecordWriter[H, R], head: H, batches: Iterable[R]) -> WriteResult:
    """``header``, every batch through ``rows``, ``close``; :meth:`~RecordWriter.abort` when
    anything fails (the caller's file is then discarded)."""
    writer.header(head)
    try:
        for batch in batches:
            writer.rows(batch)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


class SeriesWriter(RecordWriter[SeriesSchema, SeriesBatch]):
    """Writes the series of one metric-day, window by window.

    ``open`` and ``write_batch`` are the older names of ``header`` and ``rows``.
    """

    def open(self, schema: SeriesSchema) -> None:
        """Start the file (header) for ``schema``: :meth:`header`."""
        self.header(schema)

    def write_batch(self, batch: SeriesBatch) -> None:
        """Append the rows of one window: :meth:`rows`."""
        self.rows(batch)
