"""The answer budget: the decoded answers all threads of a process hold, under one cap.

A reader (:meth:`dxt_core.http.HttpClient.exchange`) takes bytes from the budget *before* it
decodes them (one step of at most 1 MiB, the unused part given back), so what the process
holds in decoded answers (being read, or read and still in a worker's hands) never passes the
cap, whatever the number of workers. In a dxt run (the ``dxt`` command, an Airflow task)
glibc's mmap threshold is fixed at 1 MiB (:func:`tune_malloc`), so that a freed answer leaves
the process at once instead of staying in a thread's arena.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dxt_core.errors import SourceError
from dxt_core.urls import redact_url

if TYPE_CHECKING:
    import httpx

_INFLATE: Any = zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
try:  # ISA-L inflates gzip answers two to three times faster than zlib (same API)
    from isal import isal_zlib as _INFLATE

    _INFLATE_ERRORS = (zlib.error, _INFLATE.error)
except ImportError:  # pragma: no cover - isal is a dependency; zlib if it is missing
    pass

#: Decoded bytes produced per inflate call: the steps in which answers take their budget.
_INFLATE_STEP = 1 << 20


class Deadline(Exception):
    """The attempt's deadline passed while this reader waited for the budget (or read)."""


class TooBig(Exception):
    """The answer alone is larger than the cap."""


class Yield(Exception):
    """This reader gives its share of the answer budget to an older one, and asks again."""

    def __init__(self, oldest: int) -> None:
        super().__init__(oldest)
        self.oldest = oldest


class AnswerBudget:
    """The bytes of decoded answers held by all threads of the process together.

    Each reader takes its bytes from the budget before it decodes them (:meth:`take` a step,
    :meth:`give_back` what the step did not fill). Inside a unit of work
    (:func:`holding_answers`), a complete answer stays charged to the thread that asked for
    it while that thread works on it; outside one it leaves the budget once read. The charge
    is given back when the same thread starts its next request
    (:meth:`dxt_core.http.HttpClient.exchange`), when its unit of work ends
    (:func:`release_answers`, called by the CLI's runner,
    :func:`dxt_core.archive_day.archive_one_day` and the Airflow task), before it waits for
    other threads' fetches (:func:`dxt_core.prefetch.prefetched` and the sources' own
    threads), and when the thread has ended. An abandoned answer is given back at once. The
    limit is the reader's ``max_answer_bytes`` (one cap for the process, not one per
    worker). When the budget runs out, the oldest reader waits for the others; a younger
    one drops what it has read and asks the server again once the oldest is done
    (:class:`Yield`): no two readers ever wait for each other, and a thread that waits
    holds no charge of its own but the answer it is reading. An answer alone larger than
    the cap is "too large" (:class:`TooBig`).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: dict[int, int] = {}
        #: Complete answers, by the thread they were handed to.
        self._kept: dict[int, int] = {}
        self._next = 0
        self.used = 0
        #: The most the readers and the threads working on answers held at once (for tests
        #: and benchmarks).
        self.peak = 0

    def start(self) -> int:
        """A new reader: its ticket (tickets are in age order: the oldest is the lowest)."""
        with self._cond:
            ticket = self._next
            self._next += 1
            self._held[ticket] = 0
            return ticket

    def take(self, ticket: int, n: int, limit: int, deadline: float) -> None:
        """Charge ``n`` more bytes to reader ``ticket``, the process holding at most ``limit``.

        Raises:
            TooBig: the reader alone would pass ``limit``.
            Yield: the budget is spent and an older reader is reading: give way to it.
            Deadline: the oldest reader waited for the others until ``deadline``.
        """
        with self._cond:
            while self.used + n > limit:
                if self._kept and self._forget_ended():
                    continue
                mine = self._held[ticket]
                if self.used == mine:
                    raise TooBig  # alone, and still over the cap
                oldest = min(self._held)
                if ticket != oldest:
                    raise Yield(oldest)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Deadline
                self._cond.wait(min(left, 0.5))
            self._held[ticket] += n
            self.used += n
            if self.used > self.peak:
                self.peak = self.used

    def _forget_ended(self) -> bool:
        """Give back the charges of threads that have ended; whether there were any."""
        alive = {t.ident for t in threading.enumerate()}
        ended = [ident for ident in self._kept if ident not in alive]
        for ident in ended:
            self.used -= self._kept.pop(ident)
        if ended:
            self._cond.notify_all()
        return bool(ended)

    def give_back(self, ticket: int, n: int) -> None:
        """Reader ``ticket`` took ``n`` bytes more than it decoded."""
        with self._cond:
            self._held[ticket] -= n
            self.used -= n
            self._cond.notify_all()

    def end(self, ticket: int) -> None:
        """Reader ``ticket`` abandoned its answer: its bytes are given back."""
        with self._cond:
            self.used -= self._held.pop(ticket, 0)
            self._cond.notify_all()

    def keep(self, ticket: int) -> None:
        """Reader ``ticket`` completed its answer: inside a unit of work
        (:func:`holding_answers`) its bytes stay charged to this thread until
        :meth:`release`; outside one they are given back now."""
        if not getattr(_UNIT, "depth", 0):
            self.end(ticket)
            return
        ident = threading.get_ident()
        with self._cond:
            n = self._held.pop(ticket, 0)
            if n:
                self._kept[ident] = self._kept.get(ident, 0) + n

    def release(self) -> None:
        """This thread is done with the answers it asked for: their bytes are given back."""
        if not self._kept:  # the common case: no lock taken
            return
        ident = threading.get_ident()
        with self._cond:
            n = self._kept.pop(ident, 0)
            if n:
                self.used -= n
                self._cond.notify_all()

    def held_by_this_thread(self) -> int:
        """The bytes of complete answers charged to the calling thread."""
        return self._kept.get(threading.get_ident(), 0)

    def wait_until_done(self, ticket: int, timeout_s: float) -> None:
        """Wait until reader ``ticket`` has finished (at most ``timeout_s``)."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while ticket in self._held and (left := end - time.monotonic()) > 0:
                self._cond.wait(min(left, 0.5))


#: Free memory at the top of a glibc heap kept for reuse rather than given back. Fixing the
#: mmap threshold also fixes glibc's trim threshold at its default, 128 KiB, which gives back
#: and faults in again the heap's top many times a second while a day is written (measured at
#: 10,000 series: 1.4 million page faults, 4 CPU-seconds, fewer with 8 MiB).
TRIM_THRESHOLD = 8 << 20


_TUNED: list[bool] = []


def tune_malloc() -> None:
    """Make glibc give large freed buffers back to the system at once, in a process that is
    a dxt run: the ``dxt`` command and an Airflow task call it first; a library user (a
    notebook) does not get it, since it applies to the whole process (numpy's and pandas'
    large arrays then fault in their pages afresh each time: a loop over 8 MB arrays took
    0.48 s before and 0.80 s after, measured).

    glibc raises its mmap threshold to the size of the largest block freed (up to 32 MiB),
    after which answer buffers come from per-thread arenas that keep freed memory: four
    workers fetching 60 MiB answers under a 64 MiB budget then grew the process by 214-271
    MiB (tests/faults/test_never_change.py). A fixed threshold (1 MiB) keeps every large
    buffer in its own mapping, returned when freed: 66-67 MiB. No-op outside glibc, and after
    the first call.
    """
    if _TUNED:
        return
    _TUNED.append(True)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 1 << 20)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)


#: The answer budget of this process, shared by every :class:`dxt_core.http.HttpClient`.
ANSWER_BUDGET = AnswerBudget()


_UNIT = threading.local()


@contextlib.contextmanager
def holding_answers() -> Iterator[None]:
    """A unit of work in this thread: the answers it asks for stay charged to the answer
    budget until its next request, and all of them are given back when the unit ends."""
    _UNIT.depth = getattr(_UNIT, "depth", 0) + 1
    try:
        yield
    finally:
        _UNIT.depth -= 1
        if not _UNIT.depth:
            ANSWER_BUDGET.release()


def release_answers() -> None:
    """The calling thread is done with the answers it asked for (the end of a unit of work,
    or before it waits for other threads' fetches): their bytes leave the answer budget."""
    ANSWER_BUDGET.release()


def read_answer(resp: httpx.Response, cap: int, deadline: float) -> bytes:
    """The body of ``resp``, decoded as it streams in under the process's answer budget
    (bounded by ``cap`` even within one compressed chunk); stops at the deadline or the cap.

    Each step of at most 1 MiB is charged before it is decoded and what it did not fill is
    given back, so the decoded bytes in hand are always charged. The answer is one buffer
    (no list of chunks joined at the end, which held it twice).

    Raises:
        TooBig, Yield, Deadline: see :meth:`AnswerBudget.take`.
        SourceError: an encoding not asked for, or a body that does not decode.
    """
    if resp.is_stream_consumed:  # an answer built in memory (a test's fake server)
        if len(resp.content) > cap:
            raise TooBig
        return resp.content
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    inflate: Any
    if encoding in ("gzip", "x-gzip"):
        inflate = _INFLATE.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflate = _INFLATE.decompressobj()
    elif encoding in ("", "identity"):
        inflate = None
    else:
        raise SourceError(
            f"answer has Content-Encoding {encoding!r}, which was not asked for",
            url=redact_url(str(resp.url)),
        )
    buf = io.BytesIO()  # getvalue() hands its buffer over without a copy
    total = 0
    kept = False
    ticket = ANSWER_BUDGET.start()
    try:
        for raw in resp.iter_raw():
            if time.monotonic() > deadline:
                raise Deadline
            data = raw
            while data:
                if inflate is None:
                    out, data = data, b""
                    total += len(out)
                    if total > cap:
                        raise TooBig
                    ANSWER_BUDGET.take(ticket, len(out), cap, deadline)
                else:
                    step = min(cap - total, _INFLATE_STEP)
                    if step:
                        ANSWER_BUDGET.take(ticket, step, cap, deadline)
                    try:
                        out = inflate.decompress(data, step or 1)
                    except _INFLATE_ERRORS as exc:
                        raise SourceError(
                            f"answer is not valid {encoding} ({exc})",
                            url=redact_url(str(resp.url)),
                        ) from exc
                    data = inflate.unconsumed_tail
                    total += len(out)
                    if total > cap:
                        raise TooBig
                    if step > len(out):
                        ANSWER_BUDGET.give_back(ticket, step - len(out))
                if out:
                    buf.write(out)
                    del out
        body = buf.getvalue()
        ANSWER_BUDGET.keep(ticket)  # charged until this thread is done with it
        kept = True
        return body
    except BaseException:
        buf.close()  # free the partial answer now, not with the traceback
        raise
    finally:
        if not kept:
            ANSWER_BUDGET.end(ticket)
