"""collectd_es against a real ES-compatible server (noida-db): PIT, slices, scroll, expiry,
the correctness bar through the client; auth against a fake server's answers."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time

import numpy as np
import pytest

from dxt_core.backends.collectd_es.archive_day import es_pages, export_window
from dxt_core.backends.collectd_es.columnar_hits import ColumnarHits
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats
from dxt_core.backends.collectd_es.tokio_hdf5 import read_tokio_dataset
from dxt_core.cli import main
from dxt_core.errors import QueryRejected
from tests.unit.collectd_es.test_collectd_es_cells import T0, T1, assert_same_as_pytokio

pytestmark = pytest.mark.integration


def source(url: str, **kw) -> CollectdEsSource:
    return CollectdEsSource(CollectdEsConnection(url), **kw)


def export_ids(
    src: CollectdEsSource, stats: ExportStats, pause: float = 0.0, columnar: bool = False
) -> list[str]:
    ids: list[str] = []
    for page in src.iter_pages("disk", T0, T1, stats=stats, columnar=columnar):
        assert isinstance(page, ColumnarHits) == columnar
        ids.extend(page.ids() if isinstance(page, ColumnarHits) else (h["_id"] for h in page))
        time.sleep(pause)
    return ids


def test_sample_loaded(noida_es):
    assert noida_es.sample_hits == 7038


def test_correctness_bar_through_the_client(noida_es, tmp_path):
    out = tmp_path / "cori.hdf5"
    rc = main(["extract", "collectd-es", "--url", noida_es.url, "--index", "cori-collectd-*",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16",
               "--ssds-per-node", "4", "--slices", "3", "--page-size", "700", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert_same_as_pytokio(out)
    # the other families are there too, empty (the sample has disk documents only)
    cols, cpu, _ = read_tokio_dataset(out, "dataservers/cpuload")
    assert cols == [] and cpu.shape == (360, 0)


def test_hdf5_export_reads_columns_and_meets_the_correctness_bar(noida_es, tmp_path):
    """The HDF5-only export takes every page column-wise from the server, and the file is
    still pytokio's."""
    out, stats = tmp_path / "cori.hdf5", ExportStats()
    with source(noida_es.url, slices=2, page_size=600) as src:
        report = export_window(es_pages(src, stats), ["disk"], T0, T1, hdf5_path=out,
                               num_nodes=16)  # fmt: skip
    assert report.hits == 7038 and stats.pages >= 12
    assert report.build["columnar_pages"] == stats.pages
    assert_same_as_pytokio(out)


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("slices", [1, 4])
def test_pit_slices_read_every_document_once_and_close_the_pit(noida_es, slices, columnar):
    stats = ExportStats()
    with source(noida_es.url, slices=slices, page_size=500) as src:
        ids = export_ids(src, stats, columnar=columnar)
        assert src.open_contexts == 0
    assert stats.mode == "pit" and stats.slices == slices
    assert len(ids) == len(set(ids)) == 7038
    # one request per page, plus at most one empty answer per slice; nothing resumed
    assert stats.resumed == 0 and stats.pages <= stats.requests <= stats.pages + slices


def test_pages_come_in_a_fixed_order(noida_es):
    runs = []
    for columnar in (False, True, True):
        with source(noida_es.url, slices=3, page_size=400) as src:
            runs.append(export_ids(src, ExportStats(), columnar=columnar))
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("columnar", [False, True])
def test_scroll_fallback_reads_every_document_once_and_clears(noida_es, columnar):
    stats = ExportStats()
    with source(noida_es.url, slices=2, page_size=1000, use_pit=False) as src:
        ids = export_ids(src, stats, columnar=columnar)
        assert src.open_contexts == 0
    assert stats.mode == "scroll"
    assert len(ids) == len(set(ids)) == 7038


@pytest.mark.parametrize(("use_pit", "columnar"), [(True, False), (False, False), (False, True)])
def test_expired_context_resumes_without_restart_or_duplicates(noida_es, use_pit, columnar):
    stats = ExportStats()
    # the consumer is slower than the keep-alive: about one resume per page of a slice
    with source(noida_es.url, slices=2, page_size=500, keep_alive="1s", use_pit=use_pit,
                max_resumes=20) as src:  # fmt: skip
        ids = export_ids(src, stats, pause=1.6, columnar=columnar)
        assert src.open_contexts == 0
    assert stats.resumed >= 1
    assert len(ids) == len(set(ids)) == 7038
    # never restarted from zero: hardly more requests than pages
    assert stats.requests <= stats.pages + 2 * stats.slices + stats.resumed


def test_abandoned_export_closes_its_contexts(noida_es):
    from elasticsearch import NotFoundError

    with source(noida_es.url, slices=2, page_size=100) as src:
        pages = src.iter_pages("disk", T0, T1)
        next(pages)
        with src._open_lock:
            pit_ids = set(src._open_pits)
        assert pit_ids
        pages.close()
        assert src.open_contexts == 0
        for pit in pit_ids:
            with pytest.raises(NotFoundError):
                src.es.search(pit={"id": pit, "keep_alive": "1m"}, size=1)


def test_jsonl_through_the_client_equals_saved_hits(noida_es, tmp_path):
    import gzip

    from tests.noida_fixtures import sample_hits

    out = tmp_path / "hits.jsonl.gz"
    rc = main(["extract", "collectd-es", "--url", noida_es.url, "2017-12-13T08:00:00",
               "2017-12-13T09:00:00", "--format", "jsonl", "--out", str(out)])  # fmt: skip
    assert rc == 0
    docs = [json.loads(x) for x in gzip.decompress(out.read_bytes()).splitlines()]
    assert len(docs) == 7038
    ours = {d["_id"]: d["_source"] for d in docs}
    saved = {h["_id"]: h["_source"] for h in sample_hits()}
    assert ours.keys() == saved.keys()
    for i, src in saved.items():
        assert ours[i].keys() == src.keys()
        for k, v in src.items():
            # noida-db prints some doubles one ulp off (17 vs 16 significant digits)
            assert ours[i][k] == (pytest.approx(v, rel=1e-15) if isinstance(v, float) else v)


# --------------------------------------------------------------------------- auth
# noida-db accepts any credentials (it has no security), so authentication is checked
# against a small fake server that answers like Elasticsearch with security enabled.


class _FakeSecureEs(http.server.BaseHTTPRequestHandler):
    expected = "Basic " + base64.b64encode(b"reader:s3cr3t").decode()
    seen: list[str | None] = []
    cleared: list[object] = []
    pit_supported = True

    def log_message(self, *args):
        pass

    def _send(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        auth = self.headers.get("Authorization")
        self.seen.append(auth)
        if auth != self.expected:
            self._send(401, {"error": {"type": "security_exception", "reason": "unable to authenticate user [reader]"}, "status": 401})  # fmt: skip
            return
        if "/_pit" in self.path and not self.pit_supported:
            # what a server older than 7.10 answers: no such endpoint
            self._send(400, {"error": {"type": "illegal_argument_exception", "reason": f"request [{self.path}] contains unrecognized parameter"}, "status": 400})  # fmt: skip
        elif self.path.startswith("/_search/scroll"):
            if self.command == "DELETE":
                self.cleared.append(body.get("scroll_id"))
                self._send(200, {"succeeded": True, "num_freed": 1})
            else:
                self._send(200, {"_scroll_id": "scroll-1", "hits": {"hits": []}})
        elif "/_pit" in self.path and self.command == "POST":
            self._send(200, {"id": "pit-1"})
        elif self.path.startswith("/_pit"):
            self._send(200, {"succeeded": True, "num_freed": 1})
        elif "_search" in self.path:
            hits = []
            if "search_after" not in body:
                ts = int(T0.timestamp() * 1000)
                src = {"@timestamp": "2017-12-13T08:00:00.000Z", "hostname": "bb1", "plugin": "disk",
                       "plugin_instance": "nvme0n1", "collectd_type": "disk_octets", "read": 1.0, "write": 2.0}  # fmt: skip
                hits = [{"_index": "i", "_id": "a", "_source": src, "sort": [ts, 1]}]
            if "scroll=" in self.path:
                self._send(200, {"_scroll_id": "scroll-1", "hits": {"hits": hits}})
            else:
                self._send(200, {"pit_id": "pit-1", "hits": {"hits": hits}})
        else:
            self._send(404, {"error": "no handler"})

    do_GET = do_POST = do_DELETE = _handle


@pytest.fixture
def fake_secure_es():
    _FakeSecureEs.seen = []
    _FakeSecureEs.cleared = []
    _FakeSecureEs.pit_supported = True
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeSecureEs)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join()


def test_basic_auth_from_pytokio_environment(fake_secure_es):
    env = {"PYTOKIO_ES_USER": "reader", "PYTOKIO_ES_PASSWORD": "s3cr3t"}
    conn = CollectdEsConnection.from_env(fake_secure_es, env=env)
    with CollectdEsSource(conn, slices=1, page_size=10) as src:
        pages = list(src.iter_pages("disk", T0, T1))
    assert [h["_id"] for p in pages for h in p] == ["a"]
    assert set(_FakeSecureEs.seen) == {_FakeSecureEs.expected}


def test_wrong_password_is_a_clear_error_without_the_secret(fake_secure_es, caplog):
    env = {"PYTOKIO_ES_USER": "reader", "PYTOKIO_ES_PASSWORD": "wrong-pw"}
    conn = CollectdEsConnection.from_env(fake_secure_es, env=env)
    with CollectdEsSource(conn, slices=1, max_retries=0) as src:
        with pytest.raises(QueryRejected) as exc:
            list(src.iter_pages("disk", T0, T1))
    msg = str(exc.value)
    assert "PYTOKIO_ES_USER" in msg and "HTTP 401" in msg and fake_secure_es in msg
    assert "wrong-pw" not in msg and "wrong-pw" not in caplog.text


def test_cli_reads_credentials_from_the_environment(fake_secure_es, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTOKIO_ES_USER", "reader")
    monkeypatch.setenv("PYTOKIO_ES_PASSWORD", "s3cr3t")
    out = tmp_path / "x.hdf5"
    rc = main(["extract", "collectd-es", "--url", fake_secure_es, "--families", "disk",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "1", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert "s3cr3t" not in capsys.readouterr().out
    cols, reads, _ = read_tokio_dataset(out, "datatargets/readrates")
    assert cols == ["bb1:nvme0n1"] and reads[0, 0] == 1.0 and np.signbit(reads[1:, 0]).all()


def test_server_without_pit_falls_back_to_scroll_and_clears_it(fake_secure_es):
    _FakeSecureEs.pit_supported = False
    env = {"PYTOKIO_ES_USER": "reader", "PYTOKIO_ES_PASSWORD": "s3cr3t"}
    stats = ExportStats()
    conn = CollectdEsConnection.from_env(fake_secure_es, env=env)
    with CollectdEsSource(conn, slices=1, page_size=10) as src:
        pages = list(src.iter_pages("disk", T0, T1, stats=stats))
        assert src.open_contexts == 0
    assert stats.mode == "scroll"
    assert [h["_id"] for p in pages for h in p] == ["a"]
    assert _FakeSecureEs.cleared in (["scroll-1"], [["scroll-1"]])  # the scroll was cleared
