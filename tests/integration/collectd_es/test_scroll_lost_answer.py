"""A scroll continuation whose answer is lost after the server made it (a read timeout, a
proxy's 504 once the backend had answered): the scroll has moved on, so asking the same
continuation again would skip a page. noida-db behind a transport that loses one answer."""

from __future__ import annotations

import httpx

from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.connection import EsClient
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats
from dxt_core.http import RetryPolicy
from tests.unit.collectd_es.test_collectd_es_cells import T0


class _LostAnswer(httpx.BaseTransport):
    """Forwards every request; the answer to the second scroll continuation is read from
    noida-db, then lost (the client sees a read timeout)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.continuations = 0
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.inner.handle_request(request)
        if request.url.path.endswith("/_search/scroll") and request.method == "POST":
            self.continuations += 1
            if self.continuations == 2:
                answer.read()
                answer.close()
                self.lost += 1
                raise httpx.ReadTimeout("the answer was lost on the way", request=request)
        return answer

    def close(self) -> None:
        self.inner.close()


def test_a_lost_scroll_answer_resumes_and_loses_no_document(noida_es, tmp_path):
    conn = CollectdEsConnection(noida_es.url)
    lost = _LostAnswer()
    client = EsClient(
        conn, retry=RetryPolicy(attempts=3, backoff_s=0.0), sleep=lambda s: None, transport=lost
    )
    stats = ExportStats()
    with CollectdEsSource(conn, slices=1, page_size=500, use_pit=False, client=client) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", T0.date(), Archive(tmp_path), stats=stats,
            formats=["jsonl"],
        )  # fmt: skip
    assert lost.lost == 1 and stats.mode == "scroll"
    assert report.rows == 7038  # every document once (the day's _count agrees: committed)
    assert stats.resumed == 1  # the scroll reopened at the last @timestamp read
