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
The daily archive (the ``dxt_kwollect`` DAG's unit of work) is in ``archive_day``; energy
integration in ``energy``; the backup's files in ``backup``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Unpack

from dxt_core._version import __version__
from dxt_core.backends.kwollect.backup import (
    BACKUP_MANIFEST,
    BackupFormat,
    SiteBackup,
    write_backup_manifest,
)
from dxt_core.backends.kwollect.connection import DEFAULT_TIME_ZONE
from dxt_core.backends.kwollect.energy import EnergyResult, integrate_power, node_energy
from dxt_core.backends.kwollect.source import (
    DEFAULT_API_URL,
    POWER_METRICS,
    ClientOptions,
    G5kNode,
    KwollectClient,
    KwollectStats,
    Point,
    by_site,
    parse_nodes,
    parse_time,
    sites_path,
    unknown_metric_error,
)
from dxt_core.budget import release_answers
from dxt_core.errors import ConfigError, DxtError, SourceError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched

log = logging.getLogger("dxt_core.backends.kwollect.experiment")

__all__ = [
    "BACKUP_MANIFEST",
    "DEFAULT_TIME_ZONE",
    "EnergyResult",
    "Kwollect",
    "integrate_power",
]


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
            (:class:`~dxt_core.backends.kwollect.source.ClientOptions`: ``timeout_s``,
            ``retry``, ``max_points``, ``max_nodes``, ``min_window_s``, ``verify_tls``,
            ``transport``, ``max_answer_bytes``).

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
        **client_options: Unpack[ClientOptions],
    ) -> None:
        given = list(nodes or []) + list(roles or [])
        if not given:
            raise ConfigError("Kwollect needs at least one node (nodes=[...] or roles=[...])")
        self.nodes: list[G5kNode] = parse_nodes(given, site)
        self.site = site
        self.client = KwollectClient(api_url, auth, **client_options)
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
        Joules are a trapezoidal integral between the first and last samples
        (:func:`~dxt_core.backends.kwollect.energy.node_energy`).
        """
        chosen = self._select(nodes)
        # the three power metrics are ours to ask: a site without one is not a typo
        data = self._get_metrics(chosen, list(POWER_METRICS), check_names=False)
        return {
            node.fqdn: node_energy(data.get(node.fqdn, []), functools.partial(self._period_s, node))
            for node in chosen
        }

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

        def one_site(site: str, site_nodes: list[G5kNode]) -> list[dict[str, Any]]:
            with contextlib.ExitStack() as stack:
                files = SiteBackup(root, site, site_nodes, format, stack)
                try:
                    # The next window is fetched while this one is written (one ahead).
                    for batch in prefetched(self.iter_site_points(site, site_nodes, mets, stats)):
                        files.add(batch)
                        batch.clear()  # free this answer now, not when the next one arrives
                    return files.close()
                except BaseException:
                    files.abort()
                    raise

        per_site = self._each_site(chosen, one_site)
        stats.seconds = time.perf_counter() - t0
        self.last_stats = stats
        files = sorted((f for fs in per_site.values() for f in fs), key=lambda f: f["file"])
        doc = {
            "software": {"name": "dxt-archive", "version": __version__},
            "api_url": self.client.safe_url,
            "start": start.isoformat(),
            "stop": stop.isoformat(),
            "bounds": "inclusive",
            "format": format,
            "nodes": [n.fqdn for n in chosen],
            "metrics": list(mets) if mets else None,
            "job": self.job.get("uid") if self.job else None,
            "requests": stats.as_dict(),
        }
        manifest = write_backup_manifest(root, doc, files)
        log.info(
            "backup of %d files (%d rows) into %s", len(files), sum(f["rows"] for f in files), root
        )
        return manifest
