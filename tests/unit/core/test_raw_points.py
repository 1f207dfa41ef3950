"""The numeric fast path: values kept as the server's JSON text must give the same rows as
decoding the JSON, and anything else must fall back to a full decode."""

from __future__ import annotations

import io

import orjson
import pytest

from dxt_core.backends.examon.source import _decode_keeping_values
from dxt_core.records import RawPoints, Series, SeriesBatch, SeriesSchema
from dxt_core.windows import zone
from dxt_core.writers import GzipCsvWriter

T0 = 1_583_708_400_000  # 2020-03-09 00:00 Europe/Rome


def answer(results: list[dict]) -> bytes:
    return orjson.dumps({"queries": [{"sample_size": 0, "results": results}]})


def result(node: str, values: list) -> dict:
    return {
        "name": "m",
        "group_by": [{"name": "tag", "tags": ["node"], "group": {"node": node}}],
        "tags": {"node": [node]},
        "values": values,
    }


def test_numeric_arrays_are_kept_as_text_and_index_like_json():
    vals = [[T0 + i * 20_000, v] for i, v in enumerate([1.5, -2, 3e-7, 1e22, 0.1])]
    doc, arrays = _decode_keeping_values(answer([result("a", vals), result("b", [])]), "u")
    assert arrays is not None and len(arrays) == 2 and arrays[1] == b""
    assert doc["queries"][0]["results"][0]["values"] == []
    rp = RawPoints.from_json(arrays[0])
    assert rp is not None and len(rp) == 5 and rp.width == 13
    assert list(rp) == vals and rp[1:3] == vals[1:3]
    assert rp.ts(0) == T0 and rp.ts(-1) == T0 + 80_000
    for ms in (0, T0 - 1, T0, T0 + 1, T0 + 20_000, T0 + 80_001, 10**14):
        assert rp.index_at(ms) == sum(1 for t, _ in vals if t < ms)


@pytest.mark.parametrize(
    "values",
    [
        [[T0, "OK ]] still a string"], [T0 + 1, "x"]],  # strings: whole answer decoded
        [[T0, None]],
    ],
)
def test_other_arrays_fall_back_to_json(values):
    raw = answer([result("a", values)])
    doc, arrays = _decode_keeping_values(raw, "u")
    if arrays is None:
        assert doc == orjson.loads(raw)
    else:
        assert RawPoints.from_json(arrays[0]) is None


def test_pretty_printed_answers_are_decoded_whole():
    raw = orjson.dumps(orjson.loads(answer([result("a", [[T0, 1.0]])])), option=orjson.OPT_INDENT_2)
    doc, arrays = _decode_keeping_values(raw, "u")
    assert arrays is None and doc["queries"][0]["results"][0]["values"] == [[T0, 1.0]]


@pytest.mark.parametrize(
    "inner",
    [b"[1,2,3],[4,5,6]", b"[-5,1.0],[-4,2.0]", b"[1 ,2]", b"[99,1],[100,2]", b"[]"],
)
def test_from_json_rejects_what_it_cannot_order_or_split(inner):
    assert RawPoints.from_json(inner) is None


def test_csv_rows_from_text_equal_rows_from_decoded_json():
    schema = SeriesSchema("m", ("node",))
    vals = [[T0 + i * 20_000, round(i * 0.37 - 5, 2)] for i in range(400)]
    raw_inner = orjson.dumps(vals)[1:-1]
    rp = RawPoints.from_json(raw_inner)
    assert rp is not None

    def write(points) -> bytes:
        buf = io.BytesIO()
        w = GzipCsvWriter(buf, zone("Europe/Rome"), origin_ms=T0)
        w.open(schema)
        w.write_batch(SeriesBatch(T0, T0 + 86_400_000, [Series("m", {"node": "a"}, points)]))
        w.close()
        return buf.getvalue()

    assert write(rp) == write(vals)


@pytest.mark.parametrize(
    ("tz", "t0", "step"),
    [
        # jittered samples across Rome's switch to summer time (2020-03-29 02:00 local)
        ("Europe/Rome", 1585437000000, 1_001),
        # a quarter-hour offset, and samples closer than a second
        ("Asia/Kathmandu", T0, 337),
        # the first seconds of the epoch (4-digit timestamps), a negative offset
        ("America/New_York", 1_000, 2),
    ],
)
def test_csv_rows_from_text_equal_rows_from_decoded_json_with_jitter(tz, t0, step):
    """The text path lays rows out by the second (one formatting per distinct second); its
    bytes must equal the decoded path's, which formats every point."""
    schema = SeriesSchema("m", ("node",))
    vals = [[t0 + i * step + (i * 7919) % 13, i % 5 * 1.5] for i in range(3000)]
    raw_inner = orjson.dumps(vals)[1:-1]
    rp = RawPoints.from_json(raw_inner)
    assert rp is not None

    def write(points) -> bytes:
        buf = io.BytesIO()
        w = GzipCsvWriter(buf, zone(tz), origin_ms=t0)
        w.open(schema)
        w.write_batch(SeriesBatch(t0, t0 + 86_400_000, [Series("m", {"node": "a"}, points)]))
        w.close()
        return buf.getvalue()

    assert write(rp) == write(vals)


@pytest.mark.parametrize(
    "inner",
    [
        b"[1583708400000,1.5],[1583708420000,-2],[1583708440000,3e-7]",
        b"[7,1],[8,2],[9,0.5]",
        b"[999,1],[1000,2]",  # first and last timestamps of two widths: not kept as text
    ],
)
def test_pairs_checked_by_the_decoder_read_as_from_json_does(inner):
    """``of_pairs`` (the decoder's regular expression has checked the text) gives what
    ``from_json`` (which checks it itself) gives."""
    a, b = RawPoints.of_pairs(inner), RawPoints.from_json(inner)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert (len(a), a.width, list(a)) == (len(b), b.width, list(b))
