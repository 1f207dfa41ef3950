"""The process's answer budget: answers stay charged while their thread works on them."""

from __future__ import annotations

import threading
import time

import pytest

from dxt_core.budget import _UNIT, AnswerBudget, Deadline, TooBig

CAP = 16


def _hold(budget: AnswerBudget, n: int, until: threading.Event, release: bool) -> None:
    """A worker that read an answer of ``n`` bytes and works on it until ``until``."""
    _UNIT.depth = 1  # in a unit of work (as holding_answers sets it)
    t = budget.start()
    budget.take(t, n, CAP, time.monotonic() + 5)
    budget.keep(t)
    until.wait(5)
    if release:
        budget.release()


def _holder(
    budget: AnswerBudget, n: int, release: bool
) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()
    th = threading.Thread(target=_hold, args=(budget, n, done, release))
    th.start()
    while budget.used < n:
        time.sleep(0.01)
    return th, done


def test_a_held_answer_stays_charged_until_its_thread_releases_it():
    budget = AnswerBudget()
    th, done = _holder(budget, 10, release=True)
    assert budget.used == 10  # read, and still in the worker's hands
    t = budget.start()
    threading.Timer(0.3, done.set).start()
    t0 = time.monotonic()
    budget.take(t, 10, CAP, time.monotonic() + 5)  # waits for the holder, then fits
    assert time.monotonic() - t0 >= 0.25
    assert budget.peak <= CAP
    budget.end(t)
    th.join()
    assert budget.used == 0


def test_an_ended_thread_keeps_no_charge():
    budget = AnswerBudget()
    th, done = _holder(budget, 10, release=False)
    done.set()
    th.join()
    t = budget.start()
    budget.take(t, 10, CAP, time.monotonic() + 5)  # the ended thread's charge is given back
    budget.end(t)
    assert budget.used == 0


def test_an_answer_over_the_cap_waits_for_the_others_then_is_too_large():
    budget = AnswerBudget()
    th, done = _holder(budget, 10, release=True)
    threading.Timer(0.2, done.set).start()
    t = budget.start()
    budget.take(t, 10, CAP, time.monotonic() + 5)
    with pytest.raises(TooBig):  # alone now, and still over the cap
        budget.take(t, 10, CAP, time.monotonic() + 5)
    budget.end(t)
    th.join()


def test_a_reader_waits_for_a_charge_never_given_back_no_longer_than_its_deadline():
    budget = AnswerBudget()
    th, done = _holder(budget, 10, release=True)
    t = budget.start()
    with pytest.raises(Deadline):
        budget.take(t, 10, CAP, time.monotonic() + 0.3)
    budget.end(t)
    done.set()
    th.join()
    assert budget.used == 0


def test_a_thread_gives_back_its_own_answers_before_asking_again():
    budget = AnswerBudget()
    _UNIT.depth = 1
    t = budget.start()
    budget.take(t, 10, CAP, time.monotonic() + 5)
    budget.keep(t)
    assert budget.held_by_this_thread() == 10
    budget.release()  # what HttpClient.exchange does first
    t = budget.start()
    budget.take(t, 10, CAP, time.monotonic() + 1)  # no wait for its own charge
    budget.end(t)
    _UNIT.depth = 0
    assert budget.used == 0


def test_outside_a_unit_an_answer_is_given_back_once_read():
    budget = AnswerBudget()
    t = budget.start()
    budget.take(t, 10, CAP, time.monotonic() + 5)
    budget.keep(t)
    assert budget.used == 0  # an idle thread (a server's, the scheduler's) keeps nothing
