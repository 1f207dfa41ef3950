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

Values: see :mod:`~dxt_core.backends.collectd_es.tokio_builder`.

Re-archiving a window first resets every row of that window, in every dataset written, to
``-0.0`` (pytokio reset only the CPU rows; resetting all makes a rerun equal to a fresh run
even when documents disappeared upstream). A window must lie inside the file's range and
on its timestep grid; a file with another timestep is refused.

The file is never modified in place: it is assembled in memory (a new one, or an existing one
loaded whole, with HDF5's ``core`` driver) and written with plain file I/O to a file the caller
owns (a temporary name beside the target, renamed over it when complete). A full disk or a size
limit is then an :class:`~dxt_core.errors.ArchiveError` naming the file, never an error inside
the HDF5 library (which reported "timestamps do not match" on a new file and then crashed). An
existing file is checked first (dtype, shape and attributes of what is about to be written): a
file of another layout is refused, never clipped into.

:class:`TokioHdf5Writer` is the format's :class:`~dxt_core.writers.base.RecordWriter`: its
header is the window's time grid, its rows pages of collectd hits. It holds the window's
columns, not the documents: each page becomes cells of the builder's matrices
(:mod:`~dxt_core.backends.collectd_es.tokio_builder`: rows x used columns, float64, per
dataset) and is dropped; at close the file's image (those columns, gzip-compressed; an
existing file's whole size when one is updated) is assembled and written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from dxt_core import masking
from dxt_core.backends.collectd_es.query import FAMILIES, Hit
from dxt_core.backends.collectd_es.tokio_builder import (
    DATASETS,
    GROUP_SOURCE,
    SCHEMA_VERSION,
    BuildStats,
    FloatArray,
    TimeGrid,
    TokioTimeSeriesBuilder,
    datasets_of,
    natural_key,
)
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import atomic_file, sweep_killed
from dxt_core.writers.base import RecordWriter, WriteResult

log = masking.logger("dxt_core.backends.collectd_es.tokio_hdf5")


class TokioHdf5Writer(RecordWriter[TimeGrid, Sequence[Hit]]):
    """TOKIO Time Series HDF5 of one window: :meth:`header` takes its time grid, :meth:`rows`
    a page of collectd hits, :meth:`close` writes the file's image to ``out``.

    Holds the window's columns (the builder's matrices), never the documents; the image is
    assembled at close. ``existing``: a file to update (its other rows and columns kept),
    else a new file over ``init`` (default: the window). ``updated``: the datasets'
    ``updated`` attribute (default now, as pytokio writes it; the archive passes the day's
    end so that a rerun writes the same bytes). ``name``: the file named in messages.
    """

    extension = "hdf5"

    def __init__(
        self,
        out: BinaryIO,
        families: Sequence[str],
        *,
        num_nodes: int,
        devices_per_server: int = 4,
        init: TimeGrid | None = None,
        existing: Path | None = None,
        updated: dt.datetime | None = None,
        name: str | Path = "",
    ) -> None:
        super().__init__(out)
        self.families = list(families)
        self.num_nodes, self.devices_per_server = num_nodes, devices_per_server
        self.init, self.existing, self.updated = init, existing, updated
        self.name = Path(name or "(HDF5 file)")
        self.builder: TokioTimeSeriesBuilder | None = None

    def header(self, window: TimeGrid) -> None:
        self.builder = TokioTimeSeriesBuilder(
            self.families, window, self.num_nodes, self.devices_per_server
        )

    def rows(self, page: Sequence[Hit]) -> None:
        if self.builder is None:
            raise ArchiveError("TokioHdf5Writer.rows called before header()")
        self.builder.add_page(page)

    @property
    def stats(self) -> BuildStats:
        """What the pages held: documents inserted, out of range, ignored."""
        return self.builder.stats if self.builder is not None else BuildStats()

    def close(self) -> WriteResult:
        """The file's image to ``out``. Its ``rows`` are the documents the writer was given
        (as the JSON Lines file's are its lines), placed in cells or not: a day whose every
        document was ignored by the conversion is still a day that held documents, with its
        file (every cell ``-0.0``). ``extra`` says what became of them: ``inserted`` (in a
        cell), ``out_of_range`` and ``ignored`` (could not be placed, first ``problems``)."""
        if self.builder is None:
            raise ArchiveError("TokioHdf5Writer.close called before header()")
        image = tokio_image(self.builder, self.existing, self.init, self.updated, self.name)
        self.out.write(image.data)
        build = {k: v for k, v in self.builder.stats.as_dict().items() if k != "documents"}
        return WriteResult(
            rows=self.builder.stats.documents,
            bytes=len(image.data),
            sha256=hashlib.sha256(image.data).hexdigest(),
            extra={"columns": image.columns, **build},
        )


@dataclass
class HdfImage:
    """An HDF5 file's bytes and what they hold."""

    data: bytes
    created: bool
    window_rows: tuple[int, int]
    columns: dict[str, int]


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
    new one (see :func:`tokio_image`)."""
    final = Path(path)
    existing = None if replace or not final.exists() else final
    image = tokio_image(builder, existing, init, now, final)
    if swept := sweep_killed(final):
        log.warning("%s: removed %d temporary file(s) that killed writers of it left", final, swept)
    with atomic_file(final, owned=True) as fh:
        fh.write(image.data)
    return HdfWriteResult(
        path=final,
        bytes=len(image.data),
        sha256=hashlib.sha256(image.data).hexdigest(),
        created=image.created,
        rows=builder.stats.inserted,
        window_rows=image.window_rows,
        columns=image.columns,
    )


def tokio_image(
    builder: TokioTimeSeriesBuilder,
    existing: Path | None,
    init: TimeGrid | None,
    now: dt.datetime | None,
    where: Path,
) -> HdfImage:
    """The file's bytes with the builder's window written in: a new file over ``init``
    (default the window), or ``existing`` updated.

    Assembled in memory (HDF5's ``core`` driver; an existing file is loaded whole, so memory
    holds its size). An existing file whose layout is not what this writer makes (dtype,
    shape, attributes) is refused before anything is written.
    """
    window = builder.window
    updated = int((now or dt.datetime.now(dt.UTC)).timestamp())
    grid = init or window
    if existing is None and grid.timestep != window.timestep:
        raise ConfigError("the initial range and the window need the same timestep")
    f = _open_image(existing, where)
    with f:
        if existing is None:
            f.attrs["version"] = SCHEMA_VERSION
            f.attrs["start"] = np.int64(grid.start)
            f.attrs["end"] = np.int64(grid.start + grid.rows * grid.timestep)
        else:
            grid = _existing_grid(f, where)
        _check_window(window, grid, where)
        results = builder.results()
        if existing is not None:
            check_layout(f, where, grid, list(results))
        r0 = (window.start - grid.start) // grid.timestep
        r1 = min(r0 + window.rows, grid.rows)
        columns_used: dict[str, int] = {}
        for name, (cols, values) in results.items():
            cap = builder.datasets[name].capacity
            columns_used[name] = _write_dataset(
                f, name, cols, values, grid, (r0, r1), cap, updated, where
            )
        f.attrs["version"] = SCHEMA_VERSION
        f.flush()
        data = f.id.get_file_image()
    return HdfImage(data, existing is None, (int(r0), int(r1)), columns_used)


def _open_image(existing: Path | None, where: Path) -> Any:
    """A new in-memory file, or ``existing`` loaded whole, writable in memory only."""
    import h5py

    try:
        if existing is None:
            # a name of its own: HDF5 refuses to open one name twice in a process
            name = f"{where.name}.{os.getpid()}.{next(_IMAGES)}.mem"
            return h5py.File(name, "w", driver="core", backing_store=False)
        f = h5py.File(existing, "r", driver="core", backing_store=False)
        f.close()  # readable as HDF5: now load it whole, writable (in memory only)
        return h5py.File(existing, "r+", driver="core", backing_store=False)
    except OSError as exc:
        raise ArchiveError(
            f"{where}: cannot read it as HDF5 ({exc}); move it away or write another file"
        ) from exc


def _check_window(window: TimeGrid, grid: TimeGrid, where: Path) -> None:
    if grid.timestep != window.timestep:
        raise ConfigError(
            f"{where} has a timestep of {grid.timestep} s, not {window.timestep} s: "
            "write another file or pass the file's timestep"
        )
    if (window.start - grid.start) % grid.timestep or (
        window.end != grid.end and (window.end - grid.start) % grid.timestep
    ):
        raise ConfigError(
            f"window [{_iso(window.start)}, {_iso(window.end)}) is not on the "
            f"{grid.timestep} s grid of {where} (starting {_iso(grid.start)})"
        )
    if window.start < grid.start or window.end > grid.end:
        raise ConfigError(
            f"window [{_iso(window.start)}, {_iso(window.end)}) is outside the range "
            f"[{_iso(grid.start)}, {_iso(grid.end)}) of {where}: write another file "
            "or recreate this one with a wider --init-start/--init-end"
        )


#: The largest dataset a file is made with (it is laid out in memory whole when made).
MAX_DATASET_BYTES = 4 << 30


def _write_dataset(
    f: Any,
    name: str,
    cols: list[str],
    values: FloatArray,
    grid: TimeGrid,
    rows: tuple[int, int],
    cap: int,
    updated: int,
    where: Path,
) -> int:
    """Reset the window's rows of dataset ``name`` and write its cells; the columns used."""
    group_name = name.split("/", 1)[0]
    group = f.require_group(group_name)
    group.attrs["source"] = GROUP_SOURCE
    ts_name = f"{group_name}/timestamps"
    if ts_name not in f:
        f.create_dataset(ts_name, data=grid.timestamps, dtype="i8")
    if name in f:
        ds = f[name]
        file_cols = [_str_attr(c) for c in ds.attrs.get("columns", [])]
        cap = ds.shape[1]
    else:
        size = grid.rows * cap * 8
        if size > MAX_DATASET_BYTES:
            # laid out in memory whole (its fill written): 100,000,000 servers asked 25 TiB
            raise ConfigError(
                f"{where}: {name} would be {grid.rows:,} rows x {cap:,} columns "
                f"({size / (1 << 30):,.1f} GiB, at most {MAX_DATASET_BYTES >> 30} GiB): give "
                "fewer --num-nodes or --ssds-per-node, or a larger --timestep"
            )
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
            f"{where}: {name} has room for {cap} columns, {len(file_cols)} used; "
            f"{len(new)} new ({', '.join(new[:5])}...) do not fit: recreate the file "
            "with a larger --num-nodes"
        )
    for c in new:
        index[c] = len(file_cols)
        file_cols.append(c)
    r0, r1 = rows
    block = np.full((r1 - r0, cap), -0.0)
    if cols:
        at = np.fromiter((index[c] for c in cols), dtype=np.int64, count=len(cols))
        block[:, at] = values[: r1 - r0]
    ds[r0:r1, :] = block
    width = max((len(c.encode()) for c in file_cols), default=1)
    ds.attrs["columns"] = np.array([c.encode() for c in file_cols], dtype=f"S{width}")
    ds.attrs["units"] = DATASETS[name][1]
    ds.attrs["updated"] = np.int64(updated)
    ds.attrs["version"] = SCHEMA_VERSION
    return len(file_cols)


_IMAGES = itertools.count()


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
        # pytokio writes a dataset that got no data with columns = numpy.array([]) (float64,
        # empty: tokio/connectors/hdf5.py, TimeSeries commit): no names yet
        if raw is not None and np.asarray(raw).size > 0:
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
    "TokioHdf5Writer",
    "TokioTimeSeriesBuilder",
    "datasets_of",
    "natural_key",
    "read_tokio_dataset",
    "write_tokio_hdf5",
]
