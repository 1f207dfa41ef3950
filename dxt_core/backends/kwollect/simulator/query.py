"""Query semantics: the reference API documents and ``/sites/<site>/metrics`` answers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import numpy as np
import orjson

from dxt_core.backends.kwollect.simulator.model import (
    DOMAIN,
    PARIS,
    Series,
    SimJob,
    SimModel,
    cluster_catalogue,
    node_index,
)

_CHUNK_US: Final = 60_000_000  # answers are generated one minute of data at a time
_DEFAULT_WINDOW_US: Final = 300_000_000
_BUCKET_US: Final = 300_000_000  # summary buckets: time_bucket('5 minute', ...)


class ApiError(Exception):
    """An error answer: HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PgError(ApiError):
    """An error of ``api.get_metrics`` as PostgREST answers it: SQLSTATE and message."""

    def __init__(self, status: int, sqlstate: str, message: str) -> None:
        super().__init__(status, message)
        self.sqlstate = sqlstate

    def doc(self) -> dict[str, Any]:
        return {"code": self.sqlstate, "details": None, "hint": None, "message": self.message}


#: The errors of kwollect's ``api.get_metrics`` (``kwollect/db/kwollect_setup_db.py``): a
#: ``plpy.error`` is SQLSTATE XX000, a Python exception 38000; PostgREST answers both with 500.
MISSING_SELECTOR: Final = "plpy.Error: Missing 'devices', 'nodes' or 'job_id' argument"
NO_SUCH_JOB: Final = "IndexError: list index out of range"


def _paris_midnight(days: int, now_us: int) -> int:
    today = datetime.fromtimestamp(now_us / 1_000_000, PARIS).date() + timedelta(days=days)
    t = datetime(today.year, today.month, today.day, tzinfo=PARIS)
    return int(t.timestamp()) * 1_000_000


def parse_time(text: str, now_us: int) -> int:
    """Epoch microseconds of a time parameter, as ``api.get_metrics`` reads it.

    What ``float()`` reads is a Unix epoch (``to_timestamp``); anything else is cast to
    ``timestamp with time zone``: ISO 8601 (without an offset: the server's zone, Paris on
    Grid'5000) and PostgreSQL's special values ``now``, ``today``, ``tomorrow``,
    ``yesterday``, ``epoch``. PostgreSQL reads more forms than these; we refuse them.
    """
    text = text.strip()
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        pass
    special = text.lower()
    if special == "now":
        return now_us
    if special == "epoch":
        return 0
    days = {"today": 0, "tomorrow": 1, "yesterday": -1}.get(special)
    if days is not None:
        return _paris_midnight(days, now_us)
    try:
        t = datetime.fromisoformat(text)
    except ValueError as exc:
        raise PgError(
            400,
            "22007",
            "spiexceptions.InvalidDatetimeFormat: invalid input syntax for type timestamp "
            f'with time zone: "{text}"',
        ) from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=PARIS)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def pg_number(value: float | int | None) -> str:
    """A ``double precision`` as PostgreSQL's JSON prints it: shortest round-trip digits,
    no ``.0`` on whole numbers, exponent form below 1e-4 and from 1e15, NaN as a string."""
    if value is None:
        return "null"
    x = float(value)
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    text = "".join(map(str, digits))
    e10 = len(text) - 1 + int(exp)
    minus = "-" if sign else ""
    if e10 < -4 or e10 >= 15:
        mant = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mant}e{'-' if e10 < 0 else '+'}{abs(e10):02d}"
    if e10 >= len(text) - 1:
        return minus + text + "0" * (e10 - len(text) + 1)
    if e10 >= 0:
        return f"{minus}{text[: e10 + 1]}.{text[e10 + 1 :]}"
    return f"{minus}0.{'0' * (-e10 - 1)}{text}"


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
        if frac:  # PostgreSQL drops trailing zeros: .02, .754307
            stamp += f".{frac:06d}".rstrip("0")
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
                    "metrics": cluster_catalogue(self.model.specs[(site, parts[3])]),
                }
            if parts[4:] == ["nodes"]:
                items = [{"uid": n, "type": "node", "cluster": parts[3]} for n in nodes]
                return {"items": items, "total": len(items), "offset": 0}
        if len(parts) == 4 and parts[2] == "jobs":
            job = self._job(site, parts[3])
            doc: dict[str, Any] = {
                "uid": job.uid,
                "user": "alice",
                "state": "terminated" if job.stopped_at is not None else "running",
                "types": list(job.types),
                "assigned_nodes": [f"{n}.{site}.{DOMAIN}" for n in job.nodes],
                "started_at": job.started_at,
            }
            # grid5000/g5k-api lib/oar/job.rb: stopped_at is nil while stop_time is 0 (a
            # running job) and to_reservation keeps only the keys whose value is not nil.
            if job.stopped_at is not None:
                doc["stopped_at"] = job.stopped_at
            return doc
        raise ApiError(404, f"Not found: /{'/'.join(parts)}")

    def _job(self, site: str, uid: str) -> SimJob:
        self._site(site)
        for job in self.model.settings.jobs:
            if job.site == site and str(job.uid) == uid.strip():
                return job
        raise ApiError(404, f"Job {uid} not found in site '{site}'")

    # -- metrics -------------------------------------------------------------------------

    def plan_metrics(self, site: str, params: dict[str, list[str]]) -> tuple[Any, ...]:
        """A metrics query read as ``api.get_metrics`` reads its arguments.

        Returns ``(series, start_us, end_us, summary, as_rate)``. Follows kwollect
        ``kwollect/db/kwollect_setup_db.py``: ``nodes`` and ``devices`` are one comma list, each
        name cut at its first dot; names it has no data for give no rows (not an error); no
        name and no ``job_id`` is an error; a job gives its nodes, start and stop unless they
        are given; a missing bound is the other one -/+ 5 minutes (both missing: the last 5
        minutes); both bounds are inclusive; ``metrics`` are exact names.
        """
        self._site(site)

        def value(key: str) -> str:
            found = params.get(key)
            return found[-1] if found else ""

        devices = ",".join(v for v in (value("nodes"), value("devices")) if v)
        job_text = value("job_id").strip()
        if job_text and not job_text.lstrip("-").isdigit():
            raise PgError(400, "22P02", f'invalid input syntax for type integer: "{job_text}"')
        job_id = int(job_text) if job_text else 0
        summary = _pg_bool(value("summary"))
        as_rate = _pg_bool(value("as_rate"))
        if not job_id and not devices:
            raise PgError(500, "XX000", MISSING_SELECTOR)
        now_us = int(time.time() * 1_000_000)
        start_text, end_text = value("start_time"), value("end_time")
        start_us = parse_time(start_text, now_us) if start_text else None
        end_us = parse_time(end_text, now_us) if end_text else None
        if job_id:
            job = self._metrics_job(site, job_id)
            start_us = job.started_at * 1_000_000 if start_us is None else start_us
            if end_us is None:
                # kwollect_setup_db.py get_metrics: COALESCE(MAX(stop_time), NOW()): a
                # running job's window ends now.
                end_us = now_us if job.stopped_at is None else job.stopped_at * 1_000_000
            devices = devices or ",".join(job.nodes)
        if start_us is None and end_us is None:
            end_us = now_us
        if start_us is None:
            assert end_us is not None
            start_us = end_us - _DEFAULT_WINDOW_US
        if end_us is None:
            end_us = start_us + _DEFAULT_WINDOW_US
        end_us = min(end_us, now_us)  # no data after now
        nodes = [d.split(".", 1)[0] for d in devices.split(",")]
        metrics_text = value("metrics")
        wanted = set(metrics_text.split(",")) if metrics_text else None
        return self.series(site, nodes, wanted), start_us, end_us, summary, as_rate

    def series(self, site: str, nodes: list[str], wanted: set[str] | None) -> list[Series]:
        """The series of ``nodes`` (names it has no data for give none) and ``wanted``
        metrics (None: all) on ``site``, in the order asked."""
        known = {n: c for c, members in self._site(site).items() for n in members}
        series: list[Series] = []
        for node in dict.fromkeys(nodes):
            cluster = known.get(node)
            if cluster is None:
                continue  # no data for that device: no rows
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
                monitor = self.model.monitor_intervals(site, node, m)
                series.append(Series(node, node_index(node), m, orjson.dumps(labels), monitor))
        return series

    def add_points(self, site: str, node: str, metric: str, points: list[Any]) -> int:
        """Store late points of one series (``POST /_sim/points``): rows a collector writes
        into the ``metrics`` table after the day was read. ``api.get_metrics`` returns every
        row of its window, ordered by time (kwollect ``kwollect/db/kwollect_setup_db.py``), so
        they are served with the others, in summaries and counts too. Each point is
        ``[time, value]``, the time as the metrics API reads ``start_time``; a time the series
        already samples is refused (the table would hold two rows of one instant).

        Raises:
            ApiError: no such series, or a point that is not ``[time, number]``.
        """
        found = self.series(site, [node], {metric})
        if len(found) != 1:
            raise ApiError(400, f"site {site} has no series {metric!r} of node {node!r}")
        s = found[0]
        now_us = int(time.time() * 1_000_000)
        parsed: dict[int, float] = {}
        for p in points:
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[1], int | float)):
                raise ApiError(400, f"a point is [time, number], not {p!r}")
            us = parse_time(str(p[0]), now_us)
            if len(self.model.times(s, us, us)):
                raise ApiError(400, f"{metric} of {node} already has a point at {p[0]}")
            parsed[us] = float(p[1])
        self.model.extra.setdefault((node, metric), {}).update(parsed)
        return len(parsed)

    def _metrics_job(self, site: str, job_id: int) -> SimJob:
        for job in self.model.settings.jobs:
            if job.site == site and job.uid == job_id:
                return job
        # the function takes row [0] of the job's nodes: an unknown job has none
        raise PgError(500, "38000", NO_SUCH_JOB)

    def count_points(self, series: list[Series], start_us: int, end_us: int, summary: bool) -> int:
        if summary:
            first, last = -(-start_us // _BUCKET_US), end_us // _BUCKET_US
            return sum(self._summary_rows(s, first, last) for s in series)
        return self.model.count_points(series, start_us, end_us)

    def _summary_rows(self, s: Series, first: int, last: int) -> int:
        """Buckets ``first..last`` (numbers) that hold a sample of ``s``: all of them for a
        series sampled at all times, those its monitor jobs cover for an on-demand one."""
        if s.metric.period_ms:
            return max(0, last - first + 1)
        held: set[int] = set()
        for js, je in s.monitor:
            for k in range(max(first, js // _BUCKET_US), min(last, je // _BUCKET_US) + 1):
                b = k * _BUCKET_US
                if k not in held and len(self.model.times(s, b, b + _BUCKET_US - 1, late=False)):
                    held.add(k)
        return len(held)

    def render(
        self,
        series: list[Series],
        start_us: int,
        end_us: int,
        summary: bool,
        as_rate: bool,
        stray_us: int | None = None,
    ) -> Iterator[bytes]:
        """The JSON array, oldest first, one minute of data (or of summary buckets) at a time.

        ``summary``: one row per 5-minute bucket whose start is in the window, the mean of the
        whole bucket (the largest value for ``*_total`` counters), stamped with its start.
        ``as_rate``: each value becomes (value - previous) / seconds between them, ``null``
        for a series' first row (a counter that went down counts as wrapped at its running
        maximum). ``stray_us`` (a fault): one more point, of the first series, first.
        """
        fmt = TimeFormatter()
        yield b"["
        first_out = True
        if stray_us is not None and series:
            s = series[0]
            number = pg_number(self.model.value(s, stray_us))
            yield (
                (
                    f'{{"timestamp":"{fmt(stray_us)}","device_id":"{s.node}",'
                    f'"metric_id":"{s.metric.name}","value":{number},"labels":'
                ).encode()
                + s.labels_json
                + b"}"
            )
            first_out = False
        heads = [
            f'{{"timestamp":"{{}}","device_id":"{s.node}","metric_id":"{s.metric.name}","value":'
            for s in series
        ]
        tails = [b',"labels":' + s.labels_json + b"}" for s in series]
        rates: list[_Rate | None] = [_Rate() if as_rate else None for _ in series]
        chunk = _BUCKET_US * 12 if summary else _CHUNK_US
        chunk_start = -(-start_us // _BUCKET_US) * _BUCKET_US if summary else start_us
        buf: list[bytes] = []
        size = 0
        while chunk_start <= end_us:
            chunk_end = min(end_us, chunk_start + chunk - 1)
            last_us = -1
            stamp = ""
            for us, i, value in self._chunk(series, chunk_start, chunk_end, end_us, summary):
                if us != last_us:
                    stamp, last_us = fmt(us), us
                rate = rates[i]
                if rate is not None:
                    value = rate.next(us, value)
                piece = (
                    ("" if first_out else ",") + heads[i].replace("{}", stamp, 1) + pg_number(value)
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

    def _chunk(
        self, series: list[Series], chunk_start: int, chunk_end: int, end_us: int, summary: bool
    ) -> Iterator[tuple[int, int, float | int | None]]:
        """(time, series index, value) of the rows in ``[chunk_start, chunk_end]``, oldest
        first (a stable sort: series order within an instant)."""
        model = self.model
        stamps: list[np.ndarray[Any, Any]] = []
        ids: list[np.ndarray[Any, Any]] = []
        bucket_values: dict[tuple[int, int], float] = {}
        for i, s in enumerate(series):
            if summary:
                times, values = self._buckets(s, chunk_start, chunk_end, end_us)
                for us, v in zip(times.tolist(), values, strict=True):
                    bucket_values[(i, us)] = v
            else:
                times = model.times(s, chunk_start, chunk_end)
            if not len(times):
                continue
            stamps.append(times)
            ids.append(np.full(len(times), i, dtype=np.int64))
        if not stamps:
            return
        ts = np.concatenate(stamps)
        sid = np.concatenate(ids)
        order = np.argsort(ts, kind="stable")
        for us, i in zip(ts[order].tolist(), sid[order].tolist(), strict=True):
            yield us, i, bucket_values[(i, us)] if summary else model.value(series[i], us)

    def _buckets(
        self, s: Series, first_us: int, last_us: int, end_us: int
    ) -> tuple[np.ndarray[Any, Any], list[float]]:
        """Summary buckets of ``s`` starting in [first, last]: starts and values.

        A bucket aggregates all its samples, also those after the window's end (the summary
        view is filtered on the bucket's start), but none after now (``end_us`` is capped at
        now by :meth:`plan_metrics` only when the request reached it), and no late point: the
        summary is a continuous aggregate refreshed over the last 12 hours only (kwollect
        ``kwollect/db/kwollect_setup_db.py``: ``add_continuous_aggregate_policy(
        'metrics_summary', start_offset => INTERVAL '12 hour', ...)``), so rows added later
        to the simulated (past) days never reach it.
        """
        total = s.metric.name.endswith("_total")
        b0 = -(-first_us // _BUCKET_US) * _BUCKET_US
        starts: list[int] = []
        values: list[float] = []
        now_us = int(time.time() * 1_000_000)
        for b in range(b0, last_us + 1, _BUCKET_US):
            times = self.model.times(s, b, min(b + _BUCKET_US - 1, now_us), late=False)
            if not len(times):
                continue
            vals = [float(self.model.value(s, us)) for us in times.tolist()]
            starts.append(b)
            values.append(max(vals) if total else math.fsum(vals) / len(vals))
        return np.array(starts, dtype=np.int64), values


class _Rate:
    """``as_rate`` of one series: the window function of ``api.get_metrics``."""

    def __init__(self) -> None:
        self.prev: tuple[int, float] | None = None
        self.top = -math.inf

    def next(self, us: int, value: float | int | None) -> float | None:
        if value is None:
            return None
        v = float(value)
        self.top = max(self.top, v)
        prev, self.prev = self.prev, (us, v)
        if prev is None or prev[0] == us:
            return None
        seconds = (us - prev[0]) / 1_000_000
        delta = (self.top - prev[1] + v) if v < prev[1] else (v - prev[1])
        return delta / seconds


def _pg_bool(text: str) -> bool:
    """A boolean argument as PostgreSQL casts text (empty: the default, false)."""
    t = text.strip().lower()
    if t in ("", "f", "false", "n", "no", "off", "0"):
        return False
    if t in ("t", "true", "y", "yes", "on", "1"):
        return True
    raise PgError(400, "22P02", f'invalid input syntax for type boolean: "{text}"')
