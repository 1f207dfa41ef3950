"""Many (parts, day) units from the command line, the way every backend's CLI runs them.

* A unit whose manifest says archived (or empty) and whose file still has the manifest's size
  is skipped, as dxt_examon resumed from its follow files; ``--refetch`` runs it again, and
  ``--replace`` also lets a rerun that reads fewer rows than the archive replace it (the
  replaced file is kept in ``.versions/``).
* Units run in a thread pool; a failure of one unit, whatever it is, becomes that unit's
  ``FAILED`` line with a one-line cause and the others go on.
* The run ends with a summary line and exit status 0 (all done), 1 (some failed).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TextIO

from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.errors import DxtError


@dataclass(frozen=True)
class Unit:
    """One unit of a CLI run: its archive key and the call that archives it."""

    key: DayKey
    run: Callable[[], DayReport]
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or "/".join(self.key.parts)


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, enabled: bool | None = None):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()

    def step(self, ok: bool, label: str) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"{rate:.1f}/s failed={self.failed} {label[:40]:<40}"
        )
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def one_line(exc: BaseException) -> str:
    """A failure as one line: our own errors as they are, others with their type."""
    if isinstance(exc, DxtError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.filename:
        text = f"{type(exc).__name__}: {exc.strerror or exc} ({exc.filename})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def is_complete(archive: Archive, key: DayKey) -> bool:
    """True when ``key`` is archived (size matches its manifest) or recorded empty, and no
    unreadable window (``holes``, see dxt_core.reconcile) waits to be retried."""
    try:
        status, _ = archive.status(key)
        if status == "archived" and (archive.read_manifest(key) or {}).get("holes"):
            return False
    except DxtError:
        return False
    return status in ("archived", "empty")


def add_arguments(parser: Any, unit: str = "metric-days") -> None:
    """``--refetch`` and ``--replace``, the same in every backend's ``extract``."""
    parser.add_argument(
        "--refetch",
        action="store_true",
        help=f"fetch {unit} again even when the archive holds them complete",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="refetch, and let a source with fewer rows than the archive replace the archived "
        "file (kept in .versions/); without it such a day keeps the archive and fails",
    )


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Ask glibc's malloc for at most ``arenas`` arenas, unless ``MALLOC_ARENA_MAX`` is set.

    glibc gives threads their own arenas (up to 8 per core) and keeps freed memory in each:
    the fetching, writing and compressing threads of a few metric-days at once then hold
    10-20 MB more than their data (the 20-metric catalog day: 92-100 MB peak by default,
    77-85 MB with two arenas, four runs each; docs/performance.md). Elsewhere than glibc this
    does nothing.
    """
    import os

    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):  # not glibc
        return
    mallopt(-8, arenas)  # M_ARENA_MAX


def run_units(
    units: Sequence[Unit],
    archive: Archive,
    *,
    workers: int = 4,
    refetch: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Run ``units`` (skipping complete ones unless ``refetch``); print FAILED lines and a
    summary; return the exit status."""
    refetch = refetch or archive.replace
    todo = [u for u in units if refetch or not is_complete(archive, u.key)]
    if todo:
        limit_malloc_arenas()
    skipped = len(units) - len(todo)
    progress = Progress(len(todo), stream=err, enabled=None if not quiet else False)
    reports: list[DayReport] = []
    failures: list[tuple[Unit, str]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(u.run): u for u in todo}
        for fut in as_completed(futures):
            u = futures[fut]
            try:
                reports.append(fut.result())
                progress.step(True, u.label)
            except Exception as exc:  # one unit's failure must not stop the others
                failures.append((u, one_line(exc)))
                progress.step(False, u.label)
                if verbose and not isinstance(exc, DxtError):
                    traceback.print_exception(exc, file=err)
    rows = sum(r.rows for r in reports)
    size = sum(r.bytes for r in reports)
    empty = sum(1 for r in reports if r.status == "empty")
    skip = f", {skipped} already archived (skipped; --refetch to redo)" if skipped else ""
    print(
        f"archived {len(reports) - empty} metric-days ({rows} rows, {size} bytes), "
        f"{empty} empty, {len(failures)} failed{skip}, into {archive.root}",
        file=out,
    )
    for u, msg in sorted(failures, key=lambda f: (f[0].key.day, f[0].label)):
        print(f"FAILED {u.label} {u.key.day}: {msg}", file=err)
    return 1 if failures else 0
