"""The dataset's README.md: a datacard generated from the archive's manifests and from
what was written (no wall-clock time in it: the same months give the same text)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dxt_core._version import __version__
from dxt_core.commit_rules import is_replacement
from dxt_core.manifests import NOT_OVER
from dxt_core.publish.archive_scan import checked, used_copy
from dxt_core.reconcile import COMPARED

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole
    from dxt_core.publish.archive_scan import UnitMonth
    from dxt_core.publish.dataset import PublishOptions, PublishReport
    from dxt_core.publish.records import Record


def _source_counts(manifests: Sequence[dict[str, Any]]) -> str:
    """At archiving: of the days whose manifest records the source's own count of the day,
    how many the archive holds exactly (rows plus the points of unreadable windows)."""
    from dxt_core.reconcile import SourceCount, archived_count

    counted = [(m, sc) for m in manifests if (sc := SourceCount.from_manifest(m)) is not None]
    if not counted:
        return "not recorded"
    agree = sum(1 for m, sc in counted if archived_count(m) == sc.count)
    return f"{agree}/{len(counted)} agree"


def _after_archiving(um: UnitMonth) -> str:
    """What the archive records of comparisons with the source made after a day was
    archived: the reconcile's last outcome per day (and the day of the latest check), days
    replaced (:func:`_why_replaced`) and days kept (the source held fewer: the archive kept
    its rows)."""
    replaced = [d for d in um.days if _replacements(d.manifest)]
    cleaned = sum(1 for d in um.days if _replacements(d.manifest, strays=True))
    parts = []
    if um.checks:
        seen = [checked(c) for c in um.checks.values()]
        states = {s: sum(1 for x, _ in seen if x == s) for s in COMPARED}
        outcomes = ", ".join(f"{n} {s}" for s, n in states.items() if n)
        parts.append(f"{len(seen)} checked ({outcomes}; last {max(d for _, d in seen)})")
    if replaced:
        parts.append(f"{len(replaced)} replaced ({_why_replaced(replaced)})")
    if cleaned:
        parts.append(f"{cleaned} with stray data files removed (no manifest named them)")
    if um.kept:
        by_reconcile = sum(1 for _, k in um.kept if str(k.get("by", "")).startswith("reconcile"))
        parts.append(
            f"{len(um.kept)} kept (source held fewer"
            + (f"; {by_reconcile} found by reconcile" if by_reconcile else "")
            + ")"
        )
    return ", ".join(parts) or "none recorded"


def _replacements(manifest: dict[str, Any], strays: bool = False) -> list[Any]:
    """A manifest's ``replaced`` records of archived bytes (not of strays it removed), or
    with ``strays``, its records of data files no manifest named that it removed."""
    records = manifest.get("replaced")
    if not isinstance(records, list):
        return [records] if records and not strays else []
    return [r for r in records if (isinstance(r, dict) and not is_replacement(r)) == strays]


def _why_replaced(days: Sequence[Any]) -> str:
    """Why days were replaced, from their rows against the rows they replaced
    (``replaced_rows``): the source grew (a reconcile's refetch, a rerun), the same count
    (a damaged file refetched, values the source changed) or fewer (``--replace`` after the
    source's retention); "rows not recorded" for a manifest without the count."""
    kinds = {"source grew": 0, "same rows": 0, "source held fewer": 0, "rows not recorded": 0}
    for d in days:
        rows, before = d.manifest.get("rows"), d.manifest.get("replaced_rows")
        if not isinstance(rows, int) or not isinstance(before, int):
            kinds["rows not recorded"] += 1
        elif rows > before:
            kinds["source grew"] += 1
        elif rows == before:
            kinds["same rows"] += 1
        else:
            kinds["source held fewer"] += 1
    said = [(k, n) for k, n in kinds.items() if n]
    if len(said) == 1:
        return said[0][0]
    return ", ".join(f"{n} {k}" for k, n in said)


def _holes(manifests: Sequence[dict[str, Any]]) -> int:
    return sum(len(m["holes"]) for m in manifests if isinstance(m.get("holes"), list))


def datacard(
    role: PublishRole,
    opts: PublishOptions,
    meta: dict[str, Any],
    report: PublishReport,
    records: Sequence[Record],
) -> bytes:
    lines = _header(role, opts, meta, report)
    lines += _metrics(role, report)
    lines += _coverage(role, report)
    lines += _skipped(report)
    lines += _jobs(report)
    lines += _people(report)
    lines += _records(opts, records)
    lines += _footer(role, opts, meta, report)
    return "\n".join(lines).encode()


def _header(
    role: PublishRole, opts: PublishOptions, meta: dict[str, Any], report: PublishReport
) -> list[str]:
    y0, m0 = report.months[0]
    y1, m1 = report.months[-1]
    zones = ", ".join(meta["zones"]) or "not recorded in the manifests"
    unit = role.time_unit
    precision = {"ms": "millisecond", "us": "microsecond"}.get(unit, unit)
    order = ", ".join(f"`{c}`" for c in (*role.series_order, "name"))
    return [
        f"# {opts.title}",
        "",
        meta["description"],
        "",
        "## Source",
        "",
        f"{role.source}, archived day by day by dxt-archive and published with "
        f"`dxt publish {role.backend}` (dxt-archive {__version__}) "
        "from the archive's manifests: a day is included only when its manifest names a "
        "file whose size and sha256 match.",
        "",
        f"- Source: {opts.source}"
        if opts.source
        else f"- Source URL(s): {', '.join(meta['sources']) or 'not recorded'}",
        f"- Period: {y0}-{m0:02d} to {y1}-{m1:02d} (archived days {meta['first_day']} to "
        f"{meta['last_day']})",
        *([f"- Published: {meta['date_published']}"] if meta.get("date_published") else []),
        f"- Days and months: calendar days of the archive's zone ({zones}); a day is "
        "[local midnight, next local midnight), so a month holds the days whose local date "
        "falls in it.",
        f"- Timestamps: UTC, {precision} precision (`timestamp[{unit}, tz=UTC]`), as the "
        "source recorded each sample: different series (nodes) are not sampled at the same "
        "instant, so aggregate across them per time step (DuckDB `time_bucket`, pandas "
        "`dt.floor`), not by equal timestamps.",
        "",
        "## Layout",
        "",
        "```",
        *role.layout,
        "```",
        "",
        f"{role.columns_note} Rows are sorted by series (the tags {order} first where the "
        "files have them, then the other tags), then `timestamp`: a series is contiguous. "
        "Row groups of 262,144 rows carry min/max statistics of `timestamp`, `value` and the "
        "first sort column. Parquet: zstd level 3, format 2.6.",
        "",
    ]


def _metrics(role: PublishRole, report: PublishReport) -> list[str]:
    label = "/".join(role.keys)
    lines = [
        "## Metrics",
        "",
        f"| {label} | value type | type changes (first day) | units (tag) | sampling (median) |",
        "|---|---|---|---|---|",
    ]
    units_by: dict[str, set[str]] = {}
    sampling_by: dict[str, float] = {}
    for u in report.units:
        k = u.scan.name
        units_by.setdefault(k, set()).update(u.units)
        if u.sampling_s is not None and k not in sampling_by:
            sampling_by[k] = u.sampling_s
    for k, doc in sorted(report.schemas.items()):
        if "columns" in doc:
            continue
        changes = ", ".join(f"{c['type']} from {c['first_day']}" for c in doc["type_changes"])
        sampling = f"{sampling_by[k]:g} s" if k in sampling_by else "n/a"
        units = ", ".join(sorted(units_by.get(k, ()))) or "n/a"
        lines.append(f"| {k} | {doc['value_type']} | {changes or 'n/a'} | {units} | {sampling} |")
    return [*lines, ""]


def _coverage(role: PublishRole, report: PublishReport) -> list[str]:
    label = "/".join(role.keys)
    lines = [
        "## Coverage per unit and month",
        "",
        "Days archived (of which archived before the day ended, with what the source held "
        "then: refill them to publish whole days) / empty (fetched, the source held nothing) "
        "/ missing (never archived) / "
        "skipped (a manifest whose file was absent or did not match its size or sha256), "
        "rows published and unreadable windows (holes). *Counted at archiving*: of the days "
        "whose manifest records the source's own count, how many the archive holds exactly "
        "(rows plus the points of holes). *Reconciled after archiving*: what the archive "
        "records of later comparisons with the source (the DAGs' reconcile task, `dxt "
        "coverage --reconcile`): the days checked, by their last outcome (equal, more: the "
        "source held more points then, fewer: it held fewer) and the day of the latest check; "
        "days replaced because the source then held more points; days kept because it held "
        "fewer (the archive keeps its rows). *None recorded*: the archive records no "
        "comparison of the month's days with the source after archiving (archives "
        "reconciled before equal outcomes were recorded hold only the differences).",
        "",
        f"| {label} | month | archived | empty | missing | skipped | rows | holes "
        "| counted at archiving | reconciled after archiving |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for u in sorted(report.units, key=lambda u: (u.scan.parts, u.scan.year, u.scan.month)):
        s = u.scan
        used = [d.manifest for d in s.days]
        skipped = len([x for x in s.skipped if not used_copy(x[1])])
        early = sum(1 for m in used if m.get(NOT_OVER))
        archived = f"{len(s.days)}" + (f" ({early} before the day ended)" if early else "")
        lines.append(
            f"| {s.name} | {s.year}-{s.month:02d} | {archived} | {len(s.empty)} "
            f"| {len(s.missing)} | {skipped} | {u.rows:,} | {_holes(used)} "
            f"| {_source_counts(used)} | {_after_archiving(s)} |"
        )
    return [*lines, ""]


#: Units the datacard lists skipped days of (the rest counted), and day ranges per unit.
SKIPPED_UNITS_LISTED = 20
SKIPPED_RANGES_LISTED = 10


def skipped_days(report: PublishReport) -> tuple[dict[str, list[dt.date]], int]:
    """The unit-days not published because their manifest or file was bad, by unit name
    (sorted), and how many more had a bad copy in one format whose other format's copy was
    published."""
    by_unit: dict[str, list[dt.date]] = {}
    other_copy = 0
    for u in report.units:
        for day, why in u.scan.skipped:
            if used_copy(why):
                other_copy += 1
            else:
                by_unit.setdefault(u.scan.name, []).append(day)
    return {k: sorted(set(v)) for k, v in sorted(by_unit.items())}, other_copy


def day_ranges(days: Sequence[dt.date]) -> list[str]:
    """Sorted days as ranges of consecutive days: ``2025-05-03..2025-05-06``, ``2025-05-09``."""
    out: list[str] = []
    i = 0
    while i < len(days):
        j = i
        while j + 1 < len(days) and days[j + 1] - days[j] == dt.timedelta(days=1):
            j += 1
        out.append(str(days[i]) if i == j else f"{days[i]}..{days[j]}")
        i = j + 1
    return out


def _skipped(report: PublishReport) -> list[str]:
    """The skipped unit-days by unit and day (no path: the command's output names the
    archive's files), the first :data:`SKIPPED_UNITS_LISTED` units listed."""
    by_unit, other_copy = skipped_days(report)
    if not by_unit and not other_copy:
        return []
    total = sum(len(v) for v in by_unit.values())
    lines = ["## Skipped days", ""]
    if by_unit:
        lines += [
            f"{total:,} unit-days of {len(by_unit):,} units are not published: their manifest "
            "was unreadable or named a file that was absent or did not match its size or "
            "sha256 (the *skipped* column above).",
            "",
        ]
        for name, days in list(by_unit.items())[:SKIPPED_UNITS_LISTED]:
            ranges = day_ranges(days)
            text = ", ".join(ranges[:SKIPPED_RANGES_LISTED])
            if len(ranges) > SKIPPED_RANGES_LISTED:
                rest = days.index(dt.date.fromisoformat(ranges[SKIPPED_RANGES_LISTED][:10]))
                text += f" and {len(days) - rest} more days"
            lines.append(f"- {name}: {text} ({len(days)} days)")
        if len(by_unit) > SKIPPED_UNITS_LISTED:
            more = list(by_unit.values())[SKIPPED_UNITS_LISTED:]
            lines.append(
                f"- and {sum(len(v) for v in more):,} unit-days of {len(more):,} more units"
            )
        lines.append("")
    if other_copy:
        lines += [
            f"{other_copy:,} unit-days had a bad copy in one format (CSV or Parquet): the other "
            "format's good copy is published.",
            "",
        ]
    return lines


def _jobs(report: PublishReport) -> list[str]:
    jobs = {k: d for k, d in report.schemas.items() if "columns" in d}
    if not jobs:
        return []
    lines = ["## Job table", ""]
    for k, doc in sorted(jobs.items()):
        cols = ", ".join(f"`{c}` {t}" for c, t in doc["columns"].items())
        lines += [
            f"`{k}`: one row per job that started that day; times are UTC timestamps, "
            "`nodes` is the list of node names (Slurm host lists expanded), so it joins "
            "exactly with the `node` column of the metric files. A job is in the month it "
            "started in: one that runs past the month's end has its last samples in the "
            "next month's metric files (read the months together).",
            "",
            f"Columns: {cols}.",
            "",
        ]
    return lines


def _people(report: PublishReport) -> list[str]:
    lines = ["## People", ""]
    if report.identities:
        cols = ", ".join(f"`{c}`" for c in sorted(report.identities))
        if report.pseudonymised:
            lines.append(
                f"Identity columns ({cols}) hold pseudonyms: HMAC-SHA256 keyed with a secret "
                "of the site that is not part of the dataset, so the same person (or account, "
                "group, job name) has the same pseudonym in every month and nobody can "
                "recompute one from a list of names. The same pseudonyms replace those names "
                "wherever they appear inside other text (paths, commands, comments)."
            )
        else:
            lines.append(
                f"Identity columns ({cols}) are published as the site recorded them "
                "(`--keep-identities`)."
            )
    else:
        lines.append("No identity columns were found.")
    return [*lines, ""]


def _records(opts: PublishOptions, records: Sequence[Record]) -> list[str]:
    lines = ["## Records", ""]
    if not records:
        return [*lines, "No data files, so no records.", ""]
    lines += [
        f"Months are grouped into records of at most {opts.max_record_bytes:,} bytes "
        "(tar files under `records/`, each with its own listings `_<record>.SHA256SUMS` and "
        "`_<record>.files.json`, which dataset readers pass over as they pass over names "
        "starting with `_`); a month larger than that is split by unit into `_part1`, "
        "`_part2`... records. Extracted into one folder with this README, the records give "
        "the dataset's layout, and `sha256sum -c SHA256SUMS` checks every file, the tars "
        "too when they are kept under `records/` (`--ignore-missing` when they are not):",
        "",
    ]
    for r in records:
        months = ", ".join(f"{y}-{m:02d}" for y, m in r.months)
        lines.append(f"- `{r.file}`: {months} ({len(r.entries)} files)")
    return [*lines, ""]


def _footer(
    role: PublishRole, opts: PublishOptions, meta: dict[str, Any], report: PublishReport
) -> list[str]:
    by = role.series_order[0] if role.series_order else "name"
    lines = [
        "## Checking it",
        "",
        "```sh",
        "sha256sum -c SHA256SUMS",
        "frictionless validate datapackage.json --skip-errors byte-count,hash-count",
        "```",
        "",
        "(frictionless reads Parquet through pandas, so it cannot count or hash the bytes of "
        "a file: `sha256sum` checks those.)",
        "",
        "## Reading it",
        "",
        "```python",
        "import duckdb",
        f'duckdb.sql("SELECT {by}, avg(value) FROM read_parquet('
        f"'{role.example_glob}', hive_partitioning = true, union_by_name = true) "
        f'GROUP BY {by}").df()',
        "```",
        "",
        "A glob chooses the files: the folder also holds this README and the descriptions, "
        "and metrics differ in their columns (`union_by_name` takes the union; pyarrow and "
        "pandas take the first file's columns), so read the job table apart.",
        "",
        "## How to cite",
        "",
        meta["cite"],
        "",
        "## Licence",
        "",
        f"{opts.licence}" + (f" ({opts.licence_url})" if opts.licence_url else ""),
        "",
    ]
    if report.warnings:
        lines += ["## Notes from publishing", ""] + [f"- {w}" for w in report.warnings] + [""]
    return lines
