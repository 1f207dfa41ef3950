"""The source's own counts: checked when a day is archived, and asked again later.

Every manifest of a metric-day records what the source itself counted for the day's window
(``"source_count": {"count": N, "method": "<how it was asked>"}``), taken by the cheapest query
the server offers (KairosDB's ``count`` aggregator, Elasticsearch's ``_count``, ...). An
archive run whose rows differ from that count for a day already past fails the metric-day
with both numbers (:func:`check_source_count`).

Later, :func:`reconcile` asks the source for the counts only, never the data, and compares
them with the manifests:

* ``equal``: the archive holds what the source holds;
* ``more``: the source has more (late data, a collector that caught up): refetch the day; the
  archive only gains rows, and the replaced file is kept in ``.versions/``;
* ``fewer``: the source has fewer (retention, deletion): the archive is kept, and a
  ``<day>.kept.json`` sidecar makes coverage show the day as ``K``.

Every comparison made (``equal``, ``more`` or ``fewer``) is also recorded in the archive, one
internal record per source and month (:data:`CHECKS_NAME`, :func:`checks_parts`): for each
unit and day the last outcome, both counts, how the source was asked, when, and how many
times the day was checked. ``dxt publish``'s datacard reports them, so a day checked and
found equal is told apart from a day never checked again.

Points the server cannot serialise (KairosDB's NaN, see :class:`~dxt_core.errors.UnreadablePoint`)
are recorded as ``holes`` in the manifest, each with its own count; the archive's side of
the comparison is its rows plus the points of its holes.

No Airflow here: a backend's reconcile role (``BackendTasks.recount``) gives a
:class:`Recount` (its units, counter and archive call) that :func:`reconcile_recent` runs;
the DAG's generic ``reconcile_recent_days`` task (``dxt_core.airflow.tasks``) calls the role.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from dxt_core import masking
from dxt_core.archive import Archive, DayKey
from dxt_core.errors import ArchiveLocked, CountMismatch, DxtError, SourceUnavailable
from dxt_core.manifests import kept_record, not_over_until

log = masking.logger("dxt_core.reconcile")

#: Environment variable of the number of past days a daily run reconciles (default 3).
RECONCILE_DAYS_ENV = "DXT_{backend}_RECONCILE_DAYS"
DEFAULT_RECONCILE_DAYS = 3

#: "not over": archived before its day ended, and the day has not ended yet: its count still
#: grows, so it is not asked (compared once the day has ended).
State = Literal["equal", "more", "fewer", "missing", "not over", "unknown", "error"]

#: The archive's internal record of the comparisons made after archiving (``Archive.
#: internal_path``: ``<root>/.dxt-checks/<source>/<YYYY-MM>.json`` on disk,
#: ``<prefix>/.dxt/checks/...`` on S3): one per source and month, so a reconcile writes one
#: record (two across a month's end) whatever the number of units.
CHECKS_NAME = "checks"
CHECKS_SCHEMA = "dxt-checks/1"
#: The outcomes a comparison records (missing and error days asked nothing of the source).
COMPARED: tuple[State, ...] = ("equal", "more", "fewer")

#: Reads an internal record of an archive: ``read(name, *parts)`` (``Archive.read_internal``;
#: a publish tree reads and parses each month's record once for every unit, through
#: ``dxt_core.publish.archive_scan.month_checks``).
ReadInternal = Callable[..., "bytes | None"]


def checks_parts(source: str, year: int, month: int) -> list[str]:
    """Where the check record of one source's month is, under :data:`CHECKS_NAME`."""
    return [source, f"{year:04d}-{month:02d}.json"]


def parse_checks(data: bytes | None) -> dict[str, dict[str, dict[str, Any]]]:
    """The entries of a check record, ``{unit: {"YYYY-MM-DD": {...}}}`` (a unit is its parts
    joined with ``/``); an absent or unreadable record is empty (the next reconcile writes it
    again)."""
    try:
        doc = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return {}
    units = doc.get("units") if isinstance(doc, dict) else None
    if not isinstance(units, dict):
        return {}
    return {
        str(u): {str(d): v for d, v in days.items() if isinstance(v, dict)}
        for u, days in units.items()
        if isinstance(days, dict)
    }


def unit_checks(
    read: ReadInternal, source: str, parts: Sequence[str], year: int, month: int
) -> dict[str, dict[str, Any]]:
    """The check entries of one unit's month (``{"YYYY-MM-DD": {...}}``)."""
    data = read(CHECKS_NAME, *checks_parts(source, year, month))
    return parse_checks(data).get("/".join(parts), {})


@dataclass(frozen=True, slots=True)
class SourceCount:
    """What the source counted for one metric-day, and how it was asked."""

    count: int
    method: str

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "method": self.method}

    @classmethod
    def from_manifest(cls, doc: dict[str, Any] | None) -> SourceCount | None:
        sc = (doc or {}).get("source_count")
        if isinstance(sc, dict) and isinstance(sc.get("count"), int):
            return cls(int(sc["count"]), str(sc.get("method", "")))
        return None


def hole_points(holes: Iterable[dict[str, Any]]) -> int:
    """Points the source counted inside the unreadable windows."""
    return sum(int(h.get("points") or 0) for h in holes)


def holes_detail(doc: dict[str, Any] | None) -> str:
    """The coverage detail of a day archived with holes ("" without): how many unreadable
    windows, how many points they hold, the first one."""
    holes = [h for h in (doc or {}).get("holes") or () if isinstance(h, dict)]
    if not holes:
        return ""
    h = holes[0]
    series = h.get("series")
    if not isinstance(series, dict):
        series = {}
    who = ",".join(f"{k}={v}" for k, v in sorted(series.items())) or "all series"
    return (
        f"holes: {len(holes)} unreadable window(s), {hole_points(holes):,} points not "
        f"archived (first: {who} [{h.get('start')}, {h.get('end')}): {h.get('message')}); "
        "retried on the next run"
    )


def archived_count(doc: dict[str, Any] | None) -> int | None:
    """The archive's side of the comparison: rows plus the points of the holes (``None``
    when the day is not archived)."""
    if not doc:
        return None
    if doc.get("status") == "empty":
        return 0
    if doc.get("status") != "archived":
        return None
    rows = doc.get("rows")
    return (rows if isinstance(rows, int) else 0) + hole_points(doc.get("holes") or ())


def is_past(window_end: dt.datetime, now: dt.datetime | None = None) -> bool:
    """Whether a window is wholly in the past (its count can no longer grow on its own)."""
    return window_end <= (now or dt.datetime.now(dt.UTC))


def check_source_count(
    what: str,
    rows: int,
    count: SourceCount,
    *,
    past: bool,
    holes: int = 0,
    url: str = "",
    advice: str = "",
) -> None:
    """Raise when a past day's rows (plus ``holes`` points) differ from the source's count.

    A day not yet over is not checked: it grows while it is read. ``advice``: the backend's
    own word on what else could explain a difference, added to the message.

    Raises:
        CountMismatch: the numbers differ; the message holds both.
    """
    got = rows + holes
    if not past or got == count.count:
        return
    held = f" ({rows:,} rows + {holes:,} points in holes)" if holes else ""
    hint = (
        "the source gained points while the day was read (late data): rerun the day"
        if count.count > got
        else "more points were read than the source counts (points removed meanwhile, by "
        "retention or a delete, or points its count does not see): rerun the day; if it "
        "persists, report it with this message"
    )
    method = count.method  # a long selector's method is long: its start and length
    if len(method) > 400:
        method = f"{method[:340]}... ({len(method):,} characters)"
    raise CountMismatch(
        f"{what}: read {got:,} points{held}, but the source counts {count.count:,} "
        f"({method}); nothing was committed; {hint}{'; ' + advice if advice else ''}",
        rows=got,
        source_count=count.count,
        url=url,
    )


@dataclass(frozen=True, slots=True)
class ReconcileRow:
    """One metric-day compared with the source's count."""

    parts: tuple[str, ...]
    day: dt.date
    state: State
    archive_count: int | None
    source_count: int | None
    method: str = ""
    detail: str = ""
    #: the comparison is in the archive's check record (:func:`checks_parts`)
    recorded: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "parts": list(self.parts),
            "day": self.day.isoformat(),
            "state": self.state,
            "archive_count": self.archive_count,
            "source_count": self.source_count,
            "method": self.method,
            "detail": self.detail,
            "recorded": self.recorded,
        }


Counter = Callable[[tuple[str, ...], dt.date], SourceCount]


def day_check(archive: Archive, key: DayKey) -> dict[str, Any] | None:
    """The last comparison of one day with the source (its check record's entry), or None
    when there is none or the record cannot be read."""
    try:
        days = unit_checks(
            archive.read_internal, key.source, key.parts, key.day.year, key.day.month
        )
    except DxtError:
        return None
    return days.get(key.day.isoformat())


def reconcile(
    archive: Archive,
    source: str,
    units: Iterable[Sequence[str]],
    days: Iterable[dt.date],
    counter: Counter,
    *,
    now: dt.datetime | None = None,
    record_kept: bool = True,
) -> list[ReconcileRow]:
    """Compare each archived (unit, day) with the source's count, asking counts only.

    Days not archived are ``missing`` (coverage's refill commands cover them) and the source
    is not asked about them. A failed count is ``error`` with the reason; it does not stop
    the others, unless the source could not be reached for :data:`UNREACHABLE_AFTER` counts
    in a row (:class:`SourceUnavailable`, after the comparisons made are recorded). With
    ``record_kept`` (the caller may write to the archive), a day the source now has fewer
    points of gets a ``<day>.kept.json`` sidecar, so coverage shows it as ``K``, and every
    comparison made is recorded in its month's check record (:func:`checks_parts`).
    """
    day_list, unit_list = list(days), [tuple(p) for p in units]
    rows: list[ReconcileRow] = []
    unreachable: list[SourceUnavailable] = []  # the counts failing so in a row
    try:
        for parts in unit_list:
            for day in day_list:
                key = DayKey(source, parts, day)
                row, down = _compare(archive, key, counter, record_kept, now)
                rows.append(row)
                if down is not None:
                    unreachable.append(down)
                elif row.state in COMPARED:
                    unreachable.clear()
                if len(unreachable) >= UNREACHABLE_AFTER:
                    _stop_unreachable(archive, source, rows, unreachable, record_kept, now)
    except KeyboardInterrupt as exc:
        # Ctrl-C (or a stop signal): the comparisons made so far are kept, recorded, and
        # said; the rows go with the exception (``reconciled``) for the caller to show
        if record_kept:
            rows = _record_checks(archive, source, rows, now or dt.datetime.now(dt.UTC))
        total = len(unit_list) * len(day_list)
        exc.add_note(
            f"reconciled {len(rows)} of {total} metric-days before it stopped"
            + (
                f"; {sum(r.recorded for r in rows)} comparisons recorded in the check records"
                if record_kept
                else ""
            )
        )
        exc.reconciled = rows  # type: ignore[attr-defined]
        raise
    asked = sum(r.state not in ("missing", "not over") for r in rows)
    if unreachable and len(unreachable) == asked:
        # fewer counts than UNREACHABLE_AFTER, every one of them unanswered (none refused,
        # none compared, no day damaged): the server is down for this reconcile as for a
        # longer one (exit status 4, not "counts failed")
        _stop_unreachable(archive, source, rows, unreachable, record_kept, now, ended=True)
    if record_kept:
        rows = _record_checks(archive, source, rows, now or dt.datetime.now(dt.UTC))
    return rows


#: The start of a row's detail when the archived day is damaged (not compared).
DAMAGED_DETAIL = "not compared: the archived day is damaged"

#: Counts failing in a row because the source could not be reached, after which a reconcile
#: stops: the next ones would fail the same way, each after its retries.
UNREACHABLE_AFTER = 5


def _stop_unreachable(
    archive: Archive,
    source: str,
    rows: list[ReconcileRow],
    failed: list[SourceUnavailable],
    record_kept: bool,
    now: dt.datetime | None,
    ended: bool = False,
) -> None:
    """Stop a reconcile whose source cannot be reached (or, ``ended``, one that could not
    reach it for any count it asked): what was compared is recorded, and the error says how
    far it got (exit status 4, as for a server that cannot be reached)."""
    recorded = ""
    if record_kept:
        rows = _record_checks(archive, source, rows, now or dt.datetime.now(dt.UTC))
        recorded = f"; {sum(r.recorded for r in rows)} comparisons recorded"
    compared = sum(1 for r in rows if r.state in COMPARED)
    what = (
        f"the source could not be reached for any of the {len(failed)} metric-days it was "
        "asked about"
        if ended
        else f"stopped: the source could not be reached for {len(failed)} metric-days in a row"
    )
    error = SourceUnavailable(
        f"{what} (the last: {failed[-1]}); {compared} of the {len(rows)} metric-days looked at "
        f"were compared{recorded}. Check the URL and that the server is up, then reconcile "
        "again"
    )
    error.reconciled = rows  # type: ignore[attr-defined]  # for the caller to show
    raise error


def _compare(
    archive: Archive,
    key: DayKey,
    counter: Counter,
    record_kept: bool,
    now: dt.datetime | None = None,
) -> tuple[ReconcileRow, SourceUnavailable | None]:
    """One (unit, day) of :func:`reconcile` compared with the source's count, and the error
    when the source could not be reached for it."""
    parts, day = key.parts, key.day
    try:
        doc = archive.read_manifest(key)
    except DxtError as exc:
        return ReconcileRow(parts, day, "error", None, None, detail=str(exc)), None
    have = archived_count(doc)
    if have is None:
        return ReconcileRow(parts, day, "missing", None, None), None
    ends = not_over_until(doc or {})
    if ends is not None and not is_past(ends, now):
        # the source's count grows until the day ends: "more" would not be late data
        detail = f"the day ends at {ends.isoformat()}; it is compared once it has ended"
        return ReconcileRow(parts, day, "not over", have, None, detail=detail), None
    status, why = archive.status(key)
    if status == "corrupt":  # the manifest's count is not what the archive holds
        detail = f"{DAMAGED_DETAIL} ({why}); refetch it"
        return ReconcileRow(parts, day, "error", have, None, detail=detail), None
    try:
        sc = counter(parts, day)
    except SourceUnavailable as exc:
        return ReconcileRow(parts, day, "error", have, None, detail=str(exc)), exc
    except DxtError as exc:
        return ReconcileRow(parts, day, "error", have, None, detail=str(exc)), None
    detail = ""
    if sc.count == have:
        state: State = "equal"
    elif sc.count > have:
        state = "more"
    else:
        state = "fewer"
        # with holes, fewer than rows + holes may be the unreadable points gone (the next run
        # retries the holes); fewer than the rows is retention
        rows_only = have - hole_points((doc or {}).get("holes") or ())
        if record_kept and doc is not None and sc.count < rows_only:
            detail = _record_kept(archive, key, doc, have, sc)
    return ReconcileRow(parts, day, state, have, sc.count, sc.method, detail), None


def _record_checks(
    archive: Archive, source: str, rows: list[ReconcileRow], now: dt.datetime
) -> list[ReconcileRow]:
    """Merge the compared rows into their months' check records. Returns the rows, a
    recorded one marked so; a record that cannot be written is said in its rows' detail and
    a warning (the comparisons stand; the next reconcile records them)."""
    months: dict[tuple[int, int], list[ReconcileRow]] = {}
    for r in rows:
        if r.state in COMPARED:
            months.setdefault((r.day.year, r.day.month), []).append(r)
    at = now.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    failed: dict[tuple[tuple[str, ...], dt.date], str] = {}
    for (year, month), group in months.items():
        update = functools.partial(_merge_checks, source, year, month, group, at)
        try:
            archive.update_internal(CHECKS_NAME, checks_parts(source, year, month), update)
        except (DxtError, OSError) as exc:
            log.warning(
                "%s %s-%02d: the check record was not written: %s", source, year, month, exc
            )
            for r in group:
                failed[(r.parts, r.day)] = (
                    f"the check was not recorded ({exc}); the next reconcile records it"
                )
    out = []
    for r in rows:
        if (k := (r.parts, r.day)) in failed:
            r = dataclasses.replace(r, detail="; ".join(x for x in (r.detail, failed[k]) if x))
        elif r.state in COMPARED:
            r = dataclasses.replace(r, recorded=True)
        out.append(r)
    return out


def _merge_checks(
    source: str,
    year: int,
    month: int,
    group: list[ReconcileRow],
    at: str,
    data: bytes | None,
) -> dict[str, Any]:
    """The month's check record ``data`` (None: none yet) with ``group``'s outcomes: the last
    per unit and day, and how many times each was checked."""
    units = parse_checks(data)
    for r in group:
        days = units.setdefault("/".join(r.parts), {})
        checks = days.get(r.day.isoformat(), {}).get("checks")
        days[r.day.isoformat()] = {
            "state": r.state,
            "archive_count": r.archive_count,
            "source_count": r.source_count,
            "method": r.method,
            "checked_at": at,
            "checks": (checks if isinstance(checks, int) else 0) + 1,
        }
    return {
        "schema": CHECKS_SCHEMA,
        "source": source,
        "month": f"{year:04d}-{month:02d}",
        "units": {u: dict(sorted(d.items())) for u, d in sorted(units.items())},
    }


def _record_kept(
    archive: Archive, key: DayKey, doc: dict[str, Any], have: int, sc: SourceCount
) -> str:
    """The ``kept`` sidecar coverage reads (the same record a shrinking rerun leaves), in
    the archive, wherever it is (a directory or a bucket). Returns the row's detail: empty,
    or why the record could not be written (the comparison stands; the next reconcile
    writes it)."""
    record = kept_record(
        key,
        doc,
        archive_rows=have,
        source_rows=sc.count,
        source_status="counted",
        by=f"reconcile ({sc.method})",
    )
    # Under the day's lock, and only if the day is still the one compared: a commit while
    # the source was counted (a --replace, a refetch) made this record false for ever.
    lock = archive.day_lock(key)
    try:
        lock.acquire()
    except ArchiveLocked:
        return "not recorded as kept: the day is being archived now; the next reconcile compares it"
    except (DxtError, OSError) as exc:
        log.warning("%s: the kept record was not written: %s", key, exc)
        return f"the kept record was not written ({exc}); the next reconcile writes it"
    try:
        if archive.read_manifest(key) != doc:
            return (
                "not recorded as kept: the day was committed again while the source was "
                "counted; the next reconcile compares it"
            )
        archive.write_kept(key, record)
    except (DxtError, OSError) as exc:
        log.warning("%s: the kept record was not written: %s", key, exc)
        return f"the kept record was not written ({exc}); the next reconcile writes it"
    finally:
        lock.release()
    return ""


def reconcile_days(backend: str, settings: Mapping[str, Any]) -> int:
    """``DXT_<BACKEND>_RECONCILE_DAYS`` (the backend's ``reconcile_days`` setting, default 3):
    how many past days a daily run reconciles; 0 turns it off.

    Raises:
        ConfigError: a negative number.
    """
    n = settings.get("reconcile_days", DEFAULT_RECONCILE_DAYS)
    n = DEFAULT_RECONCILE_DAYS if n is None else int(n)
    if n < 0:
        from dxt_core.errors import ConfigError

        name = RECONCILE_DAYS_ENV.format(backend=backend.upper())
        raise ConfigError(f"{name}={n} must be >= 0 (0 turns reconciling off)")
    return n


@dataclass
class RecentReport:
    """What a daily run's reconcile of the last days found and did."""

    days: list[dt.date] = field(default_factory=list)
    rows: list[ReconcileRow] = field(default_factory=list)
    refetched: list[tuple[tuple[str, ...], dt.date, int, int]] = field(default_factory=list)
    failed: list[tuple[tuple[str, ...], dt.date, str]] = field(default_factory=list)
    #: days archived with holes, fetched again to retry them: (parts, day, holes left)
    holes_retried: list[tuple[tuple[str, ...], dt.date, int]] = field(default_factory=list)
    #: only counted (nothing refetched)
    counts_only: bool = False
    #: comparisons whose check record could not be written (each row says why)
    unrecorded: int = 0
    #: days of the window left out: before the DAG's start date (never scheduled, so never
    #: archived, and not "missing")
    before_start: int = 0

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for r in self.rows:
            c[r.state] = c.get(r.state, 0) + 1
        return c

    def note(self) -> str:
        """One paragraph for the run note and the task log."""
        if not self.days:
            if self.before_start:
                return (
                    f"reconcile: nothing ({self.before_start} days before this one, all "
                    "before the DAG's start date)"
                )
            return "reconcile: off (0 days)"
        span = f"{self.days[0]}..{self.days[-1]}"
        c = self.counts()
        # "missing" days are not archived: the source is not asked about them. Said "when
        # counted": in a catch-up the runs of those days may be archiving them meanwhile,
        # and the note stays on this run
        parts = (
            ", ".join(
                f"{v} {k}" + (" (not archived when counted)" if k == "missing" else "")
                for k, v in sorted(c.items())
            )
            or "no units"
        )
        text = f"reconcile {span} ({len(self.rows)} metric-days, counts at the source): {parts}"
        if self.refetched:
            grown = "; ".join(
                f"{'/'.join(p)} {d}: {a:,} -> {b:,}" for p, d, a, b in self.refetched[:10]
            )
            more = f" (+{len(self.refetched) - 10} more)" if len(self.refetched) > 10 else ""
            text += f"; refetched {len(self.refetched)} grown: {grown}{more}"
        if self.holes_retried:
            left = sum(n for _, _, n in self.holes_retried)
            text += (
                f"; retried the holes of {len(self.holes_retried)} metric-days "
                f"({left} unreadable windows left)"
            )
        if self.before_start:
            text += f"; {self.before_start} earlier days left out (before the DAG's start date)"
        if self.counts_only and c.get("more"):
            text += "; counts only, nothing refetched"
        if self.unrecorded:
            text += (
                f"; {self.unrecorded} comparisons NOT recorded in the archive (the next "
                "reconcile records them)"
            )
        if self.failed:
            text += f"; {len(self.failed)} refetches FAILED: " + "; ".join(
                f"{'/'.join(p)} {d}: {why}" for p, d, why in self.failed[:5]
            )
        return text

    def failure(self) -> str | None:
        """What of the reconcile failed (counts that could not be taken, refetches that
        failed), said for the task's error; None when all of it was done. A task that ends
        successfully with such failures in its note alone is neither shown as failed nor
        retried."""
        errors = self.counts().get("error", 0)
        if not errors and not self.failed:
            return None
        what = [f"{errors} count(s) FAILED"] if errors else []
        if self.failed:
            what.append(f"{len(self.failed)} refetch(es) FAILED")
        return " and ".join(what) + f" (the rest was done): {self.note()}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": [d.isoformat() for d in self.days],
            "counts": self.counts(),
            # the ones to look at (missing days are in the counts only: a new DAG's first
            # runs would list every unit; an equal day only when something is to be said)
            "rows": [
                r.as_dict()
                for r in self.rows
                if r.state not in ("equal", "missing") or (r.state == "equal" and r.detail)
            ],
            "refetched": [
                {"parts": list(p), "day": d.isoformat(), "archive": a, "source": b}
                for p, d, a, b in self.refetched
            ],
            "failed": [
                {"parts": list(p), "day": d.isoformat(), "error": w} for p, d, w in self.failed
            ],
            "holes_retried": [
                {"parts": list(p), "day": d.isoformat(), "holes_left": n}
                for p, d, n in self.holes_retried
            ],
            "counts_only": self.counts_only,
            "unrecorded": self.unrecorded,
            "note": self.note(),
        }


def reconcile_recent(
    archive: Archive,
    source: str,
    units: Sequence[Sequence[str]],
    day: dt.date,
    n_days: int,
    counter: Counter,
    refetch: Callable[[tuple[str, ...], dt.date], Any] | None,
    *,
    record_kept: bool = True,
) -> RecentReport:
    """Reconcile the ``n_days`` days before ``day`` and refetch the ones that grew, and
    those archived with holes (to retry them).

    ``refetch(parts, day)`` archives the metric-day again over what is there; the archive
    only gains rows (a grown day is replaced, the previous file kept in ``.versions/``). A
    failed refetch is reported, not raised, so one bad day does not hide the others.
    Without ``refetch`` (counts only: the coverage view's button) nothing is fetched; with
    ``record_kept`` a day the source has fewer points of gets its ``kept`` sidecar.
    """
    report = RecentReport()
    if n_days <= 0:
        return report
    report.days = [day - dt.timedelta(days=i) for i in range(n_days, 0, -1)]
    report.rows = reconcile(archive, source, units, report.days, counter, record_kept=record_kept)
    if record_kept:
        report.unrecorded = sum(r.state in COMPARED and not r.recorded for r in report.rows)
    report.counts_only = refetch is None
    if refetch is None:
        return report
    for row in report.rows:
        holes: list[Any] = []
        if row.state in ("equal", "fewer"):
            doc = archive.read_manifest(DayKey(source, row.parts, row.day)) or {}
            holes = list(doc.get("holes") or ())
        if row.state != "more" and not holes:
            continue
        try:
            done = refetch(row.parts, row.day)
        except DxtError as exc:
            report.failed.append((row.parts, row.day, str(exc)))
            continue
        if row.state == "more":
            report.refetched.append(
                (row.parts, row.day, row.archive_count or 0, row.source_count or 0)
            )
        else:  # a day with holes: fetched again, the holes retried
            extra = getattr(done, "extra", None) or {}
            report.holes_retried.append((row.parts, row.day, int(extra.get("holes", 0) or 0)))
    return report  # its note is logged by the caller, which may add to it


@dataclass(frozen=True)
class Recount:
    """What reconciling a backend's past days needs: the archive and the backend's name, the
    units' archive parts, a counter ``(parts, day) -> SourceCount`` that asks the source for
    counts only, and ``fetch_again(parts, day)``, which archives a day again over what is
    there. A backend's reconcile role makes one (``BackendTasks.recount``)."""

    archive: Archive
    source: str
    units: Sequence[tuple[str, ...]]
    count: Counter
    fetch_again: Callable[[tuple[str, ...], dt.date], Any]

    def run(
        self, day: dt.date, n_days: int, *, refetch: bool = True, record_kept: bool = True
    ) -> RecentReport:
        """:func:`reconcile_recent` of the ``n_days`` days before ``day``; ``refetch=False``
        only counts."""
        return reconcile_recent(
            self.archive,
            self.source,
            self.units,
            day,
            n_days,
            self.count,
            self.fetch_again if refetch else None,
            record_kept=record_kept,
        )
