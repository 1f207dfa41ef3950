"""The writer interface: ``open`` with a schema, feed batches, ``close`` for the totals."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from dxt_core.records import SeriesBatch, SeriesSchema


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


class SeriesWriter(abc.ABC):
    """Writes the series of one metric-day to a binary file object, batch by batch.

    The file object is owned by the caller (the archive's atomic commit); the writer only
    writes to it and never closes it.
    """

    #: File name suffix, e.g. ``"csv.gz"``.
    extension: str = ""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    @abc.abstractmethod
    def open(self, schema: SeriesSchema) -> None:
        """Start the file (header) for ``schema``."""

    @abc.abstractmethod
    def write_batch(self, batch: SeriesBatch) -> None:
        """Append the rows of one window."""

    @abc.abstractmethod
    def close(self) -> WriteResult:
        """Finish the file (footer, flush) and return the totals."""
