"""``dxt publish <backend>``: an archive -> a dataset, for any backend with a publish role
(:class:`~dxt_core.backends.roles.PublishRole`: its units, where their days are, how to
read them, its layout).

Layout of the output (the data paths are the role's)::

    <the role's path of each unit-month>                   one file per unit and month
    records/<name>.tar       months grouped under --max-record-bytes, each with its own
                             _<name>.SHA256SUMS and _<name>.files.json
    README.md  datapackage.json  croissant.json  SHA256SUMS

Months are calendar months of the archive's days (the archive's day zone), as the day files
are named. The archive is read through its manifests only
(:mod:`dxt_core.publish.archive_scan`), from a directory or an ``s3://`` root
(:mod:`dxt_core.publish.tree`); the dataset goes to a directory or an ``s3://`` prefix
(:mod:`dxt_core.publish.output`). Publishing the same inputs with the same options into the
same output again writes nothing and says so (unless ``force``); a publication found
interrupted there is published again and completed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from dxt_core import masking
from dxt_core._version import __version__
from dxt_core.errors import ArchiveError, ConfigError, DxtError
from dxt_core.fsio import sha256_file
from dxt_core.paths import check_path_component
from dxt_core.publish.archive_scan import (
    KEPT_FIELDS,
    MANIFEST_FIELDS,
    DayFile,
    UnitMonth,
    checked,
    folding_clashes,
    month_range,
    used_copy,
)
from dxt_core.publish.datacard import datacard
from dxt_core.publish.describe import (
    FileEntry,
    croissant,
    datapackage,
    dumps,
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
from dxt_core.publish.licences import licence_and_url
from dxt_core.publish.monthfile import output_columns, published_names, write_month
from dxt_core.publish.output import STATE_FILE, STATE_SCHEMA, LocalOut, S3Out, Uploaded, open_out
from dxt_core.publish.pseudonym import Pseudonymiser
from dxt_core.publish.records import DEFAULT_MAX_RECORD_BYTES, group_months, write_record
from dxt_core.publish.role import folder_keys
from dxt_core.publish.series import BUCKET_ROWS, MonthSpool, SeriesTable, type_history, wider
from dxt_core.publish.tree import ArchiveTree, DayUnusable, open_tree
from dxt_core.urls import has_credentials, redact_value

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

log = masking.logger("dxt_core.publish")

META_FILES = ("README.md", "datapackage.json", "croissant.json")


@dataclass(slots=True)
class PublishOptions:
    archive: str | Path
    out: str | Path
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
    #: The licence text's URL; empty: the known one of ``licence`` (dxt_core.publish.licences).
    licence_url: str = ""
    cite: str = ""
    url: str = ""
    #: What the datacard names as the source (e.g. "the facility monitoring of cluster X");
    #: empty: the source URLs the manifests record (a facility may not want its servers'
    #: addresses public).
    source: str = ""
    version: str = "1"
    #: The publication date (YYYY-MM-DD) the descriptions give (Croissant's datePublished,
    #: the datacard); empty: none, so that the same inputs give the same bytes on any day.
    date_published: str = ""
    records: bool = True
    #: Rows sorted in memory at once; smaller buckets mean less memory, more files.
    bucket_rows: int = BUCKET_ROWS
    #: Publish even when the output already holds these inputs published the same way.
    force: bool = False

    def __post_init__(self) -> None:
        problem = check_path_component(self.name, "--name") if self.name else None
        if problem:
            raise ConfigError(problem)
        if self.bucket_rows < 1:
            raise ConfigError("bucket_rows must be positive")
        if self.pseudonymise_key_file is not None and self.keep_identities:
            raise ConfigError(
                "--pseudonymise-key-file and --keep-identities exclude each other: choose one"
            )
        if self.max_record_bytes <= 0:
            raise ConfigError("--max-record-bytes must be positive")
        self.licence, self.licence_url = licence_and_url(self.licence, self.licence_url)
        if not self.version.strip():
            raise ConfigError("--dataset-version is empty: give the dataset's version, e.g. 1")
        if self.date_published and not _is_iso_day(self.date_published):
            raise ConfigError(
                f"--date-published {self.date_published!r} is not a date YYYY-MM-DD, e.g. "
                "2026-12-07"
            )
        for what, text in (
            ("--url", self.url),
            ("--source", self.source),
            ("--licence-url", self.licence_url),
            ("--cite", self.cite),
        ):
            if has_credentials(text):
                # the dataset is public: its README and croissant.json would carry them
                raise ConfigError(
                    f"{what} holds a URL with a user name or password ({redact_value(text)!r}): "
                    "a published dataset is public; give the address without them"
                )


def _is_iso_day(text: str) -> bool:
    """``text`` is a calendar day written YYYY-MM-DD."""
    try:
        return dt.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


@dataclass(slots=True)
class UnitResult:
    """What was published of one unit in one month."""

    scan: UnitMonth
    path: str | None = None
    rows: int = 0
    value_type: str | None = None
    units: list[str] = field(default_factory=list)
    sampling_s: float | None = None


@dataclass(slots=True)
class PublishReport:
    out: str
    months: list[tuple[int, int]]
    units: list[UnitResult] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # unit name -> schema doc
    files: list[FileEntry] = field(default_factory=list)
    records: list[FileEntry] = field(default_factory=list)
    #: notes of the publication (the datacard's too): no path of the archive in them
    warnings: list[str] = field(default_factory=list)
    #: the unit-days skipped and why, naming the archive's files: for the operator, not in
    #: the dataset (its datacard names the days by unit and day: ``datacard.skipped_days``)
    skipped: list[str] = field(default_factory=list)
    identities: dict[str, str] = field(default_factory=dict)
    pseudonymised: bool = False
    #: the output already held these inputs published the same way: nothing was written
    unchanged: bool = False
    #: files listed by the unchanged publication
    unchanged_files: int = 0
    #: an S3 output: what was uploaded, left as it was and deleted
    upload: Uploaded | None = None
    redone: int = 0
    #: the output held a publication that was interrupted: this one completed it
    interrupted: bool = False
    #: folders of the archive passed over: no unit can have their name (``a=b``)
    left_out: list[str] = field(default_factory=list)
    #: files that interrupted publication left there and this one did not write: removed
    leftovers: list[str] = field(default_factory=list)
    #: what a killed publication left half-made (temporary files, unfinished uploads): cleared
    debris: int = 0
    #: the command that lists the skipped days with the commands refetching them
    refill: str = ""
    #: why an output holding a finished publication was published again
    again: str = ""

    @property
    def rows(self) -> int:
        return sum(u.rows for u in self.units)

    def operator_warnings(self, most: int = 20) -> list[str]:
        """What the operator is told beside the summary (naming the archive's files, so not
        in the dataset): the first ``most`` skipped unit-days, the folders left out, then the
        publication's own warnings."""
        out = list(self.skipped[:most])
        if len(self.skipped) > most:
            out.append(
                f"... and {len(self.skipped) - most:,} more unit-days skipped "
                f"({len(self.skipped):,} in all; README.md lists them by unit and day)"
            )
        if self.skipped and self.refill:
            out.append(
                f"to refetch the skipped days: {self.refill} (with the options that chose "
                "the units, e.g. --catalog) lists them with the commands that refetch them; "
                "then publish again"
            )
        if self.left_out:
            shown = ", ".join(self.left_out[:most])
            more = f" and {len(self.left_out) - most:,} more" if len(self.left_out) > most else ""
            out.append(
                f"left out {len(self.left_out):,} folders of the archive whose names no unit "
                f"can have (a '=' that is not the layout's <key>=): {shown}{more}; an older "
                "version archived them: rename a folder (and its manifests' unit) to publish "
                "its days"
            )
        return out + self.warnings

    def summary(self) -> str:
        if self.unchanged:
            return (
                f"unchanged: {self.out} already holds {', '.join(_ym(m) for m in self.months)} "
                f"published from the same archive days with the same options "
                f"({self.unchanged_files} files); nothing written (--force publishes again)"
            )
        skipped = sum(len([s for s in u.scan.skipped if not used_copy(s[1])]) for u in self.units)
        missing = sum(len(u.scan.missing) for u in self.units)
        text = f"{self.again}; " if self.again else ""
        if self.interrupted:
            text = (
                f"completed the interrupted publication found in {self.out} (published "
                f"again; {len(self.leftovers)} files it left that this one does not hold "
                f"removed, {self.debris} half-made files or unfinished uploads cleared); "
            )
        elif self.debris:
            text += f"removed {self.debris} half-made copies that killed publications left; "
        text += (
            f"published {len(self.files)} files ({self.rows:,} rows) for "
            f"{len({u.scan.parts for u in self.units if u.path})} units x "
            f"{len(self.months)} months into {self.out}; {len(self.records)} records; "
            f"{skipped} unit-days skipped (bad file or manifest), {missing} missing"
        )
        if self.upload is not None:
            u = self.upload
            text += (
                f"; uploaded {u.uploaded} objects ({u.bytes:,} bytes), {u.unchanged} already "
                f"there unchanged, {u.deleted} deleted"
            )
        return text


def _ym(m: tuple[int, int]) -> str:
    return f"{m[0]}-{m[1]:02d}"


def incomplete_days(
    role: PublishRole, archive: str | Path, from_month: str, to_month: str
) -> list[str]:
    """Unit-days of the months not archived yet (neither archived nor empty), for every unit
    with at least one archived or empty day in that month: a month is complete when this is
    empty. Returns ``"<unit> <day>"`` items."""
    tree = open_tree(archive)
    out = []
    for unit in role.units(tree):
        name = "/".join(unit)
        for y, m in month_range(from_month, to_month):
            um = role.scan(tree, unit, y, m)
            if um.days or um.empty:
                out += [f"{name} {d}" for d in um.missing]
                out += [f"{name} {d} (skipped)" for d, why in um.skipped if not used_copy(why)]
    return out


class DayReader:
    """Opens the days of a publication: in place, or fetched from an object store (and
    checked); a day found bad is skipped with a warning, counted in its unit-month."""

    def __init__(self, tree: ArchiveTree, scratch: Path, report: PublishReport) -> None:
        self.tree, self.scratch, self.report = tree, scratch, report

    @contextlib.contextmanager
    def open(self, um: UnitMonth, day: DayFile) -> Iterator[Path | None]:
        with contextlib.ExitStack() as stack:
            path: Path | None
            try:
                path = stack.enter_context(
                    self.tree.fetch(day.rel, day.bytes, day.sha256, self.scratch)
                )
            except DayUnusable as exc:
                um.unusable(day, str(exc))
                self.report.skipped.append(f"skipped {um.name} {day.day}: {exc}")
                path = None
            yield path

    def opener(self, um: UnitMonth) -> Any:
        return lambda day: self.open(um, day)


def _coverage_command(
    role: PublishRole, opts: PublishOptions, months: Sequence[tuple[int, int]]
) -> str:
    """``dxt coverage`` over the months published, checking the files (``--verify``)."""
    import calendar
    import shlex

    from dxt_core.backends import get_publisher

    (y0, m0), (y1, m1) = months[0], months[-1]
    last = calendar.monthrange(y1, m1)[1]
    words = ["dxt", "coverage", get_publisher(role.backend).command]
    words += ["--archive", redact_value(str(opts.archive))]
    words += ["--start-day", f"{y0}-{m0:02d}-01", "--end-day", f"{y1}-{m1:02d}-{last:02d}"]
    return shlex.join([*words, "--verify"])


#: The version of what a publication writes from the same inputs (layout, file bytes,
#: descriptions). 2: records' listings named by the record, croissant's media type and
#: timestamps, the first sort column's statistics, Prometheus values as doubles, the
#: datacard's check commands (2026-12-07). 3: a tag named as a folder key (``metric``,
#: ``year_month``) is published as ``exported_<key>`` (2026-12-07). 4: no Arrow schema stored,
#: so tags and identities read as plain strings, not Categorical (2026-12-07).
PUBLICATION_FORMAT = 4


def _fingerprint(
    role: PublishRole,
    opts: PublishOptions,
    scans: dict[tuple[str, ...], list[UnitMonth]],
    pseudo: Pseudonymiser | None,
) -> str:
    """What the publication is made of: the software, the options that shape the output
    and every manifest (and kept and check record) it reads. The same fingerprint, the same
    bytes."""
    doc = {
        "software": __version__,
        # what the same inputs give: a change of the dataset's bytes or metadata bumps it,
        # so an output published before is published again (not "unchanged")
        "format": PUBLICATION_FORMAT,
        "backend": role.backend,
        "months": [opts.from_month, opts.to_month],
        "options": [
            opts.name,
            opts.title,
            opts.licence,
            opts.licence_url,
            opts.cite,
            opts.url,
            opts.version,
            opts.records,
            opts.max_record_bytes,
            opts.keep_identities,
            sorted(opts.pseudonymise_columns),
            # only when given: publications made before the option keep their fingerprint
            *([opts.source] if opts.source else []),
            *([f"published {opts.date_published}"] if opts.date_published else []),
        ],
        # the pseudonym of a constant (as public as every pseudonym): another key, other
        # pseudonyms, so another fingerprint
        "key": pseudo.pseudonym("key", "dxt-publish") if pseudo is not None else None,
        "units": [
            [
                list(u),
                [um.year, um.month, [d.isoformat() for d in um.missing]],
                [[str(d.day), d.rel, d.sha256, _what_counts(d.manifest)] for d in um.days],
                [_what_counts(m) for m in um.manifests if m.get("status") == "empty"],
                [[str(d), w] for d, w in um.skipped],
                [[str(d), {k: v.get(k) for k in KEPT_FIELDS}] for d, v in um.kept],
                [[str(d), *checked(v)] for d, v in sorted(um.checks.items())],
            ]
            for u, ums in sorted(scans.items())
            for um in ums
        ],
    }
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _what_counts(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: doc.get(k) for k in MANIFEST_FIELDS}


def publish(role: PublishRole, opts: PublishOptions) -> PublishReport:
    """Publish the months ``from_month``..``to_month`` of the backend's archive (``role``)
    into ``opts.out``."""
    from dxt_core.writers.parquet import require_pyarrow

    require_pyarrow("dxt publish (its dataset is Parquet)")  # before anything is written
    if not opts.name:
        opts.name = role.dataset_name
    if not opts.title:
        opts.title = role.title
    months = month_range(opts.from_month, opts.to_month)
    tree = open_tree(opts.archive)
    target = open_out(opts.out)
    progress: list[PublishReport] = []
    try:
        return _publish(role, opts, months, tree, target, progress)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: what was done, and what to do
        done = progress[0] if progress else None
        try:
            began = (target.state() or {}).get("in_progress") is True
        except (DxtError, OSError):
            began = True  # cannot tell: the safe advice
        units = len({u.scan.parts for u in done.units}) if done else 0
        exc.add_note(
            f"{units} unit{'' if units == 1 else 's'} of {len(months)} month(s) published "
            "before it stopped"
            + (
                f"; {target.url} is marked in progress: run the same command again to "
                "complete this publication"
                if began
                else f"; nothing reached {target.url}"
            )
        )
        raise
    finally:
        target.close()


def _publish(
    role: PublishRole,
    opts: PublishOptions,
    months: list[tuple[int, int]],
    tree: ArchiveTree,
    target: LocalOut | S3Out,
    progress: list[PublishReport],
) -> PublishReport:
    previous = target.previous()
    pseudo = (
        Pseudonymiser.from_file(opts.pseudonymise_key_file)
        if opts.pseudonymise_key_file is not None
        else None
    )
    report = PublishReport(
        target.url,
        months,
        pseudonymised=pseudo is not None,
        interrupted=target.interrupted,
        debris=target.debris,
    )
    progress.append(report)
    scans = {u: [role.scan(tree, u, y, mo) for y, mo in months] for u in role.units(tree)}
    report.left_out = list(tree.left_out)
    report.refill = _coverage_command(role, opts, months)
    if not any(um.days or um.empty or um.skipped for ums in scans.values() for um in ums):
        # a dataset of nothing (a README, checksums and descriptions of no file), exit 0; a
        # month whose days were all skipped (damaged) is published, saying why
        raise ConfigError(
            f"nothing to publish: {redact_value(str(opts.archive))} holds no archived day of "
            f"{len(scans)} {role.backend} unit(s) in {opts.from_month}..{opts.to_month}; check "
            f"--archive and the months (`{report.refill}` lists what is there); nothing was "
            "written"
        )
    fingerprint = _fingerprint(role, opts, scans, pseudo)
    state = target.state() or {}
    same = state.get("fingerprint") == fingerprint
    if not opts.force and previous and same and target.intact(state):
        report.unchanged, report.unchanged_files = True, len(previous)
        return report
    if previous and state and not target.interrupted:
        report.again = _why_again(state, same, opts.force)
    for ums in scans.values():
        for um in ums:
            report.skipped += [f"skipped {um.name} {day}: {why}" for day, why in um.skipped]
    report.warnings += folding_clashes(u for u, ums in scans.items() if any(m.days for m in ums))
    jobs = {k: v for k, v in scans.items() if any(u.job_table for u in v)}
    # The job tables first (small): refuse before writing anything if identities need a
    # choice, the output not even created.
    job_schemas: dict[tuple[str, ...], JobSchema] = {}
    with tempfile.TemporaryDirectory(prefix="dxt-publish-jobs-") as tmp:
        reader = DayReader(tree, Path(tmp), report)
        for k, ums in jobs.items():
            schema = JobSchema(extra_identities=opts.pseudonymise_columns)
            for um in ums:
                schema.observe(iter_month_records(um.days, reader.opener(um)))
            refuse_without_choice(schema.identities, pseudo, opts.keep_identities)
            job_schemas[k] = schema
            report.identities.update(schema.identities)
    root = target.root
    with tempfile.TemporaryDirectory(prefix=".dxt-publish-", dir=target.scratch_parent()) as tmp:
        scratch = Path(tmp)
        reader = DayReader(tree, scratch, report)
        # from here on the output changes: it says so first (and loses its SHA256SUMS)
        target.begin(role.backend)
        root.mkdir(parents=True, exist_ok=True)
        for k, ums in sorted(scans.items()):
            if k in jobs:
                _publish_jobs(role, k, ums, job_schemas[k], pseudo, root, report, reader)
            else:
                _publish_unit(role, k, ums, scratch, root, report, reader, opts.bucket_rows)
    changed = changed_while_publishing(role, open_tree(opts.archive), scans)
    if changed:  # the output stays an interrupted publication: the next run completes it
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if changed[10:] else "")
        raise ArchiveError(
            f"the archive changed while it was published: {len(changed)} unit-days skipped "
            f"as bad were committed meanwhile ({shown}); publish again when the writes are "
            f"done (the next run completes this publication in {target.url})"
        )
    return _describe(role, opts, target, previous, report, fingerprint)


def _why_again(state: dict[str, Any], same: bool, force: bool) -> str:
    """Why an output that holds a finished publication is published again, for the summary
    (``same``: the same inputs and options as it)."""
    if same:
        why = "--force" if force else "files of the output were missing or resized"
        return f"published again: {why}"
    then = state.get("format")
    if then != PUBLICATION_FORMAT:
        was = f"format {then}" if isinstance(then, int) else "an earlier format"
        return (
            f"published again: the output was written in {was}, this version writes format "
            f"{PUBLICATION_FORMAT} (CHANGELOG.md: PUBLICATION_FORMAT)"
        )
    return "published again: the archive's days or checks, or the options, changed"


def changed_while_publishing(
    role: PublishRole, tree: ArchiveTree, scans: dict[tuple[str, ...], list[UnitMonth]]
) -> list[str]:
    """The unit-days skipped as bad (their file not the one their manifest names) that a
    fresh scan finds good or committed again: a writer committed them while the publication
    read the archive, and the dataset would miss them. ``"<unit> <day>"`` items."""
    out = []
    for unit, ums in scans.items():
        for um in ums:
            bad = [d for d, why in um.skipped if not used_copy(why)]
            if not bad:
                continue
            again = role.scan(tree, unit, um.year, um.month)
            now = {d.day: d.sha256 for d in again.days}
            for day in bad:
                was = um.read_bad.get(day)
                if day in again.empty or (day in now and now[day] != was):
                    out.append(f"{um.name} {day}")
    return out


def _describe(
    role: PublishRole,
    opts: PublishOptions,
    target: LocalOut | S3Out,
    previous: dict[str, str],
    report: PublishReport,
    fingerprint: str,
) -> PublishReport:
    """Checksums, descriptions, records and the datacard of what was written; then the
    files of the previous publication not written again go, and an S3 output is uploaded."""
    root = target.root
    written: list[FileEntry] = []
    for u in report.units:
        if u.path:
            data = root / u.path
            written.append(
                FileEntry(
                    u.path,
                    data.stat().st_size,
                    sha256_file(data),
                    parquet_fields(data),
                    f"{u.scan.name}, {u.scan.year}-{u.scan.month:02d}: {u.rows} rows",
                )
            )
    report.files = written
    by_month: dict[tuple[int, int], list[FileEntry]] = {}
    month_of = {u.path: (u.scan.year, u.scan.month) for u in report.units if u.path}
    for e in written:
        by_month.setdefault(month_of[e.path], []).append(e)
    recs = group_months(opts.name, by_month, opts.max_record_bytes, report.warnings)
    stale = sorted(
        set(previous)
        - {e.path for e in written}
        - set(META_FILES)
        - ({r.file for r in recs} if opts.records else set())  # written below
    )
    for gone in target.remove_stale(stale):
        if target.interrupted:  # not a note of the dataset: its README is a clean run's
            report.leftovers.append(gone)
        else:
            report.warnings.append(f"removed {gone}, published before but not this time")
    meta = _meta(role, opts, report)
    write_bytes(root / "datapackage.json", datapackage(opts.name, opts.title, meta, written))
    write_bytes(root / "croissant.json", croissant(opts.name, opts.title, meta, written))
    if opts.records:
        report.records = [write_record(root, r) for r in recs]
    write_bytes(root / "README.md", datacard(role, opts, meta, report, recs))
    listed = list(written) + list(report.records)
    for name in META_FILES:
        meta_path = root / name
        listed.append(FileEntry(name, meta_path.stat().st_size, sha256_file(meta_path)))
    write_bytes(root / "SHA256SUMS", sha256sums(listed))
    # the state record, last: what the no-op check of the next run compares (names, sizes)
    sizes = {e.path: e.bytes for e in listed}
    sizes["SHA256SUMS"] = (root / "SHA256SUMS").stat().st_size
    state = {
        "schema": STATE_SCHEMA,
        "backend": role.backend,
        "months": [_ym(m) for m in report.months],
        "fingerprint": fingerprint,
        "format": PUBLICATION_FORMAT,
        "files": len(listed),
        "sizes": sizes,
    }
    write_bytes(root / STATE_FILE, dumps(state))
    sums = {e.path: e.sha256 for e in listed}
    if target.remote:
        report.upload = target.commit([*sums, "SHA256SUMS", STATE_FILE], previous, sums)
    return report


def _publish_unit(
    role: PublishRole,
    unit: tuple[str, ...],
    ums: Sequence[UnitMonth],
    scratch: Path,
    out: Path,
    report: PublishReport,
    reader: DayReader,
    bucket_rows: int,
) -> None:
    """Every month of one unit, with one value type and one set of columns over them all:
    a month written before a later one widened the type or added a column is written again
    (rare: the type of a metric seldom changes)."""
    table = SeriesTable(role.series_order)
    day_types: dict[Any, str] = {}
    done: list[tuple[UnitResult, str | None, list[str]]] = []
    for um in ums:
        res, kind, cols = _publish_month(
            role, um, table, scratch, out, reader, bucket_rows, day_types
        )
        done.append((res, kind, cols))
    final: str | None = None
    for _, kind, _ in done:
        final = wider(final, kind) if kind else final
    columns = output_columns(table)
    for i, (res, kind, cols) in enumerate(done):
        if res.path and (kind != final or cols != columns):
            again, _, _ = _publish_month(
                role, res.scan, table, scratch, out, reader, bucket_rows, {}, (final, columns)
            )
            done[i] = (again, final, columns)
            report.redone += 1
    history = type_history(day_types)
    report.schemas["/".join(unit)] = {
        "value_type": final or "double",
        "type_changes": history,
        "tags": [c for c in published_names(columns, folder_keys(role)) if c != "name"],
    }
    for res, _, _ in done:
        res.value_type = final or "double"
        report.units.append(res)


def _publish_month(
    role: PublishRole,
    um: UnitMonth,
    table: SeriesTable,
    scratch: Path,
    out: Path,
    reader: DayReader,
    bucket_rows: int,
    day_types: dict[Any, str],
    forced: tuple[str | None, list[str]] | None = None,
) -> tuple[UnitResult, str | None, list[str]]:
    """One unit-month: phase 1 (spool the days), phase 2 (sort and write)."""
    # named by a digest: the parts joined could exceed a file name's 255 bytes, and two
    # units' joined parts could be one name ("a.b"/"c" and "a"/"b.c")
    digest = hashlib.sha256("\0".join(um.parts).encode("utf-8", "surrogatepass")).hexdigest()
    spool_dir = scratch / f"{digest[:32]}.{um.year}-{um.month:02d}"
    spool_dir.mkdir(parents=True, exist_ok=True)
    expected = sum(int(d.manifest.get("rows") or 0) for d in um.days)
    spool = MonthSpool(spool_dir, table, expected, unit=role.time_unit, bucket_rows=bucket_rows)
    for d in list(um.days):
        with reader.open(um, d) as path:
            if path is not None:
                where = reader.tree.where(d.rel)
                for t in role.read_day(d, path):
                    spool.add(t, d.day, where)
    buckets = spool.finish()
    for day, day_kind in spool.day_types.items():
        day_types[day] = wider(day_types.get(day), day_kind)
    kind = forced[0] if forced else spool.kind
    cols = forced[1] if forced else output_columns(table)
    res = UnitResult(um)
    if spool.rows and kind is not None:
        rel = role.data_path(um)
        names = published_names(cols, folder_keys(role))
        month = write_month(spool, buckets, kind, out / rel, cols, names)
        res.path, res.rows = rel, month.rows
        res.units, res.sampling_s = month.units, month.sampling_s
    for b in buckets:
        b.remove()
    return res, kind, cols


def _publish_jobs(
    role: PublishRole,
    key: tuple[str, ...],
    ums: Sequence[UnitMonth],
    schema: JobSchema,
    pseudo: Pseudonymiser | None,
    out: Path,
    report: PublishReport,
    reader: DayReader,
) -> None:
    name = "/".join(key)
    report.schemas[name] = {
        "columns": {c: schema.column_type(c) for c in sorted(schema.kinds)},
        "identities": dict(sorted(schema.identities.items())),
    }
    for um in ums:
        res = UnitResult(um)
        records = list(iter_month_records(um.days, reader.opener(um)))
        if records:
            rel = role.data_path(um)
            res.rows = write_job_month(records, schema, out / rel, pseudo, name)
            res.path = rel
        report.units.append(res)


def _meta(role: PublishRole, opts: PublishOptions, report: PublishReport) -> dict[str, Any]:
    days = [d.day for u in report.units for d in u.scan.days]
    manifests = [m for u in report.units for m in u.scan.manifests]
    zones = sorted({str(m["time_zone"]) for m in manifests if m.get("time_zone")})
    sources = sorted({str(m["source_url"]) for m in manifests if m.get("source_url")})
    if opts.source:
        sources = [opts.source]
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
        "date_published": opts.date_published,
        "first_day": min(days).isoformat() if days else f"{y0}-{m0:02d}-01",
        "last_day": max(days).isoformat() if days else f"{y1}-{m1:02d}-01",
        "zones": zones,
        "sources": sources,
        "keys": list(role.keys),
    }
