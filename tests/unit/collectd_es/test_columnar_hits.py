"""Search responses decoded into Arrow columns: what is decoded, what falls back to plain
JSON, and the column-wise cell builder giving exactly the hit-by-hit builder's results."""

from __future__ import annotations

import datetime as dt
import random
import sys

import numpy as np
import orjson
import pytest

from dxt_core.backends.collectd_es.columnar_hits import (
    ColumnarHits,
    columnar_available,
    decode_search_response,
)
from dxt_core.backends.collectd_es.slices import _drop_seen, _tail
from dxt_core.backends.collectd_es.tokio_hdf5 import TimeGrid, TokioTimeSeriesBuilder
from dxt_core.errors import ConfigError

T0 = dt.datetime(2017, 12, 13, 8, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(hours=1)
MS0 = int(T0.timestamp() * 1000)


def response(hits: list[dict], **top) -> bytes:
    body = {"_scroll_id": "c2Nyb2xs", "took": 3, "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": None,
                     "hits": hits}, **top}  # fmt: skip
    return orjson.dumps(body)


def hit(i: int, ts: int, **source) -> dict:
    return {"_index": "cori-collectd-x", "_id": f"id{i}", "_score": None, "_source": source,
            "sort": [ts]}  # fmt: skip


def disk(i: int, ts: int, host: str = "bb1", dev: str = "nvme0n1", kind: str = "disk_octets",
         read: float | None = 1.0, write: float | None = 2.0) -> dict:  # fmt: skip
    return hit(i, ts, hostname=host, plugin="disk", plugin_instance=dev, collectd_type=kind,
               read=read, write=write)  # fmt: skip


def test_search_response_becomes_columns_that_still_read_as_the_hits():
    hits = [disk(i, MS0 + 10_000 * i, read=float(i)) for i in range(5)]
    raw = response(hits)
    body = decode_search_response(raw)
    assert body is not None and body["_scroll_id"] == "c2Nyb2xs" and body["pit_id"] is None
    page = body["hits"]["hits"]
    assert isinstance(page, ColumnarHits) and len(page) == 5
    assert page.sort0.tolist() == [MS0 + 10_000 * i for i in range(5)]
    assert page.source.field("read").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert page.ids() == [f"id{i}" for i in range(5)]
    assert list(page) == hits and page[4] == hits[4] and page[1:3] == hits[1:3]


def test_pit_response_keeps_its_id_and_two_part_sort():
    hits = [disk(0, MS0), disk(1, MS0 + 5)]
    for n, h in enumerate(hits):
        h["sort"] = [h["sort"][0], 40 + n]
    raw = response(hits, pit_id="cGl0")
    del raw  # a PIT response has no _scroll_id
    raw = orjson.dumps({"pit_id": "cGl0", "hits": {"hits": hits}})
    body = decode_search_response(raw)
    assert body is not None and body["pit_id"] == "cGl0" and body["_scroll_id"] is None
    page = body["hits"]["hits"]
    assert page.sort0.tolist() == [MS0, MS0 + 5]
    # the last timestamp and the keys (<_index>/<_id>) of the hits that share it
    assert _tail(page) == (MS0 + 5, ["cori-collectd-x/id1"])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"error":{"type":"search_context_missing_exception"},"status":404}',
        b'{"acknowledged":true}',
        b'{"id":"cGl0"}',
        # a value of another type than the schema's: decoded as plain JSON instead
        response([disk(0, MS0, read="12")]),  # type: ignore[arg-type]
        response([hit(0, MS0, hostname=7, plugin="disk")]),
        response([{**disk(0, MS0), "sort": ["2017-12-13"]}]),
        # pretty-printed (?pretty) responses hold newlines inside the object
        orjson.dumps({"hits": {"hits": [disk(0, MS0)]}}, option=orjson.OPT_INDENT_2),
        b"[]",
    ],
)
def test_other_answers_are_left_to_plain_json(raw):
    assert decode_search_response(raw) is None


def test_missing_sort_values_leave_sort0_unset():
    hits = [disk(0, MS0), {**disk(1, MS0), "sort": []}, {k: v for k, v in disk(2, MS0).items()
                                                          if k != "sort"}]  # fmt: skip
    page = decode_search_response(response(hits))["hits"]["hits"]
    assert page.sort0 is None and list(page) == hits


def test_dropping_hits_seen_before_a_resume_keeps_the_right_dicts():
    hits = [disk(i, MS0 + (0 if i < 3 else 10)) for i in range(6)]
    page = decode_search_response(response(hits))["hits"]["hits"]
    # documents are told apart by <_index>/<_id>: id0 of another index is another document
    assert _drop_seen(page, MS0, {"other-index/id0"}) is page
    fresh = _drop_seen(page, MS0, {"cori-collectd-x/id0", "cori-collectd-x/id2"})
    assert isinstance(fresh, ColumnarHits)
    assert fresh.ids() == ["id1", "id3", "id4", "id5"]
    assert list(fresh) == [hits[i] for i in (1, 3, 4, 5)]
    assert fresh.sort0.tolist() == [MS0, MS0 + 10, MS0 + 10, MS0 + 10]
    assert _drop_seen(page, MS0, {"cori-collectd-x/id9"}) is page  # nothing to drop: the same page


# ------------------------------------------------------------------ builder equivalence

HOSTS = ["bb1", "bb2", "bb10", "bb3"]


def random_hit(rng: random.Random, i: int, irregular: float, families: list[str]) -> dict:
    ts = MS0 + rng.randrange(-60_000, 3_660_000)  # some outside the window
    fam = rng.choice(["disk", "cpu", "memory"] if rng.random() < irregular else families)
    host = rng.choice(HOSTS)
    if fam == "disk":
        src = {"hostname": host, "plugin": "disk", "plugin_instance": f"nvme{rng.randrange(3)}n1",
               "collectd_type": rng.choice(["disk_octets", "disk_ops"]),
               "read": rng.random() * 1e6, "write": float(rng.randrange(10**6))}  # fmt: skip
    elif fam == "cpu":
        src = {"hostname": host, "plugin": "cpu", "plugin_instance": str(rng.randrange(4)),
               "type_instance": rng.choice(["idle", "user", "system"]),
               "value": rng.random() * 100}  # fmt: skip
    else:
        src = {"hostname": host, "plugin": "memory",
               "type_instance": rng.choice(["used", "free", "cached", "slab_recl"]),
               "value": float(rng.randrange(10**9))}  # fmt: skip
    if rng.random() < irregular:  # something the conversion ignores or must name
        trouble = rng.choice(["hostname", "plugin", "plugin_instance", "collectd_type",
                              "type_instance", "read", "value", "sort"])  # fmt: skip
        if trouble == "plugin":
            src["plugin"] = rng.choice(["interface", None])
        elif trouble == "collectd_type":
            src["collectd_type"] = "disk_time"
        elif trouble == "type_instance":
            src["type_instance"] = "steal"
        elif trouble != "sort":
            src.pop(trouble, None)
    h = {"_index": "cori-collectd-x", "_id": f"id{i}", "_score": None, "_source": src,
         "sort": [ts]}  # fmt: skip
    if rng.random() < irregular / 4:
        h["sort"] = []
        src["@timestamp"] = dt.datetime.fromtimestamp(ts / 1000, dt.UTC).isoformat()
    return h


def build(pages, families) -> TokioTimeSeriesBuilder:
    b = TokioTimeSeriesBuilder(families, TimeGrid.of(T0, T1, 10), num_nodes=8)
    for p in pages:
        b.add_page(p)
    return b


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("irregular", [0.0, 0.002, 0.05])
def test_column_wise_cells_equal_hit_by_hit_cells(seed, irregular):
    rng = random.Random(seed)
    families = rng.choice([["disk"], ["cpu"], ["memory"], ["disk", "cpu", "memory"], ["disk"]])
    pages = []
    for p in range(rng.randrange(1, 6)):
        hits = [
            random_hit(rng, p * 1000 + i, irregular, families) for i in range(rng.randrange(1, 400))
        ]
        if "disk" not in families or rng.random() < 0.5:
            hits.sort(key=lambda h: h["sort"][0] if h["sort"] else 0)
        pages.append(hits)
    plain = build(pages, families)
    columns = build([decode_search_response(response(p))["hits"]["hits"] for p in pages], families)
    if irregular == 0.0:
        assert columns.stats.columnar_pages == len(pages)
    got, want = columns.results(), plain.results()
    assert got.keys() == want.keys()
    for name in want:
        assert got[name][0] == want[name][0], name  # the same columns, in the same order
        # bit for bit, -0.0 (no data) included
        assert np.array_equal(got[name][1].view(np.int64), want[name][1].view(np.int64)), name
    s, t = columns.stats.as_dict(), plain.stats.as_dict()
    s.pop("columnar_pages"), t.pop("columnar_pages")
    assert s == t
    assert plain.stats.columnar_pages == 0


def test_negative_zero_and_huge_numbers_go_hit_by_hit():
    """JSON's ``-0`` is the integer 0 to orjson but -0.0 (the "no data" cell) to Arrow."""
    hits = [disk(0, MS0 + 1000, read=1.0, write=2.0), disk(1, MS0 + 2000, dev="nvme1n1")]
    raw = response(hits).replace(b'"read":1.0', b'"read":-0')
    plain = build([orjson.loads(raw)["hits"]["hits"]], ["disk"])
    columns = build([decode_search_response(raw)["hits"]["hits"]], ["disk"])
    assert columns.stats.columnar_pages == 0
    got, want = columns.results()["datatargets/readrates"], plain.results()["datatargets/readrates"]
    assert got[0] == want[0]
    assert np.array_equal(got[1].view(np.int64), want[1].view(np.int64))
    assert not np.signbit(want[1][0, 0])  # a zero read, not an empty cell
    huge = response(hits).replace(b'"read":1.0', b'"read":1e400')
    page = decode_search_response(huge)
    if page is not None:  # Arrow read it as inf: orjson refuses the answer, loudly
        with pytest.raises(orjson.JSONDecodeError):
            build([page["hits"]["hits"]], ["disk"])


def test_too_many_columns_is_the_same_error_either_way():
    ops = [disk(i, MS0 + 1000 + i, dev=f"nvme{i}n1", kind="disk_ops") for i in range(5)]
    octets = [disk(10 + i, MS0 + 2000 + i, dev=f"nvme{i}n1") for i in range(5)]
    raw = response(ops + octets)
    errors = []
    for page in (orjson.loads(raw)["hits"]["hits"], decode_search_response(raw)["hits"]["hits"]):
        b = TokioTimeSeriesBuilder(["disk"], TimeGrid.of(T0, T1, 10), num_nodes=1)
        with pytest.raises(ConfigError) as exc:
            b.add_page(page)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert "datatargets/readoprates: column 'bb1:nvme4n1' would be number 5" in errors[0]


def test_without_pyarrow_pages_are_dicts(monkeypatch):
    """pyarrow is optional: without it the export decodes every answer with orjson."""
    assert columnar_available()
    monkeypatch.setitem(sys.modules, "pyarrow.json", None)  # as if pyarrow were not installed
    assert not columnar_available()


@pytest.mark.parametrize("columnar", [True, False])
def test_two_disks_of_one_tokio_column_are_a_clear_error(columnar):
    """pytokio names a disk column ``<hostname>:<plugin_instance>``: the disks (``bb1``,
    ``nvme0n1:p1``) and (``bb1:nvme0n1``, ``p1``) would share one, their rates summed into
    one series. Both insertion paths (column-wise pages, hit by hit) refuse it, naming both."""
    hits = [disk(0, MS0, "bb1", "nvme0n1:p1"), disk(1, MS0 + 10_000, "bb1:nvme0n1", "p1")]
    page = decode_search_response(response(hits))["hits"]["hits"]
    assert isinstance(page, ColumnarHits)
    b = TokioTimeSeriesBuilder(["disk"], TimeGrid.of(T0, T1, 10), num_nodes=8)
    with pytest.raises(ConfigError) as exc:
        b.add_page(page if columnar else hits)
    assert "(hostname 'bb1', plugin_instance 'nvme0n1:p1')" in str(exc.value)
    assert "(hostname 'bb1:nvme0n1', plugin_instance 'p1')" in str(exc.value)
    assert "'bb1:nvme0n1:p1'" in str(exc.value) and "--format jsonl" in str(exc.value)
    # one disk in many documents, and many disks, stay accepted (column-wise where it can)
    more = [disk(i, MS0 + 10_000 * i, f"bb{i % 2}", f"nvme{i % 3}n1") for i in range(12)]
    page = decode_search_response(response(more))["hits"]["hits"]
    ok = build([page if columnar else more], ["disk"])
    assert len(ok.results()["datatargets/readrates"][0]) == 6
    assert ok.stats.columnar_pages == (1 if columnar else 0)
