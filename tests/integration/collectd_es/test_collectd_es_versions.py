"""Contract tests: collectd_es against Elasticsearch 7.10/8.x/9.x and OpenSearch 1.x/2.x as
they behave. Each server is the version stand-in (``dxt_core.backends.collectd_es.simulator``,
a separate process) in front of noida-db; each test names the upstream file whose behaviour
it encodes. The stand-in refuses what the real server refuses, so the behaviour we had before
(elasticsearch-py 9 headers, no partial-result checks, the first PIT id kept, hits taken as
sent) fails these tests.
"""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats
from dxt_core.cli import main
from dxt_core.errors import QueryRejected, SourceError, SourceUnavailable
from tests.unit.collectd_es.test_collectd_es_cells import T0, T1, assert_same_as_pytokio

pytestmark = pytest.mark.integration

#: what elasticsearch-py 9 sends on every request (elastic/elasticsearch-py
#: elasticsearch/_sync/client/_base.py: application/json rewritten to the vendor type with
#: compatible-with=<client major>); the 9.x client is what elasticsearch>=8,<10 installs
PY9_HEADERS = {
    "Accept": "application/vnd.elasticsearch+json; compatible-with=9",
    "Content-Type": "application/vnd.elasticsearch+json; compatible-with=9",
}

#: flavour -> the paging the export must choose
MODES = {
    "elasticsearch-7.10.2": "scroll",  # PIT without a tiebreaker before 7.12
    "elasticsearch-8.15.3": "pit",
    "elasticsearch-9.1.0": "pit",
    "opensearch-1.3.20": "scroll",  # no PIT before 2.4
    "opensearch-2.11.1": "pit-keyset",  # PIT, but no _shard_doc before 3.3
}


def export_ids(url: str, stats: ExportStats, columnar: bool = False, **kw) -> list[str]:
    kw.setdefault("slices", 3)
    kw.setdefault("page_size", 700)
    with CollectdEsSource(CollectdEsConnection(url), **kw) as src:
        ids = [h["_id"] for p in src.iter_pages("disk", T0, T1, stats=stats, columnar=columnar) for h in p]  # fmt: skip
        assert src.open_contexts == 0
    return ids


def requests_of(log: list[dict]) -> list[dict]:
    return [e for e in log if "method" in e]


# --------------------------------------------------------------------------- headers


def test_es8_refuses_what_elasticsearch_py_9_sends(es_standin):
    """RestCompatibleVersionHelper.java (elastic/elasticsearch): ES 8 accepts compatible-with
    8 or 7; the 9.x client's headers get 400 media_type_header_exception, on GET / too."""
    standin = es_standin("elasticsearch-8.15.3")
    r = httpx.post(f"{standin.url}/cori-collectd-*/_search", json={"size": 1}, headers=PY9_HEADERS)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "media_type_header_exception"
    assert err["caused_by"]["reason"].startswith(
        "Accept version must be either version 8 or 7, but found 9."
    )
    r = httpx.get(standin.url, headers={"Accept": PY9_HEADERS["Accept"]})
    assert r.status_code == 400 and "found 9" in r.text
    # a request without a version (what we send) is the server's own version
    r = httpx.post(f"{standin.url}/cori-collectd-*/_search", json={"size": 1})
    assert r.status_code == 200


def test_es9_refuses_compatible_with_7(es_standin):
    """RestCompatibleVersionHelper.java / RestApiVersion.java: ES 9 accepts 9 or 8."""
    standin = es_standin("elasticsearch-9.1.0")
    h7 = {k: v.replace("=9", "=7") for k, v in PY9_HEADERS.items()}
    r = httpx.post(f"{standin.url}/cori-collectd-*/_search", json={"size": 1}, headers=h7)
    assert r.status_code == 400
    assert "either version 9 or 8, but found 7" in r.json()["error"]["caused_by"]["reason"]
    assert httpx.post(f"{standin.url}/cori-collectd-*/_search", json={"size": 1}, headers=PY9_HEADERS).status_code == 200  # fmt: skip


@pytest.mark.parametrize(
    "flavour", ["elasticsearch-7.10.2", "opensearch-1.3.20", "opensearch-2.11.1"]
)
def test_older_servers_refuse_the_vendor_content_type(es_standin, flavour):
    """RestController.java (ES <= 7.10, OpenSearch), sendContentTypeErrorMessage: a vendor
    Content-Type is unknown there: HTTP 406 (elastic/elasticsearch-py#2422)."""
    standin = es_standin(flavour)
    r = httpx.post(f"{standin.url}/cori-collectd-*/_search", json={"size": 1}, headers=PY9_HEADERS)
    assert r.status_code == 406
    assert r.json() == {
        "error": f"Content-Type header [{PY9_HEADERS['Content-Type']}] is not supported",
        "status": 406,
    }


@pytest.mark.parametrize("flavour", sorted(MODES))
@pytest.mark.parametrize("columnar", [False, True])
def test_every_version_is_read_whole_in_its_own_protocol(es_standin, flavour, columnar):
    """MainResponse.java (GET / of each server) and, by version: RestOpenPointInTimeAction.java
    (ES >= 7.10), the _shard_doc tiebreaker (ES >= 7.12), RestCreatePitAction.java (OpenSearch
    >= 2.4). Every document once, contexts closed, every request in plain application/json."""
    standin = es_standin(flavour)
    stats = ExportStats()
    ids = export_ids(standin.url, stats, columnar=columnar)
    assert len(ids) == len(set(ids)) == 7038
    assert stats.mode == MODES[flavour]
    product, number = flavour.split("-")
    assert (
        stats.server
        == f"{'Elasticsearch' if product == 'elasticsearch' else 'OpenSearch'} {number}"
    )
    log = standin.log()
    for e in requests_of(log):
        assert e["status"] < 400, e
        assert e["accept"] == "application/json"
        assert e["content_type"] in (None, "application/json")
    if stats.mode.startswith("pit"):
        opened = [
            e
            for e in requests_of(log)
            if e["method"] == "POST" and e["path"].endswith(("/_pit", "/point_in_time"))
        ]
        closed = [e["closed_pit"] for e in log if "closed_pit" in e]
        assert len(opened) == 1 and len(closed) == 1


def test_the_export_through_es8_meets_the_correctness_bar(es_standin, tmp_path):
    out = tmp_path / "cori.hdf5"
    standin = es_standin("elasticsearch-8.15.3")
    rc = main(["extract", "collectd-es", "--url", standin.url, "--families", "disk",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert_same_as_pytokio(out)


# --------------------------------------------------------------------------- point in time


def test_a_400_is_not_read_as_no_point_in_time(es_standin):
    """Only an answer saying the endpoint does not exist means "no PIT" (RestController.java:
    "no handler found for uri"). A refusal of what we sent (here TimeValue.java refusing a
    keep-alive) is an error, not a reason to try scrolls."""
    standin = es_standin("elasticsearch-8.15.3")
    with pytest.raises(QueryRejected) as exc:
        export_ids(standin.url, ExportStats(), keep_alive="2x")
    assert "opening a point in time" in str(exc.value) and "parse_exception" in str(exc.value)
    assert not [e for e in requests_of(standin.log()) if "scroll" in e["params"]]


def test_the_most_recent_pit_id_is_used_and_closed(es_standin):
    """Elastic's open point in time API documentation: each search may return another PIT id;
    always use the most recent. The stand-in rotates ids and refuses stale ones (404)."""
    standin = es_standin("elasticsearch-9.1.0")
    standin.faults(rotate_pit=True)
    stats = ExportStats()
    ids = export_ids(standin.url, stats, slices=1, page_size=500)
    assert len(ids) == len(set(ids)) == 7038
    assert stats.resumed == 0  # no stale id was refused
    log = standin.log()
    used = [e["pit"] for e in requests_of(log) if "pit" in e]
    assert len(set(used)) == len(used) > 5  # a new id for every page
    assert [e["closed_pit"] for e in log if "closed_pit" in e] == [f"pit{int(used[-1][3:]) + 1}"]


def test_the_most_recent_scroll_id_is_used(es_standin):
    """RestSearchScrollAction.java and the scroll documentation: only the most recently
    received _scroll_id may be used."""
    standin = es_standin("opensearch-1.3.20")
    standin.faults(rotate_scroll=True)
    stats = ExportStats()
    ids = export_ids(standin.url, stats, slices=2, page_size=500)
    assert len(ids) == len(set(ids)) == 7038 and stats.resumed == 0
    log = standin.log()
    assert all(e["status"] < 400 for e in requests_of(log))
    used = {e["scroll_id"] for e in log if "scroll_id" in e}
    assert len(used) > 5 and len({e["cleared_scroll"] for e in log if "cleared_scroll" in e}) == 2


def test_slices_are_time_ranges_not_elasticsearch_slices(es_standin):
    """SliceBuilder.java: Elasticsearch slices go to shards first (shardRequestIndex %
    max), so a reopened context over another set of shards holds other documents. Our
    slices are @timestamp ranges: no request carries a slice."""
    standin = es_standin("elasticsearch-8.15.3")
    ids = export_ids(standin.url, ExportStats(), slices=4, page_size=400)
    assert len(ids) == len(set(ids)) == 7038
    searches = [e for e in requests_of(standin.log()) if "slice" in e]
    assert searches and not any(e["slice"] for e in searches)


# --------------------------------------------------------------------------- partial results


def test_partial_pages_are_refused_by_the_server_and_asked_again(es_standin):
    """allow_partial_search_results=false (search parameter since 6.3): a shard failure fails
    the search (SearchPhaseExecutionException "Partial shards failure", 503) instead of a page
    missing that shard's hits; the 503 is retried. Without the parameter the stand-in answers
    the page with _shards.failed = 1 and half the hits."""
    standin = es_standin("elasticsearch-8.15.3")
    standin.faults(partial_pages=[2, 5])
    ids = export_ids(standin.url, ExportStats())
    assert len(ids) == len(set(ids)) == 7038
    searches = [e for e in requests_of(standin.log()) if e["path"].endswith("_search")]
    assert searches and all(
        e["params"].get("allow_partial_search_results") == "false" for e in searches
    )
    assert sum(e["status"] == 503 for e in searches) == 2


@pytest.mark.parametrize("flavour", ["elasticsearch-9.1.0", "opensearch-2.11.1"])
def test_a_partial_pit_page_is_asked_again(es_standin, flavour):
    """elasticsearch-py helpers/actions.py scan(): successful + skipped < total is an error
    (ScanError). A server that answers partially anyway: the same PIT request is sent again."""
    standin = es_standin(flavour)
    standin.faults(partial_pages=[3], partial_ignores_param=True)
    stats = ExportStats()
    ids = export_ids(standin.url, stats)
    assert len(ids) == len(set(ids)) == 7038
    assert stats.partial_retries == 1 and stats.resumed == 0


@pytest.mark.parametrize("flavour", ["elasticsearch-9.1.0", "opensearch-2.11.1"])
def test_a_partial_pit_page_is_asked_again_with_the_pit_id_it_carried(es_standin, flavour):
    """A partial answer carries a PIT id too, and only the most recent one is accepted (the
    stand-in rotates ids and refuses stale ones with 404): the page is asked again with the
    partial answer's id, so no resume (a reopened PIT) is spent on it."""
    standin = es_standin(flavour)
    standin.faults(partial_pages=[3, 5], partial_ignores_param=True, rotate_pit=True)
    stats = ExportStats()
    ids = export_ids(standin.url, stats, slices=1, page_size=500)
    assert len(ids) == len(set(ids)) == 7038
    assert stats.partial_retries == 2 and stats.resumed == 0
    searches = [e for e in requests_of(standin.log()) if "pit" in e]
    assert searches and all(e["status"] == 200 for e in searches)
    assert len({e["pit"] for e in searches}) == len(searches)  # each the newest id, once
    opened = [e for e in requests_of(standin.log()) if "point_in_time" in e["path"] or e["path"].endswith("/_pit")]  # fmt: skip
    assert sum(e["method"] == "POST" for e in opened) == 1  # the PIT was never reopened


def test_a_partial_scroll_page_restarts_the_slice(es_standin):
    """Scroll pages report shard failures in _shards (allow_partial_search_results is not a
    scroll parameter: RestSearchScrollAction.java); a scroll cannot ask for the same page
    again, so the slice restarts at its last timestamp."""
    standin = es_standin("opensearch-1.3.20")
    standin.faults(partial_pages=[2])  # page 1 opens the scroll, page 2 continues it
    stats = ExportStats()
    ids = export_ids(standin.url, stats, slices=1, page_size=1000)
    assert len(ids) == len(set(ids)) == 7038
    assert stats.resumed == 1
    for e in requests_of(standin.log()):
        if e["path"] == "/_search/scroll":  # unknown parameters there are a 400
            assert "allow_partial_search_results" not in e["params"]


@pytest.mark.slow  # 4 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_persistent_partial_answers_fail_and_write_nothing(es_standin, tmp_path, capsys):
    standin = es_standin("elasticsearch-8.15.3")
    standin.faults(partial_pages=list(range(1, 200)), partial_ignores_param=True)
    with pytest.raises(SourceUnavailable, match=r"only 1 \(\+0 skipped\) of 2 shards"):
        export_ids(standin.url, ExportStats(), slices=1, max_retries=1)
    standin.faults(partial_pages=list(range(1, 200)), partial_ignores_param=True)
    out = tmp_path / "x.hdf5"
    rc = main(["extract", "collectd-es", "--url", standin.url, "--families", "disk", "--slices", "1",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16", "--out", str(out)])  # fmt: skip
    assert rc == 4 and not out.exists()  # 4: the server (its shards) unavailable
    assert not list(tmp_path.iterdir())
    assert "shards" in capsys.readouterr().err


# --------------------------------------------------------------------------- answers


def test_hits_outside_the_window_are_dropped_and_counted(es_standin, tmp_path, capsys):
    """A server or proxy that answers more than the range asked for (here a hit an hour
    before the window): dropped, counted in the report and the manifest, never archived."""
    from dxt_core.archive import Archive

    standin = es_standin("elasticsearch-8.15.3")
    standin.faults(outside_pages=[1])
    out = tmp_path / "hits.jsonl.gz"
    rc = main(["extract", "collectd-es", "--url", standin.url, "--families", "disk", "--format", "jsonl",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert "1 documents outside the window dropped" in capsys.readouterr().err
    docs = [json.loads(x) for x in gzip.decompress(out.read_bytes()).splitlines()]
    assert len(docs) == 7038 and not [d for d in docs if d["_id"].startswith("stray")]

    standin.faults(outside_pages=[1])
    stats = ExportStats()
    archive = Archive(tmp_path / "archive")
    with CollectdEsSource(CollectdEsConnection(standin.url)) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), archive, stats=stats, num_nodes=16
        )
    assert report.rows == 7038
    manifest = json.loads(report.manifest.read_text())
    assert manifest["rows"] == 7038 and manifest["export"]["outside_window"] == 1


def test_a_hit_without_sort_values_is_named(es_standin, tmp_path, capsys):
    """Issue 12.15: a malformed hit said "reading disk slice 0: 'sort'". The error names the
    slice, the document and the missing field."""
    standin = es_standin("elasticsearch-8.15.3")
    standin.faults(no_sort_pages=[1])
    with pytest.raises(SourceError) as exc:
        export_ids(standin.url, ExportStats(), slices=1)
    msg = str(exc.value)
    assert "disk slice 0" in msg and "has no 'sort' values" in msg and "_id AWBO" in msg
    standin.faults(no_sort_pages=[1])
    out = tmp_path / "x.hdf5"
    rc = main(["extract", "collectd-es", "--url", standin.url, "--families", "disk",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--num-nodes", "16", "--out", str(out)])  # fmt: skip
    assert rc == 2 and not out.exists()
    assert "has no 'sort' values" in capsys.readouterr().err


def test_an_empty_window_from_a_server_is_an_error_and_writes_nothing(es_standin, tmp_path, capsys):
    standin = es_standin("opensearch-2.11.1")
    out = tmp_path / "x.hdf5"
    # a day no test loads (tests/airflow/test_collectd_es_dag.py adds 2017-12-14 to the
    # session's index)
    args = ["extract", "collectd-es", "--url", standin.url, "2017-11-02T08:00:00",
            "2017-11-02T09:00:00", "--num-nodes", "16", "--out", str(out)]  # fmt: skip
    assert main(args) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "no disk/cpu/memory document in [2017-11-02T08:00:00+00:00" in err
    assert standin.url in err and "--tz local" in err
