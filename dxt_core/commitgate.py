"""A run's commit gate: once a run has abandoned its units in flight, none of them commits.

A CLI run interrupted twice, or past its grace period, abandons the units still running
(threads cannot be stopped) and says so: "abandoned in flight, not archived". Without the
gate, a unit could still reach its commit while the summary was being printed (a slow
terminal, a pipe), and the day was archived after all. A run gives each unit's thread its
:class:`Gate` (:meth:`Gate.entered_by`); :meth:`Gate.close` stops every commit of the run that
has not begun (:class:`Abandoned`); the run then waits for the units whose commit began
(:attr:`Gate.committed`) and counts them as done: every day it calls abandoned is one no commit
touched. A commit outside a
run (an Airflow task, a library call) has no gate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dxt_core.errors import DxtError


class Abandoned(DxtError):
    """A commit that began after its run had abandoned it: nothing was changed."""


_CURRENT = threading.local()


class Gate:
    """The commits of one run's units."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False
        #: the units (their tokens, :meth:`entered_by`) that began a commit
        self.committed: set[object] = set()

    @contextmanager
    def entered_by(self, token: object = None) -> Iterator[None]:
        """The calling thread's commits, for the block, go through this gate; one that
        begins is noted in :attr:`committed` as ``token`` (the unit)."""
        _CURRENT.gate, _CURRENT.token = self, token
        try:
            yield
        finally:
            _CURRENT.gate = _CURRENT.token = None

    @contextmanager
    def _commit(self) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise Abandoned("the run was interrupted and abandoned this day: not committed")
            self._active += 1
            self.committed.add(getattr(_CURRENT, "token", None))
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """No commit of the run begins any more (those under way go on)."""
        with self._cond:
            self._closed = True


@contextmanager
def committing() -> Iterator[None]:
    """A day's commit, from its first change to the archive to its last, through the gate of
    the calling thread's run, if any.

    Raises:
        Abandoned: the run has abandoned its units (:meth:`Gate.close`); nothing changed.
    """
    gate: Gate | None = getattr(_CURRENT, "gate", None)
    if gate is None:
        yield
        return
    with gate._commit():
        yield
