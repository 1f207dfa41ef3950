"""Raw Elasticsearch hits as gzip JSON Lines: one ``{"_index", "_id", "_source"}`` per line.

This is the "native json" output of pytokio's ``archive_collectdes``, one document per line
so that it streams (``zcat | jq``) and appends page by page. Deterministic gzip
(:class:`~dxt_core.writers.compress.GzipStream`): the same hits in the same order give the
same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

import orjson

from dxt_core.writers.base import WriteResult
from dxt_core.writers.compress import GzipStream


class GzipJsonlHitsWriter:
    """Writes pages of hits to ``out`` (owned by the caller, e.g. an atomic file)."""

    extension = "jsonl.gz"

    def __init__(self, out: BinaryIO, level: int | None = None) -> None:
        self._gz = GzipStream(out, level=level)
        self.rows = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None

    def write_page(self, hits: Iterable[Mapping[str, Any]]) -> None:
        dumps = orjson.dumps
        lines = []
        for h in hits:
            lines.append(
                dumps({"_index": h.get("_index"), "_id": h.get("_id"), "_source": h["_source"]})
            )
            srt = h.get("sort")
            if srt:
                ts = srt[0]
                if self.first_ms is None or ts < self.first_ms:
                    self.first_ms = ts
                if self.last_ms is None or ts > self.last_ms:
                    self.last_ms = ts
        if lines:
            lines.append(b"")
            self._gz.write(b"\n".join(lines))
            self.rows += len(lines) - 1

    def close(self) -> WriteResult:
        sha = self._gz.close()
        return WriteResult(
            rows=self.rows,
            columns=["_index", "_id", "_source"],
            bytes=self._gz.bytes,
            sha256=sha,
            first_ms=self.first_ms,
            last_ms=self.last_ms,
            extra={"compressor": self._gz.label, "uncompressed_bytes": self._gz.raw_bytes},
        )
