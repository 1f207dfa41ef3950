"""Query semantics: the reference API documents and ``/sites/<site>/metrics`` answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import numpy as np
import orjson

from dxt_core.backends.kwollect.simulator.model import (
    DOMAIN,
    PARIS,
    MetricSpec,
    Series,
    SimJob,
    SimModel,
    node_index,
)

_CHUNK_US: Final = 60_000_000  # answers are generated one minute of data at a time
_DEFAULT_WINDOW_US: Final = 300_000_000


class ApiError(Exception):
    """An error answer: HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_time(text: str, what: str) -> int:
    """Epoch microseconds of a Kwollect time parameter."""
    text = text.strip()
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ApiError(
            400, f"Invalid {what} {text!r}: use a Unix epoch or an ISO 8601 timestamp"
        ) from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=PARIS)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class TimeFormatter:
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


class QueryEngine:
    """Answers of the reference API and of the metrics API over a :class:`SimModel`."""

    def __init__(self, model: SimModel) -> None:
        self.model = model

    # -- reference API -------------------------------------------------------------------

    def _site(self, site: str) -> dict[str, list[str]]:
        clusters = self.model.clusters
        if site not in clusters:
            raise ApiError(404, f"Site '{site}' not found; known sites: {sorted(clusters)}")
        return clusters[site]

    def _cluster(self, site: str, cluster: str) -> list[str]:
        clusters = self._site(site)
        if cluster not in clusters:
            raise ApiError(404, f"Cluster '{cluster}' not found in site '{site}'")
        return clusters[cluster]

    def reference(self, parts: list[str]) -> Any:
        if parts == ["sites"]:
            items = [{"uid": s, "type": "site"} for s in self.model.clusters]
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
                    "metrics": [self._metric_doc(m) for m in self.model.specs[(site, parts[3])]],
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
        raise ApiError(404, f"Not found: /{'/'.join(parts)}")

    def _job(self, site: str, uid: str) -> SimJob:
        self._site(site)
        for job in self.model.settings.jobs:
            if job.site == site and str(job.uid) == uid.strip():
                return job
        raise ApiError(404, f"Job {uid} not found in site '{site}'")

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
            raise ApiError(400, f"Unknown nodes or devices on site {site}: {', '.join(missing)}")
        if not nodes:
            nodes = list(known)
        if "start_time" in params:
            start_us = parse_time(params["start_time"][0], "start_time")
        if "end_time" in params:
            end_us = parse_time(params["end_time"][0], "end_time")
        now_us = int(time.time() * 1_000_000)
        if start_us is None and end_us is None:
            end_us = now_us
        if start_us is None:
            assert end_us is not None
            start_us = end_us - _DEFAULT_WINDOW_US
        if end_us is None:
            end_us = start_us + _DEFAULT_WINDOW_US
        if end_us < start_us:
            raise ApiError(400, "end_time is before start_time")
        end_us = min(end_us, now_us)
        wanted = set(names("metrics")) if "metrics" in params else None
        series: list[Series] = []
        for node in dict.fromkeys(nodes):
            cluster = known[node]
            for m in self.model.specs[(site, cluster)]:
                if wanted is not None and m.name not in wanted:
                    continue
                if m.only_for is not None and node not in m.only_for:
                    continue
                labels: dict[str, Any] = dict(m.labels)
                if m.kind == "power":
                    labels["_device_orig"] = [f"{m.source_id}-port{node_index(node)}"]
                elif m.kind == "counter":
                    labels["_device_orig"] = [f"gw-{cluster}-port-{node_index(node)}"]
                elif m.kind == "gauge":
                    labels["job"] = "node_exporter"
                series.append(
                    Series(
                        node,
                        node_index(node),
                        m,
                        orjson.dumps(labels),
                        self.model.monitor_intervals(site, node, m),
                    )
                )
        summary = params.get("summary", ["false"])[0].lower() in ("true", "1", "yes")
        as_rate = params.get("as_rate", ["false"])[0].lower() in ("true", "1", "yes")
        return series, start_us, end_us, summary, as_rate

    def render(
        self,
        series: list[Series],
        start_us: int,
        end_us: int,
        summary: bool,
        as_rate: bool,
        stray_us: int | None = None,
    ) -> Iterator[bytes]:
        """The JSON array, one minute of data at a time, oldest first.

        ``stray_us`` (a fault): one more point, of the first series at that time, first.
        """
        model = self.model
        fmt = TimeFormatter()
        yield b"["
        first_out = True
        if stray_us is not None and series:
            s = series[0]
            point = {
                "timestamp": fmt(stray_us),
                "device_id": s.node,
                "metric_id": s.metric.name,
                "value": model.value(s, stray_us, as_rate),
                "labels": orjson.loads(s.labels_json),
            }
            yield orjson.dumps(point)
            first_out = False
        if summary:
            for s in series:
                times = model.times(s, start_us, end_us).tolist()
                if not times:
                    continue
                values = [model.value(s, us, as_rate) for us in times]
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
                times = model.times(s, chunk_start, chunk_end)
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
                    value = model.value(s, us, as_rate)
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
