"""KairosDB and Examon jobs query semantics of the simulator: parse a request body, plan it
over the data model, and render the answer. Pure: no HTTP and no sockets here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import numpy as np
import orjson

from dxt_core.backends.examon.simulator.faults import Faults, _MetricFault, _QueryLimit
from dxt_core.backends.examon.simulator.model import (
    JOB_PERIOD_S,
    DataModel,
    JsonObj,
    _Metric,
    _series_values,
)

# Guards the jobs endpoint against an accidental "everything since 1970" query.
_MAX_JOBS_PER_QUERY: Final = 250_000
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


@dataclass(slots=True)
class _MetricQuery:
    name: str
    tags: dict[str, list[str]]
    group_keys: list[str] | None
    limit: int | None
    descending: bool
    exclude_tags: bool


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


def _relative_ms(value: Any, what: str, now_ms: int) -> int:
    if not isinstance(value, dict):
        raise _BadRequest(f"query.{what} must be an object {{value, unit}}, got {value!r}")
    amount = _as_int(value.get("value"), f"query.{what}.value")
    unit = str(value.get("unit", "")).lower()
    if unit not in _UNIT_MS:
        raise _BadRequest(
            f"query.{what}.unit must be one of {', '.join(_UNIT_MS)}, got {value.get('unit')!r}"
        )
    return now_ms - amount * _UNIT_MS[unit]


def _parse_query(body: Any, now_ms: int) -> _Query:
    if not isinstance(body, dict):
        raise _BadRequest("query must be a JSON object")
    metrics_raw = body.get("metrics")
    if not isinstance(metrics_raw, list) or not metrics_raw:
        raise _BadRequest("query.metric[] must have a size of at least 1")
    if body.get("start_absolute") is not None:
        start = _as_int(body["start_absolute"], "query.start_absolute")
    elif body.get("start_relative") is not None:
        start = _relative_ms(body["start_relative"], "start_relative", now_ms)
    else:
        raise _BadRequest("query.metric[0].start_time relative or absolute time must be set")
    absolute_end = body.get("end_absolute") is not None
    if absolute_end:
        end = _as_int(body["end_absolute"], "query.end_absolute")
    elif body.get("end_relative") is not None:
        end = _relative_ms(body["end_relative"], "end_relative", now_ms)
    else:
        end = now_ms
    if start < 0:
        raise _BadRequest("query.start_absolute must not be before Jan 01, 1970")
    metrics = [_parse_metric(m, i) for i, m in enumerate(metrics_raw)]
    if end < start:
        raise _BadRequest(f"query.metric[0].end_time must be greater than the start time ({start})")
    return _Query(start, end, absolute_end, metrics)


def _parse_metric(raw: Any, i: int) -> _MetricQuery:
    ctx = f"query.metric[{i}]"
    if not isinstance(raw, dict):
        raise _BadRequest(f"{ctx} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _BadRequest(f"{ctx}.name may not be empty")
    tags: dict[str, list[str]] = {}
    tags_raw = raw.get("tags") or {}
    if not isinstance(tags_raw, dict):
        raise _BadRequest(f"{ctx}.tags must be an object of tag: [values]")
    for key, values in tags_raw.items():
        if isinstance(values, str):
            tags[key] = [values]
        elif isinstance(values, list) and all(isinstance(v, str) for v in values):
            tags[key] = list(values)
        else:
            raise _BadRequest(f"{ctx}.tags.{key} must be a string or a list of strings")
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
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise _BadRequest(f"{ctx}.group_by[{j}].tags must be a list of tag names")
            group_keys = (group_keys or []) + [k for k in keys if k not in (group_keys or [])]
    if raw.get("aggregators"):
        raise _BadRequest(
            f"{ctx}.aggregators are not supported by the simulator; query raw data points"
        )
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
    )


@dataclass(slots=True)
class _Plan:
    """A metric query resolved to series and sample grid, with its point count."""

    metric: _Metric | None
    query: _MetricQuery
    first_ms: int
    samples: int
    groups: list[tuple[dict[str, str], list[int]]]  # (group tag values, series indices)
    points: int

    @property
    def empty(self) -> bool:
        return self.metric is None or self.samples == 0 or not self.groups


def _empty_result(name: str) -> JsonObj:
    return {
        "name": name,
        "group_by": [{"name": "type", "type": "number"}],
        "tags": {},
        "values": [],
    }


def _tags_of(metric: _Metric, series_idx: Sequence[int]) -> dict[str, list[str]]:
    return {
        key: sorted({metric.series[i][key] for i in series_idx if key in metric.series[i]})
        for key in metric.tag_keys
    }


@dataclass(slots=True)
class _Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    points: int = 0
    cacheable: bool = False


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
        first, samples = self.model.grid(query.start_ms, query.end_ms, now_ms)
        if metric is None or samples == 0:
            return _Plan(metric, mq, first, samples, [], 0)
        selected = [
            i
            for i, tags in enumerate(metric.series)
            if all(tags.get(key) in wanted for key, wanted in mq.tags.items())
        ]
        groups: dict[tuple[str, ...], list[int]] = {}
        if mq.group_keys is None:
            if selected:
                groups[()] = selected
        else:
            for i in selected:
                tags = metric.series[i]
                groups.setdefault(tuple(tags.get(k, "") for k in mq.group_keys), []).append(i)
        keys = mq.group_keys or []
        plan_groups = [(dict(zip(keys, gk, strict=True)), groups[gk]) for gk in sorted(groups)]
        points = 0
        for _, idx in plan_groups:
            n = samples * len(idx)
            points += n if mq.limit is None else min(n, mq.limit)
        return _Plan(metric, mq, first, samples, plan_groups, points)

    def _render_results(self, plan: _Plan) -> list[Any]:
        if plan.empty:
            return [_empty_result(plan.query.name)]
        metric = cast(_Metric, plan.metric)
        mq = plan.query
        step = self.config.interval_s * 1000
        ts = plan.first_ms + step * np.arange(plan.samples, dtype=np.int64)
        type_group = {"name": "type", "type": "text" if metric.kind == "str" else "number"}
        results: list[Any] = []
        for group, idx in plan.groups:
            values = _series_values(metric, idx, ts)
            if len(idx) == 1:
                flat_ts, flat_values = ts, values[0]
            else:
                # Merged series come out in time order, ties in series order, as KairosDB does.
                flat_ts = np.repeat(ts, len(idx))
                flat_values = values.T.reshape(-1)
            if mq.descending:
                flat_ts, flat_values = flat_ts[::-1], flat_values[::-1]
            if mq.limit is not None:
                flat_ts, flat_values = flat_ts[: mq.limit], flat_values[: mq.limit]
            # Encode each series' values on its own so that the big list of pairs is
            # short-lived; orjson splices the bytes in unchanged.
            encoded = orjson.dumps(list(zip(flat_ts.tolist(), flat_values.tolist(), strict=True)))
            group_by: list[JsonObj] = [type_group]
            if mq.group_keys is not None:
                group_by.append({"name": "tag", "tags": list(mq.group_keys), "group": group})
            results.append(
                {
                    "name": metric.name,
                    "group_by": group_by,
                    "tags": {} if mq.exclude_tags else _tags_of(metric, idx),
                    "values": orjson.Fragment(encoded),
                }
            )
        return results

    # -- endpoint implementations ------------------------------------------------------------

    def datapoints(self, body: Any, *, tags_only: bool = False) -> _Response:
        """Answer ``/api/v1/datapoints/query`` (or ``.../query/tags``) for a parsed body."""
        now_ms = int(time.time() * 1000)
        query = _parse_query(body, now_ms)
        failing = set(self.faults.fail_metrics).intersection(m.name for m in query.metrics)
        if failing:
            raise _MetricFault(sorted(failing))
        plans = [self._plan(query, mq, now_ms) for mq in query.metrics]
        # The answer is immutable once the window is wholly in the past.
        cacheable = query.absolute_end and query.end_ms < now_ms
        if tags_only:
            tag_results = [
                {
                    "name": p.query.name,
                    "tags": {} if p.empty else _tags_of(cast(_Metric, p.metric), _all(p)),
                }
                for p in plans
            ]
            response = _json(200, {"queries": [{"results": tag_results}]})
            response.cacheable = cacheable
            return response
        total = sum(p.points for p in plans)
        limit = self.faults.max_points
        if limit is not None and total > limit:
            raise _QueryLimit(limit)
        queries = [{"sample_size": p.points, "results": self._render_results(p)} for p in plans]
        response = _Response(200, orjson.dumps({"queries": queries}), points=total)
        response.cacheable = cacheable
        return response

    def jobs(self, body: Any) -> _Response:
        """Answer ``/api/v1/examon/jobs/query``: a JSON string holding the job list."""
        if not isinstance(body, dict):
            raise _BadRequest("body must be a JSON object {table, tstart, tstop}")
        table = body.get("table")
        if table not in self.model.job_tables:
            known = ", ".join(sorted(self.model.job_tables)) or "none"
            raise _BadRequest(f"unknown job table {table!r}; known tables: {known}")
        if body.get("tstart") is None or body.get("tstop") is None:
            raise _BadRequest("tstart and tstop (epoch milliseconds, UTC) are required")
        tstart = _as_int(body["tstart"], "tstart")
        tstop = _as_int(body["tstop"], "tstop")
        if tstop < tstart:
            raise _BadRequest(f"tstop ({tstop}) is before tstart ({tstart})")
        lo = tstart
        if self.config.data_start_ms is not None:
            lo = max(lo, self.config.data_start_ms)
        hi = min(tstop, int(time.time() * 1000) + 1)  # jobs not yet ended do not exist
        period_ms = JOB_PERIOD_S * 1000
        first = -(-lo // period_ms)
        stop = -(-hi // period_ms)  # end_time < tstop: half-open window
        if stop - first > _MAX_JOBS_PER_QUERY:
            raise _BadRequest(
                f"the window holds {stop - first} jobs, more than {_MAX_JOBS_PER_QUERY}; "
                "narrow tstart/tstop"
            )
        records = [self.model.job(k) for k in range(first, max(first, stop))]
        return _json(200, orjson.dumps(records).decode("utf-8"))

    def metric_names(self, prefix: str | None) -> _Response:
        """Answer ``/api/v1/metricnames``."""
        names = sorted([*self.model.plugins, *_INTERNAL_METRICS])
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


def _all(plan: _Plan) -> list[int]:
    return [i for _, idx in plan.groups for i in idx]
