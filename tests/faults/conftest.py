"""Fixtures of the fault matrix: simulators as processes, the fault proxy in front of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.proxy import FaultProxy


@pytest.fixture
def examon_proxy(examon_sim) -> Iterator[FaultProxy]:
    """The fault proxy in front of the module's Examon simulator."""
    with FaultProxy(examon_sim.url) as proxy:
        yield proxy
