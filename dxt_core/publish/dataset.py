"""``dxt publish <backend>``: an archive -> a dataset, for any backend with a publish role
(:class:`~dxt_core.backends.roles.PublishRole`: its units, where their days are, its layout).

Layout of the output directory (the data paths are the role's)::

    <the role's path of each unit-month>                   one file per unit and month
    records/<name>.tar       months grouped under --max-record-bytes, each with its own
                             SHA256SUMS and files.json
    README.md  datapackage.json  croissant.json  SHA256SUMS

Months are calendar months of the archive's days (the archive's day zone), as the day files
are named. The archive is read through its manifests only
(:mod:`dxt_core.publish.archive_scan`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dxt_core._version import __version__
from dxt_core.archive import sha256_file
from dxt_core.errors import ConfigError
from dxt_core.paths import check_path_component
from dxt_core.publish.archive_scan import UnitMonth, month_range
from dxt_core.publish.datacard import datacard
from dxt_core.publish.describe import (
    FileEntry,
    croissant,
    datapackage,
    parquet_fields,
    sha256sums,
    write_bytes,
)
from dxt_core.publish.jobs import (
    JobSchema,
    iter_month_records,
    refuse_without_choice,
    write_job_month,
)
from dxt_core.publish.pseudonym import Pseudonymiser
from dxt_core.publish.records import DEFAULT_MAX_RECORD_BYTES, group_months, write_record
from dxt_core.publish.series import RUN_ROWS, RunSpool, merge_runs, type_history

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

log = logging.getLogger("dxt_core.publish")

META_FILES = ("README.md", "datapackage.json", "croissant.json")


@dataclass(slots=True)
class PublishOptions:
    archive: Path
    out: Path
    from_month: str
    to_month: str
    pseudonymise_key_file: Path | None = None
    keep_identities: bool = False
    pseudonymise_columns: tuple[str, ...] = ()
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    #: Dataset name and title; empty: the publish role's defaults.
    name: str = ""
    title: str = ""
    licence: str = "CC-BY-4.0"
    licence_url: str = "https://creativecommons.org/licenses/by/4.0/"
    cite: str = ""
    url: str = ""
    version: str = "1"
    records: bool = True
    #: Rows per sorted run (phase 1); smaller runs mean less memory and more merge work.
    run_rows: int = RUN_ROWS

    def __post_init__(self) -> None:
        problem = check_path_component(self.name, "--name") if self.name else None
        if problem:
            raise ConfigError(problem)
        if self.run_rows < 1:
            raise ConfigError("run_rows must be positive")
        if self.pseudonymise_key_file is not None and self.keep_identities:
            raise ConfigError(
                "--pseudonymise-key-file and --keep-identities exclude each other: choose one"
            )
        if self.max_record_bytes <= 0:
            raise ConfigError("--max-record-bytes must be positive")


@dataclass(slots=True)
class UnitResult:
    """What was published of one unit (plugin, metric) in one month."""

    scan: UnitMonth
    path: str | None = None
    rows: int = 0
    value_type: str | None = None
    units: list[str] = field(default_factory=list)
    sampling_s: float | None = None


@dataclass(slots=True)
class PublishReport:
    out: Path
    months: list[tuple[int, int]]
    units: list[UnitResult] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # "p/m" -> schema doc
    files: list[FileEntry] = field(default_factory=list)
    records: list[FileEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    identities: dict[str, str] = field(default_factory=dict)
    pseudonymised: bool = False

    @property
    def rows(self) -> int:
        return sum(u.rows for u in self.units)

    def summary(self) -> str:
        skipped = sum(len(u.scan.skipped) for u in self.units)
        missing = sum(len(u.scan.missing) for u in self.units)
        return (
            f"published {len(self.files)} files ({self.rows:,} rows) for "
            f"{len({(u.scan.plugin, u.scan.metric) for u in self.units if u.path})} metrics x "
            f"{len(self.months)} months into {self.out}; {len(self.records)} records; "
            f"{skipped} metric-days skipped (bad file or manifest), {missing} missing"
        )


def incomplete_days(role: PublishRole, root: Path, from_month: str, to_month: str) -> list[str]:
    """Metric-days of the months not archived yet (neither archived nor empty), for every
    unit with at least one archived or empty day in that month: a month is complete when
    this is empty. Returns ``"<plugin>/<metric> <day>"`` items."""
    out = []
    for plugin, metric in role.units(root):
        for y, m in month_range(from_month, to_month):
            um = role.scan(root, plugin, metric, y, m)
            if um.days or um.empty:
                out += [f"{plugin}/{metric} {d}" for d in um.missing]
                out += [
                    f"{plugin}/{metric} {d} (skipped)"
                    for d, why in um.skipped
                    if not why.endswith("was used)")
                ]
    return out


def _check_out(out: Path) -> set[str]:
    """The output directory must be empty or a previous publication (whose files listed in
    SHA256SUMS are replaced); returns those previous files."""
    if not out.exists():
        return set()
    if not out.is_dir():
        raise ConfigError(f"--out {out} is not a directory")
    entries = [p for p in out.iterdir() if not p.name.startswith(".")]
    if not entries:
        return set()
    sums = out / "SHA256SUMS"
    if not (out / "datapackage.json").is_file() or not sums.is_file():
        raise ConfigError(
            f"--out {out} is neither empty nor a dataset published by dxt (no datapackage.json "
            "and SHA256SUMS): choose an empty directory"
        )
    return {line.split("  ", 1)[1] for line in sums.read_text().splitlines() if "  " in line}


def publish(role: PublishRole, opts: PublishOptions) -> PublishReport:
    """Publish the months ``from_month``..``to_month`` of the backend's archive (``role``)
    into ``opts.out``."""
    if not opts.name:
        opts.name = role.dataset_name
    if not opts.title:
        opts.title = role.title
    months = month_range(opts.from_month, opts.to_month)
    root = Path(opts.archive)
    if not root.is_dir():
        raise ConfigError(f"archive root {root} is not a directory: check --archive")
    previous = _check_out(opts.out)
    pseudo = (
        Pseudonymiser.from_file(opts.pseudonymise_key_file)
        if opts.pseudonymise_key_file is not None
        else None
    )
    report = PublishReport(opts.out, months, pseudonymised=pseudo is not None)
    scans = {
        (p, m): [role.scan(root, p, m, y, mo) for y, mo in months] for p, m in role.units(root)
    }
    for (p, m), ums in scans.items():
        for um in ums:
            for day, why in um.skipped:
                report.warnings.append(f"skipped {p}/{m} {day}: {why}")
    jobs = {k: v for k, v in scans.items() if any(u.job_table for u in v)}
    # The job tables first: refuse before writing anything if identities need a choice.
    job_schemas: dict[tuple[str, str], JobSchema] = {}
    for k, ums in jobs.items():
        schema = JobSchema(extra_identities=opts.pseudonymise_columns)
        for um in ums:
            schema.observe(iter_month_records(um.days))
        refuse_without_choice(schema.identities, pseudo, opts.keep_identities)
        job_schemas[k] = schema
        report.identities.update(schema.identities)
    opts.out.mkdir(parents=True, exist_ok=True)
    written: list[FileEntry] = []
    with tempfile.TemporaryDirectory(prefix=".dxt-publish-", dir=opts.out) as scratch_dir:
        scratch = Path(scratch_dir)
        for k, ums in sorted(scans.items()):
            if k in jobs:
                _publish_jobs(role, k, ums, job_schemas[k], pseudo, opts.out, report)
            else:
                _publish_metric(role, k, ums, scratch, opts.out, report, opts.run_rows)
    for u in report.units:
        if u.path:
            data = opts.out / u.path
            written.append(
                FileEntry(
                    u.path,
                    data.stat().st_size,
                    sha256_file(data),
                    parquet_fields(data),
                    f"{u.scan.plugin}/{u.scan.metric}, {u.scan.year}-{u.scan.month:02d}: "
                    f"{u.rows} rows",
                )
            )
    report.files = written
    gone = previous - {e.path for e in written} - set(META_FILES)
    for stale in sorted(g for g in gone if not g.startswith("records/")):  # rebuilt below
        with contextlib.suppress(FileNotFoundError):
            (opts.out / stale).unlink()
            report.warnings.append(f"removed {stale}, published before but not this time")
    meta = _meta(role, opts, report)
    write_bytes(opts.out / "datapackage.json", datapackage(opts.name, opts.title, meta, written))
    write_bytes(opts.out / "croissant.json", croissant(opts.name, opts.title, meta, written))
    by_month: dict[tuple[int, int], list[FileEntry]] = {}
    month_of = {u.path: (u.scan.year, u.scan.month) for u in report.units if u.path}
    for e in written:
        by_month.setdefault(month_of[e.path], []).append(e)
    recs = group_months(opts.name, by_month, opts.max_record_bytes, report.warnings)
    if opts.records:
        shutil.rmtree(opts.out / "records", ignore_errors=True)
        report.records = [write_record(opts.out, r) for r in recs]
    write_bytes(opts.out / "README.md", datacard(role, opts, meta, report, recs))
    listed = list(written) + list(report.records)
    for name in META_FILES:
        meta_path = opts.out / name
        listed.append(FileEntry(name, meta_path.stat().st_size, sha256_file(meta_path)))
    write_bytes(opts.out / "SHA256SUMS", sha256sums(listed))
    return report


def _publish_metric(
    role: PublishRole,
    key: tuple[str, str],
    ums: Sequence[UnitMonth],
    scratch: Path,
    out: Path,
    report: PublishReport,
    run_rows: int,
) -> None:
    plugin, metric = key
    spool_dir = scratch / f"{plugin}.{metric}"
    spool_dir.mkdir()
    spool = RunSpool(spool_dir, run_rows=run_rows)
    month_runs: list[tuple[UnitMonth, int, int]] = []
    for um in ums:
        first = len(spool.runs)
        for d in um.days:
            spool.add_day(d)
        month_runs.append((um, first, len(spool.runs)))
    history = type_history(spool.day_types)
    kind = history[-1]["type"] if history else "double"
    tags = sorted(spool.tags)
    report.schemas[f"{plugin}/{metric}"] = {
        "value_type": kind,
        "type_changes": history,
        "tags": tags,
    }
    for um, a, b in month_runs:
        res = UnitResult(um, value_type=kind)
        runs = spool.runs[a:b]
        if runs:
            rel = role.data_path(um)
            merged = merge_runs(runs, kind, tags, out / rel)
            res.path, res.rows = rel, merged.rows
            res.units, res.sampling_s = merged.units, merged.sampling_s
            for r in runs:
                r.path.unlink()
        report.units.append(res)


def _publish_jobs(
    role: PublishRole,
    key: tuple[str, str],
    ums: Sequence[UnitMonth],
    schema: JobSchema,
    pseudo: Pseudonymiser | None,
    out: Path,
    report: PublishReport,
) -> None:
    plugin, table = key
    report.schemas[f"{plugin}/{table}"] = {
        "columns": {c: schema.column_type(c) for c in sorted(schema.kinds)},
        "identities": dict(sorted(schema.identities.items())),
    }
    for um in ums:
        res = UnitResult(um)
        records = list(iter_month_records(um.days))
        if records:
            rel = role.data_path(um)
            res.rows = write_job_month(records, schema, out / rel, pseudo, f"{plugin}/{table}")
            res.path = rel
        report.units.append(res)


def _meta(role: PublishRole, opts: PublishOptions, report: PublishReport) -> dict[str, Any]:
    days = [d.day for u in report.units for d in u.scan.days]
    zones = sorted(
        {
            str(m.get("time_zone"))
            for u in report.units
            for m in u.scan.manifests
            if m.get("time_zone")
        }
    )
    sources = sorted(
        {
            str(m.get("source_url"))
            for u in report.units
            for m in u.scan.manifests
            if m.get("source_url")
        }
    )
    y0, m0 = report.months[0]
    y1, m1 = report.months[-1]
    cite = opts.cite or (
        f"{opts.title} ({y0}-{m0:02d} to {y1}-{m1:02d}), version {opts.version}. "
        f"Published with dxt-archive {__version__}."
    )
    return {
        "description": f"{opts.title}: {role.description} from {y0}-{m0:02d} to "
        f"{y1}-{m1:02d}, {role.layout_summary}.",
        "version": opts.version,
        "licence": opts.licence,
        "licence_url": opts.licence_url,
        "cite": cite,
        "url": opts.url,
        "first_day": min(days).isoformat() if days else f"{y0}-{m0:02d}-01",
        "last_day": max(days).isoformat() if days else f"{y1}-{m1:02d}-01",
        "zones": zones,
        "sources": sources,
    }
