"""What the archive holds for a range of months, read through its manifests only.

A day counts only when its manifest says ``archived`` and names a data file (the publish
role picks which, :meth:`~dxt_core.backends.roles.PublishRole.day_file`) of the manifest's
size; a day with an ``empty`` manifest counts as empty; every other day is missing, and a
manifest whose file is absent or of another size is *skipped* with the reason. The file's
sha256 is checked when it is read (a mismatch skips the day then, counted the same way).

A unit may have several directories (Examon's CSV ``<group>/<item>`` and Parquet
``<group>=<g>/<item>=<i>``, whose sidecars start with ``_``): the first that holds a good
copy of a day is used. Which directories a unit has is the role's business (it calls
:func:`scan_unit_month` with them).

Besides the days, the scan keeps what the archive records about them after they were
archived: ``<day>.kept.json`` sidecars (the source later held fewer points: the archive kept
its rows), manifests that replaced an earlier copy (``replaced``: a rerun or a reconcile
refetch found more points) and the reconcile's check records (:func:`read_checks`: the last
comparison of each day with the source's count, equal ones included).

A scan keeps of each manifest, kept record and check only the fields that shape the dataset
(:data:`MANIFEST_FIELDS`, :data:`KEPT_FIELDS`, :data:`CHECK_FIELDS`), their strings shared:
a scan of many months of many units holds a few hundred bytes per day, not whole manifests.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dxt_core.errors import ConfigError
from dxt_core.manifests import (
    KEPT_SUFFIX,
    MANIFEST_SUFFIX,
    NOT_OVER,
    kept_applies,
    manifest_files,
    not_over_mark,
)
from dxt_core.publish.tree import ArchiveTree
from dxt_core.reconcile import CHECKS_NAME, COMPARED, checks_parts, parse_checks

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")

#: What of a manifest shapes the dataset (its data, or what the datacard says of it); not
#: when or how fast the day was written, so a day archived again unchanged is unchanged.
#: The rest of a manifest is not kept by a scan.
MANIFEST_FIELDS = (
    "status", "day", "rows", "holes", "source_count", "replaced", "replaced_rows",
    "time_zone", "source_url", "job_table",
)  # fmt: skip
#: What of a ``<day>.kept.json`` record a scan keeps (and the fingerprint reads).
KEPT_FIELDS = ("archive_rows", "source_rows", "source_status", "by")
#: What of a day's check record a scan keeps (:func:`checked`).
CHECK_FIELDS = ("state", "checked_at")


def _shared(value: Any) -> Any:
    """``value`` with its strings interned: the same zone, source URL or count method in
    every manifest is one string."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(str(k)): _shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shared(v) for v in value]
    return value


def slim_manifest(doc: dict[str, Any]) -> dict[str, Any]:
    """A manifest's :data:`MANIFEST_FIELDS`, and its not-over mark when the day was archived
    before it ended (:func:`dxt_core.manifests.not_over_mark`: also of a manifest older than
    the mark), which the datacard counts."""
    out = slim(doc, MANIFEST_FIELDS)
    mark = not_over_mark(doc)
    if mark is not None:
        out[NOT_OVER] = mark
    return out


def slim(doc: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The ``fields`` of ``doc`` it has (``slim(doc, f).get(k) == doc.get(k)`` for every
    ``k`` of ``f``), strings shared."""
    return {k: _shared(doc[k]) for k in fields if k in doc}


#: Which of a manifest's files holds the day's data (None: none the role can read).
FilePicker = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def parse_month(text: str, option: str = "month") -> tuple[int, int]:
    m = _MONTH.match(text.strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ConfigError(f"{option} {text!r} is not a month: write YYYY-MM, e.g. 2020-03")
    return int(m.group(1)), int(m.group(2))


def month_range(first: str, last: str) -> list[tuple[int, int]]:
    """Every month from ``first`` to ``last`` (YYYY-MM), both included."""
    a, b = parse_month(first, "--from-month"), parse_month(last, "--to-month")
    if b < a:
        raise ConfigError(f"--to-month {last} is before --from-month {first}")
    if (b[0] - a[0]) * 12 + b[1] - a[1] >= 1200:
        raise ConfigError(
            f"--from-month {first} to --to-month {last} spans 100 years or more: the folders' "
            f"year_month=YY-MM (M100 ExaData's) would name two of its months alike "
            f"({year_month(*a)} is {a[0]}-{a[1]:02d} and {a[0] + 100}-{a[1]:02d}); publish "
            "each century into its own --out"
        )
    out = []
    y, m = a
    while (y, m) <= b:
        out.append((y, m))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def month_days(year: int, month: int) -> list[dt.date]:
    return list(_month_days(year, month))


@functools.lru_cache(maxsize=256)
def _month_days(year: int, month: int) -> tuple[dt.date, ...]:
    """The days of a month, the same objects for every unit that holds them."""
    n = calendar.monthrange(year, month)[1]
    return tuple(dt.date(year, month, d) for d in range(1, n + 1))


def year_month(year: int, month: int) -> str:
    """M100 ExaData's partition value: ``YY-MM``."""
    return f"{year % 100:02d}-{month:02d}"


def first_file(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The default :data:`FilePicker`: the manifest's (first) data file."""
    files = manifest_files(doc)
    return files[0] if files else None


@dataclass(frozen=True, slots=True)
class DayFile:
    """One archived day of one unit: its data file (relative to the archive root), the
    manifest's size and sha256 of it, and the manifest's :data:`MANIFEST_FIELDS`."""

    day: dt.date
    fmt: str  # "csv", "parquet", "jsonl": from the file's name
    rel: str
    bytes: int
    sha256: str
    manifest: dict[str, Any]


@dataclass(slots=True)
class UnitMonth:
    """What the archive holds of one unit (its partition values, e.g. plugin and metric) in
    one month."""

    parts: tuple[str, ...]
    year: int
    month: int
    days: list[DayFile] = field(default_factory=list)
    empty: list[dt.date] = field(default_factory=list)
    missing: list[dt.date] = field(default_factory=list)
    skipped: list[tuple[dt.date, str]] = field(default_factory=list)
    #: the manifests (their :data:`MANIFEST_FIELDS`) of the days archived and empty
    manifests: list[dict[str, Any]] = field(default_factory=list)
    #: days found bad when read, and the sha256 their manifest gave
    read_bad: dict[dt.date, str] = field(default_factory=dict)
    #: ``<day>.kept.json`` records (their :data:`KEPT_FIELDS`): (day, record) of days the
    #: source later held fewer of
    kept: list[tuple[dt.date, dict[str, Any]]] = field(default_factory=list)
    #: the reconcile's last comparison of each day with the source (the month's check
    #: record, :func:`read_checks`; its :data:`CHECK_FIELDS`), of the days archived or empty
    checks: dict[dt.date, dict[str, Any]] = field(default_factory=dict)
    #: Set by the backend's publish role: this unit is a job table (one row per job).
    jobs: bool = False

    @property
    def name(self) -> str:
        """``plugin/metric``: the unit's parts joined."""
        return "/".join(self.parts)

    @property
    def job_table(self) -> bool:
        return self.jobs or any(m.get("job_table") for m in self.manifests)

    def unusable(self, day: DayFile, why: str) -> None:
        """A day found bad when read (an object store's sha256): skipped, not published."""
        self.days = [d for d in self.days if d is not day]
        self.manifests = [m for m in self.manifests if m is not day.manifest]
        self.skipped.append((day.day, why))
        self.read_bad[day.day] = day.sha256
        self.skipped.sort(key=lambda s: s[0])


def fmt_of(name: str) -> str:
    """The archive format of a data file, from its name."""
    for suffix, fmt in ((".parquet", "parquet"), (".csv.gz", "csv"), (".jsonl.gz", "jsonl")):
        if name.endswith(suffix):
            return fmt
    return name.rsplit(".", 1)[-1]


def _check(tree: ArchiveTree, directory: str, day: dt.date, pick: FilePicker) -> tuple[str, Any]:
    """("archived", DayFile) / ("empty", doc) / ("missing", None) / ("skipped", why)."""
    prefix = "_" if "=" in directory.rsplit("/", 1)[-1] else ""
    name = f"{prefix}{day.isoformat()}{MANIFEST_SUFFIX}"
    listing = tree.files(directory)
    if name not in listing:
        return "missing", None
    mrel = f"{directory}/{name}"
    doc = tree.read_json(mrel)
    if doc is None:
        return "skipped", f"{tree.where(mrel)}: manifest unreadable"
    status = doc.get("status")
    if status == "empty":
        return "empty", slim_manifest(doc)
    if status != "archived":
        return "skipped", f"{tree.where(mrel)}: status {status!r}"
    entry = pick(doc)
    if entry is None:
        return "skipped", f"{tree.where(mrel)}: names no data file this backend publishes"
    fname = str(entry.get("file"))
    if "/" in fname or fname in (".", ".."):
        return "skipped", f"{tree.where(mrel)}: names {fname!r}, not a file of its directory"
    rel = f"{directory}/{fname}"
    size = listing.get(fname)
    if size is None:
        return "skipped", f"{tree.where(rel)}: named by its manifest but absent"
    if size != entry.get("bytes"):
        return "skipped", f"{tree.where(rel)}: {size} bytes, the manifest says {entry.get('bytes')}"
    # the sha256 is checked when the day is read (ArchiveTree.fetch): a scan (a month's
    # completeness, the fingerprint of a publication) reads no data file
    return "archived", DayFile(
        day,
        sys.intern(fmt_of(fname)),
        rel,
        size,
        str(entry.get("sha256")),
        slim_manifest(doc),
    )


def partition_units(tree: ArchiveTree, backend: str, keys: Sequence[str]) -> list[tuple[str, ...]]:
    """Every unit with a directory under ``<root>/<backend>``, ``len(keys)`` levels deep, in
    either layout: ``<v1>/<v2>`` (CSV, JSON Lines) or ``<k1>=<v1>/<k2>=<v2>`` (Hive
    partitions, Parquet). A clear error when the archive holds none of this backend."""
    top = tree.dirs(backend)
    if top is None:
        raise ConfigError(
            f"{tree.url} holds no {backend} archive ({tree.where(backend)} is not a "
            "directory): check --archive"
        )
    units: set[tuple[str, ...]] = set()

    def walk(rel: str, names: list[str], depth: int, found: tuple[str, ...]) -> None:
        for name in names:
            key = keys[depth]
            if name.startswith(f"{key}="):
                value = name[len(key) + 1 :]
            elif "=" in name:
                # Not this level's partition, nor a name any unit can have (refused since
                # 2026-12-06): an older archive's folder, said in the report.
                tree.left_out.append(f"{rel}/{name}")
                continue
            else:
                value = name
            here = (*found, value)
            if depth + 1 == len(keys):
                units.add(here)
            else:
                walk(f"{rel}/{name}", tree.dirs(f"{rel}/{name}") or [], depth + 1, here)

    walk(backend, top, 0, ())
    return sorted(units)


def unit_dirs(backend: str, keys: Sequence[str], parts: Sequence[str]) -> list[str]:
    """A unit's directories, Hive partitions (Parquet) first: ``<backend>/<k>=<v>/...``
    then ``<backend>/<v>/...``."""
    hive = "/".join(f"{k}={v}" for k, v in zip(keys, parts, strict=True))
    return [f"{backend}/{hive}", f"{backend}/{'/'.join(parts)}"]


def scan_unit_month(
    tree: ArchiveTree,
    dirs: Sequence[str],
    parts: tuple[str, ...],
    year: int,
    month: int,
    pick: FilePicker = first_file,
) -> UnitMonth:
    """The good, empty, missing and skipped days of one unit in one month, from its
    directories (in order of preference), and the kept records beside them."""
    um = UnitMonth(parts, year, month)
    for day in month_days(year, month):
        outcome: tuple[str, Any] = ("missing", None)
        reasons: list[str] = []
        for directory in dirs:
            status, detail = _check(tree, directory, day, pick)
            if status == "archived":
                um.days.append(detail)
                um.manifests.append(detail.manifest)
                outcome = ("archived", detail)
                break
            if status == "empty":
                outcome = ("empty", detail)
                break
            if status == "skipped":
                reasons.append(detail)
        kind = outcome[0]
        if kind == "empty":
            um.empty.append(day)
            um.manifests.append(outcome[1])
        elif kind == "missing":
            if reasons:
                um.skipped.append((day, "; ".join(reasons)))
            else:
                um.missing.append(day)
        elif reasons:  # a good copy elsewhere: say the bad one was not used
            um.skipped.append((day, "; ".join(reasons) + " (the other format's copy was used)"))
        if kind == "archived":
            _kept(tree, outcome[1], um)
    return um


def _kept(tree: ArchiveTree, day: DayFile, um: UnitMonth) -> None:
    directory, name = day.rel.rsplit("/", 1)
    prefix = "_" if name.startswith("_") or "=" in directory.rsplit("/", 1)[-1] else ""
    kname = f"{prefix}{day.day.isoformat()}{KEPT_SUFFIX}"
    if kname in tree.files(directory):
        doc = tree.read_json(f"{directory}/{kname}")
        if doc and not kept_applies(doc, {"sha256": day.sha256}):
            return  # left beside the day that replaced the one it kept (coverage: archived)
        um.kept.append((day.day, slim(doc, KEPT_FIELDS) if doc else {"unreadable": True}))


#: A month's check record as a scan keeps it: ``{unit: {day: its CHECK_FIELDS}}``.
MonthChecks = dict[str, dict[dt.date, dict[str, Any]]]


def month_checks(data: bytes | None) -> MonthChecks:
    """A month's check record (its bytes; None: none) as every unit's days compared with the
    source (:data:`COMPARED`), their :data:`CHECK_FIELDS`, the record's order kept; an absent
    or unreadable record gives none. Parsed once per tree (:meth:`ArchiveTree.internal`):
    the record of 811 units is ~7 MB of JSON, which each unit's scan decoded before."""
    out: MonthChecks = {}
    for unit, days in parse_checks(data).items():
        kept: dict[dt.date, dict[str, Any]] = {}
        for day, doc in days.items():
            try:
                d = dt.date.fromisoformat(day)
            except ValueError:
                continue
            if doc.get("state") in COMPARED:
                kept[d] = slim(doc, CHECK_FIELDS)
        if kept:
            out[unit] = kept
    return out


def read_checks(tree: ArchiveTree, source: str, um: UnitMonth) -> None:
    """Fill ``um.checks`` from the month's check record (:mod:`dxt_core.reconcile`; the tree
    reads and parses it once for every unit, :func:`month_checks`), for the days the unit
    holds (archived or empty); an absent or unreadable record gives none."""
    held = {d.day for d in um.days} | set(um.empty)
    record = tree.internal(month_checks, CHECKS_NAME, *checks_parts(source, um.year, um.month))
    um.checks = {d: doc for d, doc in record.get(um.name, {}).items() if d in held}


def checked(check: dict[str, Any]) -> tuple[str, str]:
    """What the datacard says of a day's last check: its outcome and its day (UTC)."""
    return str(check.get("state")), str(check.get("checked_at") or "")[:10]


def used_copy(why: str) -> bool:
    """A skipped copy whose day was read from another format's good copy."""
    return why.endswith("was used)")


def folding_clashes(units: Iterable[Sequence[str]]) -> list[str]:
    """A warning for each unit whose path is another's but for letter case or Unicode
    normalisation (``Temp`` and ``temp``, ``café`` in NFC and NFD): distinct folders on Linux,
    one folder where a dataset's records are unpacked on a file system that ignores case or
    normalises names (macOS, Windows), the second taking the first's place."""
    seen: dict[str, tuple[str, ...]] = {}
    out = []
    for unit in sorted(tuple(u) for u in units):
        folded = "/".join(unicodedata.normalize("NFC", p).casefold() for p in unit)
        first = seen.setdefault(folded, unit)
        if first != unit:
            out.append(
                f"units {'/'.join(first)!r} and {'/'.join(unit)!r} differ only in letter case or "
                "Unicode form: unpacked on a file system that ignores case or normalises names "
                "(macOS, Windows), one's folder takes the other's place; unpack on Linux"
            )
    return out
