"""A window's numeric points read as one column block (times as integers, values as an Arrow
array of the server's digits) must give the archive's bytes exactly as reading each series'
text on its own does, and must step aside for anything it cannot read as one block."""

from __future__ import annotations

import io
import random

import orjson
import pytest

from dxt_core.backends.examon.decode import _decode_keeping_values, decode_series
from dxt_core.records import RawPoints, Series, SeriesBatch, SeriesSchema
from dxt_core.windows import zone
from dxt_core.writers import GzipCsvWriter

pytest.importorskip("pyarrow")

SCHEMA = SeriesSchema("m", ("node",))
HOUR = 3_600_000


def answer(series: dict[str, list]) -> bytes:
    results = [
        {
            "name": "m",
            "group_by": [{"name": "tag", "tags": ["node"], "group": {"node": node}}],
            "tags": {"node": [node]},
            "values": values,
        }
        for node, values in series.items()
    ]
    return orjson.dumps({"queries": [{"sample_size": 0, "results": results}]})


def per_series(raw: bytes, start: int, end: int) -> list[Series]:
    """The window read one series' text at a time (the path without a block)."""
    doc, arrays = _decode_keeping_values(raw, "u")
    assert arrays is not None
    out = []
    for res, inner in zip(doc["queries"][0]["results"], arrays, strict=True):
        if not inner:
            continue
        rp = RawPoints.from_json(inner)
        assert rp is not None
        node = res["group_by"][0]["group"]["node"]
        pts = [p for p in rp if start <= p[0] < end]
        out.append(Series("m", {"node": node}, rp if len(pts) == len(rp) else pts))
    return out


def write(tz: str, origin: int, windows: list[tuple[int, int, list[Series]]]) -> bytes:
    buf = io.BytesIO()
    w = GzipCsvWriter(buf, zone(tz), origin_ms=origin)
    w.open(SCHEMA)
    for start, end, series in windows:
        w.write_batch(SeriesBatch(start, end, sorted(series, key=lambda s: s.tags["node"])))
    w.close()
    return buf.getvalue()


def day_of_windows(t0: int, step: int, nodes: int, rng: random.Random) -> list:
    """Three windows of jittered points of ``nodes`` series, values of every JSON shape."""
    shapes = [1.5, -2, 3e-7, 1e22, 0.1, 0, -0.25, 123456789012, 2.5e-300]
    out = []
    for w, (a, b) in enumerate([(0, 5), (5, 13), (13, 24)]):
        start, end = t0 + a * HOUR, t0 + b * HOUR
        series = {}
        for n in range(nodes):
            if (n + w) % 7 == 3:
                series[f"n{n:02d}"] = []  # a series without points in this window
                continue
            pts, t = [], start + rng.randrange(step)
            while t < end:
                pts.append([t, rng.choice(shapes)])
                t += step + rng.randrange(-step // 3, step // 3 + 1)
            series[f"n{n:02d}"] = pts
        out.append((start, end, answer(series)))
    return out


@pytest.mark.parametrize(
    ("tz", "t0", "step", "nodes"),
    [
        ("Europe/Rome", 1585432800000, 20_000, 12),  # 2020-03-29, to summer time
        ("Europe/Rome", 1603591200000 - 2 * HOUR, 7_001, 8),  # 2020-10-25, back to winter
        ("Asia/Kathmandu", 1583708400000, 13_337, 12),  # a quarter-hour offset
        ("America/New_York", 1583708400000, 997, 2),  # a negative offset, sub-second steps
    ],
)
def test_block_rows_are_the_per_series_rows_byte_for_byte(tz, t0, step, nodes):
    windows = day_of_windows(t0, step, nodes, random.Random(step))
    blocked, plain = [], []
    for start, end, raw in windows:
        series, dropped = decode_series(raw, "u", "w", "m", start, end)
        assert dropped == 0
        assert all(s.points.block is not None for s in series)  # the block path was taken
        blocked.append((start, end, series))
        plain.append((start, end, per_series(raw, start, end)))
    assert write(tz, t0, blocked) == write(tz, t0, plain)


def test_block_points_index_like_their_text():
    vals = [[1583708400000 + i * 20_000 + i % 7, i * 0.5] for i in range(50)]
    raw = answer({"a": vals[:20], "b": [], "c": vals[20:]})
    series, _ = decode_series(raw, "u", "w", "m", vals[0][0], vals[0][0] + 24 * HOUR)
    a, c = (s.points for s in series)
    assert isinstance(a, RawPoints) and isinstance(c, RawPoints)
    assert a.block is c.block and (a.first, len(a), c.first, len(c)) == (0, 20, 20, 30)
    for rp, part in ((a, vals[:20]), (c, vals[20:])):
        text = RawPoints.from_json(orjson.dumps(part)[1:-1])
        assert text is not None and list(rp) == part
        assert rp.span == text.span and (rp.ts(0), rp.ts(-1)) == (text.ts(0), text.ts(-1))
        for ms in (0, part[0][0], part[0][0] + 1, part[5][0], part[-1][0] + 1, 10**14):
            assert rp.index_at(ms) == text.index_at(ms) == sum(1 for t, _ in part if t < ms)


def test_points_outside_the_window_are_dropped_as_before():
    t0 = 1583708400000
    inside = [[t0 + i * 1000, i] for i in range(10)]
    raw = answer({"a": inside, "b": [[t0 - 5, 1], *inside, [t0 + HOUR, 2]]})
    series, dropped = decode_series(raw, "u", "w", "m", t0, t0 + HOUR)
    assert dropped == 2
    assert [list(s.points) for s in series] == [inside, inside]
    assert write("Europe/Rome", t0, [(t0, t0 + HOUR, series)]) == write(
        "Europe/Rome", t0, [(t0, t0 + HOUR, per_series(raw, t0, t0 + HOUR))]
    )


@pytest.mark.parametrize(
    "other",
    [
        [[1583708400000, "a string"]],  # the answer is decoded whole
        [[999, 1.0], [1000, 2.0]],  # timestamps of two widths: each series read alone
    ],
)
def test_what_is_not_one_block_is_read_series_by_series(other):
    vals = [[1583708400000 + i, i] for i in range(5)]
    series, _ = decode_series(answer({"a": vals, "b": other}), "u", "w", "m", 0, 10**13)
    assert [list(s.points) for s in series] == [vals, other]
    assert not any(getattr(s.points, "block", None) for s in series)


def test_a_bad_number_is_named_as_before():
    raw = answer({"a": [[1583708400000, 1]]}).replace(b"[1583708400000,1]", b"[1583708400000,01]")
    with pytest.raises(Exception, match="not a JSON number"):
        decode_series(raw, "u", "w", "m", 0, 10**13)
