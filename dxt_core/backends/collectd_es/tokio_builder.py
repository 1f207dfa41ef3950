"""The cells of a TOKIO Time Series window (pytokio's ``archive_collectdes``), built page by
page from collectd documents with NumPy: which datasets a family fills, the time grid, and how
a document becomes a cell.

A row labelled ``t`` covers ``[t, t + timestep)``. Cells without data hold ``-0.0``. The
column count is preallocated (``num_nodes x devices_per_server`` for datatargets,
``num_nodes`` for dataservers).

Values: disk ``read``/``write`` replace the cell (the last document in stream order wins);
``cpuload`` is ``100 - idle`` and ``cpuuser``/``cpusys`` the raw value, each summed per
cell and divided by the number of documents (cores) reported in that step; memory values
replace the cell. The file is :mod:`~dxt_core.backends.collectd_es.tokio_hdf5`'s.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dxt_core.backends.collectd_es.columnar_hits import ColumnarHits, plain_numpy
from dxt_core.backends.collectd_es.query import Hit, check_family, parse_timestamp_ms, to_ms
from dxt_core.errors import ConfigError

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
        #: each disk column's (hostname, plugin_instance): two pairs, one column is refused
        self._disk_pairs: dict[str, tuple[Any, Any]] = {}
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
                    target = self._disk_target(key, hit, per)
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
                v = s.get("value")
                name = (_CPU if plugin == "cpu" else _MEMORY).get(s.get("type_instance") or "")
                if name is None or v is None:
                    self._bad(f"_id {hit.get('_id')}: {plugin} document without known value")
                    continue
                acc = per[name]
                acc[0].append(ts)
                acc[1].append(self.datasets[name].column(host))
                acc[2].append(100.0 - v if name == _CPU["idle"] else v)
            else:
                self._bad(f"_id {hit.get('_id')}: plugin {plugin!r} not in {self.families}")
                continue
            self.stats.inserted += 1
        self._put(per)

    def _disk_target(
        self, key: tuple[Any, ...], hit: Hit, per: dict[str, _Acc]
    ) -> tuple[_Acc, int, _Acc, int] | None:
        """Where a disk document's read and write values go (accumulator, column each)."""
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
        col = self._disk_column(host, inst)
        d0, d1 = self.datasets[names[0]], self.datasets[names[1]]
        return per[names[0]], d0.column(col), per[names[1]], d1.column(col)

    def _disk_column(self, host: Any, inst: Any) -> str:
        """A disk series' column, pytokio's ``<hostname>:<plugin_instance>``, refused when
        another series already has it (a ``:`` in a hostname or device name: ``bb1`` and
        ``nvme0n1:p1``, ``bb1:nvme0n1`` and ``p1``), which would sum two disks' rates in
        one column."""
        col = f"{host}:{inst}"
        had = self._disk_pairs.setdefault(col, (host, inst))
        if had != (host, inst):
            raise ConfigError(
                f"datatargets: the disks (hostname {had[0]!r}, plugin_instance {had[1]!r}) and "
                f"(hostname {host!r}, plugin_instance {inst!r}) would share the TOKIO column "
                f"{col!r} (pytokio's hostname:plugin_instance); archive this window with "
                "--format jsonl, which keeps every document as it is"
            )
        return col

    def _put(self, per: dict[str, _Acc]) -> None:
        """Write a page's accumulated (time, column, value) triples into the cells."""
        for name, (tss, cols, vals) in per.items():
            if not tss:
                continue
            rows = (np.asarray(tss, dtype=np.int64) - self._start_ms) // self._step_ms
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
        if ts is None or page.source.null_count:
            return False
        inside = (ts >= self._start_ms) & (ts < self._end_ms)
        cols = _PageColumns(page, inside)
        n_in = cols.n_in
        host, hosts = cols.codes("hostname")
        if n_in and (host < 0).any():
            return False
        jobs = self._columnar_jobs(cols, host, hosts)
        if jobs is None:
            return False  # some document in the window would be ignored: name it hit by hit
        uniques = self._new_columns(jobs)
        if uniques is None:
            return False  # the hit-by-hit path names the first column too many
        self.stats.documents += len(ts)
        self.stats.out_of_range += len(ts) - n_in
        self.stats.inserted += n_in
        self.stats.columnar_pages += 1
        row_of = ((ts if cols.every else ts[inside]) - self._start_ms) // self._step_ms
        for (target, m, key, names, vals), (uniq, first) in zip(jobs, uniques, strict=True):
            if not len(uniq):
                continue
            dataset = self.datasets[target]
            col_of = np.zeros(int(uniq.max()) + 1, dtype=np.int64)
            for k in uniq[np.argsort(first)]:
                col_of[k] = dataset.column(names[k])
            dataset.put(row_of[m], col_of[key[m]], vals[m])
        return True

    def _columnar_jobs(
        self, cols: _PageColumns, host: IntArray, hosts: list[Any]
    ) -> list[_Job] | None:
        """What goes where: (dataset, rows, column key per row, key names, value per row)
        per target dataset; None when a document in the window is not taken as is."""
        plugin, plugins = cols.codes("plugin")
        jobs: list[_Job] = []
        handled = np.zeros(cols.n_in, dtype=bool)
        for code, name in enumerate(plugins):
            if name not in self.families:
                continue  # not handled: ignored documents are named hit by hit
            rows = plugin == code
            if name == "disk":
                ctype, ctypes = cols.codes("collectd_type")
                inst, insts = cols.codes("plugin_instance")
                (read, read_ok), (write, write_ok) = cols.numbers("read"), cols.numbers("write")
                key = host * max(len(insts), 1) + inst
                names = [f"{h}:{d}" for h in hosts for d in insts]
                ok = rows & (inst >= 0) & read_ok & write_ok
                for k in np.unique(key[ok]).tolist():
                    self._disk_column(hosts[k // max(len(insts), 1)], insts[k % max(len(insts), 1)])
                for kind, (r_name, w_name) in _DISK_TARGETS.items():
                    if kind in ctypes:
                        m = ok & (ctype == ctypes.index(kind))
                        handled |= m
                        jobs += [(r_name, m, key, names, read), (w_name, m, key, names, write)]
                continue
            kind_code, kinds = cols.codes("type_instance")
            value, value_ok = cols.numbers("value")
            table = _CPU if name == "cpu" else _MEMORY
            for k, kind in enumerate(kinds):
                target = table.get(kind)
                if target is not None:
                    m = rows & (kind_code == k) & value_ok
                    handled |= m
                    vals = 100.0 - value if target == _CPU["idle"] else value
                    jobs.append((target, m, host, hosts, vals))
        if not handled.all():
            return None
        for _, m, _, _, vals in jobs:
            v = vals[m]
            # JSON's -0 is the integer 0 to the hit-by-hit path (orjson) but -0.0, the "no
            # data" cell, to Arrow; a number too large for a double is inf here but refused
            # by orjson: both go hit by hit
            if not np.isfinite(v).all() or ((v == 0) & np.signbit(v)).any():
                return None
        return jobs

    def _new_columns(self, jobs: list[_Job]) -> list[tuple[IntArray, IntArray]] | None:
        """Each job's column keys (unique, with their first row); None when the new columns
        do not fit a dataset's preallocated width."""
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
                return None
        return uniques

    def add_pages(self, pages: Iterable[Sequence[Hit]]) -> None:
        for page in pages:
            self.add_page(page)

    def results(self) -> dict[str, tuple[list[str], FloatArray]]:
        """dataset -> (columns in insertion order, (rows, len(columns)) values)."""
        return {n: (list(d.columns), d.result()) for n, d in self.datasets.items()}


#: (dataset, rows of the page's window, column key per row, key names, value per row)
_Job = tuple[str, npt.NDArray[np.bool_], IntArray, list[str], FloatArray]
_DISK_TARGETS = {
    "disk_octets": ("datatargets/readrates", "datatargets/writerates"),
    "disk_ops": ("datatargets/readoprates", "datatargets/writeoprates"),
}


class _PageColumns:
    """A columnar page's fields, restricted to the documents in the window."""

    def __init__(self, page: ColumnarHits, inside: npt.NDArray[np.bool_]) -> None:
        self.src = page.source
        self.inside = inside
        self.n_in = int(inside.sum())
        self.every = self.n_in == len(inside)

    def codes(self, name: str) -> tuple[IntArray, list[Any]]:
        """Per document in the window: the index of its value in the list returned (-1 for
        null)."""
        enc = self.src.field(name).dictionary_encode()
        idx = _ints(enc.indices)
        return (idx if self.every else idx[self.inside]), enc.dictionary.to_pylist()

    def numbers(self, name: str) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        arr = self.src.field(name)
        values = _floats(arr)
        ok = np.ones(len(values), dtype=bool) if not arr.null_count else _valid(arr)
        return (values, ok) if self.every else (values[self.inside], ok[self.inside])
