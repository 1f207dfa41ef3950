"""The state of every (unit, day) of a source, as coverage and the coverage view ask for it.

From the manifest index (:mod:`dxt_core.index`) checked against one directory listing per
unit: a manifest or data file deleted since it was indexed shows as missing or corrupt, a day
kept by the never-shrink rule (its ``<day>.kept.json`` sidecar) shows as kept, and a unit
whose directory changed since it was indexed (its mtime and number of entries) is read from
its manifests, and the index repaired. Without a usable index every manifest is read. An S3
archive answers from a listing and an index object per unit.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dxt_core.archive import Archive, DayKey
from dxt_core.index import DirState, ManifestIndex, unit_entries, unit_of
from dxt_core.manifests import KEPT_SUFFIX, MANIFEST_SUFFIX

log = logging.getLogger("dxt_core.index")

State = Literal["archived", "empty", "missing", "corrupt", "kept"]
#: One character per cell in :class:`StateGrid` rows.
STATE_CODES: dict[State, str] = {
    "archived": "A",
    "empty": "E",
    "missing": "M",
    "corrupt": "C",
    "kept": "K",
}
CODE_STATES: dict[str, State] = {v: k for k, v in STATE_CODES.items()}


def _listing_state(directory: Path, listing: set[str]) -> DirState | None:
    try:
        return (os.stat(directory).st_mtime_ns, len(listing))
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass
class StateGrid:
    """Archive states of ``units`` x ``days``: one string per unit, one character per day
    (:data:`STATE_CODES`), and why for corrupt cells."""

    units: list[str]
    days: list[dt.date]
    rows: list[str]
    details: dict[tuple[int, int], str] = field(default_factory=dict)

    def state(self, unit: int, day: int) -> State:
        return CODE_STATES[self.rows[unit][day]]

    def counts(self) -> dict[State, int]:
        out: dict[State, int] = dict.fromkeys(STATE_CODES, 0)
        for row in self.rows:
            for state, code in STATE_CODES.items():
                out[state] += row.count(code)
        return out


def _listing(directory: Path) -> set[str]:
    try:
        return set(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return set()


def scan_states(
    archive: Archive,
    source: str,
    units: Sequence[Sequence[str]],
    days: Sequence[dt.date],
    check_sizes: bool = False,
    index: ManifestIndex | None = None,
) -> StateGrid:
    """Archive state of every (unit, day), from the index checked against directory listings.

    Without a usable index every manifest is read (slow on large archives). A manifest the
    index does not know is read from disk; with ``check_sizes`` each data file's size is
    compared with its manifest's (one ``stat`` per file).
    """
    if archive.remote:  # an S3 archive: a listing and an index object per unit
        return _remote_states(archive, source, units, days)
    own = index is None
    idx = index if index is not None else ManifestIndex(archive.root)
    try:
        return _scan(archive, source, units, days, check_sizes, idx)
    finally:
        if own:
            idx.close()


def _remote_states(
    archive: Archive, source: str, units: Sequence[Sequence[str]], days: Sequence[dt.date]
) -> StateGrid:
    from dxt_core.store.s3 import S3Archive

    assert isinstance(archive, S3Archive)
    grid = StateGrid(units=[unit_of(p) for p in units], days=list(days), rows=[])
    for u, row in enumerate(archive.unit_states(source, units, days)):
        cells = []
        for d, (status, detail, kept) in enumerate(row):
            state: State = "kept" if kept else status
            if detail and not kept:
                grid.details[(u, d)] = detail
            cells.append(STATE_CODES[state])
        grid.rows.append("".join(cells))
    return grid


@dataclass
class _Layout:
    """Where each unit's days are: its name, directory and listing, and the names of its
    manifests and kept sidecars by day (``_``-prefixed in Hive layouts)."""

    names: list[str]
    directories: list[Path]
    listings: list[set[str]]
    manifests: list[list[str]]
    kepts: list[list[str]]

    @classmethod
    def of(
        cls, archive: Archive, source: str, units: Sequence[Sequence[str]], day_names: list[str]
    ) -> _Layout:
        by_kind = {
            h: (
                [f"{'_' if h else ''}{day}{MANIFEST_SUFFIX}" for day in day_names],
                [f"{'_' if h else ''}{day}{KEPT_SUFFIX}" for day in day_names],
            )
            for h in (False, True)
        }
        kinds = [by_kind[any("=" in p for p in parts)] for parts in units]
        directories = [archive.root.joinpath(source, *parts) for parts in units]
        return cls(
            names=[unit_of(p) for p in units],
            directories=directories,
            listings=[_listing(d) for d in directories],
            manifests=[k[0] for k in kinds],
            kepts=[k[1] for k in kinds],
        )


#: The cells' codes as bytes, and the code of a cell not answered yet.
_A, _K, _E, _C, _M = (
    ord(STATE_CODES[s]) for s in ("archived", "kept", "empty", "corrupt", "missing")
)
_UNKNOWN = ord("?")


def _scan(
    archive: Archive,
    source: str,
    units: Sequence[Sequence[str]],
    days: Sequence[dt.date],
    check_sizes: bool,
    idx: ManifestIndex,
) -> StateGrid:
    # One pass over the index's rows, each checked against its unit's directory listing, then
    # one over the cells the index did not answer (a manifest it never saw: read from disk;
    # no manifest: missing). 300,000 cells take well under a second.
    day_names = [d.isoformat() for d in days]
    lay = _Layout.of(archive, source, units, day_names)
    usable = bool(days) and idx.exists()
    # The index is a cache: its rows of a unit are used only while the unit's directory is
    # as it was when they were indexed (one stat per unit); a stale unit is read from its
    # manifests below, and the index repaired.
    stored = idx.dir_states(source) if usable else {}
    states = [_listing_state(d, ls) for d, ls in zip(lay.directories, lay.listings, strict=True)]
    fresh = [st is None or stored.get(n) == st for n, st in zip(lay.names, states, strict=True)]
    codes = [bytearray(b"?" * len(days)) for _ in units]
    grid = StateGrid(units=lay.names, days=list(days), rows=[])
    if usable:
        rows = idx.entries(source, min(days), max(days))
        day_pos = {name: i for i, name in enumerate(day_names)}
        _cells_from_index(rows, lay, fresh, day_pos, codes, grid, check_sizes)
    for u, cells in enumerate(codes):
        listing = lay.listings[u]
        d = cells.find(_UNKNOWN)
        while d >= 0:
            if lay.manifests[u][d] not in listing:
                cells[d] = _M
            else:
                state, detail = _state_from_disk(archive, source, units[u], days[d], check_sizes)
                if detail:
                    grid.details[(u, d)] = detail
                cells[d] = ord(STATE_CODES[state])
            d = cells.find(_UNKNOWN, d + 1)
        grid.rows.append(cells.decode())
    if usable and not idx.read_only:
        _repair(idx, source, units, lay.names, lay.directories, lay.listings, states, fresh)
    return grid


def _cells_from_index(
    rows: Iterable[tuple[str, str, str, str, str]],
    lay: _Layout,
    fresh: list[bool],
    day_pos: dict[str, int],
    codes: list[bytearray],
    grid: StateGrid,
    check_sizes: bool,
) -> None:
    """The cells the index answers: its rows of fresh units, checked against the listings."""
    unit_pos = {name: i for i, name in enumerate(lay.names)}
    # Rows come in primary-key order, unit by unit: look the unit up once per run of rows.
    current, u = None, None
    listing: set[str] = set()
    manifests: list[str] = []
    kepts: list[str] = []
    row = bytearray()
    for unit, day, status, files, sizes in rows:
        if unit != current:
            current, u = unit, unit_pos.get(unit)
            if u is not None and not fresh[u]:
                u = None  # stale: its cells are read from disk
            if u is not None:
                listing, row = lay.listings[u], codes[u]
                manifests, kepts = lay.manifests[u], lay.kepts[u]
        if u is None:
            continue
        d = day_pos.get(day)
        if d is None:
            continue
        if manifests[d] not in listing:
            row[d] = _M
        elif status == "archived":
            if "/" not in files and not check_sizes:  # one data file: the usual case
                problem = "" if files in listing else f"data file {files} is missing"
            else:
                problem = _files_problem(lay.directories[u], listing, files, sizes, check_sizes)
            if problem:
                grid.details[(u, d)] = problem
                row[d] = _C
            else:
                row[d] = _K if kepts[d] in listing else _A
        elif status == "empty":
            row[d] = _E
        else:
            grid.details[(u, d)] = "unreadable manifest"
            row[d] = _C


def _repair(
    idx: ManifestIndex,
    source: str,
    units: Sequence[Sequence[str]],
    names: list[str],
    directories: list[Path],
    listings: list[set[str]],
    states: list[DirState | None],
    fresh: list[bool],
) -> None:
    """Index again, from their manifests, the units whose directories changed since they
    were indexed. Never raises: the grid was answered from the manifests already."""
    for u, ok in enumerate(fresh):
        if ok:
            continue
        try:
            entries = list(unit_entries(directories[u], source, units[u], listings[u]))
            idx.replace_unit(source, names[u], entries, states[u])
        except (sqlite3.Error, OSError) as exc:
            log.warning("%s: could not repair the index of %s (%s)", idx.path, names[u], exc)
            return
        log.info(
            "%s: %s/%s changed since it was indexed: index repaired", idx.path, source, names[u]
        )


def _files_problem(
    directory: Path, listing: set[str], names: str, sizes: str, check_sizes: bool
) -> str:
    """Why the data files of an archived day are not as its manifest says ("" if they are)."""
    if "/" not in names and not check_sizes:  # the usual single file, fast
        return "" if names in listing else f"data file {names} is missing"
    wants = sizes.split("/")
    for i, name in enumerate(names.split("/")):
        if name not in listing:
            return f"data file {name} is missing"
        if check_sizes:
            want = wants[i] if i < len(wants) else ""
            try:
                size = (directory / name).stat().st_size
            except OSError:
                return f"data file {name} is missing"
            if want and size != int(want):
                return f"data file {name} has {size} bytes, manifest says {want}"
    return ""


def _state_from_disk(
    archive: Archive, source: str, parts: Sequence[str], day: dt.date, check_sizes: bool
) -> tuple[State, str]:
    """What :meth:`Archive.status` says (it compares sizes), with kept days told apart."""
    status, detail = archive.status(DayKey(source, tuple(parts), day))
    if status == "archived" and detail.startswith("kept:"):
        return "kept", ""
    directory = f"{archive.directory(DayKey(source, tuple(parts), day))}/"
    if status == "corrupt" and detail.startswith(directory):
        # As the index's own check words it (a stale unit is read from disk)
        detail = "data file " + detail[len(directory) :]
    if status == "corrupt" and str(archive.root) in detail:
        detail = detail.replace(f"{archive.root}/", "").replace(str(archive.root), "")
    return status, detail
