"""The real servers for the Prometheus-family tests: one of each per session, loaded with
the same generated data (tests/integration/prometheus/data.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.prometheus import servers
from tests.integration.prometheus.servers import ServerProcess
from tests.integration.s3.conftest import bucket, s3_env, s3_server  # noqa: F401 (test_s3.py)


def _need(name: str) -> None:
    servers.binary(name)  # missing: skipped locally, a failure under CI


@pytest.fixture(scope="session")
def prom_blocks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("promtool")
    return servers.build_blocks(tmp_path_factory.mktemp("promtool"))


@pytest.fixture(scope="session")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, prom_blocks: Path
) -> Iterator[ServerProcess]:
    _need("prometheus")
    server = servers.start_prometheus(tmp_path_factory.mktemp("prometheus"), prom_blocks)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def victoriametrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    _need("victoria-metrics")
    server = servers.start_victoriametrics(tmp_path_factory.mktemp("victoriametrics"))
    yield server
    server.stop()


@pytest.hookimpl(tryfirst=True)  # before tests/tiers.py selects the tier by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the real Prometheus is ``slow``: the session's promtool backfill and TSDB
    take about 9 s to make and open (measured here), paid by whichever test comes first."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents and "prom_blocks" in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=[pytest.param("prometheus", marks=pytest.mark.slow), "victoriametrics"])
def server(request: pytest.FixtureRequest) -> ServerProcess:
    """Each test that takes ``server`` runs against both real servers (on Prometheus it is
    ``slow``: see :func:`pytest_collection_modifyitems`)."""
    s: ServerProcess = request.getfixturevalue(request.param)
    return s
