"""The rules of a commit, for every archive: the directory one (:mod:`dxt_core.daywrite`) and
the S3 one (:mod:`dxt_core.store.s3_write`). Where the archived bytes live differs; the rule
and its words do not."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from dxt_core.errors import ArchiveError, ContentChanged, SourceShrank
from dxt_core.manifests import is_plain_name, kept_record, manifest_files

if TYPE_CHECKING:
    from dxt_core.archive import Archive, DayKey


def source_count_grew(prev: dict[str, Any] | None, doc: dict[str, Any]) -> bool:
    """The source says it holds more points than when the day was archived (the
    ``source_count`` field of both manifests, when they have it)."""
    old = (prev or {}).get("source_count")
    new = doc.get("source_count")
    if isinstance(old, bool) or isinstance(new, bool):
        return False
    return isinstance(old, int) and isinstance(new, int) and new > old


def check_staged(key: DayKey, doc: dict[str, Any], staged: Mapping[str, Path]) -> None:
    """The data files ``doc`` names are the ones ``staged`` in this transaction (a file
    written under its final name would already have replaced the archived one).

    Raises:
        ArchiveError: ``doc`` names a file not staged, or whose staged copy is gone.
    """
    for f in manifest_files(doc) if doc.get("status") == "archived" else []:
        name = f.get("file")
        if not isinstance(name, str) or name not in staged:
            raise ArchiveError(
                f"{key}: the manifest names {name!r}, which was not written through this "
                "archive transaction (use DayWrite.open or DayWrite.staging_path)"
            )
        if not staged[name].exists():
            raise ArchiveError(f"{key}: staged file for {name} is missing")


def keep_archived_day(
    archive: Archive,
    key: DayKey,
    prev: dict[str, Any],
    doc: dict[str, Any],
    *,
    archive_rows: int,
    source_rows: int,
    kept: str,
) -> NoReturn:
    """The never-shrink rule's outcome: the archived day (manifest ``prev``) stays, the
    attempt (manifest ``doc``) is recorded as the day's ``<day>.kept.json``
    (:meth:`Archive.write_kept`; coverage shows it), and
    :class:`~dxt_core.errors.SourceShrank` names ``kept``, where the archived file is (a
    path, or an object's URL).
    """
    archive.write_kept(
        key,
        kept_record(
            key,
            prev,
            archive_rows=archive_rows,
            source_rows=source_rows,
            source_status=doc.get("status"),
        ),
    )
    raise SourceShrank(
        f"{key}: source has fewer rows than the archive ({archive_rows:,} -> "
        f"{source_rows:,}); kept the archived file {kept}; rerun with replace (--replace, or "
        "the DAG param replace) to overwrite it (the replaced file is kept in .versions/)",
        archive_rows=archive_rows,
        source_rows=source_rows,
        path=kept,
    )


def content_changed(
    key: DayKey,
    rows: int,
    old: str,
    new: str,
    *,
    kept: str,
    what: str = "file",
    columns: tuple[Any, Any] = (None, None),
) -> ContentChanged:
    """The error of a rerun that read as many rows as the archive holds (``rows``) but other
    bytes (sha256 ``old`` archived, ``new`` read now): the archived ``what`` (``file``, or
    ``object``) at ``kept`` stays. ``columns``: the archived manifest's and the new one's;
    when they differ, an older version named the columns otherwise, and the message says so
    rather than blame the source."""
    sums = f"sha256 {old[:12]} archived, {new[:12] or 'none'} read now"
    then, now = columns
    if isinstance(then, list) and isinstance(now, list) and then != now:
        cause = (
            f"as many rows as the archive ({rows:,}) in other columns ({sums}): the archived "
            f"{what} has {', '.join(map(str, then))}, this version writes "
            f"{', '.join(map(str, now))} (an older version of dxt-archive named them otherwise)"
        )
        take = "rewrite it in this version's columns"
    else:
        cause = f"the source has as many rows as the archive ({rows:,}) but other values ({sums})"
        take = "take the new values"
    return ContentChanged(
        f"{key}: {cause}; kept the archived {what} {kept}; rerun with replace (--replace, or "
        f"the DAG param replace) to {take} (the replaced {what} is kept in .versions/)",
        rows=rows,
        archive_sha256=old,
        source_sha256=new,
        path=kept,
    )


def left_behind(prev_files: list[dict[str, Any]], doc: dict[str, Any]) -> list[str]:
    """The names of the archived files (``prev_files``, of the day's previous manifest) that
    the new manifest ``doc`` no longer names: a day archived again in another format
    (``<day>.csv.gz`` -> ``<day>.parquet``) or with fewer formats. Left in place, each
    would lie beside the day with no manifest describing it; a commit keeps it in
    ``.versions/`` and removes it."""
    archived = doc.get("status") == "archived"
    named = {f.get("file") for f in manifest_files(doc)} if archived else set()
    return sorted(
        str(f["file"])
        for f in prev_files
        if is_plain_name(f.get("file")) and f.get("file") not in named
    )


UNNAMED = "unnamed"  # a ``replaced`` record's mark: the file was a stray, no manifest named it


def stray_names(prev_files: list[dict[str, Any]], strays: list[str]) -> set[str]:
    """The day's data files (``strays``: :func:`dxt_core.manifests.stray_data`) that the
    previous manifest does not name either: their removal replaces no archived data."""
    named = {f.get("file") for f in prev_files}
    return {n for n in strays if n not in named}


def is_replacement(record: Mapping[str, Any]) -> bool:
    """A ``replaced`` record of archived bytes (not of a stray file a commit removed)."""
    return not record.get(UNNAMED)


def replaced_words(
    key: DayKey, replaced: list[dict[str, Any]], rows: tuple[int, int] | None = None
) -> str:
    """The warning of a commit that kept files in ``.versions/``: the archived files it
    replaced (with the rows before and after, when known) and the stray files it removed."""
    named = [str(r["file"]) for r in replaced if is_replacement(r)]
    strays = [str(r["file"]) for r in replaced if not is_replacement(r)]
    said = []
    if named:
        counts = f" ({rows[0]:,} rows -> {rows[1]:,} rows)" if rows else ""
        said.append(f"replaced the archived {', '.join(named)}{counts}")
    if strays:
        what = "a data file" if len(strays) == 1 else "data files"
        said.append(f"removed {', '.join(strays)}, {what} of the day its manifest did not name")
    versions = ", ".join(str(r["version"]) for r in replaced if r.get("version"))
    return f"{key}: {'; '.join(said)}; the old bytes are kept as {versions}"
