"""Test tiers by marker (a pytest plugin; tests/conftest.py loads it).

The rule (README "Tests" says the same):

- **fast tier** (the default of ``pytest`` and ``./run test``): every test with none of the
  full-tier markers below. Unit tests and ``integration`` tests against our simulators
  belong here as long as each takes under 3 s (setup, call and teardown on this 2-core
  machine), so that the whole tier aims at under 2 minutes there.
- **full tier** (``./run test --all``, ``pytest --all``, what ``.ci/run`` runs): adds every
  test marked ``slow`` (over 3 s, or a real server that takes long to start), ``airflow``,
  ``postgres``, ``perf`` or ``browser``.

A test lands in its tier by its markers alone: mark a new test (or module) ``slow`` when it
takes over 3 s; the run's summary lists the fast-tier tests that took longer. The
selection applies to a run of the whole suite (no paths given): naming paths or node ids
(``pytest tests/airflow``, ``path::test``) runs what was named, and ``-m EXPR`` replaces it.

Order: the fast tier first, then the full tier by weight (slow, perf, airflow, postgres,
browser, alone add 1, 2, 4, 8, 16, 32), so the slowest tests (the demo, the production path,
the browser) run last; collection order is kept within a weight.

``--tier NAME`` runs one part of the suite: ``fast`` (no full-tier marker), ``light`` (``slow``
or ``perf`` but none of the servers-of-their-own markers), ``heavy`` (``airflow``,
``postgres`` or ``browser``: each starts Airflow, Celery or a browser of its own) or
``alone`` (marked ``alone``: the stacks whose timing a second stack beside them would bend,
the demo, the production path, the browser). ``./run test`` runs the fast tier in parallel
workers (pytest-xdist) and ``./run test --all`` runs the four parts one after the other:
fast and light in four workers, heavy in two (``--dist loadscope``: a module's tests run in
one worker, so a module-scoped server starts once), alone one at a time.
"""

from __future__ import annotations

import os

import pytest

FAST_LIMIT_S = 3.0
WEIGHTS = {"slow": 1, "perf": 2, "airflow": 4, "postgres": 8, "browser": 16, "alone": 32}
FULL_TIER = tuple(WEIGHTS)
# the markers of tests that start Airflow, Celery or a browser of their own
HEAVY = ("airflow", "postgres", "browser")
PARTS = ("fast", "light", "heavy", "alone")
#: pytest-timeout's limit for a test of the alone part that names none of its own
ALONE_TIMEOUT_S = 1800


class _State:
    deselected = 0
    selected = 0
    all_tiers = False
    over_limit: dict[str, float] = {}
    durations: dict[str, float] = {}
    part: str | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all",
        action="store_true",
        dest="dxt_all_tiers",
        help=f"run every tier: the fast tier and the tests marked {', '.join(FULL_TIER)} "
        "(a run of the whole suite without it or -m deselects those)",
    )
    parser.addoption(
        "--tier",
        choices=PARTS,
        dest="dxt_tier",
        help="run one part of the suite: fast (no full-tier marker), light (slow or perf "
        f"only), heavy (marked {', '.join(HEAVY)}, not alone), alone (marked alone)",
    )


def part_of(item: pytest.Item) -> str:
    names = {m.name for m in item.iter_markers()}
    if "alone" in names:
        return "alone"
    if names & set(HEAVY):
        return "heavy"
    return "light" if names & set(FULL_TIER) else "fast"


def weight(item: pytest.Item) -> int:
    names = {m.name for m in item.iter_markers()}
    return sum(w for name, w in WEIGHTS.items() if name in names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=weight)  # stable: collection order within a weight
    for item in items:
        # the stacks of the alone part bound their own waits (a backfill's runs, a refill's
        # retries, the demo's --timeout), and those add up past pyproject's 600 s on a loaded
        # machine: a test killed by the timeout says less than its own wait's message
        if item.get_closest_marker("alone") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(ALONE_TIMEOUT_S))
    part = config.getoption("dxt_tier")
    if part:
        _State.part, _State.all_tiers = part, False
        keep, drop = [], []
        for item in items:
            (keep if part_of(item) == part else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        _State.deselected, _State.selected = len(drop), len(keep)
        return
    _State.all_tiers = bool(
        config.getoption("dxt_all_tiers")
        or config.getoption("markexpr")
        # paths or node ids named on the command line: what was named runs
        or config.args_source != pytest.Config.ArgsSource.TESTPATHS
    )
    if _State.all_tiers:
        _State.selected = len(items)
        return
    keep, drop = [], []
    for item in items:
        (drop if weight(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _State.deselected, _State.selected = len(drop), len(keep)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if _State.part:
        return f"{_State.part} part: {_State.selected} tests ({_State.deselected} deselected)"
    if _State.all_tiers:
        return None
    return (
        f"fast tier: {_State.selected} tests; {_State.deselected} of the full tier (marked "
        f"{', '.join(FULL_TIER)}) deselected: ./run test --all runs every tier"
    )


def _limit(config: pytest.Config) -> float:
    """The fast-tier limit as measured in this run: with N parallel workers on C cores a test
    gets about C/N of a core, so its time is compared with the limit scaled by N/C."""
    try:
        workers = int(getattr(config.option, "numprocesses", 0) or 0)
    except ValueError:  # "auto" before xdist resolves it
        workers = os.cpu_count() or 1
    cores = os.cpu_count() or 1
    return FAST_LIMIT_S * max(1.0, workers / cores)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if any(name in report.keywords for name in FULL_TIER):
        return
    total = _State.durations.get(report.nodeid, 0.0) + report.duration
    _State.durations[report.nodeid] = total
    if report.when == "teardown":
        _State.over_limit[report.nodeid] = total


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    limit = _limit(config)
    over = {k: v for k, v in _State.over_limit.items() if v > limit}
    if not over:
        return
    terminalreporter.section("fast-tier tests over the limit")
    scaled = (
        f" ({FAST_LIMIT_S:.0f} s scaled to {limit:.1f} s for {config.option.numprocesses} "
        f"workers on {os.cpu_count()} cores)"
        if limit > FAST_LIMIT_S
        else ""
    )
    terminalreporter.write_line(
        f"{len(over)} test(s) without a full-tier marker took over "
        f"{FAST_LIMIT_S:.0f} s{scaled} (setup + call + teardown); mark them slow (README, Tests):"
    )
    for nodeid, secs in sorted(over.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {secs:6.1f} s  {nodeid}")
