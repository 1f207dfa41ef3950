"""noida-db (a local Elasticsearch 8.15 stand-in) for the collectd_es tests.

Import the fixtures into a test module (``from tests.noida_fixtures import noida_es``): one
server per test session on a free loopback port, loaded with the pytokio sample hour, stopped
(and reaped) at the end.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dxt_core.backends.collectd_es.simulator import (
    bulk_load,
    spawn_noida_elasticsearch,
    stop_process,
)

SAMPLE_JSON = (
    Path(__file__).resolve().parent / "data" / "pytokio" / "sample_collectdes-full.json.gz"
)


@dataclass
class NoidaEs:
    url: str
    sample_hits: int


def sample_hits() -> list[dict]:
    return [h for page in json.loads(gzip.decompress(SAMPLE_JSON.read_bytes())) for h in page]


@pytest.fixture(scope="session")
def noida_es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoidaEs]:
    proc, url = spawn_noida_elasticsearch(tmp_path_factory.mktemp("noida-db"))
    try:
        n = bulk_load(url, sample_hits())
        yield NoidaEs(url, n)
    finally:
        stop_process(proc)
