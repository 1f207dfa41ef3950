"""A KairosDB 1.2 + Examon jobs HTTP simulator, for tests and benchmarks without a real server.

The simulator answers the parts of the KairosDB REST API that Examon clients use
(``/api/v1/datapoints/query``, ``.../query/tags``, ``metricnames``, ``version``,
``health/check``), the Examon job accounting endpoint (``/api/v1/examon/jobs/query``) and the
Grafana proxy path (``/api/datasources/proxy/<id>/api/v1/...``). Every value is a pure
function of the metric name, the series and the timestamp, so two runs (and two processes)
always serve the same data. Faults (outages, delays, query limits, slow answers) can be
switched on at runtime through the unauthenticated ``/_sim/*`` admin endpoints.

Run it as ``python -m dxt_core.backends.examon.simulator --port 0``; the first line on stdout is
``dxt-simulate-examon listening on http://HOST:PORT``.

Differences from a real KairosDB, on purpose: aggregators and non-tag groupers are refused
with HTTP 400 (an archiver must never receive silently unaggregated data it asked to be
aggregated); relative times count a month as 30 days and a year as 365 days; there is no
data after the current time.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import gzip
import hmac
import math
import os
import signal
import sys
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, date, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, Final, cast
from urllib.parse import parse_qs, urlsplit

import numpy as np
import numpy.typing as npt
import orjson

from dxt_core.backends.examon.catalog import load_catalog as _load_catalog
from dxt_core.errors import ConfigError

__all__ = ["ExamonSimulator", "Faults", "SimConfig", "load_catalog", "main", "node_names"]

VERSION: Final = "KairosDB 1.2.2-1.20180201 (dxt simulator)"
NODES_PER_RACK: Final = 20
FIRST_RACK: Final = 201
ORG: Final = "cineca"
#: One job of the accounting table ends every JOB_PERIOD_S seconds (epoch aligned).
JOB_PERIOD_S: Final = 420
GRAFANA_DATASOURCE_ID: Final = 1
GRAFANA_DATASOURCE_NAME: Final = "kairosdb"

_INTERNAL_METRICS: Final = (
    "kairosdb.datastore.query_time",
    "kairosdb.http.query_time",
    "kairosdb.http.request_time",
    "kairosdb.protocol.http_request_count",
)
_PROXY_PREFIX: Final = "/api/datasources/proxy/"
_MAX_BODY: Final = 16 * 1024 * 1024
# A day of one metric over 200 nodes is ~21 MB of JSON, fetched whole (one answer) or in
# ~10-100 windows: enough entries for either to repeat from cache in benchmarks, and a byte
# cap so memory does not grow without bound.
_CACHE_ENTRIES: Final = 256
_CACHE_BYTES: Final = 512 * 1024 * 1024
# Guards the jobs endpoint against an accidental "everything since 1970" query.
_MAX_JOBS_PER_QUERY: Final = 250_000
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

JsonObj = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass
class Faults:
    """Faults the simulator injects; mutable while it runs (see ``POST /_sim/faults``).

    Attributes:
        delay_s: sleep this long before answering every request (``/_sim/*`` excepted).
        fail_next: answer the next N requests (``/_sim/*`` excepted) with ``fail_status``
            and ``{"errors": ["simulated outage"]}``; decremented on each failure.
        fail_status: HTTP status used by ``fail_next``.
        max_points: a datapoints query whose answer would exceed N points fails with HTTP
            500 and a ``query_limit`` message, like a KairosDB with ``query_limit`` set.
        slow_points: a datapoints query answering more than N points sleeps
            ``slow_delay_s`` first, to provoke client read timeouts.
        slow_delay_s: see ``slow_points``.
        fail_metrics: datapoints queries (values or tags) naming one of these metrics
            always fail with ``fail_status``, to simulate a metric the server cannot read.
    """

    delay_s: float = 0.0
    fail_next: int = 0
    fail_status: int = 503
    max_points: int | None = None
    slow_points: int | None = None
    slow_delay_s: float = 0.0
    fail_metrics: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field, so that a bad ``/_sim/faults`` update is refused whole.

        Raises:
            ConfigError: a field has the wrong type or an out-of-range value.
        """
        for name in ("delay_s", "slow_delay_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"faults.{name} must be a number >= 0, got {value!r}")
        for name in ("fail_next", "fail_status"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"faults.{name} must be an integer >= 0, got {value!r}")
        if not 100 <= self.fail_status <= 599:
            raise ConfigError(f"faults.fail_status must be an HTTP status, got {self.fail_status}")
        for name in ("max_points", "slow_points"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(f"faults.{name} must be null or an integer >= 0, got {value!r}")
        if not isinstance(self.fail_metrics, list) or not all(
            isinstance(m, str) for m in self.fail_metrics
        ):
            raise ConfigError(
                f"faults.fail_metrics must be a list of metric names, got {self.fail_metrics!r}"
            )


@dataclass
class SimConfig:
    """What the simulator serves.

    Attributes:
        catalog: ``(metric, plugin)`` pairs; rows whose plugin is ``job_table`` name the job
            accounting tables served by the jobs endpoint instead of KairosDB metrics.
        nodes: number of compute nodes (see :func:`node_names`).
        interval_s: sample period; samples sit on epoch multiples of it, so with a period
            that divides a day there is a sample at every midnight.
        cluster: value of the ``cluster`` tag.
        user: when set, every endpoint but ``/_sim/*`` requires HTTP Basic auth.
        password: password for ``user``.
        faults: faults to inject (mutable at runtime).
        data_start_ms: no data (and no job) before this epoch-millisecond instant.
    """

    catalog: list[tuple[str, str]]
    nodes: int = 8
    interval_s: int = 20
    cluster: str = "marconi100"
    user: str | None = None
    password: str | None = None
    faults: Faults = field(default_factory=Faults)
    data_start_ms: int | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ConfigError(f"nodes must be >= 1, got {self.nodes}")
        if self.interval_s < 1:
            raise ConfigError(f"interval_s must be >= 1 second, got {self.interval_s}")
        if not self.cluster:
            raise ConfigError("cluster must not be empty")
        if self.password is not None and self.user is None:
            raise ConfigError("a simulator password needs a user too (--user)")
        for i, row in enumerate(self.catalog):
            if len(row) != 2 or not row[0] or not row[1]:
                raise ConfigError(f"catalog row {i} must be a (metric, plugin) pair, got {row!r}")


def node_names(count: int) -> list[str]:
    """Names of the first ``count`` compute nodes: 20 per rack, racks from 201.

    Args:
        count: number of nodes.

    Returns:
        ``["r201n01", ..., "r201n20", "r202n01", ...]``.
    """
    return [
        f"r{FIRST_RACK + i // NODES_PER_RACK:03d}n{i % NODES_PER_RACK + 1:02d}"
        for i in range(count)
    ]


def load_catalog(path: Path | str | None = None) -> list[tuple[str, str]]:
    """Read a catalog with dxt_core's own loader (same checks, same error messages).

    Args:
        path: the CSV file; ``None`` reads the Marconi100 catalog shipped with dxt_core.

    Returns:
        The ``(metric, plugin)`` pairs in file order.
    """
    return [(e.metric, e.plugin) for e in _load_catalog(path)]


# --------------------------------------------------------------------------------------------
# Data model: which series each metric has, and their values
# --------------------------------------------------------------------------------------------

# Facility plugins have no cluster tag: a few devices named by one tag instead.
_DEVICE_PLUGINS: Final[dict[str, tuple[str, tuple[str, ...], str, int]]] = {
    # plugin: (device tag key, device names, value kind, decimals)
    "schneider_pub": ("panel", ("QE-A1", "QE-A2", "QE-B1", "QE-B2"), "float", 2),
    "vertiv_pub": ("unit", ("CRAC-01", "CRAC-02", "CRAC-03"), "float", 1),
    "logics_pub": ("device", ("PLC_Q101", "PLC_Q102"), "int", 0),
    "weather_pub": ("site", ("bologna-casalecchio",), "float", 1),
}
_NAGIOS_DESCRIPTIONS: Final = ("alive", "batchs::client::state", "filesys::m100_work")
_NAGIOS_MESSAGES: Final = (
    "OK - load average: 0.12, 0.08, 0.05",
    'WARNING - filesystem "/m100_work" is 91% full',
    "OK",
    'CRITICAL - service "slurmd" is not running, restart requested',
    "OK - node idle, 0 jobs; last check 'fine'",
    "UNKNOWN - plugin timed out after 10s",
)
_NAGIOS_STATES: Final = ("0", "0", "0", "1", "0", "2", "0", "3")
_DOWNTIME_COMMENTS: Final = (
    "",
    'maintenance "GPU swap", ticket #4411',
    "firmware upgrade, see CINECA notice",
)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _ipmi_units(metric: str) -> str:
    m = metric.lower()
    if "temp" in m or m == "ambient":
        return "degrees C"
    if "power" in m or m.startswith("gv100card"):
        return "Watts"
    if m.startswith("fan"):
        return "RPM"
    if "volt" in m:
        return "Volts"
    if "curr" in m:
        return "Amps"
    return "unspecified"


@dataclass(frozen=True, slots=True)
class _Metric:
    """One metric's series: their tags (same keys for all) and how values are made."""

    name: str
    plugin: str
    kind: str  # "float", "int" or "str"
    decimals: int
    tag_keys: tuple[str, ...]
    series: tuple[dict[str, str], ...]
    crc: int
    base: float
    amplitude: float


def _build_metric(name: str, plugin: str, nodes: Sequence[str], cluster: str) -> _Metric:
    crc = _crc(name)
    base_tags = {"org": ORG, "plugin": plugin}
    series: list[dict[str, str]] = []
    kind, decimals = "float", 3
    if plugin in _DEVICE_PLUGINS:
        key, devices, kind, decimals = _DEVICE_PLUGINS[plugin]
        series = [{**base_tags, key: device} for device in devices]
    elif plugin == "ipmi_pub":
        units = _ipmi_units(name)
        decimals = 1 if units == "degrees C" else 2
        for node in nodes:
            series.append(
                {
                    **base_tags,
                    "chnl": "data",
                    "cluster": cluster,
                    "node": node,
                    "rack": node[1:4],
                    "slot": node[5:7],
                    "units": units,
                }
            )
    elif plugin == "nagios_pub":
        kind, decimals = "str", 0
        for i, node in enumerate(nodes):
            series.append(
                {
                    **base_tags,
                    "cluster": cluster,
                    "description": _NAGIOS_DESCRIPTIONS[i % len(_NAGIOS_DESCRIPTIONS)],
                    "host_group": "compute",
                    "nagiosdrained": "1" if i % 10 == 9 else "0",
                    "node": node,
                    "state": _NAGIOS_STATES[(i + crc) % len(_NAGIOS_STATES)],
                    "state_type": "0" if i % 4 == 3 else "1",
                }
            )
    else:
        # ganglia_pub, slurm_pub and any plugin we do not know: one series per node.
        if plugin == "slurm_pub":
            kind, decimals = "int", 0
        series = [{**base_tags, "cluster": cluster, "node": node} for node in nodes]
    # Integer metrics look like counters of a few hundred; floats span sensor-like ranges.
    base = float(10 + crc % 490) if kind == "int" else 20.0 + (crc % 20_000) / 10.0
    return _Metric(
        name=name,
        plugin=plugin,
        kind=kind,
        decimals=decimals,
        tag_keys=tuple(sorted(series[0])),
        series=tuple(series),
        crc=crc,
        base=base,
        amplitude=base * 0.25 + 1.0,
    )


def _series_values(metric: _Metric, series_idx: Sequence[int], ts_ms: npt.NDArray[np.int64]) -> Any:
    """Values of the given series at the given timestamps, shape ``(len(series_idx), n)``.

    Integer arithmetic reduces the timestamps modulo the periods before the sine, so the
    result does not depend on float precision at epoch-sized arguments.
    """
    ts_s = ts_ms // 1000
    idx = np.asarray(series_idx, dtype=np.int64)[:, None]
    if metric.kind == "str":
        palette: tuple[str, ...] = _NAGIOS_MESSAGES
        if "downtime" in metric.name:
            palette = _DOWNTIME_COMMENTS
        # Messages change every 10 minutes, not every sample, like real check results.
        pick = (ts_s[None, :] // 600 + idx * 3 + metric.crc) % len(palette)
        return np.asarray(palette, dtype=object)[pick]
    day = 86_400
    hour = 3_600
    day_phase = ((ts_s[None, :] + metric.crc + idx * 7_919) % day).astype(np.float64) / day
    hour_phase = ((ts_s[None, :] + idx * 131) % hour).astype(np.float64) / hour
    raw = metric.base + metric.amplitude * (
        np.sin(2.0 * math.pi * day_phase) + 0.2 * np.sin(2.0 * math.pi * hour_phase)
    )
    if metric.kind == "int":
        return np.rint(raw).astype(np.int64)
    return np.round(raw, metric.decimals)


# --------------------------------------------------------------------------------------------
# Query parsing and answering (pure; no HTTP here)
# --------------------------------------------------------------------------------------------


class _BadRequest(Exception):
    """The request is malformed: answered with HTTP 400 and this message."""


class _MetricFault(Exception):
    """A queried metric is listed in ``faults.fail_metrics``."""


class _QueryLimit(Exception):
    """The answer would exceed ``faults.max_points``: answered with HTTP 500."""


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


# --------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------


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


def _query_limit_error(limit: int) -> _Response:
    # KairosDB answers 500 (not 4xx) when query_limit is exceeded; clients must tell it apart
    # from an outage by the message, so keep the wording stable.
    return _error(
        500, f"Query exceeded the query_limit of {limit} data points; narrow the time range"
    )


def _iso(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sim: ExamonSimulator) -> None:
        self.sim = sim
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (read timeout) is part of the test, not a server error.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class ExamonSimulator:
    """A KairosDB + Examon jobs server over ``http.server``, serving deterministic data.

    Args:
        config: what to serve; ``config.faults`` may be changed while it runs.
        host: address to bind.
        port: port to bind; 0 picks a free one (see :attr:`url`).

    Example:
        >>> sim = ExamonSimulator(SimConfig(catalog=[("total_power", "ipmi_pub")]))
        >>> sim.start()
        >>> sim.url  # doctest: +SKIP
        'http://127.0.0.1:41234'
        >>> sim.stop()
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.verbose = False
        self._lock = threading.Lock()
        self._nodes = node_names(config.nodes)
        self._plugins: dict[str, str] = {}
        self._job_tables: set[str] = set()
        for metric, plugin in config.catalog:
            if plugin == "job_table":
                self._job_tables.add(metric)
            else:
                self._plugins.setdefault(metric, plugin)
        self._metrics: dict[str, _Metric] = {}
        self._cache: OrderedDict[tuple[str, bytes, bool], _Response] = OrderedDict()
        self._cache_bytes = 0
        self._stats: dict[str, Any] = {}
        self.reset_stats()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8083``."""
        host, port = self._server.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else str(host)
        if ":" in host_text:
            host_text = f"[{host_text}]"
        return f"http://{host_text}:{port}"

    def start(self) -> None:
        """Serve in a background daemon thread; returns at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dxt-simulate-examon", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` is called from another one."""
        self._server.serve_forever()

    def __enter__(self) -> ExamonSimulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- stats and faults --------------------------------------------------------------------

    @property
    def stats(self) -> dict[str, Any]:
        """A snapshot of request counters (what ``GET /_sim/stats`` answers)."""
        with self._lock:
            snapshot = dict(self._stats)
            snapshot["requests"] = dict(self._stats["requests"])
            return snapshot

    def reset_stats(self) -> None:
        """Zero every counter."""
        with self._lock:
            self._stats = {
                "requests": {},
                "total": 0,
                "faults_served": 0,
                "refused_max_points": 0,
                "slow_served": 0,
                "unauthorized": 0,
                "bad_requests": 0,
                "points_served": 0,
                "cache_hits": 0,
            }

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] += amount

    def update_faults(self, changes: Mapping[str, Any]) -> Faults:
        """Apply a partial update to the faults, all or nothing.

        Args:
            changes: field name to new value.

        Returns:
            The faults now in force.

        Raises:
            ConfigError: an unknown field or a bad value; nothing is changed.
        """
        known = {f.name for f in fields(Faults)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(
                f"unknown fault field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        with self._lock:
            candidate = Faults(**{**asdict(self.config.faults), **changes})
            for name in known:
                setattr(self.config.faults, name, getattr(candidate, name))
            return Faults(**asdict(self.config.faults))

    def _take_failure(self) -> int | None:
        with self._lock:
            faults = self.config.faults
            if faults.fail_next <= 0:
                return None
            faults.fail_next -= 1
            self._stats["faults_served"] += 1
            return faults.fail_status

    # -- data model --------------------------------------------------------------------------

    def _metric(self, name: str) -> _Metric | None:
        plugin = self._plugins.get(name)
        if plugin is None:
            return None
        metric = self._metrics.get(name)
        if metric is None:
            metric = _build_metric(name, plugin, self._nodes, self.config.cluster)
            self._metrics[name] = metric
        return metric

    def _grid(self, start_ms: int, end_ms: int, now_ms: int) -> tuple[int, int]:
        """First sample time and sample count in ``[start_ms, end_ms]`` (both inclusive)."""
        step = self.config.interval_s * 1000
        lo = start_ms
        if self.config.data_start_ms is not None:
            lo = max(lo, self.config.data_start_ms)
        hi = min(end_ms, now_ms)
        first = -(-lo // step) * step
        last = hi // step * step
        if last < first:
            return first, 0
        return first, (last - first) // step + 1

    def _plan(self, query: _Query, mq: _MetricQuery, now_ms: int) -> _Plan:
        metric = self._metric(mq.name)
        first, samples = self._grid(query.start_ms, query.end_ms, now_ms)
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
        failing = set(self.config.faults.fail_metrics).intersection(m.name for m in query.metrics)
        if failing:
            self._count("faults_served")
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
        limit = self.config.faults.max_points
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
        if table not in self._job_tables:
            known = ", ".join(sorted(self._job_tables)) or "none"
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
        records = [self._job(k) for k in range(first, max(first, stop))]
        return _json(200, orjson.dumps(records).decode("utf-8"))

    def _job(self, k: int) -> JsonObj:
        """The job that ends at ``k * JOB_PERIOD_S``; every field derives from its id."""
        job_id = k
        h = _crc(f"job:{job_id}")
        h2 = _crc(f"wait:{job_id}")
        partitions = ("m100_usr_prod", "m100_usr_prod", "m100_usr_dbg", "m100_all_serial")
        partition = partitions[h % len(partitions)]
        qos = {"m100_usr_dbg": "m100_qos_dbg", "m100_all_serial": "normal"}.get(
            partition, "normal" if h % 3 else "m100_qos_bprod"
        )
        max_nodes = {"m100_usr_dbg": 2, "m100_all_serial": 1}.get(partition, 16)
        num_nodes = min(1 + (h >> 4) % max_nodes, len(self._nodes))
        cpus_per_node = 4 if partition == "m100_all_serial" else 128
        first_node = (h >> 8) % len(self._nodes)
        nodes = [self._nodes[(first_node + j) % len(self._nodes)] for j in range(num_nodes)]
        time_limit = (30, 60, 240, 1440)[(h >> 12) % 4]  # minutes
        if partition == "m100_usr_dbg":
            time_limit = 30
        roll = (h >> 16) % 10
        state, reason, exit_code = "COMPLETED", "None", 0
        run_time = 60 + (h >> 3) % max(1, time_limit * 60 - 60)
        if roll == 7:
            state, reason, exit_code = "FAILED", "NonZeroExitCode", 1 + (h >> 20) % 255
        elif roll == 9:
            state, reason, run_time = "TIMEOUT", "TimeLimit", time_limit * 60
        end_s = k * JOB_PERIOD_S
        start_s = end_s - run_time
        submit_s = start_s - h2 % 7_200
        user_no = h2 % 60
        user = f"a08tra{user_no:02d}"
        account = f"IscrC_PRJ{(h2 >> 8) % 25:02d}"
        names = ("lammps_md", "gromacs", "train_resnet", "cp2k_scf", "wrf_bo", "interactive")
        num_cpus = num_nodes * cpus_per_node
        gpus = 0 if partition == "m100_all_serial" else num_nodes * 4
        record: JsonObj = {
            "job_id": job_id,
            "job_name": f"{names[h2 % len(names)]}_{job_id % 1000:03d}",
            "user_id": 30_000 + user_no,
            "user_name": user,
            "group_id": 25_000 + (h2 >> 8) % 25,
            "account": account,
            "partition": partition,
            "qos": qos,
            "num_nodes": num_nodes,
            "num_cpus": num_cpus,
            "num_tasks": num_nodes * (4 if gpus else 1),
            "cpus_per_task": 32 if gpus else 4,
            "nodes": ",".join(nodes),
            "batch_host": nodes[0],
            "tres_alloc_str": (
                f"cpu={num_cpus},mem={num_nodes * 237_000}M,node={num_nodes},"
                f"billing={num_cpus}" + (f",gres/gpu={gpus}" if gpus else "")
            ),
            "submit_time": _iso(submit_s),
            "eligible_time": _iso(submit_s),
            "start_time": _iso(start_s),
            "end_time": _iso(end_s),
            "run_time": run_time,
            "time_limit": time_limit,
            "job_state": state,
            "state_reason": reason,
            "exit_code": exit_code,
            "priority": 100_000 + h % 50_000,
            "command": f"/m100/home/userexternal/{user}/job_{job_id}.sh",
            "work_dir": f"/m100_work/{account}/{user}",
            "std_out": f"/m100/home/userexternal/{user}/slurm-{job_id}.out",
            "cluster": self.config.cluster,
        }
        # Optional fields appear on some records only: clients must take the union of keys.
        if h % 6 == 0:
            record["array_job_id"] = job_id - (h >> 5) % 8
            record["array_task_id"] = (h >> 5) % 8
        if h % 5 == 0:
            record["dependency"] = f"afterok:{job_id - 1}"
        if h % 4 == 0:
            record["comment"] = 'rerun of "baseline", step 2'
        if h % 3 == 0:
            record["features"] = "gpu,ib"
        if h % 7 == 0:
            record["resv_name"] = None
        return record

    def metric_names(self, prefix: str | None) -> _Response:
        """Answer ``/api/v1/metricnames``."""
        names = sorted([*self._plugins, *_INTERNAL_METRICS])
        if prefix:
            names = [n for n in names if n.startswith(prefix)]
        return _json(200, {"results": names})

    def tag_names(self) -> _Response:
        """Answer ``/api/v1/tagnames``: every tag key of every metric."""
        keys: set[str] = set()
        for name in self._plugins:
            keys.update(cast(_Metric, self._metric(name)).tag_keys)
        return _json(200, {"results": sorted(keys)})

    def tag_values(self) -> _Response:
        """Answer ``/api/v1/tagvalues``: every tag value of every metric."""
        values: set[str] = set()
        for name in self._plugins:
            for tags in cast(_Metric, self._metric(name)).series:
                values.update(tags.values())
        return _json(200, {"results": sorted(values)})

    # -- response cache ----------------------------------------------------------------------

    def _cache_get(self, key: tuple[str, bytes, bool]) -> _Response | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._stats["cache_hits"] += 1
            return hit

    def _cache_put(self, key: tuple[str, bytes, bool], response: _Response) -> None:
        size = len(response.body) + len(key[1])
        if size > _CACHE_BYTES // 2:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = response
            self._cache_bytes += size
            while len(self._cache) > _CACHE_ENTRIES or self._cache_bytes > _CACHE_BYTES:
                old_key, old = self._cache.popitem(last=False)
                self._cache_bytes -= len(old.body) + len(old_key[1])


def _all(plan: _Plan) -> list[int]:
    return [i for _, idx in plan.groups for i in idx]


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


def _wants_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (``q=0`` refuses it)."""
    if not header:
        return False
    for part in header.split(","):
        token, *params = (piece.strip() for piece in part.split(";"))
        if token.lower() not in ("gzip", "x-gzip", "*"):
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm the body would
    # wait for the client's delayed ACK (~40 ms per request on a kept-alive connection),
    # a cost real servers do not have.
    disable_nagle_algorithm = True
    server_version = "dxt-simulate-examon/1"

    @property
    def sim(self) -> ExamonSimulator:
        return cast(_Server, self.server).sim

    def log_message(self, format: str, *args: Any) -> None:
        if self.sim.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- request reading ---------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > _MAX_BODY:
                    raise _BadRequest("request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise _BadRequest("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self) -> bool:
        config = self.sim.config
        if config.user is None:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        return hmac.compare_digest(user.encode(), config.user.encode()) and hmac.compare_digest(
            password.encode(), (config.password or "").encode()
        )

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        sim = self.sim
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        gzip_ok = _wants_gzip(self.headers.get("Accept-Encoding"))
        try:
            body = self._read_body()
        except (_BadRequest, ValueError) as exc:
            self.close_connection = True
            self._send(_error(400, str(exc)), gzip_ok)
            return
        if path.startswith("/_sim/") or path == "/_sim":
            self._send(self._admin(method, path, body), gzip_ok)
            return

        endpoint, ds_id = path, ""
        proxied = path.startswith(_PROXY_PREFIX)
        if proxied:
            ds_id, _, rest = path[len(_PROXY_PREFIX) :].partition("/")
            endpoint = "/" + rest
        with sim._lock:
            sim._stats["total"] += 1
            requests = sim._stats["requests"]
            requests[endpoint] = requests.get(endpoint, 0) + 1

        faults = sim.config.faults
        if faults.delay_s > 0:
            time.sleep(faults.delay_s)
        status = sim._take_failure()
        if status is not None:
            self._send(_error(status, "simulated outage"), gzip_ok)
            return
        if not self._authorized():
            sim._count("unauthorized")
            response = _error(401, "authentication required")
            response.headers["WWW-Authenticate"] = 'Basic realm="kairosdb"'
            self._send(response, gzip_ok)
            return
        if proxied and ds_id != str(GRAFANA_DATASOURCE_ID):
            self._send(_json(404, {"message": "Data source not found"}), gzip_ok)
            return

        cache_key = (f"{method} {endpoint}?{split.query}", body, gzip_ok)
        is_query = endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags")
        # Per-metric faults are decided on the parsed query, so skip the cache while any is set.
        if is_query and not faults.fail_metrics:
            cached = sim._cache_get(cache_key)
            if cached is not None:
                self._send_query(cached, gzip_ok)
                return
        try:
            response = self._route(method, endpoint, split.query, body)
        except _BadRequest as exc:
            sim._count("bad_requests")
            response = _error(400, str(exc))
        except _QueryLimit as exc:
            sim._count("refused_max_points")
            response = _query_limit_error(exc.args[0])
        except _MetricFault as exc:
            response = _error(
                sim.config.faults.fail_status, f"simulated outage for {', '.join(exc.args[0])}"
            )
        if is_query and response.status == 200:
            if gzip_ok:
                response.body = gzip.compress(response.body, compresslevel=1, mtime=0)
            if response.cacheable:
                sim._cache_put(cache_key, response)
            self._send_query(response, gzip_ok)
            return
        self._send(response, gzip_ok)

    def _route(self, method: str, endpoint: str, query_string: str, body: bytes) -> _Response:
        sim = self.sim
        gets: dict[str, Callable[[], _Response]] = {
            "/api/v1/version": lambda: _json(200, {"version": VERSION}),
            "/api/v1/health/check": lambda: _Response(204, b""),
            "/api/v1/health/status": lambda: _json(200, ["JVM-Thread-Deadlock: OK"]),
            "/api/v1/tagnames": sim.tag_names,
            "/api/v1/tagvalues": sim.tag_values,
            f"/api/datasources/id/{GRAFANA_DATASOURCE_NAME}": lambda: _json(
                200, {"id": GRAFANA_DATASOURCE_ID}
            ),
        }
        params = parse_qs(query_string)
        if endpoint in gets:
            return gets[endpoint]() if method == "GET" else _error(405, "use GET")
        if endpoint == "/api/v1/metricnames":
            if method != "GET":
                return _error(405, "use GET")
            return sim.metric_names(params.get("prefix", [None])[0])
        if endpoint in ("/api/v1/datapoints/query", "/api/v1/datapoints/query/tags"):
            tags_only = endpoint.endswith("/tags")
            if method == "GET":
                if "query" not in params:
                    raise _BadRequest("GET needs a ?query=<url-encoded JSON query> parameter")
                raw = params["query"][0].encode("utf-8")
            elif method == "POST":
                raw = body
            else:
                return _error(405, "use POST (or GET with ?query=)")
            return sim.datapoints(_loads(raw), tags_only=tags_only)
        if endpoint == "/api/v1/examon/jobs/query":
            if method != "POST":
                return _error(405, "use POST")
            return sim.jobs(_loads(body))
        if endpoint.startswith("/api/datasources/id/"):
            return _json(404, {"message": "Data source not found"})
        return _error(404, f"Not found: {endpoint}")

    def _admin(self, method: str, path: str, body: bytes) -> _Response:
        sim = self.sim
        if path == "/_sim/faults":
            if method == "GET":
                return _json(200, asdict(sim.config.faults))
            if method == "POST":
                try:
                    changes = _loads(body) if body.strip() else {}
                    if not isinstance(changes, dict):
                        raise _BadRequest("expected a JSON object of fault fields")
                    return _json(200, asdict(sim.update_faults(changes)))
                except (_BadRequest, ConfigError, TypeError) as exc:
                    return _error(400, str(exc))
        elif path == "/_sim/faults/reset" and method == "POST":
            return _json(200, asdict(sim.update_faults(asdict(Faults()))))
        elif path == "/_sim/stats":
            if method == "GET":
                return _json(200, sim.stats)
        elif path == "/_sim/stats/reset" and method == "POST":
            sim.reset_stats()
            return _json(200, sim.stats)
        elif path == "/_sim/config" and method == "GET":
            config = sim.config
            return _json(
                200,
                {
                    "nodes": node_names(config.nodes),
                    "interval_s": config.interval_s,
                    "cluster": config.cluster,
                    "auth": config.user is not None,
                    "data_start_ms": config.data_start_ms,
                    "metrics": len(sim._plugins),
                    "job_tables": sorted(sim._job_tables),
                },
            )
        else:
            return _error(404, f"Not found: {path}")
        return _error(405, f"method {method} not allowed on {path}")

    # -- response writing --------------------------------------------------------------------

    def _send_query(self, response: _Response, gzip_ok: bool) -> None:
        """Send a datapoints answer (body already encoded for ``gzip_ok``), faults first."""
        sim = self.sim
        faults = sim.config.faults
        if faults.max_points is not None and response.points > faults.max_points:
            # A cached answer may predate the limit; refuse it the same way.
            sim._count("refused_max_points")
            self._send(_query_limit_error(faults.max_points), gzip_ok)
            return
        if faults.slow_points is not None and response.points > faults.slow_points:
            sim._count("slow_served")
            time.sleep(faults.slow_delay_s)
        sim._count("points_served", response.points)
        self._write(response, gzip=gzip_ok)

    def _send(self, response: _Response, gzip_ok: bool) -> None:
        if gzip_ok and response.body:
            response = _Response(
                response.status,
                gzip.compress(response.body, compresslevel=1, mtime=0),
                response.headers,
            )
            self._write(response, gzip=True)
        else:
            self._write(response, gzip=False)

    def _write(self, response: _Response, *, gzip: bool) -> None:
        try:
            self.send_response(response.status)
            if response.status != 204:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                if gzip and response.body:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(response.body)))
            self.send_header("Vary", "Accept-Encoding")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if response.status != 204 and self.command != "HEAD":
                self.wfile.write(response.body)
        except (ConnectionError, TimeoutError):
            self.close_connection = True


def _loads(raw: bytes) -> Any:
    if not raw.strip():
        raise _BadRequest("request body is empty; expected a JSON query")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"invalid JSON in request body: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _utc_midnight_ms(text: str) -> int:
    try:
        day = date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD, got {text!r}") from exc
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dxt_core.backends.examon.simulator",
        description="Serve a deterministic KairosDB 1.2 + Examon jobs API for tests.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=8083, help="port; 0 picks a free one")
    p.add_argument("--catalog", help="metric,plugin CSV (default: the shipped M100 catalog)")
    p.add_argument("--nodes", type=int, default=8, help="compute nodes (default %(default)s)")
    p.add_argument("--interval", type=int, default=20, help="sample period in seconds")
    p.add_argument("--cluster", default="marconi100", help="cluster tag value")
    p.add_argument("--user", help="require HTTP Basic auth with this user")
    p.add_argument("--password", help="password for --user (or env DXT_SIM_PASSWORD)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds to wait before answers")
    p.add_argument("--fail-next", type=int, default=0, help="fail the next N requests with 503")
    p.add_argument("--max-points", type=int, help="refuse datapoints answers above N points")
    p.add_argument("--slow-points", type=int, help="delay datapoints answers above N points")
    p.add_argument("--slow-delay", type=float, default=0.0, help="seconds, see --slow-points")
    p.add_argument(
        "--fail-metric",
        action="append",
        default=[],
        metavar="METRIC",
        help="datapoints queries for METRIC always fail (repeatable)",
    )
    p.add_argument(
        "--data-start",
        type=_utc_midnight_ms,
        help="YYYY-MM-DD: no data before this UTC midnight",
    )
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0 on a clean shutdown, 2 on a configuration error.
    """
    args = _parser().parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DXT_SIM_PASSWORD")
    try:
        config = SimConfig(
            catalog=load_catalog(args.catalog),
            nodes=args.nodes,
            interval_s=args.interval,
            cluster=args.cluster,
            user=args.user,
            password=password if args.user is not None else None,
            faults=Faults(
                delay_s=args.delay,
                fail_next=args.fail_next,
                max_points=args.max_points,
                slow_points=args.slow_points,
                slow_delay_s=args.slow_delay,
                fail_metrics=list(args.fail_metric),
            ),
            data_start_ms=args.data_start,
        )
        sim = ExamonSimulator(config, host=args.host, port=args.port)
    except (ConfigError, OSError) as exc:
        print(f"dxt-simulate-examon: {exc}", file=sys.stderr)
        return 2
    sim.verbose = args.verbose

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        sim.start()
        print(f"dxt-simulate-examon listening on {sim.url}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
