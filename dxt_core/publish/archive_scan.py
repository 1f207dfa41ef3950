"""What the archive holds for a range of months, read through its manifests only.

A day counts only when its manifest says ``archived`` and names a file whose size and sha256
match; a day with an ``empty`` manifest counts as empty; every other day is missing, and a
manifest whose file is absent, of another size or another sha256 is *skipped* with the reason.
Both archive formats are read: the CSV archive (``<backend>/<group>/<item>/<day>.csv.gz``) and
the Parquet archive (``<backend>/<group>=<g>/<key>=<i>/<day>.parquet``, manifests
``_<day>...``); where both hold a good copy of a day, the Parquet one is used. Which
directories a unit has is the backend's publish role's business (it calls
:func:`scan_unit_month` with them).
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dxt_core.archive import MANIFEST_SUFFIX, manifest_files, sha256_file
from dxt_core.errors import ConfigError

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


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
    out = []
    y, m = a
    while (y, m) <= b:
        out.append((y, m))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def month_days(year: int, month: int) -> list[dt.date]:
    n = calendar.monthrange(year, month)[1]
    return [dt.date(year, month, d) for d in range(1, n + 1)]


def year_month(year: int, month: int) -> str:
    """M100 ExaData's partition value: ``YY-MM``."""
    return f"{year % 100:02d}-{month:02d}"


@dataclass(frozen=True, slots=True)
class DayFile:
    """One good archived day of one unit: its data file and manifest."""

    day: dt.date
    fmt: str  # "csv" or "parquet"
    path: Path
    manifest: dict[str, Any]


@dataclass(slots=True)
class UnitMonth:
    """What the archive holds of one unit (plugin, metric) in one month."""

    plugin: str
    metric: str
    year: int
    month: int
    days: list[DayFile] = field(default_factory=list)
    empty: list[dt.date] = field(default_factory=list)
    missing: list[dt.date] = field(default_factory=list)
    skipped: list[tuple[dt.date, str]] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    #: Set by the backend's publish role: this unit is a job table (one row per job).
    jobs: bool = False

    @property
    def job_table(self) -> bool:
        return self.jobs or any(m.get("job_table") for m in self.manifests)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _check(directory: Path, manifest_name: str, fmt: str) -> tuple[str, Any]:
    """("archived", DayFile parts) / ("empty", doc) / ("missing", None) / ("skipped", why)."""
    mpath = directory / manifest_name
    if not mpath.exists():
        return "missing", None
    doc = _read_json(mpath)
    if doc is None:
        return "skipped", f"{mpath}: manifest unreadable"
    status = doc.get("status")
    if status == "empty":
        return "empty", doc
    if status != "archived":
        return "skipped", f"{mpath}: status {status!r}"
    files = manifest_files(doc)
    if not files:
        return "skipped", f"{mpath}: names no data file"
    entry = files[0]
    data = directory / str(entry.get("file"))
    if not data.is_file():
        return "skipped", f"{data}: named by its manifest but absent"
    size = data.stat().st_size
    if size != entry.get("bytes"):
        return "skipped", f"{data}: {size} bytes, the manifest says {entry.get('bytes')}"
    if sha256_file(data) != entry.get("sha256"):
        return "skipped", f"{data}: sha256 differs from the manifest's"
    return "archived", (data, doc)


def partition_units(root: Path, backend: str, group: str, item: str) -> list[tuple[str, str]]:
    """Every (group, item) with a directory under ``root/backend`` in either archive format
    (``<g>/<i>`` for CSV, ``<group>=<g>/<item>=<i>`` for Parquet)."""
    top = root / backend
    if not top.is_dir():
        raise ConfigError(
            f"{root} holds no {backend} archive ({top} is not a directory): check --archive"
        )
    gp, ip = f"{group}=", f"{item}="
    units: set[tuple[str, str]] = set()
    for pdir in top.iterdir():
        if not pdir.is_dir() or pdir.name.startswith("."):
            continue
        for mdir in pdir.iterdir():
            if not mdir.is_dir() or mdir.name.startswith("."):
                continue
            if pdir.name.startswith(gp) and mdir.name.startswith(ip):
                units.add((pdir.name[len(gp) :], mdir.name[len(ip) :]))
            elif "=" not in pdir.name:
                units.add((pdir.name, mdir.name))
    return sorted(units)


def scan_unit_month(
    pq_dir: Path, csv_dir: Path, plugin: str, metric: str, year: int, month: int
) -> UnitMonth:
    """The good, empty, missing and skipped days of one unit in one month, from its Parquet
    and its CSV archive directories."""
    um = UnitMonth(plugin, metric, year, month)
    for day in month_days(year, month):
        d = day.isoformat()
        outcome: tuple[str, Any] = ("missing", None)
        reasons: list[str] = []
        for fmt, directory, name in (
            ("parquet", pq_dir, f"_{d}{MANIFEST_SUFFIX}"),
            ("csv", csv_dir, f"{d}{MANIFEST_SUFFIX}"),
        ):
            status, detail = _check(directory, name, fmt)
            if status == "archived":
                um.days.append(DayFile(day, fmt, detail[0], detail[1]))
                um.manifests.append(detail[1])
                outcome = ("archived", None)
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
        elif reasons:  # a good copy in the other format: say the bad one was not used
            um.skipped.append((day, "; ".join(reasons) + " (the other format's copy was used)"))
    return um
