"""Basic auth and TLS on the real Prometheus (``--web.config.file``: the exporter-toolkit's
``tls_server_config`` and ``basic_auth_users``); credentials never reach errors or manifests."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core.archive import Archive
from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
from dxt_core.backends.prometheus.catalog import CatalogEntry
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.source import PrometheusSource
from dxt_core.errors import QueryRejected, SourceError
from dxt_core.http import RetryPolicy
from tests.integration.prometheus import data, servers
from tests.integration.prometheus.servers import ServerProcess
from tests.services import self_signed_cert

pytestmark = pytest.mark.integration

PASSWORD = "s3cr3t-Pa55"
TEMP = CatalogEntry("node_temp_celsius", "node_temp_celsius")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, prom_blocks: Path) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("prom-tls")
    crt, key = self_signed_cert(work)
    web = work / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        f"basic_auth_users:\n  archiver: {servers.bcrypt_hash(PASSWORD)}\n"
    )
    s = servers.start_prometheus(
        work, prom_blocks, web_config=web, scheme="https", auth=("archiver", PASSWORD)
    )
    yield s
    s.stop()


def _conn(server: ServerProcess, **kw: object) -> PrometheusConnection:
    return PrometheusConnection(server.url, time_zone=data.TIME_ZONE, **kw)  # type: ignore[arg-type]


def test_basic_auth_over_tls_archives_the_day(secured: ServerProcess, tmp_path: Path) -> None:
    conn = _conn(secured, user="archiver", password=PASSWORD, verify_tls=False)
    with PrometheusSource(conn) as src:
        report = archive_prometheus_day(src, TEMP, dt.date(2024, 3, 31), Archive(tmp_path))
    assert report.rows == 3 * 23 * 240
    text = report.manifest.read_text()
    assert PASSWORD not in text and json.loads(text)["source_url"] == secured.url


def test_a_wrong_password_fails_at_once_without_showing_it(secured: ServerProcess) -> None:
    conn = _conn(secured, user="archiver", password="wrong-Pa55", verify_tls=False)
    with PrometheusSource(conn, retry=RetryPolicy(attempts=3, backoff_s=0)) as src:
        with pytest.raises(QueryRejected) as err:
            src.metric_names()
    assert err.value.status == 401 and "wrong-Pa55" not in str(err.value)
    assert "check the user name and password" in str(err.value)


def test_an_unverified_certificate_is_refused_by_default(secured: ServerProcess) -> None:
    conn = _conn(secured, user="archiver", password=PASSWORD)
    with PrometheusSource(conn, retry=RetryPolicy(attempts=1)) as src:
        with pytest.raises(SourceError) as err:
            src.metric_names()
    assert "TLS certificate check failed" in str(err.value)
    assert PASSWORD not in str(err.value)


def test_basic_auth_on_victoriametrics(tmp_path: Path) -> None:
    s = servers.start_victoriametrics(tmp_path / "vm", auth=("archiver", PASSWORD))
    try:
        good = _conn(s, user="archiver", password=PASSWORD)
        with PrometheusSource(good) as src:
            assert src.server().kind == "victoriametrics"
            report = archive_prometheus_day(src, TEMP, dt.date(2024, 10, 27), Archive(tmp_path))
        assert report.rows == 3 * 25 * 240
        bad = _conn(s, user="archiver", password="wrong-Pa55", flavor="victoriametrics")
        with PrometheusSource(bad, retry=RetryPolicy(attempts=1)) as src:
            with pytest.raises(QueryRejected) as err:
                src.metric_names()
        assert err.value.status == 401 and "wrong-Pa55" not in str(err.value)
    finally:
        s.stop()


def test_tls_on_victoriametrics(tmp_path: Path) -> None:
    crt, key = self_signed_cert(tmp_path)
    s = servers.start_victoriametrics(
        tmp_path / "vm", ["-tls", f"-tlsCertFile={crt}", f"-tlsKeyFile={key}"]
    )
    try:
        assert s.url.startswith("https://")
        with PrometheusSource(_conn(s, verify_tls=False)) as src:
            report = archive_prometheus_day(src, TEMP, dt.date(2024, 3, 30), Archive(tmp_path))
        assert report.rows == 3 * 24 * 240
        with PrometheusSource(_conn(s), retry=RetryPolicy(attempts=1)) as src:
            with pytest.raises(SourceError, match="TLS certificate check failed"):
                src.metric_names()
    finally:
        s.stop()
