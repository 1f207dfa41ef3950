"""Saved exports (pytokio's format) are read one page at a time, with the same pages and the
same errors as reading the file whole."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import orjson
import pytest

from dxt_core.backends.collectd_es import saved as collectd_es
from dxt_core.backends.collectd_es.saved import _whole_file_pages, iter_saved_pages
from dxt_core.errors import ConfigError

SAMPLE_JSON = Path(__file__).resolve().parents[2] / "data/pytokio/sample_collectdes-full.json.gz"


def hit(i: int, **extra: object) -> dict[str, object]:
    src = {"@timestamp": "2017-12-13T08:00:00.000Z", "hostname": f"bb{i % 7}", "plugin": "disk",
           "plugin_instance": "nvme0n1", "collectd_type": "disk_octets", "read": i * 1.5,
           "write": float(i)}  # fmt: skip
    return {"_index": "cori-collectd-2017.12.13", "_id": str(i), "_source": {**src, **extra}}


@pytest.fixture
def small_chunks(monkeypatch):
    # chunks far smaller than a page: every page crosses chunk boundaries
    monkeypatch.setattr(collectd_es, "_CHUNK", 997)


def test_pytokio_sample_streams_to_the_same_pages(small_chunks):
    streamed = list(iter_saved_pages(SAMPLE_JSON))
    assert streamed == _whole_file_pages(SAMPLE_JSON)
    assert sum(map(len, streamed)) == 7038


@pytest.mark.parametrize("indent", [None, 2])
def test_tricky_pages_stream_exactly(tmp_path, small_chunks, indent):
    pages = [
        [hit(0), hit(1, note="a ],[ and ]] and ] , [ in a string")],
        [],
        [hit(2, matrix=[[1, 2], [3, 4]], nested={"x": [[]]})],  # arrays of arrays in a hit
        [hit(i) for i in range(3, 60)],
    ]
    p = tmp_path / "saved.json"
    p.write_text(json.dumps(pages, indent=indent).replace("], [", "]  ,\n\n  ["))
    assert list(iter_saved_pages(p)) == pages
    g = tmp_path / "saved.json.gz"
    g.write_bytes(gzip.compress(p.read_bytes()))
    assert list(iter_saved_pages(g)) == pages


def test_pages_that_are_search_responses_are_read_whole(tmp_path, small_chunks):
    pages = [{"took": 3, "hits": {"hits": [hit(0), hit(1)]}}, {"hits": {"hits": [hit(2)]}}]
    p = tmp_path / "responses.json"
    p.write_text(json.dumps(pages))
    assert list(iter_saved_pages(p)) == [[hit(0), hit(1)], [hit(2)]]
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([[hit(0)], {"hits": {"hits": [hit(1)]}}]))
    assert list(iter_saved_pages(mixed)) == [[hit(0)], [hit(1)]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[{"_id": "a", "_source": {}}], [{"_id": "b", "_sour', r"bad\.json: not JSON"),
        ('[[{"_id": "a", "_source": {}}]] trailing', r"bad\.json: not JSON \(data after"),
        ('[[{"_id": "a", "_source": {}}], [{"_id": "b"}]]', "page 1, hit 0 has no _source"),
        ("[[], 3]", "page 1 is int, expected a list of hits"),
        ("", r"bad\.json: not JSON"),
    ],
)
def test_bad_files_name_the_file_and_place(tmp_path, small_chunks, text, message):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        list(iter_saved_pages(p))


def test_corrupt_gzip_is_named(tmp_path):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(gzip.compress(b"[[]]" * 1000)[:40])
    with pytest.raises(ConfigError, match=r"bad\.json\.gz: corrupt gzip"):
        list(iter_saved_pages(p))


def _peak_while_reading(p: Path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        count = 0
        for page in iter_saved_pages(p):
            count += len(page)
            del page
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return count, peak


@pytest.mark.slow  # 10-13 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_memory_holds_a_page_not_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(collectd_es, "_CHUNK", 1 << 16)
    peaks, sizes = [], []
    for n in (10, 60):
        pages = [[hit(i * 1000 + j) for j in range(1000)] for i in range(n)]
        raw = orjson.dumps(pages)
        p = tmp_path / f"{n}.json.gz"
        p.write_bytes(gzip.compress(raw, 1))
        count, peak = _peak_while_reading(p)
        assert count == n * 1000
        peaks.append(peak)
        sizes.append(len(raw))
    # 6x the file, about the same peak: one decoded page and a chunk of text
    assert peaks[1] < 1.3 * peaks[0], peaks
    assert peaks[1] < sizes[1] / 2, (peaks, sizes)
