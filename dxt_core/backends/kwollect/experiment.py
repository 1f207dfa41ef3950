"""Kwollect (Grid'5000) for an experiment: metrics of its nodes, energy and backups.

Example:
    >>> from dxt_core.backends.kwollect.experiment import Kwollect
    >>> with Kwollect(["nova-1.lyon.grid5000.fr"]) as k:  # doctest: +SKIP
    ...     run_experiment()
    >>> k.energy()  # doctest: +SKIP
    {'nova-1.lyon.grid5000.fr': {'metric': 'wattmetre_power_watt', 'joules': ...}}

:class:`Kwollect` records start and stop times (no API call) and fetches afterwards, one
request at a time per site and all sites in parallel (threads), through
:class:`dxt_core.backends.kwollect.source.KwollectClient`, which plans and splits requests.
The daily archive (the ``dxt_kwollect`` DAG's unit of work) is in ``archive_day``.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import itertools
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

import httpx
import orjson

from dxt_core._version import __version__
from dxt_core.backends.kwollect.connection import DEFAULT_TIME_ZONE
from dxt_core.backends.kwollect.source import (
    DEFAULT_API_URL,
    DEFAULT_MAX_POINTS,
    POWER_METRICS,
    G5kNode,
    KwollectClient,
    KwollectStats,
    Point,
    by_site,
    check_component,
    parse_nodes,
    parse_time,
    point_time,
    sites_path,
    unknown_metric_error,
)
from dxt_core.budget import release_answers
from dxt_core.errors import ConfigError, DxtError, SourceError
from dxt_core.fsio import atomic_file, write_json_atomic
from dxt_core.http import RequestStats, RetryPolicy
from dxt_core.prefetch import prefetched
from dxt_core.writers.compress import GzipStream

log = logging.getLogger("dxt_core.backends.kwollect.experiment")

__all__ = [
    "BACKUP_MANIFEST",
    "DEFAULT_TIME_ZONE",
    "EnergyResult",
    "Kwollect",
    "integrate_power",
]

BACKUP_MANIFEST = "manifest.json"
BACKUP_SCHEMA = "dxt-archive/kwollect-backup/1"
BackupFormat = Literal["jsonl", "csv"]
_BASE_COLUMNS = ("timestamp", "device_id", "metric_id", "value")
#: A backup keeps one open gzip stream per (node, metric): ISA-L compresses as it goes with a
#: small state per stream, where buffering backends would hold megabytes per open file.
STREAM_BACKEND: Literal["isal"] = "isal"


# --------------------------------------------------------------------------------------------
# Energy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnergyResult:
    """Trapezoidal integral of a power series.

    ``mean_watts`` is time-weighted (joules / covered seconds). ``gaps`` lists intervals
    between consecutive samples longer than ``gap_factor`` times the expected period; the
    integral bridges them linearly, so a long gap makes ``joules`` an estimate.
    """

    joules: float
    mean_watts: float | None
    max_watts: float | None
    samples: int
    covered_seconds: float
    gaps: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "joules": self.joules,
            "mean_watts": self.mean_watts,
            "max_watts": self.max_watts,
            "samples": self.samples,
            "covered_seconds": self.covered_seconds,
            "gaps": self.gaps,
        }


def integrate_power(
    times: Sequence[dt.datetime],
    watts: Sequence[float],
    period_s: float | None = None,
    gap_factor: float = 3.0,
) -> EnergyResult:
    """Energy of samples ``watts`` at ``times`` (oldest first) by the trapezoidal rule.

    Args:
        period_s: expected sampling period; default the median interval.
        gap_factor: an interval longer than ``gap_factor * period_s`` is reported as a gap.
    """
    if len(times) != len(watts):
        raise ConfigError(f"{len(times)} timestamps but {len(watts)} values")
    n = len(watts)
    if n == 0:
        return EnergyResult(0.0, None, None, 0, 0.0, [])
    if n == 1:
        return EnergyResult(0.0, float(watts[0]), float(watts[0]), 1, 0.0, [])
    deltas = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    if any(d < 0 for d in deltas):
        raise ConfigError("power samples are not in chronological order")
    if period_s is None:
        period_s = sorted(deltas)[len(deltas) // 2] or 1.0
    joules = math.fsum((watts[i] + watts[i + 1]) / 2.0 * deltas[i] for i in range(n - 1))
    covered = (times[-1] - times[0]).total_seconds()
    gaps = [
        {
            "start": times[i].isoformat(),
            "end": times[i + 1].isoformat(),
            "seconds": deltas[i],
        }
        for i in range(n - 1)
        if deltas[i] > gap_factor * period_s
    ]
    return EnergyResult(
        joules,
        joules / covered if covered > 0 else float(watts[0]),
        float(max(watts)),
        n,
        covered,
        gaps,
    )


# --------------------------------------------------------------------------------------------
# Backup writers
# --------------------------------------------------------------------------------------------


@dataclass
class _FileStats:
    rows: int = 0
    first: str | None = None
    last: str | None = None


class _JsonlFile:
    """Points of one (node, metric) as gzip JSON Lines, exactly as the API returned them."""

    extension = "jsonl.gz"

    def __init__(self, fh: BinaryIO) -> None:
        self.gz = GzipStream(fh, backend=STREAM_BACKEND)
        self.stats = _FileStats()

    def write(self, point: Point, line: bytes) -> None:
        self.gz.write(line)
        s = self.stats
        s.rows += 1
        s.first = s.first or point["timestamp"]
        s.last = point["timestamp"]

    def close(self) -> tuple[int, str]:
        sha = self.gz.close()
        return self.gz.bytes, sha


def _label_text(value: Any) -> str:
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return "" if value is None else str(value)


class _CsvFile:
    """Points of one (node, metric) as gzip CSV, labels flattened into ``label:<key>`` columns.

    The set of label keys is known only at the end, so rows are spooled to an unnamed
    temporary file first (memory stays flat) and the CSV is written at close.
    """

    extension = "csv.gz"

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.keys: dict[str, None] = {}
        self.stats = _FileStats()

    def write(self, point: Point, line: bytes) -> None:
        self.spool.write(line)
        for k in point.get("labels") or {}:
            self.keys.setdefault(k, None)
        s = self.stats
        s.rows += 1
        s.first = s.first or point["timestamp"]
        s.last = point["timestamp"]

    def close(self) -> tuple[int, str]:
        keys = sorted(self.keys)
        gz = GzipStream(self.fh, backend=STREAM_BACKEND)
        text = io.StringIO()
        w = csv.writer(text, lineterminator="\n")
        w.writerow([*_BASE_COLUMNS, *(f"label:{k}" for k in keys)])
        self.spool.seek(0)
        for line in self.spool:
            p = orjson.loads(line)
            labels = p.get("labels") or {}
            w.writerow(
                [
                    p.get("timestamp"),
                    p.get("device_id"),
                    p.get("metric_id"),
                    p.get("value"),
                    *(_label_text(labels.get(k)) for k in keys),
                ]
            )
            if text.tell() > 1 << 16:
                gz.write(text.getvalue().encode())
                text.seek(0)
                text.truncate()
        gz.write(text.getvalue().encode())
        self.spool.close()
        sha = gz.close()
        return gz.bytes, sha


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


class Kwollect:
    """Metrics of a set of Grid'5000 nodes between a start and a stop time.

    Args:
        nodes: host names (``nova-1.lyon.grid5000.fr``, ``nova-1.lyon``, or ``nova-1`` with
            ``site``) or objects with an ``address`` attribute (EnOSlib hosts).
        api_url: the Grid'5000 API, e.g. ``https://api.grid5000.fr/stable``.
        auth: ``(login, password)`` for HTTP Basic (needed from outside Grid'5000).
        site: the site of short node names.
        max_workers: sites fetched in parallel (default: all).
        **client_options: passed to :class:`~dxt_core.backends.kwollect.source.KwollectClient`
            (``timeout_s``, ``retry``, ``max_points``, ``max_nodes``, ``min_window_s``,
            ``verify_tls``, ``transport``).

    ``start``/``stop`` make no API call; several instances may be started and stopped in any
    order. ``get_metrics``, ``backup`` and ``energy`` cover ``[start, stop]`` inclusive.
    """

    def __init__(
        self,
        nodes: Iterable[object] | None = None,
        api_url: str = DEFAULT_API_URL,
        auth: tuple[str, str] | None = None,
        *,
        site: str | None = None,
        roles: Iterable[object] | None = None,
        max_workers: int | None = None,
        timeout_s: float = 330.0,
        retry: RetryPolicy | None = None,
        max_points: int = DEFAULT_MAX_POINTS,
        max_nodes: int = 50,
        min_window_s: float = 1.0,
        verify_tls: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        given = list(nodes or []) + list(roles or [])
        if not given:
            raise ConfigError("Kwollect needs at least one node (nodes=[...] or roles=[...])")
        self.nodes: list[G5kNode] = parse_nodes(given, site)
        self.site = site
        self.client = KwollectClient(
            api_url,
            auth,
            timeout_s=timeout_s,
            retry=retry,
            max_points=max_points,
            max_nodes=max_nodes,
            min_window_s=min_window_s,
            verify_tls=verify_tls,
            transport=transport,
        )
        self.max_workers = max_workers
        self.start_time: dt.datetime | None = None
        self.stop_time: dt.datetime | None = None
        self.last_stats = KwollectStats()
        self.job: dict[str, Any] | None = None

    # -- after the fact ------------------------------------------------------------------

    @classmethod
    def from_job(
        cls,
        site: str,
        job_id: int | str,
        api_url: str = DEFAULT_API_URL,
        auth: tuple[str, str] | None = None,
        **options: Any,
    ) -> Kwollect:
        """Nodes, start and stop of a (past or running) OAR job, from the reference API."""
        probe = KwollectClient(api_url, auth, transport=options.get("transport"))
        try:
            job = probe.job(site, job_id)
        finally:
            probe.close()
        nodes = job.get("assigned_nodes") or []
        if not nodes:
            raise ConfigError(f"job {job_id} of site {site} has no assigned nodes (not started?)")
        started, stopped = job.get("started_at"), job.get("stopped_at")
        if not started:
            raise ConfigError(f"job {job_id} of site {site} has not started yet")
        k = cls(nodes, api_url, auth, site=site, **options)
        k.start(started)
        if stopped:
            k.stop(stopped)
        k.job = job
        return k

    # -- service interface ---------------------------------------------------------------

    def deploy(self) -> Kwollect:
        """Check that every node is known to the reference API of its site.

        Raises:
            ConfigError: names every unknown site and node.
        """
        problems: list[str] = []
        for site, nodes in by_site(self.nodes).items():
            # One reference API call per cluster in use, not per cluster of the site.
            clusters = {n.cluster: self.client.cluster_nodes(site, n.cluster) for n in nodes}
            bad = [n.fqdn for n in nodes if n.name not in (clusters[n.cluster] or ())]
            if bad:
                missing = sorted(c for c, members in clusters.items() if members is None)
                why = f" (no cluster {', '.join(missing)} on site {site})" if missing else ""
                if missing and not self._site_exists(site):
                    why = f" (site {site!r} is unknown to {self.client.safe_url})"
                problems.append(f"unknown nodes on site {site}: {', '.join(bad)}{why}")
        if problems:
            raise ConfigError(
                "; ".join(problems) + " -- check the node names (Grid'5000 reference API)"
            )
        return self

    def _site_exists(self, site: str) -> bool:
        try:
            self.client.get(sites_path(site))
        except SourceError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def start(self, timestamp: object | None = None) -> Kwollect:
        """Record the start time (now, or ``timestamp``: datetime, epoch or ISO string)."""
        self.start_time = (
            dt.datetime.now(dt.UTC) if timestamp is None else parse_time(timestamp, "start")
        )
        self.stop_time = None
        return self

    def stop(self, timestamp: object | None = None) -> Kwollect:
        """Record the stop time (now, or ``timestamp``)."""
        if self.start_time is None:
            raise ConfigError("stop() before start(): call start() first")
        t = dt.datetime.now(dt.UTC) if timestamp is None else parse_time(timestamp, "stop")
        if t < self.start_time:
            raise ConfigError(
                f"stop time {t.isoformat()} is before start time {self.start_time.isoformat()}"
            )
        self.stop_time = t
        return self

    def __enter__(self) -> Kwollect:
        self.deploy()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def close(self) -> None:
        self.client.close()

    def window(self) -> tuple[dt.datetime, dt.datetime]:
        """``[start, stop]``; a started, not yet stopped instance ends now."""
        if self.start_time is None:
            raise ConfigError("no start time: call start() (or start(timestamp=...)) first")
        return self.start_time, self.stop_time or dt.datetime.now(dt.UTC)

    def _select(self, nodes: Iterable[object] | None) -> list[G5kNode]:
        if nodes is None:
            return list(self.nodes)
        chosen = parse_nodes(list(nodes), self.site)
        return chosen

    # -- information ---------------------------------------------------------------------

    def available_metrics(
        self, nodes: Iterable[object] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """Per node FQDN, the reference API's metric entries that apply to it."""
        return {n.fqdn: self.client.node_metrics(n) for n in self._select(nodes)}

    def info(self) -> dict[str, Any]:
        """What this instance covers: API, nodes per site, times (no API call)."""
        start, stop = self.start_time, self.stop_time
        return {
            "api_url": self.client.safe_url,
            "sites": {s: [n.fqdn for n in ns] for s, ns in by_site(self.nodes).items()},
            "start": start.isoformat() if start else None,
            "stop": stop.isoformat() if stop else None,
            "duration_s": (stop - start).total_seconds() if start and stop else None,
            "job": self.job.get("uid") if self.job else None,
        }

    def __repr__(self) -> str:
        i = self.info()
        sites = sorted(i["sites"])
        return f"Kwollect({len(self.nodes)} nodes on {sites}, {i['start']} -> {i['stop']})"

    # -- fetching ------------------------------------------------------------------------

    def _each_site(
        self,
        nodes: list[G5kNode],
        work: Callable[[str, list[G5kNode]], Any],
    ) -> dict[str, Any]:
        """Run ``work(site, nodes)`` for every site in parallel; all errors in one."""
        sites = by_site(nodes)
        results: dict[str, Any] = {}
        errors: list[str] = []
        workers = self.max_workers or max(len(sites), 1)
        release_answers()  # the sites' fetches may wait for the budget this thread holds
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kwollect") as pool:
            futures = {s: pool.submit(work, s, ns) for s, ns in sites.items()}
            first: BaseException | None = None
            for s, fut in futures.items():
                try:
                    results[s] = fut.result()
                except DxtError as exc:
                    errors.append(f"site {s}: {exc}")
                    first = first or exc
        if errors:
            if len(errors) == 1 and first is not None:
                raise first
            raise SourceError("; ".join(errors))
        return results

    def iter_site_points(
        self,
        site: str,
        nodes: list[G5kNode],
        metrics: Sequence[str] | None,
        stats: RequestStats,
    ) -> Iterator[list[Point]]:
        start, stop = self.window()
        return self.client.iter_batches(
            site, nodes, metrics, start, stop, stats, monitored=self.monitored
        )

    @property
    def monitored(self) -> bool:
        """Whether the job (``from_job``) is of type ``monitor``: its nodes' promotable
        metrics come at their ``optional_period`` (wattmetre: 20 ms), and requests are
        planned for that."""
        types = (self.job or {}).get("types") or []
        return any(str(t).split("=", 1)[0].strip() == "monitor" for t in types)

    def get_metrics(
        self,
        metrics: Sequence[str] | str | None = None,
        nodes: Iterable[object] | None = None,
        roles: Iterable[object] | None = None,
    ) -> dict[str, list[Point]]:
        """``{node FQDN: [point, ...]}``, all metrics of a node in one chronological list.

        ``nodes`` (or ``roles``, EnOSlib style) restricts the nodes; default: all of them.
        """
        chosen = self._select(nodes if roles is None else [*(nodes or []), *roles])
        mets = [metrics] if isinstance(metrics, str) else metrics
        return self._get_metrics(chosen, mets, check_names=True)

    def _get_metrics(
        self, chosen: list[G5kNode], mets: Sequence[str] | None, check_names: bool
    ) -> dict[str, list[Point]]:
        if mets and check_names:
            self.check_metrics(mets, chosen)
        stats = KwollectStats()
        t0 = time.perf_counter()

        def one_site(site: str, site_nodes: list[G5kNode]) -> dict[str, list[Point]]:
            names = {n.name: n.fqdn for n in site_nodes}
            out: dict[str, list[Point]] = {fqdn: [] for fqdn in names.values()}
            for batch in self.iter_site_points(site, site_nodes, mets, stats):
                for p in batch:
                    fqdn = names.get(p.get("device_id", ""))
                    if fqdn is not None:
                        out[fqdn].append(p)
            return out

        merged: dict[str, list[Point]] = {}
        for part in self._each_site(chosen, one_site).values():
            merged.update(part)
        stats.seconds = time.perf_counter() - t0
        self.last_stats = stats
        return {n.fqdn: merged.get(n.fqdn, []) for n in chosen}

    def check_metrics(self, metrics: Sequence[str], nodes: Sequence[G5kNode]) -> None:
        """Refuse names that no catalogue of any site of ``nodes`` knows (issue: a typo
        would give empty results that look like "no data").

        Raises:
            ConfigError: names the metrics and the closest known names.
        """
        unknown: set[str] | None = None
        entries: list[dict[str, Any]] = []
        for site, site_nodes in by_site(nodes).items():
            here, seen = self.client.unknown_metrics(site, site_nodes, metrics)
            entries += seen
            unknown = set(here) if unknown is None else unknown & set(here)
        if unknown:
            where = "sites " + ", ".join(sorted(by_site(nodes)))
            missing = [m for m in metrics if m in unknown]
            raise unknown_metric_error(missing, entries, where, self.client.safe_url)

    def get_metrics_pandas(
        self,
        metrics: Sequence[str] | str | None = None,
        nodes: Iterable[object] | None = None,
        roles: Iterable[object] | None = None,
    ) -> Any:
        """The same points as a pandas DataFrame: node, timestamp (UTC), device_id,
        metric_id, value, labels (dicts). Needs pandas (``pip install dxt-archive[analysis]``).
        """
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ConfigError("get_metrics_pandas needs pandas: pip install pandas") from exc
        data = self.get_metrics(metrics, nodes, roles)
        rows = [
            (
                node,
                p["timestamp"],
                p.get("device_id"),
                p.get("metric_id"),
                p.get("value"),
                p.get("labels"),
            )
            for node, points in data.items()
            for p in points
        ]
        df = pd.DataFrame(
            rows, columns=["node", "timestamp", "device_id", "metric_id", "value", "labels"]
        )
        df["timestamp"] = pd.to_datetime(df["timestamp"], utc=True, format="ISO8601")
        return df

    # -- energy --------------------------------------------------------------------------

    def energy(self, nodes: Iterable[object] | None = None) -> dict[str, dict[str, Any]]:
        """Energy per node from its best power metric (wattmetre > PDU outlet > BMC).

        A node's metric is the first of :data:`POWER_METRICS` that has samples in
        ``[start, stop]``; a BMC series that reads 0 throughout is skipped (some BMCs do).
        Joules are a trapezoidal integral between the first and last samples.
        """
        chosen = self._select(nodes)
        # the three power metrics are ours to ask: a site without one is not a typo
        data = self._get_metrics(chosen, list(POWER_METRICS), check_names=False)
        out: dict[str, dict[str, Any]] = {}
        for node in chosen:
            per_metric: dict[str, list[Point]] = {}
            for p in data.get(node.fqdn, []):
                per_metric.setdefault(p["metric_id"], []).append(p)
            skipped: list[str] = []
            result: dict[str, Any] = {
                "metric": None,
                "joules": None,
                "mean_watts": None,
                "max_watts": None,
                "samples": 0,
                "gaps": [],
            }
            for metric in POWER_METRICS:
                points = per_metric.get(metric)
                if not points:
                    continue
                values = [float(p["value"]) for p in points]
                if metric == "bmc_node_power_watt" and all(v == 0 for v in values):
                    skipped.append(f"{metric} reads 0 throughout")
                    continue
                period = self._period_s(node, metric)
                e = integrate_power([point_time(p) for p in points], values, period)
                result = {"metric": metric, **e.as_dict()}
                break
            if skipped:
                result["skipped"] = skipped
            if result["metric"] is None:
                result["reason"] = (
                    "no usable power metric (" + ", ".join(POWER_METRICS) + ") in the window"
                )
            out[node.fqdn] = result
        return out

    def _period_s(self, node: G5kNode, metric: str) -> float | None:
        try:
            for m in self.client.node_metrics(node):
                if m.get("name") == metric and m.get("period"):
                    return float(m["period"]) / 1000.0
        except SourceError:
            pass
        return None

    # -- backup --------------------------------------------------------------------------

    def backup(
        self,
        backup_dir: str | Path = "kwollect-backup",
        metrics: Sequence[str] | str | None = None,
        nodes: Iterable[object] | None = None,
        format: BackupFormat = "jsonl",
    ) -> Path:
        """Stream ``[start, stop]`` to ``<backup_dir>/<node FQDN>/<metric>.<jsonl|csv>.gz``.

        JSON Lines keep every point exactly as the API sent it (labels included); CSV
        flattens labels into ``label:<key>`` columns (lists joined with ``;``). Every file is
        written under a temporary name and renamed when complete; ``manifest.json`` (files,
        rows, bytes, sha256, first/last timestamps) is written last. Returns its path.
        """
        if format not in ("jsonl", "csv"):
            raise ConfigError(f"unknown backup format {format!r}: use 'jsonl' or 'csv'")
        root = Path(backup_dir).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (root / BACKUP_MANIFEST).unlink()
        chosen = self._select(nodes)
        mets = [metrics] if isinstance(metrics, str) else metrics
        if mets:
            self.check_metrics(mets, chosen)
        start, stop = self.window()
        stats = KwollectStats()
        t0 = time.perf_counter()
        file_cls = _JsonlFile if format == "jsonl" else _CsvFile

        def one_site(site: str, site_nodes: list[G5kNode]) -> list[dict[str, Any]]:
            names = {n.name: n for n in site_nodes}
            files: dict[tuple[str, str], Any] = {}
            paths: dict[tuple[str, str], Path] = {}
            done: list[dict[str, Any]] = []
            with contextlib.ExitStack() as stack:
                # The next window is fetched while this one is written (one ahead).
                for batch in prefetched(self.iter_site_points(site, site_nodes, mets, stats)):
                    for p in batch:
                        node = names.get(p.get("device_id", ""))
                        if node is None:
                            continue
                        key = (node.fqdn, str(p.get("metric_id")))
                        writer = files.get(key)
                        if writer is None:
                            metric = check_component(
                                key[1], "metric name sent by the API", SourceError
                            )
                            path = root / node.fqdn / f"{metric}.{file_cls.extension}"
                            # many files stay open at once: small write buffers
                            fh = stack.enter_context(atomic_file(path, buffer_size=1 << 16))
                            writer = files[key] = file_cls(fh)
                            paths[key] = path
                        writer.write(p, orjson.dumps(p) + b"\n")
                    batch.clear()  # free this answer now, not when the next one arrives
                for key, writer in sorted(files.items()):
                    size, sha = writer.close()
                    s = writer.stats
                    done.append(
                        {
                            "file": paths[key].relative_to(root).as_posix(),
                            "node": key[0],
                            "site": site,
                            "metric": key[1],
                            "rows": s.rows,
                            "bytes": size,
                            "sha256": sha,
                            "first_timestamp": s.first,
                            "last_timestamp": s.last,
                        }
                    )
            return done

        per_site = self._each_site(chosen, one_site)
        stats.seconds = time.perf_counter() - t0
        self.last_stats = stats
        files = sorted((f for fs in per_site.values() for f in fs), key=lambda f: f["file"])
        manifest = root / BACKUP_MANIFEST
        write_json_atomic(
            manifest,
            {
                "schema": BACKUP_SCHEMA,
                "software": {"name": "dxt-archive", "version": __version__},
                "api_url": self.client.safe_url,
                "start": start.isoformat(),
                "stop": stop.isoformat(),
                "bounds": "inclusive",
                "format": format,
                "nodes": [n.fqdn for n in chosen],
                "metrics": list(mets) if mets else None,
                "job": self.job.get("uid") if self.job else None,
                "files": files,
                "rows": sum(f["rows"] for f in files),
                "bytes": sum(f["bytes"] for f in files),
                "requests": stats.as_dict(),
            },
        )
        log.info(
            "backup of %d files (%d rows) into %s", len(files), sum(f["rows"] for f in files), root
        )
        return manifest
