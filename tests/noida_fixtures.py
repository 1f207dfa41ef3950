"""noida-db (a local Elasticsearch 8.15 stand-in) for the collectd_es tests, and version
stand-ins in front of it (Elasticsearch 7.10/8.x/9.x, OpenSearch 1.x/2.x; see
``dxt_core.backends.collectd_es.simulator``).

Import the fixtures into a test module (``from tests.noida_fixtures import noida_es,
es_standin``): one noida-db per test session on a free loopback port, loaded with the
pytokio sample hour; stand-ins started on first use, one per (flavour, user), reset (no
faults, empty log) for every test that asks for one; all stopped (and reaped) at the end.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core import procs
from dxt_core.backends.collectd_es.simulator import (
    bulk_load,
    spawn_es_standin,
    spawn_noida_elasticsearch,
)

SAMPLE_JSON = (
    Path(__file__).resolve().parent / "data" / "pytokio" / "sample_collectdes-full.json.gz"
)


@dataclass
class NoidaEs:
    url: str
    sample_hits: int


@dataclass
class Standin:
    """A running stand-in: its URL, and its control endpoints."""

    url: str
    flavour: str

    def faults(self, **faults: Any) -> None:
        httpx.post(f"{self.url}/_standin/faults", json=faults).raise_for_status()

    def log(self) -> list[dict[str, Any]]:
        return httpx.get(f"{self.url}/_standin/log").json()["log"]


def sample_hits() -> list[dict]:
    return [h for page in json.loads(gzip.decompress(SAMPLE_JSON.read_bytes())) for h in page]


@pytest.fixture(scope="session")
def noida_es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoidaEs]:
    proc, url = spawn_noida_elasticsearch(tmp_path_factory.mktemp("noida-db"))
    try:
        n = bulk_load(url, sample_hits())
        yield NoidaEs(url, n)
    finally:
        procs.stop(proc)


@pytest.fixture(scope="session")
def _standins(noida_es: NoidaEs) -> Iterator[dict[tuple[str, str | None], tuple[Any, str]]]:
    running: dict[tuple[str, str | None], tuple[subprocess.Popen[str], str]] = {}
    try:
        yield running
    finally:
        for proc, _ in running.values():
            procs.stop(proc)


@pytest.fixture
def es_standin(
    noida_es: NoidaEs, _standins: dict[tuple[str, str | None], tuple[Any, str]]
) -> Callable[..., Standin]:
    """``es_standin("opensearch-2.11.1", user=None, password=None)`` -> a reset stand-in."""

    def get(flavour: str, user: str | None = None, password: str | None = None) -> Standin:
        key = (flavour, user)
        if key not in _standins:
            _standins[key] = spawn_es_standin(noida_es.url, flavour, user=user, password=password)
        standin = Standin(_standins[key][1], flavour)
        standin.faults()
        return standin

    return get
