"""``_id`` is unique within an index only, and ``cori-collectd-*`` spans many: two documents
with one ``_id`` in two daily indices (ingest-set fingerprints, a reindex) are two documents.
A page that starts at the last page's ``@timestamp`` dropped the second as already seen."""

from __future__ import annotations

import datetime as dt

import pytest

from dxt_core import procs
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.noida import bulk_load
from dxt_core.backends.collectd_es.simulator import spawn_noida_elasticsearch
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats

pytestmark = pytest.mark.integration

DAY = dt.date(2017, 12, 13)


def _hit(index: str, doc_id: str, second: int, host: str) -> dict[str, object]:
    return {
        "_index": index,
        "_id": doc_id,
        "_source": {
            "plugin": "disk",
            "@timestamp": f"2017-12-13T08:00:{second:02d}.000Z",
            "hostname": host,
            "collectd_type": "disk_octets",
            "plugin_instance": "nvme0n1",
            "read": 1.0,
            "write": 2.0,
        },
    }


@pytest.fixture(scope="module")
def twin_ids(tmp_path_factory):
    proc, url = spawn_noida_elasticsearch(tmp_path_factory.mktemp("noida-twins"))
    try:
        bulk_load(
            url,
            [
                _hit("cori-collectd-2017.12.13", "X", 0, "bb1"),
                _hit("cori-collectd-2017.12.13-reindexed", "X", 0, "bb2"),
                _hit("cori-collectd-2017.12.13", "Y", 1, "bb1"),
            ],
        )
        yield url
    finally:
        procs.stop(proc)


@pytest.mark.parametrize("use_pit", [True, False], ids=["pit", "scroll"])
def test_one_id_in_two_indices_is_two_documents(twin_ids, tmp_path, use_pit):
    conn = CollectdEsConnection(twin_ids)
    stats = ExportStats()
    # one hit a page: the second page starts at the first page's @timestamp
    with CollectdEsSource(conn, slices=1, page_size=1, use_pit=use_pit) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", DAY, Archive(tmp_path), stats=stats, formats=["jsonl"]
        )
    assert report.rows == 3 and stats.skipped_duplicates == 0  # _count says 3 too
