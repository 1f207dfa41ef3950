"""Reading KairosDB's answers: the JSON document, each result's ``values`` kept as the
server's text where it can be (no Python object per point), checked points, tag groups and
counts.

Numeric ``values`` arrays are cut out of the answer and decoded as
:class:`~dxt_core.records.RawPoints` (the writers copy the digits as they came); an answer
whose arrays hold strings, or anything unexpected, is decoded whole. Every error says which
window of which metric it is and that nothing of it was archived.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from dxt_core.backends.examon.json_numbers import bad_pair as _bad_pair
from dxt_core.backends.examon.json_numbers import valid_numbers as _valid_numbers
from dxt_core.errors import SourceError
from dxt_core.http import html_hint
from dxt_core.masking import excerpt, excerpt_near
from dxt_core.records import RawPoints, Series

_VALUES_KEY = b'"values":['


def _loads_answer(raw: bytes, url: str, where: str = "") -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        pos = exc.pos
        near = excerpt_near(raw, pos, 60, 20) if pos else excerpt(raw, 200)
        raise SourceError(
            f"{where + ': ' if where else ''}the answer is not valid JSON ({exc}) near "
            f"{near!r}; nothing of it is archived{html_hint(raw)}",
            url=url,
        ) from exc


def _checked_points(values: Any, url: str, where: str) -> list[Any]:
    """A decoded ``values`` list, checked: each point ``[int ms, number or string]``."""
    if values is None:
        return []
    if not isinstance(values, list):
        raise SourceError(
            f"{where}: 'values' is not a list: {excerpt(str(values), 100)!r}", url=url
        )
    for p in values:
        if (
            not isinstance(p, list)
            or len(p) != 2
            or type(p[0]) is not int
            or isinstance(p[1], bool)
            or not isinstance(p[1], int | float | str)
        ):
            raise SourceError(
                f"{where}: a point is not [timestamp, number or string]: "
                f"{orjson.dumps(p)[:100].decode()!r}; nothing of the window is archived",
                url=url,
            )
    return values


def _inside(points: Sequence[Any], start_ms: int, end_ms: int) -> tuple[Sequence[Any], int]:
    """The points in ``[start_ms, end_ms)`` and how many were outside.

    Every timestamp is looked at, not only the first and the last: a point of another day
    in the middle of a series (a server's or a proxy's bug) is dropped too. For points kept
    as the server's text the test is ``min``/``max`` over the timestamps' digit strings
    (one width, so they order as numbers), a C loop.
    """
    if isinstance(points, RawPoints):
        lo, hi = str(start_ms).encode(), str(end_ms).encode()
        first, last = points.span
        if len(lo) == len(hi) == points.width and lo <= first and last < hi:
            return points, 0
        points = list(points)
    if not points:
        return points, 0
    times = [p[0] for p in points]
    if start_ms <= min(times) and max(times) < end_ms:
        return points, 0
    kept = [p for p in points if start_ms <= p[0] < end_ms]
    return kept, len(points) - len(kept)


def _decode_keeping_values(raw: bytes, url: str, where: str = "") -> tuple[Any, list[bytes] | None]:
    """Decode a query answer, keeping each result's ``values`` array as its JSON text.

    Returns the document with every ``values`` emptied and the arrays' inner texts in
    document order. Only answers whose arrays hold no JSON string take this path (a ``]]``
    inside a string cannot then be mistaken for an array's end); others, and anything
    unexpected, are decoded whole and returned with ``None``.
    """
    pieces: list[bytes] = []
    arrays: list[bytes] = []
    pos = 0
    while (i := raw.find(_VALUES_KEY, pos)) >= 0:
        start = i + len(_VALUES_KEY)
        if raw[start : start + 1] == b"]":
            end = start
        else:
            end = raw.find(b"]]", start)
            if end < 0:
                return _loads_answer(raw, url, where), None
            end += 1
        inner = raw[start:end]
        if b'"' in inner:
            return _loads_answer(raw, url, where), None
        pieces.append(raw[pos:start])
        arrays.append(inner)
        pos = end
    if not arrays:
        return _loads_answer(raw, url, where), None
    pieces.append(raw[pos:])
    try:
        return orjson.loads(b"".join(pieces)), arrays
    except orjson.JSONDecodeError:
        return _loads_answer(raw, url, where), None


def _results(doc: Any, url: str) -> list[dict[str, Any]]:
    try:
        queries = doc["queries"]
        results = queries[0]["results"]
    except (KeyError, IndexError, TypeError) as exc:
        raise SourceError(
            "unexpected KairosDB answer: no queries[0].results; is this a KairosDB URL?", url=url
        ) from exc
    if not isinstance(results, list):
        raise SourceError("unexpected KairosDB answer: results is not a list", url=url)
    return results


def _group_tags(result: dict[str, Any]) -> dict[str, str]:
    for g in result.get("group_by") or ():
        if isinstance(g, dict) and g.get("name") == "tag" and isinstance(g.get("group"), dict):
            return {str(k): str(v) for k, v in g["group"].items()}
    tags = result.get("tags") or {}
    # Without a tag group, a tag with several values is joined so no value is lost.
    return {
        str(k): "|".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in tags.items()
    }


def decode_series(
    raw: bytes, url: str, where: str, metric: str, start_ms: int, end_ms: int
) -> tuple[list[Series], int]:
    """The series of a query answer with points in ``[start_ms, end_ms)``, and how many
    points were outside it (dropped).

    Raises:
        SourceError: the answer is not KairosDB's, or holds a value that is not a JSON number
            or string; nothing of the window is archived.
    """
    doc, arrays = _decode_keeping_values(raw, url, where)
    results = _results(doc, url)
    if arrays is not None and len(arrays) != len(results):
        doc, arrays = _loads_answer(raw, url, where), None
        results = _results(doc, url)
    found: list[Series] = []
    dropped = 0
    for i, result in enumerate(results):
        points = _points_of(result, None if arrays is None else arrays[i], url, where)
        if not points:
            continue
        points, out = _inside(points, start_ms, end_ms)
        dropped += out
        if points:
            found.append(Series(str(result.get("name", metric)), _group_tags(result), points))
    return found, dropped


def _points_of(result: dict[str, Any], inner: bytes | None, url: str, where: str) -> Sequence[Any]:
    """One result's points: ``inner`` (its ``values`` text) as :class:`RawPoints` when it is
    all numbers, else decoded and checked; ``None``: the result was decoded whole."""
    if inner is None:
        return _checked_points(result.get("values"), url, where)
    if not inner:
        return ()
    if _valid_numbers(inner):  # [t,v] pairs of JSON numbers: the common case, checked once
        raw_points = RawPoints.of_pairs(inner)
        if raw_points is not None:
            return raw_points
    raw_points = RawPoints.from_json(inner)
    if raw_points is None:
        return _checked_points(_loads_answer(b"[" + inner + b"]", url, where), url, where)
    if not _valid_numbers(inner):
        raise SourceError(
            f"{where}: a value is not a JSON number: "
            f"{_bad_pair(inner)[:100].decode('utf-8', 'replace')!r}; "
            "nothing of the window is archived",
            url=url,
        )
    return raw_points


def counted(result: dict[str, Any], key: str, url: str) -> int:
    """The points one result of a ``count`` aggregator query counts: the sum of its
    ``[timestamp, long]`` values (kairosdb v1.2.2 ``core/aggregator/CountAggregator.java``)."""
    n = 0
    for p in result.get("values") or []:
        if not (isinstance(p, list) and len(p) == 2 and type(p[1]) is int):
            raise SourceError(f"{key}: a count answer is not [timestamp, integer]: {p!r}", url=url)
        n += p[1]
    return n
