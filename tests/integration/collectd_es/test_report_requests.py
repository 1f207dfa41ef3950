"""A collectd_es metric-day's report gives the requests and retries of its export.

`airflow dags test dxt_collectd_es 2017-12-13` against noida-db reported "0 requests" (and
an XCom with ``'requests': 0``) while the day's manifest said ``export.requests: 3``: the
report's request statistics were never filled. They are the export's own counts, the ones
the manifest records under ``export`` (and, as every backend's, under ``requests``): each
search sent (a retried one once per attempt) and each other request (the day's ``_count``,
the point in time opened and closed), the searches asked again (transient HTTP failures,
partial pages, expired contexts) and the bytes received. Each test runs a real
export against noida-db (a separate process) or a version stand-in in front of it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from dxt_core.archive import Archive
from dxt_core.archive_day import DayReport
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.connection import EsClient
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats
from dxt_core.backends.collectd_es.tasks import TASKS
from dxt_core.cli import main
from dxt_core.http import RetryPolicy
from tests.unit.collectd_es.test_collectd_es_cells import T0

pytestmark = pytest.mark.integration


def manifest_of(report: DayReport) -> dict[str, Any]:
    return json.loads(report.manifest.read_text())


def assert_report_is_the_exports(report: DayReport) -> dict[str, Any]:
    """The report's (and its XCom's) request counts are those the manifest records."""
    doc = manifest_of(report)
    export = doc["export"]
    assert export["requests"] > 0
    # the server's GET / (each task asks it once), the day's _count, and the point in time
    # opened and closed (or each slice's scroll cleared)
    if export["mode"].startswith("pit"):
        assert export["other_requests"] == 4
    else:
        assert 2 <= export["other_requests"] <= 2 + export["slices"]
    s = report.stats
    assert s.requests == export["requests"] + export["other_requests"]
    assert s.retries == export["retries"] + export["partial_retries"] + export["resumed"]
    assert s.splits == 0  # collectd pages through a day: no window is ever split
    assert s.bytes_received == export["bytes_received"] > 0
    xcom = report.as_dict()
    assert (xcom["requests"], xcom["retries"]) == (s.requests, s.retries)
    assert f", {s.requests} request" in report.summary()
    # the request record every backend's manifest has (the coverage view shows it)
    assert {k: doc["requests"][k] for k in ("requests", "retries", "splits", "bytes_received")} == {
        "requests": s.requests,
        "retries": s.retries,
        "splits": 0,
        "bytes_received": s.bytes_received,
    }
    return export


#: the run's Params: JSON Lines only (the HDF5 grid of a day of 288 nodes takes seconds)
PARAMS = {"formats": ["jsonl"]}


def test_the_dag_tasks_report_gives_the_exports_requests(noida_es, tmp_path):
    """What the DAG's archive task returns (its XCom) for disk on 2017-12-13."""
    conn = CollectdEsConnection(noida_es.url)
    report = TASKS.archive("disk", T0.date(), Archive(tmp_path), conn, PARAMS)
    assert report.status == "archived" and report.rows == 7038
    export = assert_report_is_the_exports(report)
    assert report.stats.retries == 0 and export["pages"] <= export["requests"]


def test_an_empty_days_report_gives_its_requests_too(noida_es, tmp_path):
    day = T0.date().replace(day=14)  # the sample is one hour of 2017-12-13
    conn = CollectdEsConnection(noida_es.url)
    report = TASKS.archive("disk", day, Archive(tmp_path), conn, PARAMS)
    assert report.status == "empty"
    doc = manifest_of(report)
    export = doc["export"]
    assert report.stats.requests == export["requests"] + export["other_requests"] > 0
    assert export["other_requests"] >= 2  # the server's GET / and the day's _count at least
    assert report.as_dict()["requests"] == report.stats.requests


class _Faulty(httpx.BaseTransport):
    """noida-db behind a transport that spoils the first search answer: a 503 (``busy``), or
    a page one of whose two shards failed."""

    def __init__(self, fault: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.fault = fault
        self.spoilt = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.spoilt or not request.url.path.endswith("/_search"):
            return self.inner.handle_request(request)
        self.spoilt += 1
        if self.fault == "busy":
            return httpx.Response(503, json={"error": "busy"})
        answer = self.inner.handle_request(request)
        doc = json.loads(answer.read())
        doc["_shards"] = {"total": 2, "successful": 1, "skipped": 0, "failed": 1}
        return httpx.Response(answer.status_code, headers=answer.headers, json=doc)

    def close(self) -> None:
        self.inner.close()


def archive_through(url: str, fault: str, tmp_path: Path) -> tuple[DayReport, int]:
    """Archive disk on 2017-12-13 (JSON Lines) through a :class:`_Faulty` transport."""
    conn = CollectdEsConnection(url)
    faulty = _Faulty(fault)
    retry = RetryPolicy(attempts=3, backoff_s=0.0)
    client = EsClient(conn, retry=retry, sleep=lambda s: None, transport=faulty)
    stats = ExportStats()
    with CollectdEsSource(conn, slices=1, client=client) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats),
            "disk",
            T0.date(),
            Archive(tmp_path),
            stats=stats,
            formats=["jsonl"],
        )
    return report, faulty.spoilt


def test_a_partial_page_asked_again_is_a_retry(noida_es, tmp_path):
    report, spoilt = archive_through(noida_es.url, "partial", tmp_path)
    assert spoilt == 1 and report.rows == 7038
    export = assert_report_is_the_exports(report)
    assert export["partial_retries"] == report.stats.retries == 1 and export["retries"] == 0
    assert export["requests"] == export["pages"] + 1  # the partial page, then the whole one


def test_a_transient_failure_retried_is_a_request_and_a_retry(noida_es, tmp_path):
    report, spoilt = archive_through(noida_es.url, "busy", tmp_path)
    assert spoilt == 1 and report.rows == 7038
    export = assert_report_is_the_exports(report)
    assert export["retries"] == report.stats.retries == 1 and export["partial_retries"] == 0
    assert export["requests"] == export["pages"] + 1  # the refused attempt, then its answer


def test_dxt_extract_gives_the_exports_requests(noida_es, tmp_path, capsys):
    out = tmp_path / "disk.jsonl.gz"
    rc = main(["extract", "collectd-es", "--url", noida_es.url, "--families", "disk", "--format", "jsonl",
               "2017-12-13T08:00:00", "2017-12-13T09:00:00", "--out", str(out)])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    found = re.search(
        r", (\d+) searches and (\d+) other requests \(the server's version, contexts, count\), ",
        err,
    )
    # GET /, and a point in time opened and closed (no count: a window, not a day)
    assert found and int(found.group(1)) > 0 and int(found.group(2)) == 3, err
