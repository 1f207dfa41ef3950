"""Documents of one ``@timestamp`` are written in ``<_index>/<_id>`` order, not in the order
the server keeps them (``_shard_doc``, which a segment merge, a reindex or a snapshot restore
changes; a scroll has none): the same documents indexed in another order give the same
JSON Lines bytes, whatever the page size (groups that straddle pages included)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core import procs
from dxt_core.archive import Archive
from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
from dxt_core.backends.collectd_es.noida import bulk_load
from dxt_core.backends.collectd_es.simulator import spawn_noida_elasticsearch
from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource, ExportStats

pytestmark = pytest.mark.integration

DAY = dt.date(2017, 12, 13)
INDEX = "cori-collectd-2017.12.13"


def _hits() -> list[dict[str, object]]:
    """Four instants, each with the disks of three nodes (12 documents, ties of three)."""
    hits = []
    for second in range(4):
        for node in ("bb1", "bb2", "bb3"):
            hits.append(
                {
                    "_index": INDEX,
                    "_id": f"{node}-{second}",
                    "_source": {
                        "plugin": "disk",
                        "@timestamp": f"2017-12-13T08:00:{second * 10:02d}.000Z",
                        "hostname": node,
                        "collectd_type": "disk_octets",
                        "plugin_instance": "nvme0n1",
                        "read": float(second),
                        "write": 2.0,
                    },
                }
            )
    return hits


@pytest.fixture(scope="module")
def two_orders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The same documents on two servers, indexed in opposite orders."""
    procs_started, urls = [], []
    try:
        for name, hits in (("forward", _hits()), ("backward", _hits()[::-1])):
            proc, url = spawn_noida_elasticsearch(tmp_path_factory.mktemp(f"noida-{name}"))
            procs_started.append(proc)
            bulk_load(url, hits)
            urls.append(url)
        yield urls
    finally:
        for proc in procs_started:
            procs.stop(proc)


def _jsonl(url: str, out: Path, page_size: int, use_pit: bool) -> bytes:
    stats = ExportStats()
    conn = CollectdEsConnection(url)
    with CollectdEsSource(conn, slices=1, page_size=page_size, use_pit=use_pit) as src:
        report = archive_collectd_es_day(
            es_pages(src, stats), "disk", DAY, Archive(out), stats=stats, formats=["jsonl"]
        )
    assert report.rows == 12
    return next(out.rglob("*.jsonl.gz")).read_bytes()


@pytest.mark.parametrize("use_pit", [True, False], ids=["pit", "scroll"])
@pytest.mark.parametrize("page_size", [2, 100])
def test_the_same_documents_in_another_order_give_the_same_bytes(
    two_orders: list[str], tmp_path: Path, page_size: int, use_pit: bool
) -> None:
    forward, backward = two_orders
    a = _jsonl(forward, tmp_path / "a", page_size, use_pit)
    b = _jsonl(backward, tmp_path / "b", page_size, use_pit)
    assert a == b
