"""KairosDB and Examon jobs query semantics of the simulator: parse a request body, plan it
over the data model, and render the answer. Pure: no HTTP and no sockets here.
"""

from __future__ import annotations

import math
import re
import time
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, cast

import numpy as np
import orjson

from dxt_core.backends.examon.simulator.faults import (
    CORRUPTIONS,
    Faults,
    _MetricFault,
    _QueryLimit,
)
from dxt_core.backends.examon.simulator.model import (
    DataModel,
    JsonObj,
    _Metric,
    _series_values,
)

_INTERNAL_METRICS: Final = (
    "kairosdb.datastore.query_time",
    "kairosdb.http.query_time",
    "kairosdb.http.request_time",
    "kairosdb.protocol.http_request_count",
)
_UNIT_MS: Final = {
    "milliseconds": 1,
    "seconds": 1_000,
    "minutes": 60_000,
    "hours": 3_600_000,
    "days": 86_400_000,
    "weeks": 7 * 86_400_000,
    "months": 30 * 86_400_000,
    "years": 365 * 86_400_000,
}


class _BadRequest(Exception):
    """The request is malformed: answered with HTTP 400 and this message."""


class _ServerError(Exception):
    """A query KairosDB 1.2.2 fails on with a Java exception: HTTP 500 and this message.

    kairosdb/kairosdb v1.2.2 ``core/http/rest/MetricsResource.java`` ``runQuery`` and
    ``getMeta``: ``catch (Exception e)`` answers 500 with ``{"errors": [e.getMessage()]}``.
    """


class _NotFinite(Exception):
    """The answer holds a stored NaN or Infinity, which KairosDB 1.2.2 cannot write.

    kairosdb/kairosdb v1.2.2 ``core/datapoints/DoubleDataPoint.java`` ``writeValueToJson``
    throws ``IllegalStateException("NaN or Infinity:" + m_value + " data point=" + this)``
    (``this`` prints as ``DataPointHelper{m_timestamp=...}``); ``core/http/rest/
    MetricsResource.java`` ``runQuery`` catches it (``catch (Exception e)``) and answers
    HTTP 500 with ``{"errors": [e.getMessage()]}``.
    """


def java_special(x: float) -> str:
    """``Double.toString`` of a non-finite double."""
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


@dataclass(slots=True)
class _MetricQuery:
    name: str
    tags: dict[str, list[str]]
    group_keys: list[str] | None
    limit: int | None
    descending: bool
    exclude_tags: bool
    #: The ``count`` aggregator's sampling in ms (one range per sampling period from the
    #: query start), or ``None`` for raw data points.
    count_ms: int | None = None
    count_align: str = ""


@dataclass(slots=True)
class _Query:
    start_ms: int
    end_ms: int
    absolute_end: bool
    metrics: list[_MetricQuery]


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise _BadRequest(f"{what} must be a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise _BadRequest(f"{what} must be a number, got {value!r}")


_JAVA_LONG: Final = re.compile(r"[+-]?[0-9]+")


def _gson_long(value: Any, what: str) -> int:
    """``start_absolute``/``end_absolute`` as Gson 2.2.4 reads a ``Long`` field from the
    parsed tree (kairosdb/kairosdb v1.2.2 ``core/http/rest/json/Query.java``: ``Long
    m_startAbsolute``; ``QueryParser.parseQueryMetric`` runs ``m_gson.fromJson(obj,
    Query.class)`` on a ``JsonObject``).

    google/gson gson-2.2.4 ``internal/bind/JsonTreeReader.java`` ``nextLong`` takes
    ``JsonPrimitive.getAsLong()``: a number is a ``LazilyParsedNumber`` whose ``longValue``
    is ``Long.parseLong`` or else ``new BigDecimal(text).longValue()`` (``1.9`` reads 1,
    ``1e3`` reads 1000: accepted, truncated); a string goes through ``Long.parseLong`` (its
    ``NumberFormatException`` becomes a ``JsonSyntaxException``, answered 400 with its
    message); any other token is ``IllegalStateException("Expected NUMBER but was ...")``,
    also a ``JsonSyntaxException`` (``Gson.fromJson`` wraps it).
    """
    if isinstance(value, bool):
        raise _BadRequest("java.lang.IllegalStateException: Expected NUMBER but was BOOLEAN")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _BadRequest(f"java.lang.NumberFormatException: For input string: {value!r}")
        return int(Decimal(repr(value)))  # BigDecimal.longValue truncates toward zero
    if isinstance(value, str):
        if _JAVA_LONG.fullmatch(value):
            return int(value)
        raise _BadRequest(f'java.lang.NumberFormatException: For input string: "{value}"')
    token = "BEGIN_OBJECT" if isinstance(value, dict) else "BEGIN_ARRAY"
    raise _BadRequest(f"java.lang.IllegalStateException: Expected NUMBER but was {token}")


def gson_text(value: Any) -> str:
    """A parsed JSON value as Gson's ``JsonElement.toString`` writes it (compact)."""
    if value is None:
        return "null"
    return orjson.dumps(value).decode()


_OFFSET_ZONE: Final = re.compile(r"[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9](?::?[0-5][0-9])?)?")


def _check_time_zone(value: Any) -> None:
    """``time_zone`` as QueryParser's ``DateTimeZoneDeserializer`` reads it (kairosdb/kairosdb
    v1.2.2 ``core/http/rest/json/QueryParser.java``): null or "" is fine (UTC); an id Joda
    ``DateTimeZone.forID`` refuses is a ``ContextualJsonSyntaxException(tz, "is not a valid
    time zone, must be one of " + DateTimeZone.getAvailableIDs())``, which
    ``parseQueryMetric`` answers as ``query.<tz> ...`` (400). The list printed is the tz
    database this Python has (Joda's own copy may differ by a few names).
    """
    if value is None:
        return
    tz = value if isinstance(value, str) else gson_text(value)
    if tz == "" or tz == "UTC" or _OFFSET_ZONE.fullmatch(tz) or tz in _zone_ids():
        return
    raise _BadRequest(
        f"query.{tz} is not a valid time zone, must be one of [{', '.join(sorted(_zone_ids()))}]"
    )


_ZONES: set[str] = set()


def _zone_ids() -> set[str]:
    if not _ZONES:
        _ZONES.update(zoneinfo.available_timezones())
        _ZONES.add("UTC")
    return _ZONES


def _duration(
    value: Any, what: str, units: dict[str, int], default_unit: str = "", why: str = ""
) -> tuple[int, int]:
    """A ``{value, unit}`` object (KairosDB's RelativeTime and Sampling): its amount and its
    unit in milliseconds; ``why`` follows the list of units where the unit is not one."""
    if not isinstance(value, dict):
        raise _BadRequest(f"{what} must be an object {{value, unit}}, got {value!r}")
    amount = _as_int(value.get("value"), f"{what}.value")
    unit = str(value.get("unit", default_unit)).lower()
    if unit not in units:
        raise _BadRequest(
            f"{what}.unit must be one of {', '.join(units)}{why}, got {value.get('unit')!r}"
        )
    return amount, units[unit]


def _relative_ms(value: Any, what: str, now_ms: int) -> int:
    amount, unit_ms = _duration(value, f"query.{what}", _UNIT_MS)
    return now_ms - amount * unit_ms


def _parse_query(body: Any, now_ms: int) -> _Query:
    """A query body as kairosdb/kairosdb v1.2.2 ``core/http/rest/json/QueryParser.java``
    ``parseQueryMetric`` reads it, in its order: the ``Query`` fields (Gson), then
    ``metrics`` (absent: 400; ``[]``: no query, answered ``{"queries": []}``), then for each
    metric its name and tags, its start (needed only there), its end, its group_by and
    aggregators."""
    if not isinstance(body, dict):
        # parser.parse(json).getAsJsonObject(): an empty body parses as JsonNull; the
        # IllegalStateException reaches MetricsResource's catch (Exception e): 500.
        raise _ServerError(f"Not a JSON Object: {gson_text(body)}")
    start: int | None = None
    if body.get("start_absolute") is not None:
        start = _gson_long(body["start_absolute"], "query.start_absolute")
    elif body.get("start_relative") is not None:
        start = _relative_ms(body["start_relative"], "start_relative", now_ms)
    end: int | None = None
    if body.get("end_absolute") is not None:
        end = _gson_long(body["end_absolute"], "query.end_absolute")
    elif body.get("end_relative") is not None:
        end = _relative_ms(body["end_relative"], "end_relative", now_ms)
    _check_time_zone(body.get("time_zone"))
    # QueryParser.getEndTime: neither end gives -1 and "if (endTime > -1)" sets it; any other
    # (a negative end too) leaves QueryMetric's end at Long.MAX_VALUE: up to now here.
    absolute_end = end is not None and end > -1 and body.get("end_absolute") is not None
    if end is None or end <= -1:
        end = None
    metrics_raw = body.get("metrics")
    if metrics_raw is None:
        raise _BadRequest("query.metric[] must have a size of at least 1")
    if not isinstance(metrics_raw, list):
        # obj.getAsJsonArray("metrics"): a ClassCastException, caught as any Exception.
        kind = "JsonObject" if isinstance(metrics_raw, dict) else "JsonPrimitive"
        raise _ServerError(f"com.google.gson.{kind} cannot be cast to com.google.gson.JsonArray")
    metrics = [_parse_metric(m, i, start, end) for i, m in enumerate(metrics_raw)]
    return _Query(start or 0, now_ms if end is None else end, absolute_end, metrics)


def _parse_metric(raw: Any, i: int, start: int | None, end: int | None) -> _MetricQuery:
    ctx = f"query.metric[{i}]"
    if not isinstance(raw, dict):
        # MetricDeserializer: jsonElement.getAsJsonObject(); Gson.fromJson wraps the
        # IllegalStateException in a JsonSyntaxException: 400 with its message.
        raise _BadRequest(f"java.lang.IllegalStateException: Not a JSON Object: {gson_text(raw)}")
    tags = _parse_tags(raw, ctx)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _BadRequest(f"{ctx}.name may not be empty")
    if start is None:
        raise _BadRequest(f"{ctx}.start_time relative or absolute time must be set")
    if end is not None and end < start:
        # QueryParser.parseQueryMetric: SimpleConstraintViolation("end_time", "must be
        # greater than the start time") in the metric's context, no number in it.
        raise _BadRequest(f"{ctx}.end_time must be greater than the start time")
    group_keys: list[str] | None = None
    group_raw = raw.get("group_by")
    if group_raw is not None:
        if not isinstance(group_raw, list):
            raise _BadRequest(f"{ctx}.group_by must be a list")
        for j, grouper in enumerate(group_raw):
            gname = grouper.get("name") if isinstance(grouper, dict) else None
            if not isinstance(gname, str) or not gname:
                raise _BadRequest(f"{ctx}.group_by[{j}] must have a name")
            if gname in ("time", "value", "bin"):
                raise _BadRequest(f"{ctx}.group_by[{j}].{gname} is not supported by the simulator")
            if gname != "tag":
                raise _BadRequest(f"{ctx}.group_by[{j}].{gname} invalid group_by name")
            keys = cast(JsonObj, grouper).get("tags")
            # core/groupby/TagGroupBy.java: "@NotNull @NotEmpty List<String> tags", checked by
            # QueryParser.parseQueryProcessor's validateObject(queryProcessor, qpContext):
            # BeanValidationException prints "<context>.<property> <message>" (QueryParserTest
            # test_groupby_tag_missing_tags_invalid / test_groupby_tag_emtpy_tags_invalid).
            if keys is None:
                raise _BadRequest(f"{ctx}.group_by[{j}].tags may not be null")
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise _BadRequest(f"{ctx}.group_by[{j}].tags must be a list of tag names")
            if not keys:
                raise _BadRequest(f"{ctx}.group_by[{j}].tags may not be empty")
            group_keys = (group_keys or []) + [k for k in keys if k not in (group_keys or [])]
    count_ms, count_align = _parse_count(raw.get("aggregators"), ctx)
    limit = None
    if raw.get("limit") is not None:
        limit = _as_int(raw["limit"], f"{ctx}.limit")
        if limit < 0:
            raise _BadRequest(f"{ctx}.limit must be >= 0")
    order = str(raw.get("order", "asc")).lower()
    if order not in ("asc", "desc"):
        raise _BadRequest(f"{ctx}.order must be 'asc' or 'desc', got {raw.get('order')!r}")
    return _MetricQuery(
        name=name,
        tags=tags,
        group_keys=group_keys,
        limit=limit,
        descending=order == "desc",
        exclude_tags=bool(raw.get("exclude_tags", False)),
        count_ms=count_ms,
        count_align=count_align,
    )


def _parse_tags(raw: JsonObj, ctx: str) -> dict[str, list[str]]:
    """A metric's tag filter as kairosdb/kairosdb v1.2.2 ``QueryParser.MetricDeserializer``
    reads it: an empty key, a null or "" value (alone or in a list) is a
    ``ContextualJsonSyntaxException`` answered 400 as ``<ctx>.tags[<n>].<key> value must not
    be null or empty`` (``n`` counts the keys); an empty list puts nothing in the
    ``TreeMultimap``, so it filters nothing; numbers are read with ``getAsString``."""
    if "tags" not in raw:
        return {}
    tags_raw = raw["tags"]
    if not isinstance(tags_raw, dict):
        # jeTags.getAsJsonObject() on null or a non-object: IllegalStateException, wrapped
        # by Gson.fromJson in a JsonSyntaxException (400, its message).
        raise _BadRequest(
            f"java.lang.IllegalStateException: Not a JSON Object: {gson_text(tags_raw)}"
        )
    tags: dict[str, list[str]] = {}
    for count, (key, values) in enumerate(tags_raw.items()):
        where = f"{ctx}.tags[{count}]"
        if key == "":
            raise _BadRequest(f"{where} name must not be empty")
        wanted: list[str] = []
        for value in values if isinstance(values, list) else [values]:
            if value is None or value == "":
                raise _BadRequest(f"{where}.{key} value must not be null or empty")
            if isinstance(value, bool):
                wanted.append("true" if value else "false")
            elif isinstance(value, int | float | str):
                wanted.append(value if isinstance(value, str) else gson_text(value))
            else:
                raise _BadRequest(f"{ctx}.tags.{key} must be a string or a list of strings")
        if wanted:
            tags[key] = sorted(set(tags.get(key, [])) | set(wanted))
    return tags


#: Sampling units of fixed length; KairosDB also takes days, weeks, months and years
#: (calendar fields in the query's time zone), which the simulator refuses.
_FIXED_UNIT_MS: Final = {"milliseconds": 1, "seconds": 1_000, "minutes": 60_000, "hours": 3_600_000}


def _parse_count(aggregators: Any, ctx: str) -> tuple[int | None, str]:
    """The one aggregator the simulator implements: ``count``, as KairosDB 1.2.2 does it.

    kairosdb/kairosdb v1.2.2 ``core/aggregator/CountAggregator.java`` (a RangeAggregator
    whose sub-aggregator counts the points of each range) and ``RangeAggregator.java``:
    ranges are ``sampling`` long from the query's start (``QueryParser`` calls
    ``setStartTime(queryMetric.getStartTime())``; default sampling 1 ms); a range without
    points yields nothing; each count is stamped with the time of the range's first point,
    or its start (``align_start_time``) or end (``align_end_time``).
    """
    if not aggregators:
        return None, ""
    if not isinstance(aggregators, list) or len(aggregators) != 1:
        raise _BadRequest(f"{ctx}.aggregators: the simulator supports one count aggregator only")
    agg = aggregators[0]
    if not isinstance(agg, dict) or agg.get("name") != "count":
        name = agg.get("name") if isinstance(agg, dict) else agg
        raise _BadRequest(
            f"{ctx}.aggregators[0].{name} is not supported by the simulator (count only); "
            "query raw data points"
        )
    sampling = agg.get("sampling") or {"value": 1, "unit": "milliseconds"}
    what = f"{ctx}.aggregators[0].sampling"
    why = " in the simulator (it supports no longer unit)"
    value, unit_ms = _duration(sampling, what, _FIXED_UNIT_MS, "milliseconds", why)
    if value < 1:
        raise _BadRequest(f"{what}.value must be >= 1")
    if agg.get("align_sampling"):
        raise _BadRequest(f"{ctx}.aggregators[0].align_sampling is not supported by the simulator")
    align = "start" if agg.get("align_start_time") else "end" if agg.get("align_end_time") else ""
    return value * unit_ms, align


@dataclass(slots=True)
class _Plan:
    """A metric query resolved to series and sample slots, with its point count."""

    metric: _Metric | None
    query: _MetricQuery
    first_slot: int
    slots: int
    lo: int
    hi: int
    groups: list[tuple[dict[str, str], list[int]]]  # (group tag values, series indices)
    counts: dict[int, int]  # samples per series index in the window
    points: int

    @property
    def empty(self) -> bool:
        return self.metric is None or self.points == 0 or not self.groups


def _empty_result(name: str) -> JsonObj:
    # A metric without rows in the window (or unknown) is one group with no GroupByResult:
    # no "group_by" key (KairosDatastore.groupByTypeAndTag adds a SortingDataPointGroup;
    # JsonResponse.formatQuery writes group_by only when there are results).
    return {"name": name, "tags": {}, "values": []}


def java_double(x: float) -> str:
    """``Double.toString(x)`` as Java 8 writes it.

    Decimal notation for 1e-3 <= |x| < 1e7, otherwise ``d.dddE<n>``; the digits are the
    shortest that read back as ``x`` (JDK 8 is sometimes longer, for rare values).
    """
    if x != x or x in (math.inf, -math.inf):
        raise ValueError(f"JSON does not allow non-finite numbers: {x}")
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    text = repr(x)
    if 1e-3 <= abs(x) < 1e7:
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(text).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    power = cast(int, exponent) + len(digits) - 1
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{power}"


def org_json_number(x: float) -> str:
    """A double as KairosDB 1.2.2 writes it: org.json (chargebee-1.0) ``numberToString``
    drops trailing zeros and then a trailing point from ``Double.toString`` when there is no
    exponent: ``24.0`` -> ``24``, ``0.1 + 0.2`` -> ``0.30000000000000004``, ``1.0E7`` kept."""
    text = java_double(x)
    if "." in text and "E" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _encode(ts: Any, values: Any, kind: str) -> bytes:
    """``[[ts, v], ...]`` as KairosDB writes a series: doubles through org.json, longs as
    integers, strings quoted."""
    if kind == "float":
        return _encode_doubles(ts, values)
    return orjson.dumps(list(zip(ts.tolist(), values.tolist(), strict=True)))


def _encode_doubles(ts: Any, values: Any) -> bytes:
    """``[[ts, v], ...]`` with the doubles as org.json prints them."""
    finite = values[values != 0]
    if finite.size == 0 or (np.abs(finite).min() >= 1e-3 and np.abs(finite).max() < 1e7):
        # orjson writes these as Python's repr does, always with a fraction: only the
        # whole ones differ (``24.0``), and ``.0]`` can only be a value's end.
        return orjson.dumps(list(zip(ts.tolist(), values.tolist(), strict=True))).replace(
            b".0]", b"]"
        )
    pairs = ",".join(
        f"[{t},{org_json_number(v)}]" for t, v in zip(ts.tolist(), values.tolist(), strict=True)
    )
    return f"[{pairs}]".encode()


def _tags_of(metric: _Metric, series_idx: Sequence[int]) -> dict[str, list[str]]:
    return {
        key: sorted({metric.series[i][key] for i in series_idx if key in metric.series[i]})
        for key in metric.tag_keys
    }


def _result(
    metric: _Metric,
    mq: _MetricQuery,
    group: Any,
    series_idx: Sequence[int],
    type_group: JsonObj,
    values: Any,
) -> JsonObj:
    """One entry of a metric query's ``results``: the tag group when the query groups by
    tags, then the type group, the tags of the series merged into it (unless excluded).

    kairosdb/kairosdb v1.2.2 ``core/datastore/KairosDatastore.java`` ``groupByTypeAndTag``:
    ``new SortingDataPointGroup(groups.get(key), groupByResults.get(key), order)`` adds the
    TagGroupByResult, then ``sdpGroup.addGroupByResult(new TypeGroupByResult(type))``;
    ``core/formatter/JsonResponse.java`` ``formatQuery`` writes them in that order.
    """
    group_by: list[JsonObj] = []
    if mq.group_keys is not None:
        group_by.append({"name": "tag", "tags": list(mq.group_keys), "group": group})
    group_by.append(type_group)
    tags = {} if mq.exclude_tags else _tags_of(metric, series_idx)
    return {"name": metric.name, "group_by": group_by, "tags": tags, "values": values}


@dataclass(slots=True)
class _Response:
    """An answer before it is written.

    Attributes:
        encoding: who would compress it: ``"kairosdb"`` (Jetty's GzipFilter: whenever the
            client accepts gzip), ``"flask"`` (the Examon server's ``flask_gzip``: 2xx of
            500 bytes or more) or ``"none"`` (Grafana's own API, ``enable_gzip = false``;
            error pages).
    """

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    points: int = 0
    #: Data points in the answer when they are not ``points`` (those read): a ``count``
    #: query reads every point and answers one number per range.
    served: int | None = None
    cacheable: bool = False
    content_type: str = "application/json; charset=UTF-8"
    encoding: str = "kairosdb"


def _json(status: int, obj: Any, **headers: str) -> _Response:
    return _Response(status, orjson.dumps(obj), dict(headers))


def _error(status: int, *messages: str) -> _Response:
    return _json(status, {"errors": list(messages)})


class QueryEngine:
    """Answers KairosDB and Examon jobs queries over a :class:`DataModel`.

    Args:
        model: the data to serve.
        faults: the faults in force (read on every query; may change between queries).
    """

    def __init__(self, model: DataModel, faults: Faults) -> None:
        self.model = model
        self.config = model.config
        self.faults = faults

    def _plan(self, query: _Query, mq: _MetricQuery, now_ms: int) -> _Plan:
        metric = self.model.metric(mq.name)
        first, count, lo, hi = self.model.slots(query.start_ms, query.end_ms, now_ms)
        if metric is None or (count == 0 and not self.model.extra.get(mq.name)):
            return _Plan(metric, mq, first, count, lo, hi, [], {}, 0)
        selected = [
            i
            for i, tags in enumerate(metric.series)
            if all(tags.get(key) in wanted for key, wanted in mq.tags.items())
        ]
        found = self.model.sample_counts(metric, selected, first, count, lo, hi)
        counts = dict(zip(selected, found, strict=True))
        for i in selected:
            counts[i] += len(self.model.extra_points(metric, i, lo, hi))
        selected = [i for i in selected if counts[i]]
        # kairosdb/kairosdb v1.2.2 core/datastore/KairosDatastore.java groupByTypeAndTag:
        # getMatchingTags gives every grouping key, "" where the row lacks it (the row
        # wrapper's getTagValues is Collections.singleton(null), never null); the groups
        # are keyed and sorted by getTagsKey, the keys and values run together (a TreeSet of
        # those strings), and a group's "group" is the last TagGroupByResult put for its key.
        groups: dict[str, tuple[dict[str, str], list[int]]] = {}
        if mq.group_keys is None:
            if selected:
                groups[""] = ({}, selected)
        else:
            for i in selected:
                tags = metric.series[i]
                matching = {k: tags.get(k, "") for k in mq.group_keys}
                key = "".join(k + v for k, v in matching.items())
                members = groups[key][1] if key in groups else []
                groups[key] = (matching, [*members, i])
        plan_groups = [groups[key] for key in sorted(groups)]
        points = 0
        for _, idx in plan_groups:
            n = sum(counts[i] for i in idx)
            points += n if mq.limit is None else min(n, mq.limit)
        return _Plan(metric, mq, first, count, lo, hi, plan_groups, counts, points)

    def _series_points(self, plan: _Plan, metric: _Metric, i: int) -> tuple[Any, Any]:
        """Timestamps and values of series ``i`` in the plan's window, added points merged."""
        ts = self.model.sample_times(metric, i, plan.first_slot, plan.slots, plan.lo, plan.hi)
        values = _series_values(metric, i, ts, self.config.realistic)
        extra = self.model.extra_points(metric, i, plan.lo, plan.hi)
        if extra:
            ets = np.asarray([p[0] for p in extra], dtype=np.int64)
            dtype = object if metric.kind == "str" else values.dtype
            evals = np.asarray([p[1] for p in extra], dtype=dtype)
            all_ts = np.concatenate([ts, ets])
            order = np.argsort(all_ts, kind="stable")
            ts = all_ts[order]
            values = np.concatenate([np.asarray(values, dtype=evals.dtype), evals])[order]
        return ts, values

    def _render_counts(self, plan: _Plan, query_start_ms: int) -> list[Any]:
        """Results of a ``count`` query (see :func:`_parse_count`)."""
        if plan.empty:
            return [_empty_result(plan.query.name)]
        metric = cast(_Metric, plan.metric)
        mq = plan.query
        step = cast(int, mq.count_ms)
        results: list[Any] = []
        for group, idx in plan.groups:
            all_ts = np.sort(
                np.concatenate([self._series_points(plan, metric, i)[0] for i in idx]),
                kind="stable",
            )
            ranges = (all_ts - query_start_ms) // step
            bins, first, n = np.unique(ranges, return_index=True, return_counts=True)
            if mq.count_align == "start":
                stamps = query_start_ms + bins * step
            elif mq.count_align == "end":
                stamps = query_start_ms + (bins + 1) * step
            else:
                stamps = all_ts[first]
            pairs = [[int(t), int(c)] for t, c in zip(stamps, n, strict=True)]
            if mq.descending:
                pairs.reverse()
            if mq.limit is not None:
                pairs = pairs[: mq.limit]
            # The group_by written is the rows' own TypeGroupByResult: the aggregator's group
            # (core/aggregator/AggregatedDataPointGroupWrapper.java getGroupByResult) returns
            # the inner group's list; CountAggregator.getAggregatedGroupType only picks the
            # next aggregator (KairosDatastore.DatastoreQueryImpl.execute).
            type_group = {"name": "type", "type": "text" if metric.kind == "str" else "number"}
            results.append(_result(metric, mq, group, idx, type_group, pairs))
        return results

    def _render_results(self, plan: _Plan) -> list[Any]:
        if plan.empty:
            return [_empty_result(plan.query.name)]
        metric = cast(_Metric, plan.metric)
        mq = plan.query
        type_group = {"name": "type", "type": "text" if metric.kind == "str" else "number"}
        results: list[Any] = []
        for group, idx in plan.groups:
            parts = [self._series_points(plan, metric, i) for i in idx]
            if len(parts) == 1:
                flat_ts, flat_values = parts[0]
            else:
                # Merged series come out in time order, ties in series order, as KairosDB does.
                all_ts = np.concatenate([t for t, _ in parts])
                order = np.argsort(all_ts, kind="stable")
                flat_ts = all_ts[order]
                flat_values = np.concatenate([v for _, v in parts])[order]
            if mq.descending:
                flat_ts, flat_values = flat_ts[::-1], flat_values[::-1]
            if mq.limit is not None:
                flat_ts, flat_values = flat_ts[: mq.limit], flat_values[: mq.limit]
            if metric.kind == "float":
                bad = np.flatnonzero(~np.isfinite(flat_values))
                if bad.size:
                    at = int(bad[0])
                    raise _NotFinite(
                        f"NaN or Infinity:{java_special(float(flat_values[at]))} data point="
                        f"DataPointHelper{{m_timestamp={int(flat_ts[at])}}}"
                    )
            # Encode each series' values on its own so that the big list of pairs is
            # short-lived; orjson splices the bytes in unchanged.
            encoded = _encode(flat_ts, flat_values, metric.kind)
            if not results and len(flat_ts):
                encoded = self._spoil(encoded, flat_ts, flat_values, metric.kind, plan.lo)
            results.append(_result(metric, mq, group, idx, type_group, orjson.Fragment(encoded)))
        return results

    def _spoil(self, encoded: bytes, ts: Any, values: Any, kind: str, start_ms: int) -> bytes:
        """Apply ``faults.stray_points`` and ``faults.corrupt_values`` to a series' text."""
        faults = self.faults
        first = _encode(ts[:1], values[:1], kind)[1:-1]  # "[t,v]", how the text starts
        if faults.stray_points:
            stray = b"[%d" % (start_ms - 3_600_000) + first[first.index(b",") :]
            encoded = b"[" + stray + b"," + encoded[1:]
            first = stray
        if faults.corrupt_values is not None:
            bad = first[: first.index(b",") + 1] + CORRUPTIONS[faults.corrupt_values] + b"]"
            encoded = b"[" + bad + encoded[1 + len(first) :]
        return encoded

    # -- endpoint implementations ------------------------------------------------------------

    def datapoints(self, body: Any, *, tags_only: bool = False) -> _Response:
        """Answer ``/api/v1/datapoints/query`` (or ``.../query/tags``) for a parsed body."""
        now_ms = int(time.time() * 1000)
        query = _parse_query(body, now_ms)
        failing = set(self.faults.fail_metrics).intersection(m.name for m in query.metrics)
        if failing:
            raise _MetricFault(sorted(failing))
        # The answer is immutable once the window is wholly in the past.
        cacheable = query.absolute_end and query.end_ms < now_ms
        if tags_only:
            plans = [self._plan(_row_window(query), mq, now_ms) for mq in query.metrics]
            # MetricsResource.getMeta formats an EmptyDataPointGroup per metric: name, tags
            # and an empty "values", no sample_size and no group_by.
            tag_results = [
                {
                    "name": p.query.name,
                    "tags": {} if p.empty else _tags_of(cast(_Metric, p.metric), _all(p)),
                    "values": [],
                }
                for p in plans
            ]
            # getMeta calls formatQuery once per metric: one {"results": [...]} each.
            response = _json(200, {"queries": [{"results": [r]} for r in tag_results]})
            response.cacheable = cacheable
            return response
        plans = [self._plan(query, mq, now_ms) for mq in query.metrics]
        total = sum(p.points for p in plans)
        limit = self.faults.max_points
        if limit is not None and total > limit:
            raise _QueryLimit(limit)
        queries = [
            {
                "sample_size": p.points,
                "results": self._render_results(p)
                if p.query.count_ms is None
                else self._render_counts(p, query.start_ms),
            }
            for p in plans
        ]
        served = 0
        for p, q in zip(plans, queries, strict=True):
            if p.query.count_ms is None:
                served += p.points
            else:
                served += sum(len(r["values"]) for r in cast(list[JsonObj], q["results"]))
        response = _Response(200, orjson.dumps({"queries": queries}), points=total, served=served)
        response.cacheable = cacheable
        return response

    def metric_names(self, prefix: str | None) -> _Response:
        """Answer ``/api/v1/metricnames``."""
        if prefix == "":
            # CassandraDatastore.getMetricNames increments the last byte of the prefix:
            # an empty one fails (ArrayIndexOutOfBoundsException) and the catch answers 500.
            return _error(500, "java.lang.ArrayIndexOutOfBoundsException: -1")
        # Names come in Cassandra's order of the string_index column (UTF-8 bytes).
        names = sorted([*self.model.plugins, *_INTERNAL_METRICS], key=lambda n: n.encode())
        if prefix:
            names = [n for n in names if n.startswith(prefix)]
        return _json(200, {"results": names})

    def tag_names(self) -> _Response:
        """Answer ``/api/v1/tagnames``: every tag key of every metric."""
        keys: set[str] = set()
        for name in self.model.plugins:
            keys.update(cast(_Metric, self.model.metric(name)).tag_keys)
        return _json(200, {"results": sorted(keys)})

    def tag_values(self) -> _Response:
        """Answer ``/api/v1/tagvalues``: every tag value of every metric."""
        values: set[str] = set()
        for name in self.model.plugins:
            for tags in cast(_Metric, self.model.metric(name)).series:
                values.update(tags.values())
        return _json(200, {"results": sorted(values)})

    # -- response cache ----------------------------------------------------------------------


#: kairosdb/kairosdb v1.2.2 ``datastore/cassandra/CassandraDatastore.java`` ``ROW_WIDTH``: a
#: Cassandra row holds three weeks of one series.
ROW_WIDTH_MS: Final = 1_814_400_000


def row_time(timestamp: int) -> int:
    """``CassandraDatastore.calculateRowTime``: the start of the row holding ``timestamp``."""
    return timestamp - abs(timestamp) % ROW_WIDTH_MS


def _row_window(query: _Query) -> _Query:
    """The span whose series ``/datapoints/query/tags`` reports.

    kairosdb/kairosdb v1.2.2 ``CassandraDatastore.queryMetricTags`` adds the tags of every
    row key ``getKeysForQueryIterator`` finds, without reading a point:
    ``CQLFilteredRowKeyIterator`` asks the row_key_time_index for row times in
    ``[calculateRowTime(start), end]``, so a series with a point anywhere in the rows that
    overlap the window is reported, from the start of the first row to the end of the last.
    """
    start = row_time(query.start_ms)
    end = row_time(query.end_ms) + ROW_WIDTH_MS - 1
    return _Query(start, end, query.absolute_end, query.metrics)


def _all(plan: _Plan) -> list[int]:
    return [i for _, idx in plan.groups for i in idx]
