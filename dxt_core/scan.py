"""The state of every (unit, day) of a source, as coverage and the coverage view ask for it.

From the manifest index (:mod:`dxt_core.index`) checked against one directory listing per
unit: a manifest or data file deleted since it was indexed shows as missing or corrupt, a day
kept by the never-shrink rule (its ``<day>.kept.json`` sidecar) shows as kept, and a unit
whose directory changed since it was indexed (its mtime and number of entries) has its index
rows repaired first: one ``stat`` per manifest, and only the manifests new or changed since
they were indexed are read (:func:`_changed`), once. Without a usable index every manifest
is read. An S3 archive answers from a listing and an index object per unit.
"""

from __future__ import annotations

import bisect
import datetime as dt
import os
import sqlite3
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.index import (
    MANIFEST_NAME,
    DirState,
    ManifestIndex,
    UnitRepair,
    unit_entries,
    unit_of,
)
from dxt_core.manifests import KEPT_SUFFIX, MANIFEST_SUFFIX, kept_applies

log = masking.logger("dxt_core.index")

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


#: Told, as one line for the user, when a read is about to repair the index of units whose
#: directories changed since they were indexed and when it is done (``dxt coverage`` prints
#: it on stderr; the repair is logged at INFO level either way). None: nothing is told.
repair_notice: Callable[[str], None] | None = None
#: Rows read again written per index transaction during a repair (bounds its memory).
REPAIR_BATCH = 20_000


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


def _state_and_listing(directory: Path) -> tuple[DirState | None, set[str]]:
    """A unit directory's state, taken before it is listed (a change while it is listed
    shows as a later state that differs), and its listing; (None, empty) when it is gone."""
    try:
        mtime_ns = os.stat(directory).st_mtime_ns
        listing = set(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return None, set()
    return (mtime_ns, len(listing)), listing


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
    if index is None:  # an index opened here is closed here
        with ManifestIndex(archive.root) as idx:
            return scan_states(archive, source, units, days, check_sizes, idx)
    # One pass over the index's rows, each checked against its unit's directory listing, then
    # one over the cells the index did not answer (a manifest it never saw: read from disk;
    # no manifest: missing). 300,000 cells take well under a second.
    day_names = [d.isoformat() for d in days]
    lay = _Layout.of(archive, source, units, day_names)
    usable = bool(days) and index.exists()
    # The index is a cache: its rows of a unit are used only while the unit's directory is
    # as it was when they were indexed (one stat per unit). A stale unit's rows are repaired
    # first, from its manifests that changed; where that cannot be (a read-only index, a
    # failed update) its cells are read from the manifests below.
    stored = index.dir_states(source) if usable else {}
    fresh = [st is None or stored.get(n) == st for n, st in zip(lay.names, lay.states, strict=True)]
    if usable and not index.read_only and not all(fresh):
        _repair(index, source, units, lay, stored, fresh)
    codes = [bytearray(b"?" * len(days)) for _ in units]
    grid = StateGrid(units=lay.names, days=list(days), rows=[])
    if usable:
        rows = index.entries(source, min(days), max(days))
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
    return grid


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


class _DayNames:
    """The files of a unit directory that belong to the days asked (``[_]<day>...``: their
    manifests, kept sidecars and data files), from one listing: what a scan holds per unit
    follows the range asked, not the archive's age (all names of three years of 811 units
    were 1.7 M strings, 232 MB, for a question about one day). A name of no day asked (a data
    file named otherwise, or after another day) is looked up on disk."""

    __slots__ = ("days", "directory", "names")

    def __init__(self, directory: Path, listing: Iterable[str], days: frozenset[str]) -> None:
        self.directory = directory
        self.days = days
        self.names = frozenset(_in_days(listing, days))

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self.names:
            return True
        if _day_of(name) in self.days or not name or "/" in name or name in (".", ".."):
            return False
        return os.path.lexists(self.directory / name)


def _in_days(listing: Iterable[str], days: frozenset[str]) -> Iterator[str]:
    """The names of ``listing`` whose day is one of ``days``: sorted, then the names from the
    first day to the last bisected out (with and without the ``_`` prefix), so the names of
    other days are not looked at one by one (a year's 800 per unit, 811 units)."""
    if not days:
        return
    names = sorted(listing)
    first, last = min(days), max(days)
    for prefix in ("", "_"):
        lo = bisect.bisect_left(names, prefix + first)
        hi = bisect.bisect_left(names, prefix + last + "\U0010ffff", lo)
        yield from (n for n in names[lo:hi] if _day_of(n) in days)


def _day_of(name: str) -> str:
    """The day a file of a unit directory belongs to by its name (``[_]YYYY-MM-DD...``)."""
    return name[1:11] if name[:1] == "_" else name[:10]


@dataclass
class _Layout:
    """Where each unit's days are: its name, directory, the names of its files of the days
    asked (:class:`_DayNames`) and directory state, and the names of its manifests and kept
    sidecars by day (``_``-prefixed in Hive layouts)."""

    names: list[str]
    directories: list[Path]
    listings: list[_DayNames]
    states: list[DirState | None]
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
        days = frozenset(day_names)
        lay = cls(
            [unit_of(p) for p in units], [], [], [], [k[0] for k in kinds], [k[1] for k in kinds]
        )
        for parts in units:  # one directory's whole listing at a time
            directory = archive.root.joinpath(source, *parts)
            state, listing = _state_and_listing(directory)
            lay.directories.append(directory)
            lay.listings.append(_DayNames(directory, listing, days))
            lay.states.append(state)
        return lay


#: The cells' codes as bytes, and the code of a cell not answered yet.
_A, _K, _E, _C, _M = (
    ord(STATE_CODES[s]) for s in ("archived", "kept", "empty", "corrupt", "missing")
)
_UNKNOWN = ord("?")


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
    listing: Container[str] = frozenset()
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
                kept = kepts[d] in listing
                row[d] = (
                    _K if kept and _kept_applies(lay.directories[u], kepts[d], manifests[d]) else _A
                )
        elif status == "empty":
            row[d] = _E
        else:
            grid.details[(u, d)] = "unreadable manifest"
            row[d] = _C


def _kept_applies(directory: Path, kept: str, manifest: str) -> bool:
    """The day's kept record still describes its manifest (:func:`kept_applies`: not one
    that a replace failed to remove), both read from disk; unreadable: it applies."""
    docs = []
    for name in (kept, manifest):
        try:
            doc = orjson.loads((directory / name).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return True
        if not isinstance(doc, dict):
            return True
        docs.append(doc)
    return kept_applies(docs[0], docs[1])


def _repair(
    idx: ManifestIndex,
    source: str,
    units: Sequence[Sequence[str]],
    lay: _Layout,
    stored: dict[str, DirState],
    fresh: list[bool],
    quiet: bool = False,
) -> None:
    """Bring the index's rows of the units whose directories changed since they were indexed
    up to date, reading only their manifests that changed (:func:`_changed`), and mark them
    fresh: their cells are then answered from the index. Never raises: a unit not repaired
    stays stale, and its cells are read from its manifests."""
    stale = [u for u, ok in enumerate(fresh) if not ok]
    t0 = time.perf_counter()
    tell = (lambda _: None) if quiet else _tell
    tell(
        f"{len(stale)} unit{'s' if len(stale) != 1 else ''} of {source} changed since the "
        f"index saw {'them' if len(stale) != 1 else 'it'}: repairing the index (one stat "
        "per manifest, the changed ones read)"
    )
    batch: dict[int, UnitRepair] = {}
    read = gone = 0

    def write() -> None:  # one transaction per batch: its units are fresh once it commits
        idx.repair_units(source, batch.values())
        for done in batch:
            fresh[done] = True
        batch.clear()

    try:
        for u in stale:
            if lay.states[u] is None:  # a unit without a directory is never stale
                continue
            # its whole listing (the layout keeps the names of the days asked only)
            state, listing = _state_and_listing(lay.directories[u])
            if state is None:  # gone since
                continue
            lay.states[u] = state
            lay.listings[u] = _DayNames(lay.directories[u], listing, lay.listings[u].days)
            rows = idx.unit_stats(source, lay.names[u])
            since = stored.get(lay.names[u])
            names, vanished = _changed(lay.directories[u], listing, rows, since)
            entries = [
                e.as_tuple() for e in unit_entries(lay.directories[u], source, units[u], names)
            ]
            batch[u] = UnitRepair(lay.names[u], entries, vanished, state)
            read, gone = read + len(names), gone + len(vanished)
            if sum(len(r.rows) for r in batch.values()) >= REPAIR_BATCH:
                write()
        write()
    except (sqlite3.Error, OSError) as exc:
        log.warning("%s: could not repair the index of %s (%s)", idx.path, source, exc)
        return
    said = (
        f"index of {len(stale)} unit{'s' if len(stale) != 1 else ''} of {source} repaired: "
        f"{read} manifests read, {gone} rows of manifests gone dropped, "
        f"{time.perf_counter() - t0:.1f} s"
    )
    log.info("%s: %s", idx.path, said)
    tell(said)


def refresh_index(archive: Archive, keys: Iterable[DayKey]) -> None:
    """Bring the index of the units of ``keys`` up to date after a run that committed their
    days on several threads at once: a commit records its directory's new state only when
    no other commit changed the directory during its transaction, so days of one unit
    committed side by side left the unit stale, and the next coverage said the index had
    not seen it ("changed since the index saw it: repairing"). Quiet, and never raises: a
    unit left stale is repaired by the next reader."""
    if archive.remote:
        return
    by_source: dict[str, list[tuple[str, ...]]] = {}
    for key in keys:
        if key.parts not in by_source.setdefault(key.source, []):
            by_source[key.source].append(key.parts)
    try:
        with ManifestIndex(archive.root) as idx:
            if not idx.exists() or idx.read_only:
                return
            for source, units in by_source.items():
                lay = _Layout.of(archive, source, units, [])
                stored = idx.dir_states(source)
                fresh = [
                    st is None or stored.get(n) == st
                    for n, st in zip(lay.names, lay.states, strict=True)
                ]
                if not all(fresh):
                    _repair(idx, source, units, lay, stored, fresh, quiet=True)
    except (sqlite3.Error, OSError) as exc:
        log.info("%s: the index was not brought up to date (%s)", archive.root, exc)


def _tell(message: str) -> None:
    if repair_notice is not None:
        repair_notice(message)


def _changed(
    directory: Path,
    listing: set[str],
    rows: dict[str, tuple[str, int | None, int | None]],
    since: DirState | None,
) -> tuple[list[str], list[tuple[str, str, int | None, int | None]]]:
    """The manifests of a stale unit to read again, and its index rows whose manifest is gone
    (``rows``: the index's, ``day -> (manifest, msize, mtime_ns)``), from one ``stat`` per
    manifest.

    A manifest is as the index saw it when it has the name, size and mtime its row records
    (what a fresh unit's rows are checked against) and its inode has not changed since the
    index last matched the directory: its ctime, which no program can set back, is older
    than the directory's mtime then (``since``; without it every manifest is read). So a
    ``touch`` of the directory, a file removed or added beside the manifests, reads none; a
    manifest replaced or rewritten, even with its size and mtime kept, is read.
    """
    by_day: dict[str, str] = {}
    for name in sorted(listing):  # as unit_entries: of two names of one day, the last
        m = MANIFEST_NAME.match(name)
        if m:
            by_day[m.group(1)] = name
    base = f"{directory}/"
    read: list[str] = []
    lost: set[str] = set()
    for day, name in by_day.items():
        try:
            st = os.stat(base + name)
        except OSError:  # gone since the listing: its row is dropped
            lost.add(day)
            continue
        row = rows.get(day)
        if (
            row is None
            or since is None
            or row != (name, st.st_size, st.st_mtime_ns)
            or st.st_ctime_ns >= since[0]
        ):
            read.append(name)
    # (a day whose manifest now has the other name is read: its row is replaced)
    gone = [(day, *row) for day, row in rows.items() if day not in by_day or day in lost]
    return read, gone


def _files_problem(
    directory: Path, listing: Container[str], names: str, sizes: str, check_sizes: bool
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
    key = DayKey(source, tuple(parts), day)
    status, detail = archive.status(key)
    if status == "archived" and detail.startswith("kept:"):
        return "kept", ""
    if status == "corrupt":  # as the index's own check words it (a stale unit is read from disk)
        detail = relative_detail(archive, key, detail)
    return status, detail


def relative_detail(archive: Archive, key: DayKey, detail: str) -> str:
    """``detail`` (of :meth:`Archive.status`) as the index's check words it: a file of the
    day's folder by its name (``data file <name> ...``, ``manifest <name> ...``), any other
    path relative to the archive's root, so that every way of finding a corrupt day says it
    the same."""
    directory = f"{archive.directory(key)}/"
    if detail.startswith(directory):
        rest = detail[len(directory) :]
        what = "manifest" if rest.split(":", 1)[0].endswith(MANIFEST_SUFFIX) else "data file"
        detail = f"{what} {rest}"
    root = str(archive.root)
    if root in detail:
        detail = detail.replace(f"{root}/", "").replace(root, "")
    return detail
