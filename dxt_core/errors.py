"""The one exception tree of dxt-archive.

::

    DxtError
    +-- ConfigError            bad option, environment variable or connection field
    |   +-- CatalogError       bad catalog file: names the file, line and problem
    +-- SourceError            a backend could not be read; carries the URL (never credentials)
    |   +-- SourceUnavailable  retryable: connection error, timeout, 429 or 5xx after all retries
    |   |   +-- RateLimited    the server or a proxy limits the request rate; wait, never split
    |   +-- QueryRejected      not retryable: 4xx, or a server error that names a bad query
    |   +-- WindowTooLarge     the server refused the window as too large; split it and retry
    |   +-- AnswerTooLarge     one answer decoded to more than the configured cap
    |   +-- UnreadablePoint    the server cannot serialise a stored point (KairosDB's NaN)
    |   +-- CountMismatch      the rows read differ from the source's own count of a past day
    +-- ArchiveError           the archive could not be written or read back (manifest, checksum,
        |                      or an OS error: read-only, disk full, name too long)
        +-- SourceShrank       the source now has fewer rows than the archived day: kept the
        |                      archived file; rerun with replace to overwrite it
        +-- ContentChanged     the source gives as many rows as the archived day, but other
        |                      values: kept the archived file; rerun with replace to take them
        +-- ArchiveLocked      another process is archiving the same metric-day

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any

from dxt_core.masking import scrub


class DxtError(Exception):
    """Base class of every error raised by dxt_core.

    ``run_wide``: this error fails every unit of a run the same way (the archive's days are
    cut in another zone, the archive root cannot hold an archive): a run stops at the first.

    A message never shows a registered secret or a quoted credential
    (:func:`dxt_core.masking.scrub`), whatever text of a server it quotes.
    """

    run_wide: bool = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class ConfigError(DxtError, ValueError):
    """A setting, environment variable or connection field is wrong or missing."""


class CatalogError(ConfigError):
    """A catalog file is malformed. The message names the file and line."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(f"{where}: {problem}")


class SourceError(DxtError):
    """A backend request failed. ``url`` never contains credentials."""

    retryable = False

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        self.message = message  # without the status and URL: for a message that wraps it
        self.url = url
        self.status = status
        parts = [message]
        if status is not None:
            parts.append(f"HTTP {status}")
        if url:
            parts.append(f"from {url}")
        super().__init__(" | ".join(parts))


class SourceUnavailable(SourceError):
    """Transient failure that persisted through every retry; rerun the task later."""

    retryable = True


class RateLimited(SourceUnavailable):
    """The server, or a reverse proxy in front of it, limits the request rate (HTTP 429, or
    503 with ``Retry-After``). Wait (``retry_after_s`` when the server said how long) and
    retry the same request; never read it as "window too large"."""

    def __init__(
        self,
        message: str,
        *,
        url: str = "",
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, url=url, status=status)
        self.retry_after_s = retry_after_s


class QueryRejected(SourceError):
    """The server refused the request itself (4xx or an error naming the query)."""


class WindowTooLarge(SourceError):
    """The server refused the time window as too large (point limit, memory, timeout)."""

    retryable = True


class AnswerTooLarge(SourceError):
    """One answer decoded to more bytes than the configured cap (``max_answer_bytes``)."""


class UnreadablePoint(SourceError):
    """The server cannot write a point it stores (KairosDB 1.2: ``NaN or Infinity:NaN data
    point=...``, HTTP 500); every query whose answer holds it fails the same way, so it is
    not retried: the window is split down to the point (a "hole" in the manifest)."""


class CountMismatch(SourceError):
    """The rows read for a past day differ from the source's own count of it.

    Attributes:
        rows: rows this run read (plus the points of its recorded holes).
        source_count: what the source's count query answered.
    """

    def __init__(self, message: str, *, rows: int, source_count: int, url: str = "") -> None:
        super().__init__(message, url=url)
        self.rows = rows
        self.source_count = source_count


class ArchiveError(DxtError):
    """The archive could not be written, or what is on disk does not match its manifest."""


class SourceShrank(ArchiveError):
    """A rerun read fewer rows than the archive holds for the day; the archive was kept.

    Attributes:
        archive_rows: rows of the archived file.
        source_rows: rows the source gave on this run (0 when it said "empty").
        path: the archived data file that was kept.
    """

    def __init__(self, message: str, *, archive_rows: int, source_rows: int, path: str) -> None:
        super().__init__(message)
        self.archive_rows = archive_rows
        self.source_rows = source_rows
        self.path = path


class ContentChanged(ArchiveError):
    """A rerun read as many rows as the archive holds, but other values; the archive was
    kept (rerun with ``replace`` to take the new content; the old file is kept in
    ``.versions/``).

    Attributes:
        rows: rows of the archived file (and of this run).
        archive_sha256: checksum of the archived file that was kept.
        source_sha256: checksum of what this run read.
        path: the archived data file that was kept.
    """

    def __init__(
        self, message: str, *, rows: int, archive_sha256: str, source_sha256: str, path: str
    ) -> None:
        super().__init__(message)
        self.rows = rows
        self.archive_sha256 = archive_sha256
        self.source_sha256 = source_sha256
        self.path = path


class ArchiveLocked(ArchiveError):
    """Another process holds the lock of the metric-day; ``holder`` says who (pid, host,
    start time) when it could be read."""

    def __init__(self, message: str, *, holder: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.holder = holder or {}


def run_wide(exc: BaseException) -> bool:
    """Whether ``exc`` would fail every unit of the run the same way, so the run stops at
    the first: the server refused the credentials (401, 403: asking for every metric-day
    again could lock the account), or an error that says so (``DxtError.run_wide``)."""
    if isinstance(exc, QueryRejected) and exc.status in (401, 403):
        return True
    return isinstance(exc, DxtError) and exc.run_wide
