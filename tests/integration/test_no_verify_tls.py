"""``--no-verify-tls`` on every ``dxt extract`` that speaks HTTP to one server (Examon,
Kwollect, Prometheus's is tested on the real server): a simulator behind a TLS front with a
self-signed certificate is refused by the certificate check, with the advice naming the
option, and archived with it."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess
from tests.kwollect_sim import KwollectSimProcess
from tests.services import TlsFront, server_tls_context

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # about 3 s each, two dxt processes

DXT = str(Path(sys.executable).parent / "dxt")


def dxt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DXT, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    return server_tls_context(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def examon_front(examon_sim: SimulatorProcess, tls: ssl.SSLContext) -> Iterator[str]:
    front = TlsFront(examon_sim.url, tls)
    yield front.url
    front.close()


@pytest.fixture(scope="module")
def kwollect_front(tls: ssl.SSLContext) -> Iterator[str]:
    sim = KwollectSimProcess()
    front = TlsFront(sim.url, tls)
    yield front.url
    front.close()
    sim.stop()


def test_examon_extract_over_tls(examon_front: str, small_catalog: Path, tmp_path: Path) -> None:
    args = ["extract", "examon", "--url", examon_front, "--catalog", str(small_catalog)]
    args += ["--start-day", "2020-03-09", "--limit", "1", "--retries", "1"]
    refused = dxt(*args, "--archive", str(tmp_path / "a"))
    assert refused.returncode != 0
    assert "TLS certificate check failed" in refused.stderr + refused.stdout
    assert "--no-verify-tls" in refused.stderr + refused.stdout
    assert not list((tmp_path / "a").rglob("*.csv.gz"))
    done = dxt(*args, "--archive", str(tmp_path / "b"), "--no-verify-tls")
    assert done.returncode == 0, done.stderr
    (data,) = list((tmp_path / "b").rglob("*.csv.gz"))
    manifest = json.loads(
        data.with_name(data.name.replace(".csv.gz", ".manifest.json")).read_text()
    )
    assert manifest["rows"] > 0 and manifest["source_url"] == examon_front


def test_kwollect_extract_over_tls(kwollect_front: str, tmp_path: Path) -> None:
    args = ["extract", "kwollect", "--api-url", kwollect_front, "--clusters", "nancy/gros"]
    args += ["--metrics", "bmc_node_power_watt", "--start-day", "2024-11-26"]
    refused = dxt(*args, "--archive", str(tmp_path / "a"))
    assert refused.returncode != 0
    assert "TLS certificate check failed" in refused.stderr + refused.stdout
    done = dxt(*args, "--archive", str(tmp_path / "b"), "--no-verify-tls")
    assert done.returncode == 0, done.stderr + done.stdout
    assert list((tmp_path / "b").rglob("*.manifest.json"))
