"""A Grid'5000 reference API + Kwollect metrics API simulator, for tests, demos and benchmarks.

Serves, for a few sites, clusters and nodes:

* the reference API: ``/sites``, ``/sites/<site>``, ``/sites/<site>/clusters``,
  ``/sites/<site>/clusters/<cluster>`` (with its ``metrics`` catalog: ``period``,
  ``optional_period``, ``source``, ``labels``, ``only_for``, Prometheus ``prom_`` names),
  ``/sites/<site>/clusters/<cluster>/nodes`` and ``/sites/<site>/jobs/<id>``;
* Kwollect: ``/sites/<site>/metrics`` with ``nodes``, ``devices``, ``metrics``,
  ``start_time``, ``end_time``, ``job_id``, ``summary`` and ``as_rate``.

A ``/stable`` prefix is accepted and ignored, so ``--api-url http://HOST:PORT/stable`` works as
with ``https://api.grid5000.fr/stable``. Every value is a pure function of the node, the metric
and the timestamp: two runs (and two processes) serve the same bytes. Power is a triangle wave
(period 600 s, breakpoints on whole seconds), so trapezoidal integration of the 1 s wattmetre
series is exact and tests can compare energy with a closed form (:func:`power_watts`).

Behaviour copied from the real service: node names may be FQDNs (cut at the first dot); a
numeric time is a Unix epoch, otherwise ISO 8601, read in Europe/Paris when it has no offset;
only a start means a 5-minute window; both bounds are inclusive; results are oldest first;
unknown nodes, devices or jobs are an error; no paging; an answer above ``max_points`` points
fails like the real query timeout, with HTTP 500 and the message "Request timeout, too much data
to process" (after ``timeout_delay_s`` seconds). Answers are streamed (HTTP/1.0, no
Content-Length) so a one-day 50-node wattmetre request never sits in memory.

As on Grid'5000, a job of type ``monitor=<regex>`` samples the matching metrics of its nodes
at their ``optional_period`` (wattmetre: 20 ms) from its start to its stop. Differences on
purpose: no data after the current time; ``summary=true`` answers one point per series whose
value is the mean and whose ``labels._summary`` holds ``min``, ``max``, ``mean``, ``count``,
``first`` and ``last``.

Run it as ``python -m dxt_core.backends.kwollect.simulator --port 0``; the first line on stdout is
``dxt-simulate-kwollect listening on http://HOST:PORT``. ``/_sim/config`` (POST JSON:
``site_delay_s``, ``delay_s``, ``max_points``, ``timeout_delay_s``) changes faults at run time
and ``/_sim/stats`` counts requests, points and the peak number of concurrent requests.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import numpy as np
import orjson

from dxt_core.errors import ConfigError

__all__ = ["KwollectSimulator", "SimJob", "SimSettings", "main", "power_watts"]

PARIS: Final = ZoneInfo("Europe/Paris")
DOMAIN: Final = "grid5000.fr"
TOO_MUCH_DATA: Final = "Request timeout, too much data to process"
#: Power triangle wave: period and amplitude (watts).
WAVE_PERIOD_S: Final = 600
WAVE_AMPLITUDE_W: Final = 60.0
_CHUNK_US: Final = 60_000_000  # answers are generated one minute of data at a time
_DEFAULT_WINDOW_US: Final = 300_000_000


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    description: str
    period_ms: int
    kind: str  # power | bmc | counter | gauge
    protocol: str
    source_id: str
    phase_ms: int = 0
    optional_period_ms: int | None = None
    only_for: tuple[str, ...] | None = None
    labels: dict[str, str] = field(default_factory=dict)


def _cluster_metrics(cluster: str, nodes: list[str]) -> list[MetricSpec]:
    bmc = MetricSpec(
        "bmc_node_power_watt",
        "Power consumption of node reported by BMC, in watt",
        5000,
        "bmc",
        "ipmisensor",
        "1",
        phase_ms=250,
    )
    net = MetricSpec(
        "network_ifacein_bytes_total",
        "Input byte counter for the network device port",
        15000,
        "counter",
        "snmp",
        "1.3.6.1.2.1.2.2.1.10.{{ 1.3.6.1.2.1.2.2.1.2 == %SNMP_IFACE% }}",
        phase_ms=460,
        labels={"interface": "eth0"},
    )
    load = MetricSpec(
        "prom_node_load1",
        "1m load average (Prometheus node exporter)",
        15000,
        "gauge",
        "prometheus",
        "node_load1",
        phase_ms=120,
    )
    wattmetre = MetricSpec(
        "wattmetre_power_watt",
        "Power consumption of node reported by wattmetre, in watt",
        1000,
        "power",
        "wattmetre",
        f"wattmetre-{cluster}",
        optional_period_ms=20,
    )
    if cluster == "taurus":
        pdu = MetricSpec(
            "pdu_outlet_power_watt",
            "Power consumption of PDU outlet, in watt",
            1000,
            "power",
            "snmp",
            "1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.%PDU_PORT%",
            only_for=tuple(nodes[:2]),
        )
        return [pdu, bmc, net, load]
    return [wattmetre, bmc, net, load]


#: site -> clusters. The benchmark and tests use nova (lyon) and gros (nancy).
SITE_CLUSTERS: Final = {"lyon": ["nova", "taurus"], "nancy": ["gros"]}


#: Extra watts per cluster, so that nodes of different clusters draw different curves.
CLUSTER_OFFSET_W: Final = {"nova": 0.0, "taurus": 1.5, "gros": 3.0}


def power_watts(node_index: int, t_s: float, kind: str = "power", cluster: str = "nova") -> float:
    """The simulated power of node number ``node_index`` at epoch second ``t_s``.

    A triangle wave between ``base`` and ``base + 60`` W with a 600 s period (minimum at
    multiples of 600 s, maximum 300 s later), ``base = 90 + 7 * node_index`` plus
    :data:`CLUSTER_OFFSET_W`; BMC readings are 5 W above the wattmetre's.
    """
    base = 90.0 + 7.0 * node_index + CLUSTER_OFFSET_W.get(cluster, 0.0)
    base += 5.0 if kind == "bmc" else 0.0
    x = (t_s % WAVE_PERIOD_S) / (WAVE_PERIOD_S / 2)
    return base + WAVE_AMPLITUDE_W * (1.0 - abs(x - 1.0))


@dataclass(frozen=True, slots=True)
class SimJob:
    site: str
    uid: int
    nodes: tuple[str, ...]
    started_at: int
    stopped_at: int
    types: tuple[str, ...] = ()


@dataclass
class SimSettings:
    """What the simulator serves and how it misbehaves (changeable at run time)."""

    nodes_per_cluster: int = 4
    delay_s: float = 0.0
    site_delay_s: dict[str, float] = field(default_factory=dict)
    max_points: int | None = None
    timeout_delay_s: float = 0.0
    zero_bmc_node: str = "taurus-3"
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    jobs: list[SimJob] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nodes_per_cluster < 3:
            raise ConfigError("--nodes must be >= 3 (taurus-3 is the node whose BMC reads 0)")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class _Series:
    node: str
    index: int
    metric: MetricSpec
    labels_json: bytes
    #: inclusive [start, end] microsecond intervals sampled at ``optional_period`` (monitor jobs)
    monitor: tuple[tuple[int, int], ...] = ()


def _node_index(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


def _parse_time(text: str, what: str) -> int:
    """Epoch microseconds of a Kwollect time parameter."""
    text = text.strip()
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _HttpError(
            400, f"Invalid {what} {text!r}: use a Unix epoch or an ISO 8601 timestamp"
        ) from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=PARIS)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class _TimeFormatter:
    """ISO timestamps in Europe/Paris, cached by UTC hour offset (the formatting hot path)."""

    def __init__(self) -> None:
        self._offsets: dict[int, tuple[int, str]] = {}

    def __call__(self, us: int) -> str:
        hour = us // 3_600_000_000
        cached = self._offsets.get(hour)
        if cached is None:
            local = datetime.fromtimestamp(hour * 3600, PARIS)
            off = local.utcoffset() or timedelta(0)
            secs = int(off.total_seconds())
            sign = "+" if secs >= 0 else "-"
            text = f"{sign}{abs(secs) // 3600:02d}:{abs(secs) % 3600 // 60:02d}"
            cached = (secs, text)
            self._offsets[hour] = cached
        secs, text = cached
        whole, frac = divmod(us, 1_000_000)
        base = datetime(1970, 1, 1) + timedelta(seconds=whole + secs)  # noqa: DTZ001 - wall time
        stamp = base.isoformat()
        if frac:
            stamp += f".{frac:06d}"
        return stamp + text


class KwollectSimulator:
    """The simulated API over ``http.server`` (threaded)."""

    def __init__(self, settings: SimSettings, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self.clusters: dict[str, dict[str, list[str]]] = {}
        self.specs: dict[tuple[str, str], list[MetricSpec]] = {}
        for site, clusters in SITE_CLUSTERS.items():
            self.clusters[site] = {}
            for cluster in clusters:
                nodes = [f"{cluster}-{i}" for i in range(1, settings.nodes_per_cluster + 1)]
                self.clusters[site][cluster] = nodes
                self.specs[(site, cluster)] = _cluster_metrics(cluster, nodes)
        if not settings.jobs:
            start = int(datetime(2024, 11, 26, 14, 0, tzinfo=UTC).timestamp())
            settings.jobs = [
                SimJob("lyon", 1930000, ("nova-1", "nova-2"), start, start + 1800),
                # a 50 Hz wattmetre job, on a day the other examples do not use
                SimJob(
                    "nancy",
                    5200000,
                    ("gros-1", "gros-2", "gros-3"),
                    start + 3 * 86_400,
                    start + 3 * 86_400 + 3600,
                    ("monitor=wattmetre_power_watt",),
                ),
            ]
        self._stats: dict[str, Any] = {}
        self.reset_stats()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{host_text}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    # -- stats ---------------------------------------------------------------------------

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = {
                "requests": 0,
                "metrics_requests": {},
                "points_served": 0,
                "too_much_data": 0,
                "in_flight": 0,
                "max_in_flight": 0,
            }

    @property
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._stats, "metrics_requests": dict(self._stats["metrics_requests"])}

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] += amount

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        allowed = {"delay_s", "site_delay_s", "max_points", "timeout_delay_s"}
        unknown = set(changes) - allowed
        if unknown:
            raise _HttpError(400, f"unknown settings {sorted(unknown)}; allowed {sorted(allowed)}")
        for key, value in changes.items():
            setattr(self.settings, key, value)
        return self.settings_doc()

    def settings_doc(self) -> dict[str, Any]:
        s = self.settings
        return {
            "delay_s": s.delay_s,
            "site_delay_s": s.site_delay_s,
            "max_points": s.max_points,
            "timeout_delay_s": s.timeout_delay_s,
            "nodes_per_cluster": s.nodes_per_cluster,
            "zero_bmc_node": s.zero_bmc_node,
            "sites": self.clusters,
        }

    # -- reference API -------------------------------------------------------------------

    def _site(self, site: str) -> dict[str, list[str]]:
        if site not in self.clusters:
            raise _HttpError(404, f"Site '{site}' not found; known sites: {sorted(self.clusters)}")
        return self.clusters[site]

    def _cluster(self, site: str, cluster: str) -> list[str]:
        clusters = self._site(site)
        if cluster not in clusters:
            raise _HttpError(404, f"Cluster '{cluster}' not found in site '{site}'")
        return clusters[cluster]

    def reference(self, parts: list[str]) -> Any:
        if parts == ["sites"]:
            items = [{"uid": s, "type": "site"} for s in self.clusters]
            return {"items": items, "total": len(items), "offset": 0}
        site = parts[1]
        if len(parts) == 2:
            self._site(site)
            return {"uid": site, "type": "site", "name": site.capitalize()}
        if parts[2:] == ["clusters"]:
            items = [{"uid": c, "type": "cluster"} for c in self._site(site)]
            return {"items": items, "total": len(items), "offset": 0}
        if len(parts) >= 4 and parts[2] == "clusters":
            nodes = self._cluster(site, parts[3])
            if len(parts) == 4:
                return {
                    "uid": parts[3],
                    "type": "cluster",
                    "metrics": [self._metric_doc(m) for m in self.specs[(site, parts[3])]],
                }
            if parts[4:] == ["nodes"]:
                items = [{"uid": n, "type": "node", "cluster": parts[3]} for n in nodes]
                return {"items": items, "total": len(items), "offset": 0}
        if len(parts) == 4 and parts[2] == "jobs":
            job = self._job(site, parts[3])
            return {
                "uid": job.uid,
                "user": "alice",
                "state": "terminated",
                "types": list(job.types),
                "assigned_nodes": [f"{n}.{site}.{DOMAIN}" for n in job.nodes],
                "started_at": job.started_at,
                "stopped_at": job.stopped_at,
            }
        raise _HttpError(404, f"Not found: /{'/'.join(parts)}")

    def _job(self, site: str, uid: str) -> SimJob:
        self._site(site)
        for job in self.settings.jobs:
            if job.site == site and str(job.uid) == uid.strip():
                return job
        raise _HttpError(404, f"Job {uid} not found in site '{site}'")

    @staticmethod
    def _metric_doc(m: MetricSpec) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": m.name,
            "description": m.description,
            "period": m.period_ms,
            "source": {"protocol": m.protocol, "id": m.source_id},
            "labels": m.labels,
        }
        if m.optional_period_ms is not None:
            doc["optional_period"] = m.optional_period_ms
        if m.only_for is not None:
            doc["only_for"] = list(m.only_for)
        return doc

    # -- metrics -------------------------------------------------------------------------

    def plan_metrics(self, site: str, params: dict[str, list[str]]) -> tuple[Any, ...]:
        """Validate a metrics query; returns (series, start_us, end_us, summary, as_rate)."""
        clusters = self._site(site)
        known = {n: c for c, nodes in clusters.items() for n in nodes}

        def names(key: str) -> list[str]:
            raw = ",".join(params.get(key, []))
            return [x.strip().split(".", 1)[0] for x in raw.split(",") if x.strip()]

        nodes = names("nodes") + names("devices")
        start_us = end_us = None
        if "job_id" in params:
            job = self._job(site, params["job_id"][0])
            nodes = nodes or list(job.nodes)
            start_us = job.started_at * 1_000_000
            end_us = job.stopped_at * 1_000_000
        missing = sorted({n for n in nodes if n not in known})
        if missing:
            raise _HttpError(400, f"Unknown nodes or devices on site {site}: {', '.join(missing)}")
        if not nodes:
            nodes = list(known)
        if "start_time" in params:
            start_us = _parse_time(params["start_time"][0], "start_time")
        if "end_time" in params:
            end_us = _parse_time(params["end_time"][0], "end_time")
        now_us = int(time.time() * 1_000_000)
        if start_us is None and end_us is None:
            end_us = now_us
        if start_us is None:
            assert end_us is not None
            start_us = end_us - _DEFAULT_WINDOW_US
        if end_us is None:
            end_us = start_us + _DEFAULT_WINDOW_US
        if end_us < start_us:
            raise _HttpError(400, "end_time is before start_time")
        end_us = min(end_us, now_us)
        wanted = set(names("metrics")) if "metrics" in params else None
        series: list[_Series] = []
        for node in dict.fromkeys(nodes):
            cluster = known[node]
            for m in self.specs[(site, cluster)]:
                if wanted is not None and m.name not in wanted:
                    continue
                if m.only_for is not None and node not in m.only_for:
                    continue
                labels: dict[str, Any] = dict(m.labels)
                if m.kind == "power":
                    labels["_device_orig"] = [f"{m.source_id}-port{_node_index(node)}"]
                elif m.kind == "counter":
                    labels["_device_orig"] = [f"gw-{cluster}-port-{_node_index(node)}"]
                elif m.kind == "gauge":
                    labels["job"] = "node_exporter"
                series.append(
                    _Series(
                        node,
                        _node_index(node),
                        m,
                        orjson.dumps(labels),
                        self._monitor_intervals(site, node, m),
                    )
                )
        summary = params.get("summary", ["false"])[0].lower() in ("true", "1", "yes")
        as_rate = params.get("as_rate", ["false"])[0].lower() in ("true", "1", "yes")
        return series, start_us, end_us, summary, as_rate

    def _monitor_intervals(
        self, site: str, node: str, m: MetricSpec
    ) -> tuple[tuple[int, int], ...]:
        """Periods of jobs of type ``monitor=<regex>`` matching ``m`` on ``node``."""
        if m.optional_period_ms is None:
            return ()
        found = []
        for job in self.settings.jobs:
            if job.site != site or node not in job.nodes:
                continue
            for t in job.types:
                kind, _, pattern = t.partition("=")
                if kind == "monitor" and re.fullmatch(pattern.strip("'\""), m.name):
                    found.append((job.started_at * 1_000_000, job.stopped_at * 1_000_000))
        return tuple(sorted(found))

    @staticmethod
    def _segments(s: _Series, start_us: int, end_us: int) -> list[tuple[int, int, int, int]]:
        """``(start, end, period, phase)`` pieces of [start, end] with one sampling grid each."""
        m = s.metric
        slow, phase = m.period_ms * 1000, m.phase_ms * 1000
        fast = (m.optional_period_ms or m.period_ms) * 1000
        segs: list[tuple[int, int, int, int]] = []
        cur = start_us
        for js, je in s.monitor:
            if je < cur or js > end_us:
                continue
            if js > cur:
                segs.append((cur, js - 1, slow, phase))
            segs.append((max(js, cur), min(je, end_us), fast, phase))
            cur = min(je, end_us) + 1
        if cur <= end_us:
            segs.append((cur, end_us, slow, phase))
        return segs

    @staticmethod
    def _grid(p: int, ph: int, start_us: int, end_us: int) -> tuple[int, int]:
        """First and last sample numbers k (t = k * p + ph) in [start, end]."""
        first = -((ph - start_us) // p)  # ceil((start - ph) / p)
        last = (end_us - ph) // p
        return first, last

    def _times(self, s: _Series, start_us: int, end_us: int) -> np.ndarray[Any, Any]:
        parts = []
        for a, b, p, ph in self._segments(s, start_us, end_us):
            k0, k1 = self._grid(p, ph, a, b)
            if k1 >= k0:
                parts.append(np.arange(k0, k1 + 1, dtype=np.int64) * p + ph)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def count_points(self, series: list[_Series], start_us: int, end_us: int) -> int:
        total = 0
        for s in series:
            for a, b, p, ph in self._segments(s, start_us, end_us):
                k0, k1 = self._grid(p, ph, a, b)
                total += max(0, k1 - k0 + 1)
        return total

    def _value(self, s: _Series, us: int, as_rate: bool) -> float | int:
        t = us / 1_000_000
        kind = s.metric.kind
        if kind == "power":
            return power_watts(s.index, t, "power", s.node.rsplit("-", 1)[0])
        if kind == "bmc":
            if s.node == self.settings.zero_bmc_node:
                return 0
            return power_watts(s.index, t, "bmc", s.node.rsplit("-", 1)[0])
        if kind == "counter":
            rate = 125_000 * (1 + s.index % 3)
            if as_rate:
                return float(rate)
            return s.index * 1_000_000_000 + us * rate // 1_000_000
        return round(abs(math.sin(t / 300 + s.index)) * 4, 2)

    def render(
        self, series: list[_Series], start_us: int, end_us: int, summary: bool, as_rate: bool
    ) -> Iterator[bytes]:
        """The JSON array, one minute of data at a time, oldest first."""
        fmt = _TimeFormatter()
        yield b"["
        first_out = True
        if summary:
            for s in series:
                times = self._times(s, start_us, end_us).tolist()
                if not times:
                    continue
                values = [self._value(s, us, as_rate) for us in times]
                labels = orjson.loads(s.labels_json)
                labels["_summary"] = {
                    "min": min(values),
                    "max": max(values),
                    "mean": sum(values) / len(values),
                    "count": len(values),
                    "first": fmt(times[0]),
                    "last": fmt(times[-1]),
                }
                point = {
                    "timestamp": fmt(times[0]),
                    "device_id": s.node,
                    "metric_id": s.metric.name,
                    "value": sum(values) / len(values),
                    "labels": labels,
                }
                yield (b"" if first_out else b",") + orjson.dumps(point)
                first_out = False
            yield b"]"
            return
        heads = [
            f'{{"timestamp":"{{}}","device_id":"{s.node}","metric_id":"{s.metric.name}","value":'
            for s in series
        ]
        tails = [b',"labels":' + s.labels_json + b"}" for s in series]
        chunk_start = start_us
        buf: list[bytes] = []
        size = 0
        while chunk_start <= end_us:
            chunk_end = min(end_us, chunk_start + _CHUNK_US - 1)
            stamps: list[np.ndarray[Any, Any]] = []
            ids: list[np.ndarray[Any, Any]] = []
            for i, s in enumerate(series):
                times = self._times(s, chunk_start, chunk_end)
                if not len(times):
                    continue
                stamps.append(times)
                ids.append(np.full(len(times), i, dtype=np.int64))
            if stamps:
                ts = np.concatenate(stamps)
                sid = np.concatenate(ids)
                order = np.argsort(ts, kind="stable")
                last_us = -1
                stamp = ""
                for us, i in zip(ts[order].tolist(), sid[order].tolist(), strict=True):
                    if us != last_us:
                        stamp, last_us = fmt(us), us
                    s = series[i]
                    value = self._value(s, us, as_rate)
                    piece = (
                        ("" if first_out else ",")
                        + heads[i].replace("{}", stamp, 1)
                        + (repr(value) if isinstance(value, float) else str(value))
                    ).encode() + tails[i]
                    first_out = False
                    buf.append(piece)
                    size += len(piece)
                    if size >= 1 << 16:
                        yield b"".join(buf)
                        buf, size = [], 0
            chunk_start = chunk_end + 1
        buf.append(b"]")
        yield b"".join(buf)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sim: KwollectSimulator) -> None:
        self.sim = sim
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _authorized(self) -> bool:
        s = self.server.sim.settings
        if s.user is None:
            return True
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(user, s.user) and hmac.compare_digest(password, s.password or "")

    def _handle(self, method: str) -> None:
        sim = self.server.sim
        sim._count("requests")
        parts_url = urlsplit(self.path)
        path = parts_url.path.rstrip("/")
        try:
            if path.startswith("/_sim/"):
                self._admin(method, path)
                return
            if not self._authorized():
                raise _HttpError(401, "Authentication required (HTTP Basic, Grid'5000 login)")
            if path.startswith("/stable/"):
                path = path[len("/stable") :]
            parts = [p for p in path.split("/") if p]
            if method != "GET":
                raise _HttpError(405, "use GET")
            if len(parts) == 3 and parts[0] == "sites" and parts[2] == "metrics":
                self._metrics(parts[1], parse_qs(parts_url.query))
                return
            if not parts or parts[0] != "sites":
                raise _HttpError(404, f"Not found: {path or '/'}")
            self._json(200, sim.reference(parts))
        except _HttpError as exc:
            self._json(exc.status, {"code": exc.status, "message": exc.message})

    def _admin(self, method: str, path: str) -> None:
        sim = self.server.sim
        if path == "/_sim/stats" and method == "GET":
            self._json(200, sim.stats)
        elif path == "/_sim/stats/reset" and method == "POST":
            sim.reset_stats()
            self._json(200, sim.stats)
        elif path == "/_sim/config" and method == "GET":
            self._json(200, sim.settings_doc())
        elif path == "/_sim/config" and method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            try:
                changes = orjson.loads(self.rfile.read(length) or b"{}")
            except orjson.JSONDecodeError as exc:
                raise _HttpError(400, f"invalid JSON: {exc}") from exc
            self._json(200, sim.configure(changes))
        else:
            raise _HttpError(404, f"Not found: {path}")

    def _metrics(self, site: str, params: dict[str, list[str]]) -> None:
        sim = self.server.sim
        s = sim.settings
        with sim._lock:
            st = sim._stats
            st["in_flight"] += 1
            st["max_in_flight"] = max(st["max_in_flight"], st["in_flight"])
            st["metrics_requests"][site] = st["metrics_requests"].get(site, 0) + 1
        try:
            series, start_us, end_us, summary, as_rate = sim.plan_metrics(site, params)
            delay = s.delay_s + s.site_delay_s.get(site, 0.0)
            if delay:
                time.sleep(delay)
            points = sim.count_points(series, start_us, end_us) if not summary else len(series)
            if s.max_points is not None and points > s.max_points:
                sim._count("too_much_data")
                if s.timeout_delay_s:
                    time.sleep(s.timeout_delay_s)
                raise _HttpError(500, TOO_MUCH_DATA)
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.end_headers()
            try:
                for piece in sim.render(series, start_us, end_us, summary, as_rate):
                    self.wfile.write(piece)
            except (ConnectionError, TimeoutError):
                return
            sim._count("points_served", points)
        finally:
            sim._count("in_flight", -1)

    def _json(self, status: int, doc: Any) -> None:
        body = orjson.dumps(doc)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="Grid5000"')
            self.end_headers()
            self.wfile.write(body)
        except (ConnectionError, TimeoutError):
            pass


def _parse_job(text: str) -> SimJob:
    try:
        site, uid, nodes, start, stop = text.split(":")
        return SimJob(site, int(uid), tuple(nodes.split(",")), int(float(start)), int(float(stop)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"bad --job {text!r}: expected SITE:ID:NODE,NODE:START_EPOCH:STOP_EPOCH"
        ) from exc


def _site_delay(text: str) -> tuple[str, float]:
    site, _, value = text.partition("=")
    try:
        return site, float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"bad --site-delay {text!r}: expected SITE=SECONDS"
        ) from exc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dxt simulate kwollect",
        description="Serve a deterministic Grid'5000 reference + Kwollect metrics API.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8084, help="port; 0 picks a free one")
    p.add_argument("--nodes", type=int, default=4, help="nodes per cluster (default 4, >= 3)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before every metrics answer")
    p.add_argument(
        "--site-delay",
        type=_site_delay,
        action="append",
        default=[],
        metavar="SITE=SECONDS",
        help="extra delay of one site's metrics answers (repeatable)",
    )
    p.add_argument("--max-points", type=int, help="'too much data' (HTTP 500) above N points")
    p.add_argument("--timeout-delay", type=float, default=0.0, help="seconds before that error")
    p.add_argument("--user", help="require HTTP Basic auth with this user")
    p.add_argument("--password", help="password of --user (or env DXT_SIM_PASSWORD)")
    p.add_argument(
        "--job",
        type=_parse_job,
        action="append",
        default=[],
        help="SITE:ID:NODE,NODE:START_EPOCH:STOP_EPOCH (repeatable)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT."""
    args = _parser().parse_args(argv)
    password = args.password if args.password is not None else os.environ.get("DXT_SIM_PASSWORD")
    try:
        settings = SimSettings(
            nodes_per_cluster=args.nodes,
            delay_s=args.delay,
            site_delay_s=dict(args.site_delay),
            max_points=args.max_points,
            timeout_delay_s=args.timeout_delay,
            user=args.user,
            password=password if args.user else None,
            jobs=list(args.job),
        )
        sim = KwollectSimulator(settings, host=args.host, port=args.port)
    except (ConfigError, OSError) as exc:
        print(f"dxt-simulate-kwollect: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    handlers: dict[int, Callable[..., Any] | int | None] = {
        sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        sim.start()
        print(f"dxt-simulate-kwollect listening on {sim.url}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
