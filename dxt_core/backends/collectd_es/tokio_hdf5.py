"""TOKIO Time Series HDF5 (pytokio's ``archive_collectdes`` layout), written with NumPy.

Layout (schema version ``1``)::

    /                         attrs version='1', start, end (epoch s; end exclusive)
    /datatargets              attr source='collectd_disk'
        timestamps            int64 epoch s, one per row: start, start+timestep, ...
        readrates writerates readoprates writeoprates
                              float64 (rows, num_nodes x devices_per_server), gzip, chunked
                              attrs columns ('host:device', bytes), units, updated, version
    /dataservers              attr source='collectd_disk'
        timestamps
        cpuload cpuuser cpusys                      (rows, num_nodes), '%'
        memcached membuffered memfree memused memslab memslab_unrecl   (rows, num_nodes)

A row labelled ``t`` covers ``[t, t + timestep)``. Cells without data hold ``-0.0``. The
column count is preallocated (``num_nodes x devices_per_server`` for datatargets,
``num_nodes`` for dataservers); ``columns`` names the used ones, in natural order
(``bb2`` before ``bb10``) in a new file, in the file's own order (new names appended) in an
existing one.

Values: disk ``read``/``write`` replace the cell (the last document in stream order wins);
``cpuload`` is ``100 - idle`` and ``cpuuser``/``cpusys`` the raw value, each summed per
cell and divided by the number of documents (cores) reported in that step; memory values
replace the cell.

Re-archiving a window first resets every row of that window, in every dataset written, to
``-0.0`` (pytokio reset only the CPU rows; resetting all makes a rerun equal to a fresh run
even when documents disappeared upstream). A window must lie inside the file's range and
on its timestep grid; a file with another timestep is refused.

The file is never modified in place: it is assembled in memory (a new one, or an existing one
loaded whole) and written under a temporary name beside the target, then renamed over it. An
existing file is checked first (dtype, shape and attributes of what is about to be written):
a file of another layout is refused, never clipped into.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import itertools
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dxt_core.backends.collectd_es.columnar_hits import ColumnarHits, plain_numpy
from dxt_core.backends.collectd_es.source import (
    FAMILIES,
    Hit,
    check_family,
    parse_timestamp_ms,
    to_ms,
)
from dxt_core.errors import ArchiveError, ConfigError

SCHEMA_VERSION = "1"
GROUP_SOURCE = "collectd_disk"

#: dataset -> (family, units), in pytokio's order
DATASETS: dict[str, tuple[str, str]] = {
    "datatargets/readrates": ("disk", "bytes/sec"),
    "datatargets/writerates": ("disk", "bytes/sec"),
    "datatargets/readoprates": ("disk", "ops/sec"),
    "datatargets/writeoprates": ("disk", "ops/sec"),
    "dataservers/memcached": ("memory", "bytes"),
    "dataservers/membuffered": ("memory", "bytes"),
    "dataservers/memfree": ("memory", "bytes"),
    "dataservers/memused": ("memory", "bytes"),
    "dataservers/memslab": ("memory", "bytes"),
    "dataservers/memslab_unrecl": ("memory", "bytes"),
    "dataservers/cpuload": ("cpu", "%"),
    "dataservers/cpuuser": ("cpu", "%"),
    "dataservers/cpusys": ("cpu", "%"),
}
AVERAGED = frozenset({"dataservers/cpuload", "dataservers/cpuuser", "dataservers/cpusys"})
_DISK = ("readrates", "writerates", "readoprates", "writeoprates")
_MEMORY = {
    "cached": "dataservers/memcached",
    "buffered": "dataservers/membuffered",
    "free": "dataservers/memfree",
    "used": "dataservers/memused",
    "slab_recl": "dataservers/memslab",
    "slab_unrecl": "dataservers/memslab_unrecl",
}
_CPU = {
    "idle": "dataservers/cpuload",
    "user": "dataservers/cpuuser",
    "system": "dataservers/cpusys",
}

FloatArray = npt.NDArray[np.float64]
_Acc = tuple[list[int], list[int], list[float]]
IntArray = npt.NDArray[np.int64]


def natural_key(name: str) -> tuple[Any, ...]:
    """``bb2:nvme0n1`` < ``bb10:nvme0n1``: digit runs compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def datasets_of(families: Iterable[str]) -> list[str]:
    fams = {check_family(f) for f in families}
    return [name for name, (fam, _) in DATASETS.items() if fam in fams]


@dataclass(frozen=True)
class TimeGrid:
    """Rows ``start, start + timestep, ...`` up to (excluding) ``end``; epoch seconds."""

    start: int
    end: int
    timestep: int

    def __post_init__(self) -> None:
        if self.timestep < 1:
            raise ConfigError(f"timestep must be >= 1 s, not {self.timestep}")
        if self.end <= self.start:
            raise ConfigError(f"empty time range [{self.start}, {self.end})")

    @property
    def rows(self) -> int:
        return -(-(self.end - self.start) // self.timestep)

    @property
    def timestamps(self) -> npt.NDArray[np.int64]:
        return self.start + self.timestep * np.arange(self.rows, dtype=np.int64)

    @classmethod
    def of(cls, start: dt.datetime, end: dt.datetime, timestep: int) -> TimeGrid:
        s, e = to_ms(start), to_ms(end)
        if s % 1000 or e % 1000:
            raise ConfigError("HDF5 time ranges are whole seconds: drop the fractions")
        return cls(s // 1000, e // 1000, timestep)


@dataclass
class _Dataset:
    name: str
    capacity: int
    rows: int
    columns: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    values: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    counts: FloatArray | None = None

    def __post_init__(self) -> None:
        width = min(self.capacity, 64)
        self.values = np.full((self.rows, width), -0.0)
        if self.name in AVERAGED:
            self.values[:] = 0.0
            self.counts = np.zeros((self.rows, width))

    def column(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = len(self.columns)
            if i >= self.capacity:
                raise ConfigError(
                    f"{self.name}: column {name!r} would be number {i + 1}, more than the "
                    f"{self.capacity} preallocated; raise --num-nodes (or --ssds-per-node)"
                )
            if i >= self.values.shape[1]:
                self._grow(min(self.capacity, 2 * self.values.shape[1]))
            self.index[name] = i
            self.columns.append(name)
        return i

    def _grow(self, width: int) -> None:
        fill = 0.0 if self.counts is not None else -0.0
        extra = np.full((self.rows, width - self.values.shape[1]), fill)
        self.values = np.hstack([self.values, extra])
        if self.counts is not None:
            self.counts = np.hstack([self.counts, np.zeros_like(extra)])

    def put(
        self, rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64], vals: FloatArray
    ) -> None:
        width = self.values.shape[1]
        flat = rows * width + cols
        if self.counts is not None:
            np.add.at(self.values.reshape(-1), flat, vals)
            np.add.at(self.counts.reshape(-1), flat, 1.0)
            return
        # the last document in stream order wins, explicitly (fancy assignment with repeated
        # indices does not promise an order)
        rev = flat[::-1]
        _, first = np.unique(rev, return_index=True)
        keep = len(flat) - 1 - first
        self.values.reshape(-1)[flat[keep]] = vals[keep]

    def result(self) -> FloatArray:
        used = self.values[:, : len(self.columns)]
        if self.counts is None:
            return used
        counts = self.counts[:, : len(self.columns)]
        out = np.full(used.shape, -0.0)
        np.divide(used, counts, out=out, where=counts > 0)
        return out


@dataclass
class BuildStats:
    documents: int = 0
    inserted: int = 0
    out_of_range: int = 0
    ignored: int = 0
    problems: list[str] = field(default_factory=list)
    #: pages inserted column-wise (the rest hit by hit)
    columnar_pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "inserted": self.inserted,
            "out_of_range": self.out_of_range,
            "ignored": self.ignored,
            "problems": self.problems[:20],
            "columnar_pages": self.columnar_pages,
        }


def _valid(arr: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _ints(arr: Any) -> IntArray:
    """Integer Arrow array (dictionary indices) -> int64 NumPy array, nulls as -1."""
    if not arr.null_count:
        signed = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[arr.type.bit_width]
        return plain_numpy(arr, signed).astype(np.int64)
    values = np.asarray(arr.to_numpy(zero_copy_only=False))
    return np.where(_valid(arr), np.nan_to_num(values, nan=-1), -1).astype(np.int64)


def _floats(arr: Any) -> FloatArray:
    if not arr.null_count:
        return plain_numpy(arr, np.float64)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


class TokioTimeSeriesBuilder:
    """Turns pages of collectd hits into the cells of one window, page by page.

    Memory: the window's matrices (rows x used columns per dataset) plus one page.
    Documents outside ``[window.start, window.end)`` are counted in ``stats.out_of_range``.
    """

    def __init__(
        self,
        families: Sequence[str],
        window: TimeGrid,
        num_nodes: int,
        devices_per_server: int = 4,
    ) -> None:
        if num_nodes < 1 or devices_per_server < 1:
            raise ConfigError("--num-nodes and --ssds-per-node must be >= 1")
        self.families = [check_family(f) for f in families]
        self.window = window
        self.num_nodes = num_nodes
        self.devices_per_server = devices_per_server
        self.stats = BuildStats()
        self.datasets: dict[str, _Dataset] = {}
        for name in datasets_of(self.families):
            cap = num_nodes * devices_per_server if name.startswith("datatargets/") else num_nodes
            self.datasets[name] = _Dataset(name, cap, window.rows)
        self._start_ms = window.start * 1000
        self._end_ms = window.end * 1000
        self._step_ms = window.timestep * 1000

    def _bad(self, msg: str) -> None:
        self.stats.ignored += 1
        if len(self.stats.problems) < 20:
            self.stats.problems.append(msg)

    def add_page(self, hits: Sequence[Hit]) -> None:
        """Insert one page of hits (``_source``; ``sort[0]`` = ``@timestamp`` ms if known).

        A :class:`ColumnarHits` page is inserted column-wise when every document in the
        window is one the conversion takes as is; otherwise, and for plain lists, hit by
        hit. Both give the same cells, columns and counts."""
        if isinstance(hits, ColumnarHits):
            if self._add_columnar(hits):
                return
            hits = hits.dicts()
        per: dict[str, _Acc] = {n: ([], [], []) for n in self.datasets}
        disk = "datatargets/readrates" in self.datasets
        cpu = "dataservers/cpuload" in self.datasets
        memory = "dataservers/memused" in self.datasets
        lo, hi = self._start_ms, self._end_ms
        self.stats.documents += len(hits)
        cache: dict[tuple[Any, ...], tuple[_Acc, int, _Acc, int]] = {}

        def disk_target(key: tuple[Any, ...], hit: Hit) -> tuple[_Acc, int, _Acc, int] | None:
            ctype, host, inst = key
            if ctype == "disk_octets":
                names = ("datatargets/readrates", "datatargets/writerates")
            elif ctype == "disk_ops":
                names = ("datatargets/readoprates", "datatargets/writeoprates")
            else:
                self._bad(f"_id {hit.get('_id')}: collectd_type {ctype!r}")
                return None
            if not isinstance(inst, str):
                self._bad(f"_id {hit.get('_id')}: disk document without plugin_instance")
                return None
            col = f"{host}:{inst}"
            d0, d1 = self.datasets[names[0]], self.datasets[names[1]]
            return per[names[0]], d0.column(col), per[names[1]], d1.column(col)

        for hit in hits:
            s = hit.get("_source")
            if not isinstance(s, dict):
                self._bad(f"_id {hit.get('_id')}: no _source")
                continue
            srt = hit.get("sort")
            try:
                ts = srt[0] if srt else parse_timestamp_ms(s.get("@timestamp"))
            except (ValueError, TypeError) as exc:
                self._bad(f"_id {hit.get('_id')}: {exc}")
                continue
            if not lo <= ts < hi:
                self.stats.out_of_range += 1
                continue
            host = s.get("hostname")
            if not isinstance(host, str):
                self._bad(f"_id {hit.get('_id')}: no hostname")
                continue
            plugin = s.get("plugin")
            if plugin == "disk" and disk:
                key = (s.get("collectd_type"), host, s.get("plugin_instance"))
                target = cache.get(key)
                if target is None:
                    target = disk_target(key, hit)
                    if target is None:
                        continue
                    cache[key] = target
                r, w = s.get("read"), s.get("write")
                if r is None or w is None:
                    self._bad(f"_id {hit.get('_id')}: disk document without read/write")
                    continue
                acc_r, col_r, acc_w, col_w = target
                acc_r[0].append(ts)
                acc_r[1].append(col_r)
                acc_r[2].append(r)
                acc_w[0].append(ts)
                acc_w[1].append(col_w)
                acc_w[2].append(w)
            elif (plugin == "cpu" and cpu) or (plugin == "memory" and memory):
                kind = s.get("type_instance")
                v = s.get("value")
                name_or_none = (_CPU if plugin == "cpu" else _MEMORY).get(kind or "")
                if name_or_none is None or v is None:
                    self._bad(f"_id {hit.get('_id')}: {plugin} document without known value")
                    continue
                acc = per[name_or_none]
                acc[0].append(ts)
                acc[1].append(self.datasets[name_or_none].column(host))
                acc[2].append(100.0 - v if name_or_none == "dataservers/cpuload" else v)
            else:
                self._bad(f"_id {hit.get('_id')}: plugin {plugin!r} not in {self.families}")
                continue
            self.stats.inserted += 1
        for name, (tss, cols, vals) in per.items():
            if not tss:
                continue
            rows = (np.asarray(tss, dtype=np.int64) - lo) // self._step_ms
            try:
                values = np.asarray(vals, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{name}: a document holds a non-numeric value ({exc})") from exc
            self.datasets[name].put(rows, np.asarray(cols, dtype=np.int64), values)

    def _add_columnar(self, page: ColumnarHits) -> bool:
        """:meth:`add_page` over Arrow columns; False (nothing changed) when a document in
        the window would be ignored or has no ``sort`` value: the hit-by-hit path then names
        it."""
        ts = page.sort0
        src = page.source
        if ts is None or src.null_count:
            return False
        lo, hi = self._start_ms, self._end_ms
        inside = (ts >= lo) & (ts < hi)
        n_in = int(inside.sum())
        every = n_in == len(ts)
        ts_in = ts if every else ts[inside]

        def codes(name: str) -> tuple[IntArray, list[Any]]:
            """Per document in the window: the index of its value in the list returned
            (-1 for null)."""
            enc = src.field(name).dictionary_encode()
            idx = _ints(enc.indices)
            return (idx if every else idx[inside]), enc.dictionary.to_pylist()

        def numbers(name: str) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
            arr = src.field(name)
            values = _floats(arr)
            ok = np.ones(len(values), dtype=bool) if not arr.null_count else _valid(arr)
            return (values, ok) if every else (values[inside], ok[inside])

        plugin, plugins = codes("plugin")
        host, hosts = codes("hostname")
        if n_in and (host < 0).any():
            return False
        # (dataset, rows, column key per row, key names, value per row)
        jobs: list[tuple[str, npt.NDArray[np.bool_], IntArray, list[str], FloatArray]] = []
        handled = np.zeros(n_in, dtype=bool)
        for code, name in enumerate(plugins):
            if name not in self.families:
                continue  # not handled: ignored documents are named hit by hit
            rows = plugin == code
            if name == "disk":
                ctype, ctypes = codes("collectd_type")
                inst, insts = codes("plugin_instance")
                (read, read_ok), (write, write_ok) = numbers("read"), numbers("write")
                key = host * max(len(insts), 1) + inst
                names = [f"{h}:{d}" for h in hosts for d in insts]
                ok = rows & (inst >= 0) & read_ok & write_ok
                for kind, (r_name, w_name) in (
                    ("disk_octets", ("datatargets/readrates", "datatargets/writerates")),
                    ("disk_ops", ("datatargets/readoprates", "datatargets/writeoprates")),
                ):
                    if kind in ctypes:
                        m = ok & (ctype == ctypes.index(kind))
                        handled |= m
                        jobs.append((r_name, m, key, names, read))
                        jobs.append((w_name, m, key, names, write))
            else:
                kind_code, kinds = codes("type_instance")
                value, value_ok = numbers("value")
                table = _CPU if name == "cpu" else _MEMORY
                for k, kind in enumerate(kinds):
                    target = table.get(kind)
                    if target is not None:
                        m = rows & (kind_code == k) & value_ok
                        handled |= m
                        vals = 100.0 - value if target == "dataservers/cpuload" else value
                        jobs.append((target, m, host, hosts, vals))
        if not handled.all():
            return False  # some document in the window would be ignored: name it hit by hit
        for _, m, _, _, vals in jobs:
            v = vals[m]
            # JSON's -0 is the integer 0 to the hit-by-hit path (orjson) but -0.0, the "no
            # data" cell, to Arrow; a number too large for a double is inf here but refused
            # by orjson: both go hit by hit
            if not np.isfinite(v).all() or ((v == 0) & np.signbit(v)).any():
                return False
        uniques: list[tuple[IntArray, IntArray]] = []
        new_columns: dict[str, set[str]] = {}
        for target, m, key, names, _ in jobs:
            uniq, first = np.unique(key[m], return_index=True)
            uniques.append((uniq, first))
            new = {names[k] for k in uniq} - self.datasets[target].index.keys()
            new_columns.setdefault(target, set()).update(new)
        for target, new in new_columns.items():
            d = self.datasets[target]
            if len(d.columns) + len(new) > d.capacity:
                return False  # the hit-by-hit path names the first column too many
        self.stats.documents += len(ts)
        self.stats.out_of_range += len(ts) - n_in
        self.stats.inserted += n_in
        self.stats.columnar_pages += 1
        row_of = (ts_in - lo) // self._step_ms
        for (target, m, key, names, vals), (uniq, first) in zip(jobs, uniques, strict=True):
            if not len(uniq):
                continue
            keys = key[m]
            dataset = self.datasets[target]
            col_of = np.zeros(int(uniq.max()) + 1, dtype=np.int64)
            for k in uniq[np.argsort(first)]:
                col_of[k] = dataset.column(names[k])
            dataset.put(row_of[m], col_of[keys], vals[m])
        return True

    def add_pages(self, pages: Iterable[Sequence[Hit]]) -> None:
        for page in pages:
            self.add_page(page)

    def results(self) -> dict[str, tuple[list[str], FloatArray]]:
        """dataset -> (columns in insertion order, (rows, len(columns)) values)."""
        return {n: (list(d.columns), d.result()) for n, d in self.datasets.items()}


@dataclass
class HdfWriteResult:
    path: Path
    bytes: int
    sha256: str
    created: bool
    rows: int
    window_rows: tuple[int, int]
    columns: dict[str, int]


def _str_attr(v: Any) -> str:
    return v.decode() if isinstance(v, bytes | np.bytes_) else str(v)


def write_tokio_hdf5(
    path: str | Path,
    builder: TokioTimeSeriesBuilder,
    init: TimeGrid | None = None,
    now: dt.datetime | None = None,
    replace: bool = False,
) -> HdfWriteResult:
    """Write the builder's window into ``path`` (created over ``init``, default the window,
    or updated if it exists, unless ``replace``); atomic: readers see the old file or the
    new one.

    The file is assembled in memory (HDF5's ``core`` driver; an existing file is loaded
    whole, so memory holds its size) and written out with plain file I/O: a full disk or
    a size limit is then an :class:`ArchiveError` naming the file, never an error inside the
    HDF5 library (which used to report "timestamps do not match" on a new file and then
    crash). An existing file whose layout is not what this writer makes (dtype, shape,
    attributes) is refused before anything is written.
    """
    import h5py

    final = Path(path)
    window = builder.window
    updated = int((now or dt.datetime.now(dt.UTC)).timestamp())
    created = replace or not final.exists()
    grid = init or window
    if created and grid.timestep != window.timestep:
        raise ConfigError("the initial range and the window need the same timestep")
    try:
        if created:
            # a name of its own: HDF5 refuses to open one name twice in a process
            name = f"{final.name}.{os.getpid()}.{next(_IMAGES)}.mem"
            f = h5py.File(name, "w", driver="core", backing_store=False)
        else:
            f = h5py.File(final, "r", driver="core", backing_store=False)
            f.close()  # readable as HDF5: now load it whole, writable (in memory only)
            f = h5py.File(final, "r+", driver="core", backing_store=False)
    except OSError as exc:
        raise ArchiveError(
            f"{final}: cannot read it as HDF5 ({exc}); move it away or write another file"
        ) from exc
    with f:
        if created:
            f.attrs["version"] = SCHEMA_VERSION
            f.attrs["start"] = np.int64(grid.start)
            f.attrs["end"] = np.int64(grid.start + grid.rows * grid.timestep)
        else:
            grid = _existing_grid(f, final)
            if grid.timestep != window.timestep:
                raise ConfigError(
                    f"{final} has a timestep of {grid.timestep} s, not {window.timestep} s: "
                    "write another file or pass the file's timestep"
                )
        if (window.start - grid.start) % grid.timestep or (
            window.end != grid.end and (window.end - grid.start) % grid.timestep
        ):
            raise ConfigError(
                f"window [{_iso(window.start)}, {_iso(window.end)}) is not on the "
                f"{grid.timestep} s grid of {final} (starting {_iso(grid.start)})"
            )
        if window.start < grid.start or window.end > grid.end:
            raise ConfigError(
                f"window [{_iso(window.start)}, {_iso(window.end)}) is outside the range "
                f"[{_iso(grid.start)}, {_iso(grid.end)}) of {final}: write another file "
                "or recreate this one with a wider --init-start/--init-end"
            )
        results = builder.results()
        if not created:
            check_layout(f, final, grid, list(results))
        r0 = (window.start - grid.start) // grid.timestep
        r1 = min(r0 + window.rows, grid.rows)
        columns_used: dict[str, int] = {}
        for name, (cols, values) in results.items():
            group_name = name.split("/", 1)[0]
            group = f.require_group(group_name)
            group.attrs["source"] = GROUP_SOURCE
            ts_name = f"{group_name}/timestamps"
            if ts_name not in f:
                f.create_dataset(ts_name, data=grid.timestamps, dtype="i8")
            cap = builder.datasets[name].capacity
            if name in f:
                ds = f[name]
                file_cols = [_str_attr(c) for c in ds.attrs.get("columns", [])]
                cap = ds.shape[1]
            else:
                ds = f.create_dataset(
                    name,
                    shape=(grid.rows, cap),
                    dtype="f8",
                    chunks=True,
                    compression="gzip",
                    fillvalue=-0.0,
                )
                ds[...] = np.full((grid.rows, cap), -0.0)
                file_cols = []
            index = {c: i for i, c in enumerate(file_cols)}
            new = sorted((c for c in cols if c not in index), key=natural_key)
            if len(file_cols) + len(new) > cap:
                raise ConfigError(
                    f"{final}: {name} has room for {cap} columns, {len(file_cols)} used; "
                    f"{len(new)} new ({', '.join(new[:5])}...) do not fit: recreate the file "
                    "with a larger --num-nodes"
                )
            for c in new:
                index[c] = len(file_cols)
                file_cols.append(c)
            block = np.full((r1 - r0, cap), -0.0)
            if cols:
                where = np.fromiter((index[c] for c in cols), dtype=np.int64, count=len(cols))
                block[:, where] = values[: r1 - r0]
            ds[r0:r1, :] = block
            width = max((len(c.encode()) for c in file_cols), default=1)
            ds.attrs["columns"] = np.array([c.encode() for c in file_cols], dtype=f"S{width}")
            ds.attrs["units"] = DATASETS[name][1]
            ds.attrs["updated"] = np.int64(updated)
            ds.attrs["version"] = SCHEMA_VERSION
            columns_used[name] = len(file_cols)
        f.attrs["version"] = SCHEMA_VERSION
        f.flush()
        image = f.id.get_file_image()
    size, digest = _write_atomic(final, image)
    return HdfWriteResult(
        path=final,
        bytes=size,
        sha256=digest,
        created=created,
        rows=builder.stats.inserted,
        window_rows=(int(r0), int(r1)),
        columns=columns_used,
    )


_IMAGES = itertools.count()


def _write_atomic(final: Path, image: bytes) -> tuple[int, str]:
    """``image`` under a temporary name beside ``final``, fsynced, then renamed over it.
    (size, sha256); an OS error (full disk, size limit, read-only directory) is an
    :class:`ArchiveError` naming the file, with nothing left behind."""
    tmp: Path | None = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        tmp = Path(tmp_name)
        with os.fdopen(fd, "wb") as fh:
            fh.write(image)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise ArchiveError(
            f"{final}: cannot write the HDF5 file ({exc.strerror or exc}; {len(image)} bytes "
            "to write): free space or fix the directory, then rerun (the previous file, if "
            "any, is unchanged)"
        ) from exc
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    return len(image), hashlib.sha256(image).hexdigest()


def check_layout(f: Any, where: Path, grid: TimeGrid, names: Sequence[str]) -> None:
    """Refuse an existing file this writer would damage: the groups, timestamps and the
    datasets ``names`` it is about to write must have the TOKIO Time Series layout (float64
    values, ``rows x columns`` on the file's grid, a ``columns`` list that fits, the same
    units). Raises :class:`ArchiveError` naming the file, the dataset and the problem."""
    import h5py

    def refuse(what: str) -> ArchiveError:
        return ArchiveError(
            f"{where}: {what}; this is not a TOKIO Time Series file this writer can update "
            "(values could be clipped or misplaced): move it away or write another file"
        )

    version = _str_attr(f.attrs.get("version", ""))
    if version != SCHEMA_VERSION:
        raise refuse(f"root attribute version is {version!r}, not {SCHEMA_VERSION!r}")
    for group_name in sorted({n.split("/", 1)[0] for n in names}):
        if group_name not in f:
            continue
        group = f[group_name]
        if not isinstance(group, h5py.Group):
            raise refuse(f"/{group_name} is a dataset, not a group")
        ts_name = f"{group_name}/timestamps"
        if ts_name not in f:
            continue
        ts = f[ts_name]
        if not isinstance(ts, h5py.Dataset) or ts.dtype.kind not in "iu" or ts.ndim != 1:
            raise refuse(f"{ts_name} is not a one-dimensional integer dataset")
        if ts.shape[0] != grid.rows or not np.array_equal(ts[:], grid.timestamps):
            raise refuse(
                f"{ts_name} does not match the root start/end and the timestep "
                f"({ts.shape[0]} rows, {grid.rows} expected)"
            )
    for name in names:
        if name not in f:
            continue
        ds = f[name]
        if not isinstance(ds, h5py.Dataset):
            raise refuse(f"{name} is a group, not a dataset")
        if ds.dtype != np.float64:
            raise refuse(f"{name} is {ds.dtype}, not float64")
        if ds.ndim != 2 or ds.shape[0] != grid.rows or ds.shape[1] < 1:
            raise refuse(f"{name} has shape {ds.shape}, not ({grid.rows}, columns)")
        raw = ds.attrs.get("columns")
        if raw is not None:
            arr = np.asarray(raw)
            if arr.ndim != 1 or arr.dtype.kind not in "SUO":
                raise refuse(f"{name}: attribute columns is not a list of names")
            cols = [_str_attr(c) for c in arr]
            if len(cols) > ds.shape[1]:
                raise refuse(f"{name}: {len(cols)} column names for {ds.shape[1]} columns")
            if len(set(cols)) != len(cols):
                raise refuse(f"{name}: attribute columns repeats a name")
        units = ds.attrs.get("units")
        if units is not None and _str_attr(units) != DATASETS[name][1]:
            raise refuse(f"{name} is in {_str_attr(units)!r}, not {DATASETS[name][1]!r}")


def _iso(epoch_s: int) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).isoformat().replace("+00:00", "Z")


def _existing_grid(f: Any, where: Path) -> TimeGrid:
    try:
        start = int(f.attrs["start"])
        end = int(f.attrs["end"])
    except KeyError as exc:
        raise ArchiveError(
            f"{where} has no root start/end attributes: not a TOKIO Time Series file; "
            "move it away or write another file"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise ArchiveError(
            f"{where}: root start/end attributes are not epoch seconds; move it away or "
            "write another file"
        ) from exc
    step = None
    for group in ("datatargets", "dataservers"):
        key = f"{group}/timestamps"
        if key in f and getattr(f[key], "ndim", 0) == 1 and f[key].shape[0] >= 2:
            ts = f[key][:2]
            step = int(ts[1] - ts[0])
            break
    if step is None:
        raise ArchiveError(
            f"{where}: no timestamps dataset with two rows; cannot tell its timestep"
        )
    if step < 1 or end <= start:
        raise ArchiveError(
            f"{where}: start/end/timestamps do not describe a time grid (start {start}, end "
            f"{end}, step {step}); move it away or write another file"
        )
    return TimeGrid(start, end, step)


def read_tokio_dataset(
    path: str | Path, name: str
) -> tuple[list[str], FloatArray, Mapping[str, Any]]:
    """(columns, values over the used columns, attrs) of one dataset; for tests and checks."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f[name]
        cols = [_str_attr(c) for c in ds.attrs.get("columns", [])]
        values = np.asarray(ds[:, : len(cols)], dtype=np.float64)
        attrs = {k: ds.attrs[k] for k in ds.attrs}
    return cols, values, attrs


__all__ = [
    "DATASETS",
    "FAMILIES",
    "BuildStats",
    "HdfWriteResult",
    "TimeGrid",
    "TokioTimeSeriesBuilder",
    "datasets_of",
    "natural_key",
    "read_tokio_dataset",
    "write_tokio_hdf5",
]
