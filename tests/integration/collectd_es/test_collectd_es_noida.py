"""collectd_es against a real ES-compatible server (noida-db): PIT, slices, scroll, expiry,
the correctness bar through the client; auth against a fake server's answers."""

from __future__ import annotations

import json
import time

import httpx
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


@pytest.mark.slow  # 5 s measured on the shared 2-core machine (fast tier: < 3 s)
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
@pytest.mark.slow  # 24 s measured on the shared 2-core machine (fast tier: < 3 s)
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
    with source(noida_es.url, slices=2, page_size=100) as src:
        pages = src.iter_pages("disk", T0, T1)
        next(pages)
        with src._open_lock:
            pit_ids = {p.id for p in src._open_pits}
        assert pit_ids
        pages.close()
        assert src.open_contexts == 0
    for pit in pit_ids:
        r = httpx.post(
            f"{noida_es.url}/_search", json={"pit": {"id": pit, "keep_alive": "1m"}, "size": 1}
        )
        assert r.status_code == 404 and "search_context_missing" in r.text


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
# through the version stand-in with --user: it answers 401 security_exception like an
# Elasticsearch with security enabled, and 403 on GET / for a user without the monitor
# privilege when asked to.


def test_basic_auth_from_pytokio_environment(es_standin):
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    env = {"PYTOKIO_ES_USER": "reader", "PYTOKIO_ES_PASSWORD": "s3cr3t"}
    conn = CollectdEsConnection.from_env(standin.url, env=env)
    with CollectdEsSource(conn, slices=1, page_size=5000) as src:
        n = sum(len(p) for p in src.iter_pages("disk", T0, T1))
    assert n == 7038
    requests = [e for e in standin.log() if "method" in e]
    assert requests and all(e["status"] < 400 for e in requests)  # none was refused


def test_wrong_password_is_a_clear_error_without_the_secret(es_standin, caplog):
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    env = {"PYTOKIO_ES_USER": "reader", "PYTOKIO_ES_PASSWORD": "wrong-pw"}
    conn = CollectdEsConnection.from_env(standin.url, env=env)
    with CollectdEsSource(conn, slices=1, max_retries=0) as src:
        with pytest.raises(QueryRejected) as exc:
            list(src.iter_pages("disk", T0, T1))
    msg = str(exc.value)
    assert "PYTOKIO_ES_USER" in msg and "HTTP 401" in msg and standin.url in msg
    assert "wrong-pw" not in msg and "wrong-pw" not in caplog.text


def test_cli_reads_credentials_from_the_environment(es_standin, tmp_path, monkeypatch, capsys):
    standin = es_standin("elasticsearch-8.15.3", user="reader", password="s3cr3t")
    monkeypatch.setenv("PYTOKIO_ES_USER", "reader")
    monkeypatch.setenv("PYTOKIO_ES_PASSWORD", "s3cr3t")
    out = tmp_path / "x.hdf5"
    rc = main(["extract", "collectd-es", "--url", standin.url, "--families", "disk",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16", "--out", str(out)])  # fmt: skip
    assert rc == 0
    captured = capsys.readouterr()
    assert "s3cr3t" not in captured.out + captured.err
    assert_same_as_pytokio(out)


@pytest.mark.parametrize(
    ("flavour", "mode"), [("elasticsearch-8.15.3", "pit"), ("opensearch-2.11.1", "scroll")]
)
def test_a_user_without_the_monitor_privilege_still_reads(es_standin, flavour, mode):
    """GET / answers 403 to a user without ``cluster:monitor/main``. Elasticsearch >= 7.14
    still names itself in ``X-Elastic-Product`` (PIT); anything else is read with scrolls,
    which every version has."""
    standin = es_standin(flavour, user="reader", password="s3cr3t")
    standin.faults(monitor_forbidden=True)
    stats = ExportStats()
    conn = CollectdEsConnection(standin.url, user="reader", password="s3cr3t")
    with CollectdEsSource(conn, slices=2, page_size=3000) as src:
        ids = [h["_id"] for p in src.iter_pages("disk", T0, T1, stats=stats) for h in p]
        assert src.open_contexts == 0
    assert stats.mode == mode and len(ids) == len(set(ids)) == 7038


def test_server_without_pit_reads_with_scrolls_and_clears_them(es_standin):
    """OpenSearch 1.x has no point in time (RestCreatePitAction.java arrived in 2.4)."""
    standin = es_standin("opensearch-1.3.20")
    stats = ExportStats()
    with source(standin.url, slices=1, page_size=3000) as src:
        pages = list(src.iter_pages("disk", T0, T1, stats=stats))
        assert src.open_contexts == 0
    assert stats.mode == "scroll" and stats.server == "OpenSearch 1.3.20"
    assert sum(map(len, pages)) == 7038
    log = standin.log()
    assert not [
        e for e in log if "_pit" in e.get("path", "") or "point_in_time" in e.get("path", "")
    ]
    cleared = [e["cleared_scroll"] for e in log if "cleared_scroll" in e]
    scrolled = {e["scroll_id"] for e in log if "scroll_id" in e}
    assert cleared and set(cleared) >= scrolled  # every scroll used was cleared


def test_dxt_simulate_loads_the_pytokio_sample_into_noida_db(noida_es, capsys):
    """The documented command that loads the sample into a noida-db (ids kept, so loading the
    session's noida-db again replaces its documents, it does not add to them)."""
    from tests.noida_fixtures import SAMPLE_JSON

    def count() -> int:
        answer = httpx.post(f"{noida_es.url}/_count", json={"query": {"match_all": {}}}).json()
        return int(answer["count"])

    # the session's noida-db is shared: other tests may have added documents of their own
    before = count()
    assert before >= noida_es.sample_hits
    rc = main(["simulate", "collectd-es", "--upstream", noida_es.url, "--load", str(SAMPLE_JSON)])
    assert rc == 0
    assert f"loaded {noida_es.sample_hits} documents from {SAMPLE_JSON}" in capsys.readouterr().out
    assert count() == before
