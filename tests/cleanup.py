"""Stop what a test run started, however the run ends (a pytest plugin; tests/conftest.py
loads it).

Fixtures start servers as processes (simulators, noida-db, redis-server, Airflow and its
Celery worker), most of them in sessions of their own, and create databases on the shared
PostgreSQL. pytest tears fixtures down on Ctrl-C, but not on SIGTERM (whose default action
ends the process at once), and a fixture interrupted before its ``yield`` has no teardown at
all. So:

- SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does: pytest's teardown runs.
- Once the session is finishing (teardown, after an interrupt or not), a further Ctrl-C,
  SIGTERM or SIGHUP does not break the teardown halfway: it makes every stop hurry
  (:func:`dxt_core.procs.hurry`: SIGKILL at once). A third one interrupts.
- After the teardown, every process still registered with :mod:`dxt_core.procs` (each with its
  session) is stopped and every database still registered with
  :func:`tests.services.track_database` is dropped; the terminal summary names them.
- At interpreter exit the same is done once more, for a run that ended another way.

A pytest-timeout in its default ``signal`` method fails the test and the teardown runs; the
``thread`` method ends the process with ``os._exit`` and nothing can be stopped, so it is not
used here.
"""

from __future__ import annotations

import atexit
import signal
import threading
from types import FrameType

import pytest

from dxt_core import procs
from tests.services import drop_tracked_databases

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    finishing = False
    late_signals = 0
    stopped: list[str] = []
    dropped: list[str] = []


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _State.finishing:
        _State.late_signals += 1
        procs.hurry()
        if _State.late_signals < 3:
            return
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def _clean_up() -> None:
    _State.stopped += procs.stop_tracked(untracked_children=True)
    _State.dropped += drop_tracked_databases()


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        # a run started with SIGINT ignored (a script's background job, some CI runners)
        # would pass that on to every process it starts, and a dxt run keeps an ignored
        # SIGINT ignored: the tests that stop one with Ctrl-C need it taken
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
    atexit.register(_clean_up)


@pytest.hookimpl(tryfirst=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_begins(session: pytest.Session) -> None:
    # before the fixtures' teardown (pytest's own sessionfinish does it)
    _State.finishing = True
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _interrupt)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # after every fixture's teardown: what is left was not stopped by its fixture
    _clean_up()


def _report_lines() -> list[str]:
    lines = []
    if _State.stopped:
        lines.append(f"cleanup: stopped {len(_State.stopped)} process(es) left running:")
        lines += [f"  {line}" for line in _State.stopped]
    if _State.dropped:
        lines.append(f"cleanup: dropped {len(_State.dropped)} database(s) left behind:")
        lines += [f"  {name}" for name in _State.dropped]
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _report_lines():
        terminalreporter.write_line(line)
    _State.stopped, _State.dropped = [], []


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _clean_up()  # a run whose teardown was itself interrupted
    lines = _report_lines()
    if lines:
        print("\n" + "\n".join(lines), flush=True)
