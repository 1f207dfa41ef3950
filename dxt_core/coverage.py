"""Coverage: the state of every (unit, day) of a source, one row each, with why.

:func:`coverage` is the one entry point (``dxt coverage``, the demo's summary, the tests). It
answers from where the archive keeps its answers fastest:

* an S3 archive: a listing and an index object per unit
  (:meth:`dxt_core.store.s3.S3Archive.coverage_rows`);
* a directory archive with a manifest index: the index checked against one directory listing
  per unit, and each data file's size (:func:`dxt_core.scan.scan_states`);
* otherwise, or with ``verify`` (the sha256 of every data file), every manifest read
  (:meth:`dxt_core.archive.Archive.status`).

All three give the same rows for the same archive.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dxt_core.archive import Archive, DayKey
from dxt_core.manifests import Status, kept_detail

if TYPE_CHECKING:
    from dxt_core.index import ManifestIndex


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One (unit, day): its status and, for corrupt days and days with holes, why."""

    parts: tuple[str, ...]
    day: dt.date
    status: Status
    detail: str = ""
    kept: bool = False  # a rerun read fewer rows than the archive holds; the archive was kept


def coverage(
    archive: Archive,
    source: str,
    units: Iterable[Sequence[str]],
    days: Iterable[dt.date],
    verify: bool = False,
) -> list[CoverageRow]:
    """Status of every (unit, day) of ``source``: archived, empty, missing or corrupt (kept
    days are archived with ``kept`` set), units first, then days, in the order given.

    ``verify`` also checks every data file's sha256 (reads every manifest and file).
    """
    unit_list = [tuple(u) for u in units]
    day_list = list(days)
    if archive.remote:
        from dxt_core.store.s3 import S3Archive

        assert isinstance(archive, S3Archive)
        return archive.coverage_rows(source, unit_list, day_list, verify=verify)
    from dxt_core.index import ManifestIndex

    if not verify and day_list:
        with ManifestIndex(archive.root) as idx:
            if idx.exists():
                return _from_index(archive, source, unit_list, day_list, idx)
    return _from_manifests(archive, source, unit_list, day_list, verify)


def _from_manifests(
    archive: Archive,
    source: str,
    units: Sequence[tuple[str, ...]],
    days: Sequence[dt.date],
    verify: bool,
) -> list[CoverageRow]:
    rows: list[CoverageRow] = []
    for parts in units:
        for day in days:
            status, detail = archive.status(DayKey(source, parts, day), verify=verify)
            kept = status == "archived" and detail.startswith("kept:")
            rows.append(CoverageRow(parts, day, status, detail, kept))
    return rows


def _from_index(
    archive: Archive,
    source: str,
    units: Sequence[tuple[str, ...]],
    days: Sequence[dt.date],
    idx: ManifestIndex,
) -> list[CoverageRow]:
    from dxt_core.index import unit_of
    from dxt_core.scan import scan_states

    grid = scan_states(archive, source, units, days, check_sizes=True, index=idx)
    holes = idx.holes(source, min(days), max(days))
    rows: list[CoverageRow] = []
    for u, parts in enumerate(units):
        for d, day in enumerate(days):
            state = grid.state(u, d)
            detail = grid.details.get((u, d), "")
            if state == "kept":
                kept = archive.read_kept(DayKey(source, parts, day)) or {}
                rows.append(CoverageRow(parts, day, "archived", kept_detail(kept), True))
            else:
                if state == "archived" and not detail:
                    detail = holes.get((unit_of(parts), day.isoformat()), "")
                rows.append(CoverageRow(parts, day, state, detail))
    return rows
