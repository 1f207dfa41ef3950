"""Issue 19 against noida-db (an Elasticsearch 8.15 emulator) and the version stand-ins in
front of it: the server's own ``_count`` in every manifest, with ``_shards`` checked; and an
Elasticsearch >= 8.8 that leaves ``X-Elastic-Product`` out of its 403 still gets PIT paging.
"""

from __future__ import annotations

import json

import httpx
import pytest

from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.connection import elasticsearch_refusal
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats
from dxt_core.reconcile import archived_count
from tests.services import TlsFront
from tests.unit.collectd_es.test_collectd_es_cells import T0, T1


def test_the_manifest_holds_the_servers_own_count(noida_es, tmp_path):
    stats = ExportStats()
    with CollectdEsSource(CollectdEsConnection(noida_es.url)) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), Archive(tmp_path), stats=stats, num_nodes=16
        )
        again = src.count("disk", T0, T1)
    doc = json.loads(report.manifest.read_text())
    assert doc["rows"] == 7038
    assert doc["source_count"] == {
        "count": 7038,
        "method": "Elasticsearch _count with the export's query (_shards checked)",
    }
    assert archived_count(doc) == again.count == 7038  # the sample is that one hour


@pytest.mark.parametrize("flavour", ["elasticsearch-7.10.2", "opensearch-2.11.1"])
def test_count_through_other_versions(es_standin, tmp_path, flavour):
    standin = es_standin(flavour)
    stats = ExportStats()
    with CollectdEsSource(CollectdEsConnection(standin.url)) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), Archive(tmp_path), stats=stats, num_nodes=16
        )
    doc = json.loads(report.manifest.read_text())
    assert doc["source_count"]["count"] == doc["rows"] == 7038
    counts = [e for e in standin.log() if e.get("path", "").endswith("/_count")]
    assert len(counts) == 1 and counts[0]["status"] == 200
    assert counts[0]["params"] == {}  # _count takes no search-only parameter


def test_count_refuses_search_only_keys_as_elasticsearch_does(es_standin):
    standin = es_standin("elasticsearch-8.15.3")
    r = httpx.post(f"{standin.url}/cori-collectd-*/_count", json={"query": {}, "size": 0})
    assert r.status_code == 400 and "request does not support [size]" in r.text


def test_a_403_without_the_product_header_still_pages_with_pit(es_standin):
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    standin.faults(monitor_forbidden=True)
    r = httpx.get(standin.url, auth=("reader", "s3cr3t"))
    assert r.status_code == 403 and "x-elastic-product" not in r.headers  # 8.8 and later
    stats = ExportStats()
    conn = CollectdEsConnection(standin.url, user="reader", password="s3cr3t")
    with CollectdEsSource(conn, slices=2, page_size=3000) as src:
        n = sum(len(p) for p in src.iter_pages("disk", T0, T1, stats=stats))
        assert src.server().product == "elasticsearch"
    assert stats.mode == "pit" and n == 7038


def test_the_refusal_wording_tells_elasticsearch_from_opensearch():
    assert elasticsearch_refusal(
        "security_exception", "action [cluster:monitor/main] is unauthorized for user [reader]"
    )
    assert not elasticsearch_refusal(
        "security_exception",
        "no permissions for [cluster:monitor/main] and User [name=reader, backend_roles=[], "
        "requestedTenant=null]",
    )
    assert not elasticsearch_refusal("index_not_found_exception", "is unauthorized for user [x]")


def test_a_count_with_a_failed_shard_is_an_error_never_a_smaller_count():
    """A server answer faked over a real socket: ``_count`` with one of two shards failed."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from dxt_core.errors import SourceUnavailable

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer({"version": {"number": "8.15.3"}, "tagline": "You Know, for Search"})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(
                {"count": 3, "_shards": {"total": 2, "successful": 1, "skipped": 0, "failed": 1}}
            )

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with CollectdEsSource(CollectdEsConnection(url), max_retries=0) as src:
            with pytest.raises(SourceUnavailable) as ei:
                src.count("disk", T0, T1)
    finally:
        server.shutdown()
        server.server_close()
    assert "only 1 (+0 skipped) of 2 shards answered, 1 failed" in str(ei.value)


def test_reconcile_from_the_command_line(noida_es, tmp_path):
    import subprocess
    import sys

    stats = ExportStats()
    with CollectdEsSource(CollectdEsConnection(noida_es.url)) as src:
        archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), Archive(tmp_path), stats=stats, num_nodes=16
        )
    day = T0.date().isoformat()
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "coverage", "collectd-es", "--reconcile",
         "--url", noida_es.url, "--archive", str(tmp_path), "--families", "disk",
         "--start-day", day, "--end-day", day],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 equal" in out.stdout and "_count" in out.stdout


# --------------------------------------------------------------------------- --reconcile options


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory):
    """A server TLS context with a self-signed certificate for 127.0.0.1."""
    from tests.services import server_tls_context

    return server_tls_context(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def archived_hour(noida_es, tmp_path_factory):
    """An archive of the sample day's disk documents (noida-db, behind every stand-in)."""
    root = tmp_path_factory.mktemp("archive")
    stats = ExportStats()
    with CollectdEsSource(CollectdEsConnection(noida_es.url)) as src:
        archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), Archive(root), stats=stats, num_nodes=16
        )
    return root


@pytest.fixture
def reconcile(archived_hour, monkeypatch, capsys):
    """``dxt coverage collectd-es --reconcile --url URL OPTIONS...`` over the archived day:
    (exit status, stdout + stderr); no credentials in the environment unless set."""
    from dxt_core.backends.collectd_es.connection import ENV_PASSWORD, ENV_USER
    from dxt_core.cli import main

    for name in (ENV_USER, ENV_PASSWORD):
        monkeypatch.delenv(name, raising=False)
    day = T0.date().isoformat()

    def run(url: str, *options: str) -> tuple[int, str]:
        capsys.readouterr()
        rc = main(["coverage", "collectd-es", "--reconcile", "--url", url, "--archive",
                   str(archived_hour), "--families", "disk", "--start-day", day, "--end-day",
                   day, *options])  # fmt: skip
        out = capsys.readouterr()
        return rc, out.out + out.err

    return run


def counts_of(standin) -> list[dict]:
    return [e for e in standin.log() if e.get("path", "").endswith("/_count")]


def test_reconcile_counts_with_the_credentials_given_else_the_environment(
    es_standin, reconcile, monkeypatch
):
    """--user/--password reach the count (else PYTOKIO_ES_USER/PYTOKIO_ES_PASSWORD, each on
    its own, as the extract reads them); a wrong password is the count's 401, unechoed."""
    from dxt_core.backends.collectd_es.connection import ENV_PASSWORD, ENV_USER

    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    rc, out = reconcile(standin.url, "--user", "reader", "--password", "s3cr3t")
    assert rc == 0 and "1 equal" in out, out
    assert [e["status"] for e in counts_of(standin)] == [200]
    rc, out = reconcile(standin.url, "--user", "reader", "--password", "wrong")
    assert rc == 3 and "count FAILED" in out and "401" in out and "wrong" not in out, out
    monkeypatch.setenv(ENV_USER, "reader")
    monkeypatch.setenv(ENV_PASSWORD, "s3cr3t")
    rc, out = reconcile(standin.url)
    assert rc == 0 and "1 equal" in out, out
    monkeypatch.delenv(ENV_USER)
    rc, out = reconcile(standin.url, "--user", "reader")  # the password from the environment
    assert rc == 0 and "1 equal" in out, out
    monkeypatch.delenv(ENV_PASSWORD)
    rc, out = reconcile(standin.url, "--user", "reader")
    assert rc == 2 and "a user without a password: give --user and --password" in out, out


def reader_in_the_environment(monkeypatch) -> None:
    from dxt_core.backends.collectd_es.connection import ENV_PASSWORD, ENV_USER

    monkeypatch.setenv(ENV_USER, "reader")
    monkeypatch.setenv(ENV_PASSWORD, "s3cr3t")


def test_reconcile_counts_within_the_timeout_given(es_standin, reconcile, monkeypatch):
    """--timeout reaches the count: a count answered after 2 s is given up after 0.5 s and
    asked again (the default, 60 s, would have waited for it)."""
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    reader_in_the_environment(monkeypatch)
    standin.faults(slow_counts=[1], slow_s=2)
    rc, out = reconcile(standin.url, "--timeout", "0.5")
    assert rc == 0 and "1 equal" in out, out
    assert len(counts_of(standin)) == 2  # the first one timed out
    rc, out = reconcile(standin.url, "--timeout", "0")
    assert rc == 2 and "--timeout 0: give the request timeout in seconds, above 0" in out, out


def test_reconcile_over_tls_verifies_unless_no_verify_tls(
    es_standin, tls_context, reconcile, monkeypatch
):
    """--no-verify-tls reaches the count: the auth stand-in behind https with a self-signed
    certificate is refused by the certificate check, and counted with the option."""
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    reader_in_the_environment(monkeypatch)
    front = TlsFront(standin.url, tls_context)
    try:
        rc, out = reconcile(front.url)
        assert rc == 3 and "TLS certificate check failed" in out, out
        assert counts_of(standin) == []
        rc, out = reconcile(front.url, "--no-verify-tls")
        assert rc == 0 and "1 equal" in out, out
        assert [e["status"] for e in counts_of(standin)] == [200]
        rc, out = reconcile(front.url, "--no-verify-certs")  # pytokio's name, as the extract's
        assert rc == 0 and "1 equal" in out, out
        assert [e["status"] for e in counts_of(standin)] == [200, 200]
    finally:
        front.close()


@pytest.fixture
def extract(monkeypatch, capsys, tmp_path):
    """``dxt extract collectd-es --url URL`` of the sample hour's disk documents to JSON Lines
    with OPTIONS...: (exit status, stdout + stderr); no credentials in the environment."""
    from dxt_core.backends.collectd_es.connection import ENV_PASSWORD, ENV_USER
    from dxt_core.cli import main

    for name in (ENV_USER, ENV_PASSWORD):
        monkeypatch.delenv(name, raising=False)

    def run(url: str, *options: str) -> tuple[int, str]:
        capsys.readouterr()
        rc = main(["extract", "collectd-es", "--url", url, "--families", "disk", "--format",
                   "jsonl", "--out", str(tmp_path / "hits.jsonl.gz"), T0.isoformat(),
                   T1.isoformat(), *options])  # fmt: skip
        out = capsys.readouterr()
        return rc, out.out + out.err

    return run


def test_extract_over_tls_takes_no_verify_tls_and_pytokios_no_verify_certs(
    es_standin, tls_context, extract
):
    """Every backend's extract takes --no-verify-tls; collectd-es also pytokio's name."""
    standin = es_standin("elasticsearch-8.15.3")
    front = TlsFront(standin.url, tls_context)
    try:
        rc, out = extract(front.url)
        assert rc == 2 and "TLS certificate check failed" in out and "--no-verify-tls" in out
        for option in ("--no-verify-tls", "--no-verify-certs"):
            rc, out = extract(front.url, option)
            assert rc == 0 and "wrote" in out and "7038" in out, out
    finally:
        front.close()


def test_extract_takes_user_and_password_else_the_environment(es_standin, extract, monkeypatch):
    """--user/--password, as the reconcile and every other backend's extract take them; each
    else PYTOKIO_ES_USER/PYTOKIO_ES_PASSWORD; both or neither; never echoed."""
    from dxt_core.backends.collectd_es.connection import ENV_PASSWORD

    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    rc, out = extract(standin.url, "--user", "reader", "--password", "s3cr3t")
    assert rc == 0 and "7038" in out and "s3cr3t" not in out, out
    rc, out = extract(standin.url, "--user", "reader")
    assert rc == 2 and "a user without a password: give --user and --password" in out, out
    monkeypatch.setenv(ENV_PASSWORD, "s3cr3t")
    rc, out = extract(standin.url, "--user", "reader")  # the password from the environment
    assert rc == 0 and "7038" in out, out
