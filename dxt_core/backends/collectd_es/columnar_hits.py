"""Search responses decoded into columns (Apache Arrow) instead of one dict per hit.

The HDF5 conversion reads nine ``_source`` fields of each hit and ``sort[0]``. Decoding a
page of 5,000 hits into Python dicts costs more than everything else done with them, and
holds the GIL; Arrow's JSON reader builds the columns in C++ with the GIL released, so the
slice threads decode in parallel. Only the HDF5-only export uses this (the JSON Lines output
keeps every hit byte for byte, so it reads dicts).

A response is decoded this way only when it has the shape of a search response and every
field has the type the schema expects; anything else (errors, PIT responses, an unexpected
type in a document) is decoded by orjson as before. A :class:`ColumnarHits` page still
behaves as a list of hit dicts (decoded from its raw bytes on first use), so code that
does not know about columns gets exactly the hits the server sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import orjson

#: ``_source`` fields decoded into columns (``@timestamp`` comes from ``sort[0]``)
COLUMN_FIELDS: tuple[tuple[str, str], ...] = (
    ("hostname", "string"),
    ("plugin", "string"),
    ("plugin_instance", "string"),
    ("collectd_type", "string"),
    ("type_instance", "string"),
    ("value", "float64"),
    ("read", "float64"),
    ("write", "float64"),
)

#: the ``_source`` filter of columnar requests
COLUMN_SOURCE_FIELDS: tuple[str, ...] = tuple(name for name, _ in COLUMN_FIELDS)

_SCHEMA: Any = None


def _schema() -> Any:
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        types = {"string": pa.string(), "float64": pa.float64()}
        source = pa.struct([(name, types[kind]) for name, kind in COLUMN_FIELDS])
        hit = pa.struct(
            [
                ("_index", pa.string()),
                ("_id", pa.string()),
                ("_source", source),
                ("sort", pa.list_(pa.int64())),
            ]
        )
        shards = pa.struct([(k, pa.int64()) for k in ("total", "successful", "skipped", "failed")])
        _SCHEMA = pa.schema(
            [
                ("_scroll_id", pa.string()),
                ("pit_id", pa.string()),
                ("timed_out", pa.bool_()),
                ("_shards", shards),
                ("hits", pa.struct([("hits", pa.list_(hit))])),
            ]
        )
    return _SCHEMA


def plain_numpy(arr: Any, dtype: type[Any]) -> npt.NDArray[Any]:
    """The values of a primitive Arrow array without nulls as a NumPy view of its buffer
    (``to_numpy`` would import pandas on first use: half a second per process)."""
    if arr.null_count:
        raise ValueError("plain_numpy needs an array without nulls")
    width = np.dtype(dtype).itemsize
    if arr.type.bit_width != 8 * width:
        raise TypeError(f"{arr.type} is not {np.dtype(dtype)}")
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * width)


class ColumnarHits(Sequence[dict[str, Any]]):
    """One page of hits as Arrow columns, plus the response bytes they came from.

    ``source`` is the ``_source`` struct array (fields :data:`COLUMN_FIELDS`), ``sort0``
    the ``sort[0]`` of each hit (None when a hit has no sort value). Indexing or iterating
    gives the hits as dicts, decoded from the raw bytes once, so they are exactly what the
    server sent.
    """

    __slots__ = ("_dicts", "_keep", "_raw", "hits", "sort0")

    def __init__(
        self,
        hits: Any,
        raw: bytes,
        sort0: npt.NDArray[np.int64] | None,
        keep: npt.NDArray[np.intp] | None = None,
    ) -> None:
        self.hits = hits
        self._raw = raw
        self.sort0 = sort0
        self._keep = keep  # positions in the response of the hits kept (None: all)
        self._dicts: list[dict[str, Any]] | None = None

    def where(self, mask: npt.NDArray[np.bool_]) -> ColumnarHits:
        """The hits where ``mask`` is true, as a page of their own."""
        import pyarrow as pa

        kept = np.flatnonzero(mask)
        if self._keep is not None:
            kept = self._keep[kept]
        sort0 = None if self.sort0 is None else self.sort0[mask]
        return ColumnarHits(self.hits.filter(pa.array(mask)), self._raw, sort0, kept)

    @property
    def source(self) -> Any:
        return self.hits.field("_source")

    def ids(self, start: int = 0) -> list[str | None]:
        return list(self.hits.field("_id")[start:].to_pylist())

    def keys(self, start: int = 0) -> list[str]:
        """``<_index>/<_id>`` of the hits from ``start`` on (:func:`hit_key`)."""
        index = self.hits.field("_index")[start:].to_pylist()
        return [f"{i}/{d}" for i, d in zip(index, self.ids(start), strict=True)]

    def dicts(self) -> list[dict[str, Any]]:
        """The hits as the server sent them (decoded on first use)."""
        if self._dicts is None:
            every = orjson.loads(self._raw)["hits"]["hits"]
            self._dicts = list(every) if self._keep is None else [every[i] for i in self._keep]
        return self._dicts

    def __len__(self) -> int:
        return len(self.hits)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.dicts()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.dicts())

    def __repr__(self) -> str:
        return f"ColumnarHits({len(self)} hits)"


def decode_search_response(data: bytes) -> dict[str, Any] | None:
    """A search or scroll response as ``{"_scroll_id", "pit_id", "timed_out", "_shards",
    "hits": {"hits": ColumnarHits}}``, or None when ``data`` is not one the schema can hold
    (then decode it as plain JSON)."""
    if b'"hits":[' not in data or data[:1] != b"{":
        return None
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 64),
            parse_options=pj.ParseOptions(
                explicit_schema=_schema(), unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != 1:
        return None
    outer = table.column("hits").chunk(0)
    if outer.null_count:
        return None
    lists = outer.field("hits")
    if lists.null_count:
        return None
    hits = lists.flatten()
    sort = hits.field("sort")
    sort0: npt.NDArray[np.int64] | None = None
    if len(hits) and not sort.null_count:
        offsets = plain_numpy(sort.offsets, np.int32)
        values = sort.values
        if (np.diff(offsets) > 0).all() and not values.null_count:
            sort0 = plain_numpy(values, np.int64)[offsets[:-1]]
    return {
        "_scroll_id": table.column("_scroll_id")[0].as_py(),
        "pit_id": table.column("pit_id")[0].as_py(),
        "timed_out": table.column("timed_out")[0].as_py(),
        "_shards": table.column("_shards")[0].as_py(),
        "hits": {"hits": ColumnarHits(hits, data, sort0)},
    }


def columnar_available() -> bool:
    """pyarrow is an optional dependency (the ``parquet`` extra): without it, pages are
    decoded into dicts as before."""
    try:
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


def hit_key(hit: dict[str, Any]) -> str:
    """What tells a document apart in a search over several indices: ``<_index>/<_id>``
    (an ``_id`` is unique within its index only; an index name cannot hold ``/``)."""
    return f"{hit.get('_index')}/{hit.get('_id')}"
