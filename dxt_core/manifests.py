"""What the archive records beside a day's data: manifests and their sidecars.

A day counts as archived only when its manifest ``<YYYY-MM-DD>.manifest.json`` exists; a
manifest with ``"status": "empty"`` records a day that was fetched and held no data. A
``<day>.kept.json`` sidecar records a rerun that read fewer rows than the archive holds (the
archived file was kept), and ``.versions/`` holds the bytes a commit replaced. In
Hive-partitioned layouts (``plugin=<p>/metric=<m>``, used for Parquet) manifests and other
sidecars start with ``_`` so that dataset readers skip them.

This module reads them; :mod:`dxt_core.daywrite` writes them.
"""

from __future__ import annotations

import datetime as dt
import gzip
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dxt_core._version import __version__
from dxt_core.errors import ConfigError
from dxt_core.paths import check_path_component
from dxt_core.windows import zone

if TYPE_CHECKING:
    from dxt_core.archive import DayKey

MANIFEST_SCHEMA = "dxt-archive/manifest/1"
KEPT_SCHEMA = "dxt-archive/kept/1"
MANIFEST_SUFFIX = ".manifest.json"
KEPT_SUFFIX = ".kept.json"
VERSIONS_DIR = ".versions"
#: Manifest fields that say which data a unit's day holds (Prometheus' ``selector``), which a
#: rerun compares with what it asks (:func:`day_complete`'s ``expects``); the S3 index keeps
#: them, so that planning a rerun reads no manifest.
IDENTITY_FIELDS = ("selector",)
DAYS_SCHEMA = "dxt-archive/days/1"
#: How a day is cut out of time, recorded with the zone (see :meth:`Archive.check_day_zone`).
DAY_DEFINITION = "[local midnight, next local midnight)"

#: What to do about a manifest that cannot be read. Deleting it loses nothing either: the data
#: file beside it is kept by the next run as archived data (see :func:`unmanifested_data`).
DAMAGED_MANIFEST_ADVICE = (
    "rerun the day to write a new one (the data file beside it is kept: a rerun with fewer "
    "rows or other values fails and changes nothing, and any replaced bytes go to .versions/)"
)

#: The state of one archived day, as coverage reports it.
Status = Literal["archived", "empty", "missing", "corrupt"]


def kept_record(
    key: DayKey,
    prev: dict[str, Any],
    *,
    archive_rows: int,
    source_rows: int,
    source_status: Any,
    by: str = "",
) -> dict[str, Any]:
    """The ``<day>.kept.json`` record: the archived day (manifest ``prev``, ``archive_rows``)
    was kept although the source held fewer rows (``source_rows``), found by a rerun or, when
    ``by`` says so, by a later count (reconcile). Stored by :meth:`Archive.write_kept`."""
    record: dict[str, Any] = {
        "schema": KEPT_SCHEMA,
        "source": key.source,
        "parts": list(key.parts),
        "day": key.day.isoformat(),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "archive_rows": archive_rows,
        "source_rows": source_rows,
        "source_status": source_status,
    }
    if by:
        record["by"] = by
    record |= {
        "archive_file": prev.get("file"),
        "archive_sha256": prev.get("sha256"),
        "software": {"name": "dxt-archive", "version": __version__},
    }
    return record


def manifest_files(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The data files a manifest names: ``files`` entries, else the single ``file``."""
    files = doc.get("files")
    if isinstance(files, list) and files:
        return [f for f in files if isinstance(f, dict)]
    if isinstance(doc.get("file"), str):
        return [{"file": doc["file"], "bytes": doc.get("bytes"), "sha256": doc.get("sha256")}]
    return []


def rows_of(doc: dict[str, Any] | None) -> int:
    """The rows an archived day's manifest records (0 for an empty or unknown day)."""
    if not doc or doc.get("status") != "archived":
        return 0
    rows = doc.get("rows")
    return rows if isinstance(rows, int) and rows > 0 else 0


def is_plain_name(name: object) -> bool:
    """``name`` is one file name (no directory part, not ``.``/``..``)."""
    return isinstance(name, str) and check_path_component(name, "file") is None


#: The manifest field of a day archived before it was over (absent on every other day):
#: ``{"ends": <the day's end, ISO 8601>, "zone": <the zone its days are cut in>}``.
NOT_OVER = "day_not_over"
#: How a day's detail begins when the day was archived before it was over.
NOT_OVER_DETAIL = "not over:"


def holes_detail(doc: dict[str, Any]) -> str:
    """What coverage says of a committed day beside its status: "holes: ..." for a day
    archived around unreadable windows (dxt_core.reconcile), else "not over: ..." for a day
    archived (or found empty) before it ended (:data:`NOT_OVER`: it holds what the source
    had then, and the next run over it fetches it again), else nothing."""
    if doc.get("holes"):
        from dxt_core.reconcile import holes_detail as detail

        return detail(doc)
    return not_over_detail(doc)


def not_over_ends(detail: str) -> dt.datetime | None:
    """When the day of a "not over: ..." ``detail`` (:func:`not_over_detail`) ends; None for
    any other detail (or one that does not say)."""
    if not detail.startswith(NOT_OVER_DETAIL):
        return None
    head = detail.partition("(")[2].partition(")")[0]
    try:
        ends = dt.datetime.fromisoformat(head)
    except ValueError:
        return None
    return ends if ends.tzinfo is not None else None


def not_over_mark(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The :data:`NOT_OVER` mark of a day archived (or found empty) before it ended, else
    None. A manifest written before the mark existed (dxt before 2026-12-05) has none, but
    says the same when it was written (``written_at``) before its day's end (its
    ``query_window``'s ``end``, collectd-es's ``window``): such a day is taken as not over
    too, or it would count as complete for ever (skipped by every rerun, ``#`` in
    coverage)."""
    mark = doc.get(NOT_OVER)
    if mark:
        return mark if isinstance(mark, dict) else {}
    if NOT_OVER in doc:  # None: told, and over (an index entry)
        return None
    # the day's window: ``query_window`` (Examon, Prometheus, Kwollect), ``window``
    # (collectd-es: the UTC day)
    window = doc.get("query_window", doc.get("window"))
    end = _aware(window.get("end")) if isinstance(window, dict) else None
    written = _aware(doc.get("written_at"))
    if end is None or written is None or written >= end:
        return None
    return {"ends": end.isoformat(), "inferred": "written_at before query_window.end"}


def day_complete(status: str, doc: dict[str, Any], expects: Sequence[tuple[str, Any]] = ()) -> bool:
    """Whether a day of ``status`` whose manifest (or S3 index entry) is ``doc`` needs no
    rerun: archived (size matching its manifest) or recorded empty, no unreadable window
    (``holes``) waiting to be retried, over when it was archived (:func:`not_over_mark`),
    and ``doc`` holds ``expects`` (a field it lacks, written before it was recorded, is
    taken as held)."""
    if status not in ("archived", "empty"):
        return False
    if not_over_mark(doc) is not None or (status == "archived" and doc.get("holes")):
        return False
    return not any(doc.get(k, v) != v for k, v in expects)


def not_over_until(doc: dict[str, Any]) -> dt.datetime | None:
    """When the day of ``doc``, archived (or found empty) before it ended, ends (its
    :data:`NOT_OVER` mark's ``ends``); None for a day archived after its end, or a mark
    that does not say."""
    mark = not_over_mark(doc)
    return _aware(mark.get("ends")) if isinstance(mark, dict) else None


def _aware(text: object) -> dt.datetime | None:
    """An ISO 8601 time with its offset, else None."""
    if not isinstance(text, str):
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def not_over_detail(doc: dict[str, Any]) -> str:
    """ "not over: ..." for a day archived before it ended, else ``""``."""
    mark = not_over_mark(doc)
    if mark is None:
        return ""
    ends = mark.get("ends") if isinstance(mark, dict) else None
    return (
        f"{NOT_OVER_DETAIL} archived before the day ended"
        + (f" ({ends})" if ends else "")
        + ", with what the source held then; the next run over the day fetches it again"
    )


def kept_detail(kept: dict[str, Any]) -> str:
    """ "kept: ..." for a day whose rerun read fewer rows than the archive holds."""
    try:
        a, s = int(kept["archive_rows"]), int(kept["source_rows"])
    except (KeyError, TypeError, ValueError):
        return "kept: a rerun read fewer rows than the archive holds"
    return (
        f"kept: on {kept.get('at', '?')} the source had {s:,} rows, the archive {a:,}; "
        "the archived file was kept"
    )


def kept_applies(kept: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Whether a ``<day>.kept.json`` record still describes the day of ``manifest``.

    A commit removes the record (the day it kept is no longer the archived one); when that
    removal failed (a bucket policy refusing s3:DeleteObject, a read-only file) the record
    stays beside a newer day. It no longer applies when the manifest names other bytes than
    the file it kept (``archive_sha256``), or was written after it (``written_at`` later than
    its ``at``). Without either to compare (an older record or manifest), it applies."""
    was, now = kept.get("archive_sha256"), manifest.get("sha256")
    if isinstance(was, str) and isinstance(now, str) and was != now:
        return False
    at, written = _instant(kept.get("at")), _instant(manifest.get("written_at"))
    return at is None or written is None or written <= at


def _instant(value: Any) -> dt.datetime | None:
    """An ISO time with its zone, else None."""
    try:
        when = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def count_rows(path: Path) -> int | None:
    """The rows of an archived data file, counted from the file itself (None when its
    format is not one this function reads): the protection of a day whose manifest is gone.
    """
    name = path.name
    if name.endswith((".csv.gz", ".jsonl.gz")):
        with gzip.open(path, "rb") as fh:
            lines = 0
            last = b"\n"
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
            lines += last != b"\n"
        return max(lines - 1, 0) if name.endswith(".csv.gz") else lines
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    return None


def day_data_names(names: Iterable[str], day: dt.date) -> list[str]:
    """The names of ``day``'s data files among a unit directory's (or S3 prefix's)
    ``names``: ``<day>.<ext>``, its manifest and kept sidecar left out (hidden temporary
    files and locks start with a dot, Hive layouts' sidecars with ``_``), sorted."""
    prefix = f"{day.isoformat()}."
    return sorted(
        n for n in names if n.startswith(prefix) and not n.endswith((MANIFEST_SUFFIX, KEPT_SUFFIX))
    )


def stray_data(names: Iterable[str], day: dt.date, doc: dict[str, Any] | None) -> list[str]:
    """The data files of ``day`` among ``names`` that its manifest ``doc`` does not name (an
    empty day's names none): left by an older dxt (a refetch in another format before
    2026-12-07) or put there by hand. A reader's glob (``*.csv.gz``) takes them as archived
    data; ``coverage --verify`` reports the day, and its next commit keeps them in
    ``.versions/`` and removes them."""
    archived = doc is not None and doc.get("status") == "archived"
    named = {f.get("file") for f in manifest_files(doc)} if doc and archived else set()
    return [n for n in day_data_names(names, day) if n not in named]


def stray_detail(where: str, names: Sequence[str], day: dt.date) -> str:
    """A corrupt day's detail for its stray data files (:func:`stray_data`), ``where`` the
    unit directory's path or prefix URL."""
    if len(names) == 1:
        return (
            f"{where}/{names[0]}: data of {day.isoformat()} that its manifest does not name "
            "(an older run's file, or one put there by hand; globs read it as archived "
            "data); the day's refill keeps it in .versions/ and removes it"
        )
    return (
        f"{where}/{names[0]} and {len(names) - 1} more: data of {day.isoformat()} that its "
        "manifest does not name (older runs' files, or put there by hand; globs read them "
        "as archived data); the day's refill keeps them in .versions/ and removes them"
    )


def unmanifested_data(directory: Path, day: dt.date) -> dict[str, Any] | None:
    """What the archive holds for ``day`` in ``directory`` when no manifest says so: its data
    files (``<day>.<ext>``), their rows counted from the files, as a manifest-like document
    (``recovered_from``), or None when there are none. Such files are archived data: the
    never-shrink rule and the versions apply to them as to any other."""
    try:
        names = day_data_names(os.listdir(directory), day)
    except FileNotFoundError:
        return None
    files: list[dict[str, Any]] = []
    for name in names:
        path = directory / name
        if not path.is_file():
            continue
        try:
            rows = count_rows(path)
        except Exception:
            rows = None
        files.append({"file": name, "bytes": path.stat().st_size, "rows": rows})
    if not files:
        return None
    return recovered_manifest(files, "data files without a readable manifest")


def recovered_manifest(files: list[dict[str, Any]], recovered_from: str) -> dict[str, Any]:
    """A manifest-like document for data ``files`` found without a manifest (each a dict
    with ``file``, ``bytes``, ``rows``: None when not counted, and optionally ``sha256``):
    archived, its main file the first whose rows were counted. ``recovered_from`` says
    where they were found (and keeps the document out of ``.versions/``)."""
    counted = [f for f in files if isinstance(f["rows"], int)]
    main = counted[0] if counted else files[0]
    doc = {
        "status": "archived",
        "file": main["file"],
        "rows": main["rows"],
        "bytes": main["bytes"],
        "files": files,
        "recovered_from": recovered_from,
    }
    if "sha256" in main:
        doc["sha256"] = main["sha256"]
    return doc


def manifest_zone(doc: Any) -> str | None:
    """The zone a manifest's day is cut in (its ``day_definition``, else the ``time_zone``
    of a manifest older than that), None when it names none or no zone there is."""
    if not isinstance(doc, dict):
        return None
    definition = doc.get("day_definition")
    name = definition.get("time_zone") if isinstance(definition, dict) else None
    name = name if isinstance(name, str) else doc.get("time_zone")
    if not isinstance(name, str) or not name:
        return None
    try:
        zone(name)
    except ConfigError:
        return None
    return name


def files_intact(directory: Path, manifest: dict[str, Any] | None) -> bool:
    """Whether ``manifest``'s data files are in ``directory`` with the sizes it gives (true
    of a manifest that names none). A rerun that writes the same bytes over a missing or
    damaged file restored it: it is not "unchanged"."""
    if not manifest or manifest.get("status") != "archived":
        return True
    for f in manifest_files(manifest):
        name = f.get("file")
        if not is_plain_name(name):
            return False
        try:
            if (directory / str(name)).stat().st_size != f.get("bytes"):
                return False
        except OSError:
            return False
    return True
