"""The servers' answers as columns: one window's samples, series by series, in NumPy arrays.

No Python object per sample: an answer's arrays of times and values are cut out of the JSON
text as whole byte ranges, joined, and parsed in one call each; the values are kept as the
server's own digits (the CSV writes them as they came, the Parquet writer parses them), so
the per-sample work is NumPy's (and, when installed, Arrow's), not the interpreter's.

What the servers send (both write values with Go's ``strconv.AppendFloat(f, 'f', -1)``:
plain decimals, never an exponent):

* **VictoriaMetrics** ``/api/v1/export``: one line per series,
  ``{"metric":{...},"values":[v,...],"timestamps":[ms,...]}``, in that order; a NaN value is
  ``null``, except as a line's first value, written ``NaN`` (as are ``+Inf`` and ``-Inf``),
  which is not JSON (VictoriaMetrics app/vmselect/prometheus/export.qtpl ``ExportJSONLine``;
  quicktemplate's ``QWriter.F``).
* **Prometheus**: an instant query of a range vector, a matrix,
  ``{"metric":{...},"values":[[<seconds>,"<value>"],...]}`` per series, values as text
  (``"NaN"``, ``"+Inf"``, ``"-Inf"`` for the special ones; prometheus/prometheus
  web/api/v1/api.go, util/jsonutil).

Values are written as the server's digits when they are plain decimals; any other token is
the number it stands for, written as Python writes it (``nan``, ``inf``, ``-inf``; a whole
number below 2**53 without ``.0``): a rule per value, so a file does not depend on which
values shared a query window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import orjson

from dxt_core.backends.prometheus.labels import LabelCache, LabelKey, label_key
from dxt_core.errors import SourceError
from dxt_core.masking import excerpt

#: Bytes of a plain decimal value (and the commas between values).
PLAIN = b"0123456789.-,"
_COMMA = 44


@dataclass(slots=True)
class Columns:
    """The raw samples of one window ``[start_ms, end_ms)``.

    Series ``i`` is ``labels[i]`` (``__name__`` included) and owns rows
    ``starts[i]:starts[i + 1]``, in time order; row ``r`` is time ``ts[r]`` (epoch ms) and the
    value ``text[offsets[r]:offsets[r + 1]]``: the server's digits (or the normalised form of
    a special value, see the module's docstring) followed by a comma, as the CSV row holds
    it (the text is the answer's, commas included: no copy without them).
    """

    start_ms: int
    end_ms: int
    labels: list[dict[str, str]] = field(default_factory=list)
    #: each series' labels as a sorted tuple (its identity; computed once per series)
    keys: list[LabelKey] = field(default_factory=list)
    starts: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    text: bytes = b""
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    #: known to hold each series once (the decoder checked its list of series)
    distinct: bool = False

    @property
    def rows(self) -> int:
        return len(self.ts)

    @property
    def points(self) -> int:  # the name SeriesBatch uses (window sizing)
        return len(self.ts)

    def series_of_rows(self) -> np.ndarray:
        """The series index of each row."""
        return np.repeat(np.arange(len(self.labels), dtype=np.int32), np.diff(self.starts))

    def tokens(self) -> list[str]:
        """The values as text, without their commas (a Python object per value: tests)."""
        t, o = self.text, self.offsets.tolist()
        return [t[a : b - 1].decode() for a, b in itertools.pairwise(o)]

    def values(self) -> np.ndarray:
        """The values as float64 (Arrow's parser when installed, else NumPy's)."""
        n = self.rows
        if n == 0:
            return np.zeros(0, np.float64)
        try:
            import pyarrow as pa
            import pyarrow.compute as pc
        except ImportError:  # pragma: no cover - pyarrow is there with the Parquet writer
            parsed: np.ndarray = np.fromstring(self.text[:-1], dtype=np.float64, sep=",")
            return parsed
        large = len(self.text) >= 2**31
        offsets = self.offsets.astype(np.int64 if large else np.int32, copy=False)
        arr = pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(),
            n,
            [None, pa.py_buffer(offsets), pa.py_buffer(self.text)],
        )
        pool = pa.system_memory_pool()  # short-lived (see layout.CsvDayWriter.write)
        text = pc.binary_slice(arr, 0, -1, memory_pool=pool).cast(
            pa.large_string() if large else pa.string(), memory_pool=pool
        )
        parsed_arr = pc.cast(text, pa.float64(), memory_pool=pool)  # no nulls: it raises
        # the buffer as it is (to_numpy(zero_copy_only=False) imports pandas, about 50 MB)
        out: np.ndarray = np.frombuffer(parsed_arr.buffers()[1], np.float64, n, parsed_arr.offset)
        return out

    def take_rows(self, keep: np.ndarray) -> Columns:
        """The rows where ``keep`` (a boolean mask) is true, series kept in order (a series
        left without rows stays, with none)."""
        lengths = np.diff(self.offsets)
        text = np.frombuffer(self.text, np.uint8)[np.repeat(keep, lengths)].tobytes()
        offsets = np.zeros(int(keep.sum()) + 1, self.offsets.dtype)
        np.cumsum(lengths[keep], out=offsets[1:])
        per_series = np.bincount(self.series_of_rows()[keep], minlength=len(self.labels))
        starts = np.zeros(len(self.labels) + 1, np.int64)
        np.cumsum(per_series, out=starts[1:])
        return Columns(
            self.start_ms,
            self.end_ms,
            self.labels,
            self.keys,
            starts,
            self.ts[keep],
            text,
            offsets,
            self.distinct,
        )


# -- values --------------------------------------------------------------------------------


def _number_text(token: bytes) -> bytes:
    """A special value token (``NaN``, ``null``, ``+Inf``, an exponent) as the CSV writes it:
    the number it stands for, as Python prints it."""
    t = token.strip().strip(b'"')
    if t == b"null":  # VictoriaMetrics' NaN
        return b"nan"
    f = float(t)
    if f.is_integer() and abs(f) < 2**53:
        return str(int(f)).encode()
    return str(f).encode()


def _tokens(joined: bytes, where: str, url: str) -> tuple[bytes, np.ndarray]:
    """The values of ``joined`` (each followed by a comma, the last one too) as (text,
    offsets of each value with its comma); special values normalised (see
    :func:`_number_text`)."""
    if joined.translate(None, PLAIN):  # a NaN, an infinity, an exponent, or garbage
        try:
            parts = [
                p if not p.translate(None, PLAIN) else _number_text(p)
                for p in joined[:-1].split(b",")
            ]
        except ValueError as exc:
            raise SourceError(f"{where}: a value is not a number ({exc})", url=url) from None
        joined = b",".join(parts) + b","
    ends = np.flatnonzero(np.frombuffer(joined, np.uint8) == _COMMA)
    ends += 1
    if len(ends) and (int(ends[0]) < 2 or (np.diff(ends) < 2).any()):
        raise SourceError(f"{where}: an empty value in the answer", url=url)
    offsets = np.zeros(len(ends) + 1, _offset_type(len(joined)))
    offsets[1:] = ends
    return joined, offsets


def _offset_type(size: int) -> type[np.signedinteger[Any]]:
    """Offsets into a text of ``size`` bytes: 32 bits while they fit (half the memory)."""
    return np.int32 if size < 2**31 else np.int64


def _ints(joined: bytes, count: int | None, where: str, url: str) -> np.ndarray:
    """``count`` comma-separated integers (epoch ms; a last comma is allowed); as many as
    are read when ``count`` is None."""
    try:
        out = np.fromstring(joined.removesuffix(b","), dtype=np.int64, sep=",")
    except ValueError as exc:
        raise SourceError(f"{where}: a timestamp is not an integer ({exc})", url=url) from None
    if count is not None and len(out) != count:
        raise SourceError(f"{where}: {len(out)} timestamps read where {count} were sent", url=url)
    result: np.ndarray = out
    return result


def _assemble(
    where: str,
    url: str,
    series: tuple[list[dict[str, str]], list[LabelKey], bool],
    counts: list[int] | np.ndarray,
    ts: np.ndarray,
    text: bytes,
    offsets: np.ndarray,
) -> Columns:
    labels, keys, distinct = series
    starts = np.zeros(len(labels) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    if int(starts[-1]) != len(ts) or len(offsets) != len(ts) + 1:
        raise SourceError(f"{where}: {len(ts)} timestamps but {len(offsets) - 1} values", url=url)
    return Columns(0, 0, labels, keys, starts, ts, text, offsets, distinct)


# -- VictoriaMetrics /api/v1/export ---------------------------------------------------------

_VM_HEAD = b'{"metric":'
_VM_VALUES = b',"values":['
_VM_TIMES = b'],"timestamps":['


def decode_export(body: bytes, where: str, url: str, label_cache: LabelCache) -> Columns:
    """VictoriaMetrics' export lines as columns, series in the order of their ``metric``
    text (VictoriaMetrics 1.79 exports the series of each window in another order; in this
    one, windows of the same series are alike, and :class:`LabelCache` and the writers
    reuse the last window's lists; the order of rows in a file is the writers' own).

    ``label_cache`` holds the labels of the series decoded before (:class:`LabelCache`).
    """
    lines = _export_lines(body)
    if not lines.laid_out.all():
        return _decode_export_lines(body, where, url, label_cache)
    # every line as VictoriaMetrics writes it: cut each at the places found (the arrays as
    # views of the answer, copied once, by the join); a line without samples is left out
    # (VictoriaMetrics writes none: export.qtpl returns early)
    t_len = lines.ends - lines.t_open - 3
    numbers = np.arange(1, len(t_len) + 1)  # each line's number in the answer (errors)
    keep = t_len > 0
    if not keep.all():
        lines = _Lines(*(x[keep] for x in lines))
        t_len, numbers = t_len[keep], numbers[keep]
    metas = [
        body[a + len(_VM_HEAD) : v - 10]
        for a, v in zip(lines.starts.tolist(), lines.v_open.tolist(), strict=True)
    ]
    order = sorted(range(len(metas)), key=metas.__getitem__)
    if order != list(range(len(metas))):
        metas = [metas[i] for i in order]
        lines = _Lines(*(x[order] for x in lines))
        t_len, numbers = t_len[order], numbers[order]
    v_open, t_open, ends = (x.tolist() for x in lines[1:4])
    view = memoryview(body)
    values: list[bytes | memoryview] = [
        view[v + 1 : t - 15] for v, t in zip(v_open, t_open, strict=True)
    ]
    times: list[bytes | memoryview] = [
        view[t + 1 : e - 2] for t, e in zip(t_open, ends, strict=True)
    ]
    series = label_cache.series(metas, where, url, numbers.tolist())
    return _export_columns(where, url, series, values, times, t_len)


def _export_columns(
    where: str,
    url: str,
    series: tuple[list[dict[str, str]], list[LabelKey], bool],
    values: list[bytes | memoryview],
    times: list[bytes | memoryview],
    lengths: np.ndarray | None = None,
) -> Columns:
    """Columns from each line's labels, values and times (``lengths``: the times' lengths,
    when known)."""
    if not times:
        return _assemble(where, url, series, [], np.zeros(0, np.int64), b"", np.zeros(1, np.int64))
    joined = b",".join(times)
    if lengths is None:
        lengths = np.array([len(t) for t in times], np.int64)
    del times[:]  # the views of the answer
    ts = _ints(joined, None, where, url)
    counts = _line_counts(joined, lengths, ts, where, url)
    del joined
    values.append(b"")  # a comma after the last value too
    joined = b",".join(values)
    del values[:]
    text, offsets = _tokens(joined, where, url)
    return _assemble(where, url, series, counts, ts, text, offsets)


#: Epoch ms written with 13 digits: 2001-09-09 to 2286.
_THIRTEEN_DIGITS = (10**12, 10**13)


def _line_counts(
    joined: bytes, lengths: np.ndarray, ts: np.ndarray, where: str, url: str
) -> np.ndarray:
    """Samples per line, from the lengths of the lines' times in ``joined`` (joined with
    commas) and the times read from it (``ts``). Times all of 13 digits (the epoch ms of
    2001 to 2286) are 14 bytes each with their comma: the count is the length over 14, no
    pass over the text; else one more than the commas inside the line's stretch."""
    total = (lengths + 1) // 14
    if (
        not ((lengths + 1) % 14).any()
        and len(ts) == int(total.sum())
        and _THIRTEEN_DIGITS[0] <= int(ts.min())
        and int(ts.max()) < _THIRTEEN_DIGITS[1]
    ):
        return total
    line_starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1] + 1, out=line_starts[1:])
    commas = np.flatnonzero(np.frombuffer(joined, np.uint8) == _COMMA)
    if len(ts) != len(commas) + 1:
        raise SourceError(
            f"{where}: {len(ts)} timestamps read where {len(commas) + 1} were sent", url=url
        )
    inner = np.searchsorted(commas, line_starts + lengths) - np.searchsorted(commas, line_starts)
    counts: np.ndarray = inner + 1
    return counts


def _decode_export_lines(body: bytes, where: str, url: str, label_cache: LabelCache) -> Columns:
    """The slow path, line by line: some line is not laid out as VictoriaMetrics writes it
    (decoded as JSON), or blank."""
    found: list[tuple[dict[str, str], LabelKey]] = []
    values: list[bytes | memoryview] = []
    times: list[bytes | memoryview] = []
    for n, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        one = _export_lines(line + b"\n")
        if one.laid_out[0]:
            vo, to = int(one.v_open[0]), int(one.t_open[0])
            meta, v, t = line[len(_VM_HEAD) : vo - 10], line[vo + 1 : to - 15], line[to + 1 : -2]
        else:
            meta, v, t = _export_line(line, n, where, url)
        if not t:
            continue
        found.append(label_cache.one(meta, n, where, url))
        values.append(v)
        times.append(t)
    keys = [f[1] for f in found]
    series = ([f[0] for f in found], keys, len(set(keys)) == len(keys))
    return _export_columns(where, url, series, values, times)


_TIMES_TAIL = np.frombuffer(b'],"timestamps":', np.uint8)
_VALUES_TAIL = np.frombuffer(b',"values":', np.uint8)
_HEAD = np.frombuffer(_VM_HEAD, np.uint8)


class _Lines(NamedTuple):
    starts: np.ndarray
    v_open: np.ndarray
    t_open: np.ndarray
    ends: np.ndarray
    laid_out: np.ndarray


def _export_lines(body: bytes) -> _Lines:
    """Each line of an export as (start, its values' ``[``, its timestamps' ``[``, end
    before the newline, laid out as VictoriaMetrics writes it), found for all lines at once:
    the last two ``[`` of a line open its values and timestamps (numbers hold none; a label
    value that does comes before them), checked against the text around them."""
    arr = np.frombuffer(body, np.uint8)
    ends = np.flatnonzero(arr == 10)
    if not len(body) or body[-1:] != b"\n":
        ends = np.append(ends, len(body))
    starts = np.zeros(len(ends), np.int64)
    starts[1:] = ends[:-1] + 1
    opens = np.flatnonzero(arr == 91)
    if len(opens) < 2:
        # no line holds both arrays (an empty answer: VictoriaMetrics lists a series for
        # every UTC date it has samples on, and exports none of a local day that has none):
        # each line is read on its own (a blank one is skipped, any other is an error)
        return _Lines(starts, starts, starts, ends, np.zeros(len(ends), bool))
    k = np.searchsorted(opens, ends)
    ok = (k >= 2) & (ends - starts >= 40)
    safe = np.where(ok, k, 2)
    t_open, v_open = opens[safe - 1], opens[safe - 2]
    ok &= v_open > starts + len(_VM_HEAD)
    ok &= (arr[np.clip(t_open, 15, None)[:, None] - 15 + np.arange(15)] == _TIMES_TAIL).all(1)
    ok &= (arr[np.clip(v_open, 10, None)[:, None] - 10 + np.arange(10)] == _VALUES_TAIL).all(1)
    head = np.clip(starts, 0, max(len(arr) - len(_HEAD), 0))[:, None] + np.arange(len(_HEAD))
    ok &= (arr[np.clip(head, 0, len(arr) - 1)] == _HEAD).all(1)
    tail = np.clip(ends - 2, 0, None)
    ok &= (arr[tail] == ord("]")) & (arr[np.clip(ends - 1, 0, None)] == ord("}"))
    return _Lines(starts, v_open, t_open, ends, ok)


def _export_line(line: bytes, n: int, where: str, url: str) -> tuple[bytes, bytes, bytes]:
    """A line not laid out as VictoriaMetrics writes it, decoded as JSON: (metric JSON,
    values, timestamps) as the fast path cuts them."""
    try:
        doc = orjson.loads(line)
        ts, vs = doc["timestamps"], doc["values"]
        if len(ts) != len(vs):
            raise ValueError(f"{len(ts)} timestamps but {len(vs)} values")
        meta = orjson.dumps(doc["metric"])
        values = b",".join(_json_value(v) for v in vs)
        times = b",".join(str(int(t)).encode() for t in ts)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SourceError(
            f"{where}: export line {n} is not a series ({exc}): {line[:120]!r}; nothing of "
            "the window is archived (a cut answer? retry)",
            url=url,
        ) from exc
    return meta, values, times


def _json_value(v: Any) -> bytes:
    if v is None:
        return b"null"
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"value {v!r} is not a number")
    return repr(v).encode() if isinstance(v, float) else str(v).encode()


# -- Prometheus: a matrix of raw samples ----------------------------------------------------

_PROM_VALUES = b'"values":['


_MATRIX_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_MATRIX_TAIL = b"]}}"
_NEXT_SERIES = b']},{"metric":'
_VALUES_KEY = b',"values":['


def decode_matrix(raw: bytes, where: str, url: str, label_cache: LabelCache) -> Columns:
    """A Prometheus matrix answer as columns (series in the answer's order).

    Laid out as Prometheus writes it (``{"status":"success","data":{"resultType":"matrix",
    "result":[{"metric":{...},"values":[[<seconds>,"<value>"],...]},...]}}``), the answer is
    cut at the series' boundaries, each series' ``metric`` object decoded once per run
    (``label_cache``); any other layout is parsed as JSON, the arrays apart. The arrays'
    pairs are parsed in one pass (times in ms, rounded as ``round(seconds * 1000)``).
    """
    cut = _matrix_parts(raw)
    if cut is None:
        found, arrays = _matrix_json(raw, where, url)
        keys = [f[1] for f in found]
        series = ([f[0] for f in found], keys, len(set(keys)) == len(keys))
    else:
        metas, arrays = cut
        series = label_cache.series(metas, where, url)
    # the arrays joined, a comma after each (the last one too); a sample is one ``[``
    joined = b",".join([*arrays, b""])
    lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
    del arrays
    bounds = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths + 1, out=bounds[1:])
    opens = np.flatnonzero(np.frombuffer(joined, np.uint8) == ord("["))
    counts = np.diff(np.searchsorted(opens, bounds))
    total = len(opens)
    if not total:
        empty = np.zeros(0, np.int64)
        return _assemble(where, url, series, counts, empty, b"", np.zeros(1, np.int64))
    if not counts.all():  # a series without samples: no empty item between two commas
        kept = np.flatnonzero(counts).tolist()
        joined = b"".join([joined[bounds[i] : bounds[i + 1]] for i in kept])
    flat = joined.translate(None, b'[]"')
    del joined
    text, offsets = _tokens(flat, where, url)
    if len(offsets) != 2 * total + 1:
        raise SourceError(f"{where}: a sample is not [time, value]", url=url)
    # tokens alternate: time, value; the times' bytes and the values' bytes apart
    lengths = np.diff(offsets)
    is_value = np.zeros(2 * total, bool)
    is_value[1::2] = True
    byte_is_value = np.repeat(is_value, lengths)
    data = np.frombuffer(text, np.uint8)
    ts = _seconds_ms(data[~byte_is_value].tobytes(), total, where, url)
    value_offsets = np.zeros(total + 1, _offset_type(len(text)))
    np.cumsum(lengths[1::2], out=value_offsets[1:])
    values = data[byte_is_value].tobytes()
    return _assemble(where, url, series, counts, ts, values, value_offsets)


def _matrix_parts(raw: bytes) -> tuple[list[bytes], list[bytes]] | None:
    """(each series' ``metric`` JSON, its ``values`` array without the outer brackets), cut
    from an answer laid out as Prometheus writes it; None for any other layout.

    Outside the series' ``metric`` objects the text holds only numbers, quotes, brackets and
    commas, and inside them a quote is escaped: ``]},{"metric":`` is found only where a
    series ends, and the last ``,"values":[`` of a series is its own.
    """
    if not (raw.startswith(_MATRIX_HEAD) and raw.endswith(_MATRIX_TAIL)):
        return None
    body = raw[len(_MATRIX_HEAD) : -len(_MATRIX_TAIL)]
    if not body:
        return [], []
    if not (body.startswith(b'{"metric":') and body.endswith(b"]}")):
        return None
    parts = [p.rpartition(_VALUES_KEY) for p in body[len(b'{"metric":') : -2].split(_NEXT_SERIES)]
    metas = [p[0] for p in parts]
    # each a JSON object with its array: the joined texts hold a "}" and "{" at every join
    joined = b"\0".join(metas)
    if (
        joined[:1] != b"{"
        or joined[-1:] != b"}"
        or joined.count(b"}\0{") != len(metas) - 1
        or not all(p[1] for p in parts)
    ):
        return None
    return metas, [p[2] for p in parts]


def _matrix_json(
    raw: bytes, where: str, url: str
) -> tuple[list[tuple[dict[str, str], LabelKey]], list[bytes]]:
    """The generic path: the ``values`` arrays cut out of the text, the rest parsed as
    JSON (and the whole answer when that does not line up)."""
    skeleton, arrays = _cut_values(raw)
    doc = _loads(skeleton, url, where)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else doc
        raise SourceError(f"{where}: the server did not answer success: {err}", url=url)
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise SourceError(
            f"{where}: expected a matrix, got {str(data)[:200]}; is the catalog entry a "
            "series selector (no function, no range)?",
            url=url,
        )
    results = data.get("result") or []
    if len(results) != len(arrays):  # something unexpected in the text: decode it all
        results = _loads(raw, url, where)["data"]["result"]
        arrays = [_pairs_text(item.get("values") or (), where, url) for item in results]
    labels = [{str(k): str(v) for k, v in (item.get("metric") or {}).items()} for item in results]
    return [(lab, label_key(lab)) for lab in labels], arrays


def _seconds_ms(joined: bytes, count: int, where: str, url: str) -> np.ndarray:
    """``count`` times in seconds (``1711922400`` or ``1711922415.5``), each followed by a
    comma, as epoch ms (``round(seconds * 1000)``)."""
    if b"." not in joined:
        return _ints(joined, count, where, url) * 1000
    try:
        f = np.fromstring(joined[:-1], dtype=np.float64, sep=",")
    except ValueError as exc:
        raise SourceError(f"{where}: a sample time is not a number ({exc})", url=url) from None
    if len(f) != count:
        raise SourceError(f"{where}: a sample time is not a number", url=url)
    out: np.ndarray = np.rint(f * 1000).astype(np.int64)
    return out


def _cut_values(raw: bytes) -> tuple[bytes, list[bytes]]:
    """``raw`` with the inner text of every ``"values":[...]]`` array taken out (the arrays
    left empty), and those texts in order (each ``[t,"v"],...,[t,"v"]``)."""
    pieces: list[bytes] = []
    arrays: list[bytes] = []
    pos = 0
    key = _PROM_VALUES
    while (i := raw.find(key, pos)) >= 0:
        start = i + len(key)
        if raw[start : start + 1] == b"]":
            arrays.append(b"")
            pieces.append(raw[pos:start])
            pos = start
            continue
        stop = raw.find(b"]]", start)
        if stop < 0:
            break
        stop += 1
        pieces.append(raw[pos:start])
        arrays.append(raw[start:stop])
        pos = stop
    pieces.append(raw[pos:])
    return b"".join(pieces), arrays


def _pairs_text(values: Iterable[Any], where: str, url: str) -> bytes:
    try:
        return b",".join(
            b'[%s,"%s"]' % (repr(float(t)).encode(), str(v).encode()) for t, v in values
        )
    except (TypeError, ValueError) as exc:
        raise SourceError(f"{where}: a sample is not [time, value] ({exc})", url=url) from exc


def _loads(raw: bytes, url: str, where: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SourceError(
            f"{where}: the answer is not valid JSON ({exc}): {excerpt(raw, 200)!r}; is this a "
            "Prometheus API URL?",
            url=url,
        ) from exc


# -- putting answers together ---------------------------------------------------------------


def concat(parts: Sequence[Columns], start_ms: int, end_ms: int) -> Columns:
    """One window from several answers (the parts of a series split, or a series sent in
    several lines): series with the same labels are joined, rows of a series in time order."""
    parts = [p for p in parts if p.labels]
    if not parts:
        return Columns(start_ms, end_ms)
    if len(parts) == 1:
        out = parts[0]
    else:
        labels = [lab for p in parts for lab in p.labels]
        keys = [k for p in parts for k in p.keys]
        lengths = np.concatenate([np.diff(p.starts) for p in parts])
        starts = np.zeros(len(labels) + 1, np.int64)
        np.cumsum(lengths, out=starts[1:])
        base = np.cumsum([0, *(len(p.text) for p in parts[:-1])])
        offsets = np.concatenate(
            [parts[0].offsets[:1]] + [p.offsets[1:] + b for p, b in zip(parts, base, strict=True)]
        )
        out = Columns(
            0,
            0,
            labels,
            keys,
            starts,
            np.concatenate([p.ts for p in parts]),
            b"".join(p.text for p in parts),
            offsets,
        )
    out.start_ms, out.end_ms = start_ms, end_ms
    return _normalised(out)


def _normalised(cols: Columns) -> Columns:
    """Each series once, each in time order: the answer as it came when it already is."""
    sid = cols.series_of_rows()
    keys = cols.keys
    if cols.distinct or len(set(keys)) == len(keys):
        later = cols.ts[1:] < cols.ts[:-1]
        if not (later & (sid[1:] == sid[:-1])).any():
            return cols
    first: dict[LabelKey, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    new_id = np.array([first[k] for k in keys], np.int64)
    kept = sorted(set(first.values()))
    rank = np.zeros(len(keys), np.int64)
    rank[kept] = np.arange(len(kept))
    row_series = rank[new_id][sid]
    order = np.lexsort((cols.ts, row_series))  # stable: equal times keep the answers' order
    lengths = np.diff(cols.offsets)[order]
    starts_bytes = cols.offsets[:-1][order]
    text = _gather(cols.text, starts_bytes, lengths)
    offsets = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(np.bincount(row_series, minlength=len(kept)), out=starts[1:])
    labels = [cols.labels[i] for i in kept]
    keys = [cols.keys[i] for i in kept]
    return Columns(
        cols.start_ms, cols.end_ms, labels, keys, starts, cols.ts[order], text, offsets, True
    )


def _gather(text: bytes, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``text``, in order."""
    total = int(lengths.sum())
    if total == 0:
        return b""
    dest = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=dest[1:])
    idx = np.repeat(starts - dest, lengths) + np.arange(total)
    out: bytes = np.frombuffer(text, np.uint8)[idx].tobytes()
    return out


def inside(cols: Columns) -> tuple[Columns, int]:
    """The rows in ``[start_ms, end_ms)`` and how many were dropped."""
    if not cols.rows:
        return cols, 0
    keep = (cols.ts >= cols.start_ms) & (cols.ts < cols.end_ms)
    kept = int(keep.sum())
    if kept == cols.rows:
        return cols, 0
    return cols.take_rows(keep), cols.rows - kept


def without_nan(cols: Columns) -> tuple[Columns, int]:
    """The rows whose value is not NaN, and how many were dropped: VictoriaMetrics stores no
    NaN but Prometheus' staleness markers (it skips every other NaN when it ingests a sample:
    lib/storage/storage.go, "Skip NaNs other than Prometheus staleness marker"), and exports
    them (``null``); they mark a series' end, not a sample, so Prometheus' range selection
    skips them and ``count_over_time`` on both servers does not count them."""
    if not cols.rows:
        return cols, 0
    keep = np.frombuffer(cols.text, np.uint8)[cols.offsets[:-1]] != ord("n")  # "nan,"
    kept = int(keep.sum())
    if kept == cols.rows:
        return cols, 0
    return cols.take_rows(keep), cols.rows - kept


def count_of(data: Any, where: str, url: str, labels: set[str] | None = None) -> int:
    """The sum of a ``count_over_time`` answer's per-series counts; ``labels`` (when given)
    gets the label names of the series counted (``__name__`` aside: the function drops it)."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise SourceError(f"count of {where}: expected a vector, got {str(data)[:200]}", url=url)
    total = 0
    for item in data.get("result") or ():
        value = float(item["value"][1])
        if not math.isnan(value) and value > 0:
            total += int(value)
            if labels is not None and isinstance(item.get("metric"), dict):
                labels.update(k for k in item["metric"] if k != "__name__")
    return total
