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
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar, Unpack

from dxt_core import masking
from dxt_core._version import __version__
from dxt_core.backends.kwollect import catalog, frame
from dxt_core.backends.kwollect.backup import (
    BACKUP_MANIFEST,
    BackupFormat,
    BackupInterrupted,
    SiteBackup,
    commit_backup,
    default_backup_dir,
    discard_staging,
    earlier_backup,
    new_staging,
)
from dxt_core.backends.kwollect.connection import DEFAULT_TIME_ZONE
from dxt_core.backends.kwollect.energy import EnergyResult, integrate_power, node_energy
from dxt_core.backends.kwollect.siterun import BackupPlan, SiteRun, failed, metric_list, summed
from dxt_core.backends.kwollect.source import (
    DEFAULT_API_URL,
    POWER_METRICS,
    ClientOptions,
    G5kNode,
    KwollectClient,
    KwollectStats,
    Point,
    Stopped,
    by_site,
    parse_nodes,
    parse_time,
    unknown_metric_error,
)
from dxt_core.budget import release_answers
from dxt_core.errors import ConfigError, DxtError, SourceError
from dxt_core.http import RequestStats
from dxt_core.prefetch import prefetched
from dxt_core.runner import GRACE_S, STOP_SIGNALS, Interrupt, sigint_counted

log = masking.logger("dxt_core.backends.kwollect.experiment")

C = TypeVar("C", bound=frame.Collector)

__all__ = [
    "BACKUP_MANIFEST",
    "DEFAULT_TIME_ZONE",
    "BackupInterrupted",
    "EnergyResult",
    "Kwollect",
    "integrate_power",
]


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


#: The longest window a started, unstopped instance takes up to now: a longer one is
#: refused (a start with a mistyped year fetched years of points, for minutes, into memory);
#: ``stop()`` says "now" explicitly.
IMPLICIT_STOP_AT_MOST = dt.timedelta(days=7)


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
        if isinstance(nodes, str):  # one node given as a string, not a list of them
            nodes = [nodes]
        given = list(nodes or []) + list(roles or [])
        if not given:
            raise ConfigError("Kwollect needs at least one node (nodes=[...] or roles=[...])")
        if not isinstance(api_url, str) or not api_url.strip():
            raise ConfigError(f"api_url must be the API's URL, not {api_url!r}")
        if max_workers is not None and (
            isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1
        ):
            raise ConfigError(
                f"max_workers={max_workers!r}: give a whole number of sites fetched at once, "
                "1 or more (or None: every site at once)"
            )
        self.nodes: list[G5kNode] = parse_nodes(given, site)
        self.site = site
        self.client = KwollectClient(api_url, auth, **client_options)
        self.max_workers = max_workers
        self.start_time: dt.datetime | None = None
        self.stop_time: dt.datetime | None = None
        self._dropped_stop: dt.datetime | None = None  # before a later start(): said once
        self._start_of_job = False  # the start is an OAR job's (from_job), not typed
        self.last_stats = KwollectStats()
        self.job: dict[str, Any] | None = None
        #: the nodes were checked against the reference API (deploy(), or the first fetch)
        self.deployed = False

    # -- after the fact ------------------------------------------------------------------

    @classmethod
    def from_job(
        cls,
        site: str,
        job_id: int | str,
        api_url: str = DEFAULT_API_URL,
        auth: tuple[str, str] | None = None,
        max_workers: int | None = None,
        **options: Unpack[ClientOptions],
    ) -> Kwollect:
        """Nodes, start and stop of a (past or running) OAR job, from the reference API;
        ``max_workers`` and ``options`` as for :class:`Kwollect`."""
        # the job is read with the options given (TLS check, timeout, transport)
        probe = KwollectClient(api_url, auth, **options)
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
        k = cls(nodes, api_url, auth, site=site, max_workers=max_workers, **options)
        k.start(started)
        k._start_of_job = True  # a running job's window ends now, however long it has run
        if stopped:
            k.stop(stopped)
        k.job = job
        return k

    # -- service interface ---------------------------------------------------------------

    def deploy(self) -> Kwollect:
        """Check that every node is known to the reference API of its site.

        Raises:
            ConfigError: names every unknown node, with its cluster's nodes (or the site's
                clusters, or the known sites).
        """
        self.client.check_nodes(self.nodes)
        self.deployed = True
        return self

    def start(self, timestamp: object | None = None) -> Kwollect:
        """Record the start time (now, or ``timestamp``: datetime, epoch or ISO string).

        A recorded stop time is kept when the new start is not after it (a cell run again);
        one before the new start is dropped: a window asked before :meth:`stop` is called
        again ends now, with a warning (none when ``stop()`` follows, as for a new phase)."""
        t = dt.datetime.now(dt.UTC) if timestamp is None else parse_time(timestamp, "start")
        if self.stop_time is not None and t > self.stop_time:
            self._dropped_stop = self.stop_time
            self.stop_time = None
        self.start_time = t
        self._start_of_job = False
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
        self._dropped_stop = None
        return self

    def __enter__(self) -> Kwollect:
        self.deploy()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def close(self) -> None:
        """Close the HTTP connections (a later call opens new ones)."""
        self.client.close()

    def window(self) -> tuple[dt.datetime, dt.datetime]:
        """``[start, stop]``; a started, not yet stopped instance ends now."""
        if self.start_time is None:
            raise ConfigError("no start time: call start() (or start(timestamp=...)) first")
        now = dt.datetime.now(dt.UTC)
        if self.start_time > now:
            raise ConfigError(
                f"start {self.start_time.isoformat()} is in the future (now is "
                f"{now.isoformat(timespec='seconds')}): Kwollect holds no metrics of it yet"
            )
        if self.stop_time is not None and self.stop_time > now:
            log.warning(
                "stop %s is in the future: the metrics end now (%s); ask again after it",
                self.stop_time.isoformat(),
                now.isoformat(timespec="seconds"),
            )
        if self.stop_time is None and self._dropped_stop is not None:
            log.warning(
                "start %s is after the stop %s recorded before it: the stop was dropped and "
                "the window ends now (call stop() to end it)",
                self.start_time.isoformat(),
                self._dropped_stop.isoformat(),
            )
            self._dropped_stop = None
        long = now - self.start_time > IMPLICIT_STOP_AT_MOST
        if self.stop_time is None and long and not self._start_of_job:
            days = (now - self.start_time).total_seconds() / 86400
            raise ConfigError(
                f"no stop time: the window would end now, {days:,.1f} days after its start "
                f"{self.start_time.isoformat()} (a mistyped start?), and fetch all of it; "
                "say where it ends: stop() (now) or stop(timestamp=...) in Python, --end now "
                "or --end TIME on the command line"
            )
        return self.start_time, self.stop_time or now

    def _select(
        self, nodes: Iterable[object] | None, roles: Iterable[object] | None = None
    ) -> list[G5kNode]:
        """The experiment's nodes, or those of them ``nodes`` and ``roles`` (EnOSlib style)
        name (a subset: a node not in the experiment is refused); checked against the
        reference API the first time data is asked for when :meth:`deploy` was not called
        (an unknown node was silently empty)."""
        if not self.deployed:
            self.deploy()
        if nodes is None and roles is None:
            return list(self.nodes)
        given = [nodes] if isinstance(nodes, str) else list(nodes or [])
        given += [roles] if isinstance(roles, str) else list(roles or [])
        chosen = parse_nodes(given, self.site)
        outside = [n.fqdn for n in chosen if n not in self.nodes]
        if outside:
            raise ConfigError(
                f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} not a node of this "
                f"experiment ({', '.join(n.fqdn for n in self.nodes)}): choose among them, or "
                "make another Kwollect instance for those nodes"
            )
        return chosen

    # -- information ---------------------------------------------------------------------

    def available_metrics(
        self, nodes: Iterable[object] | None = None, roles: Iterable[object] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """Per node FQDN, the reference API's metric entries that apply to it."""
        return {n.fqdn: self.client.node_metrics(n) for n in self._select(nodes, roles)}

    def get_available_metrics(
        self, nodes: Iterable[object] | None = None, roles: Iterable[object] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """EnOSlib's name for :meth:`available_metrics`."""
        return self.available_metrics(nodes, roles)

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
        nodes = f"{len(self.nodes)} node{'' if len(self.nodes) == 1 else 's'}"
        return f"Kwollect({nodes} on {sites}, {i['start']} -> {i['stop']})"

    # -- fetching ------------------------------------------------------------------------

    def _run_sites(
        self,
        nodes: list[G5kNode],
        work: Callable[[str, list[G5kNode]], Any],
        stopping: threading.Event,
        interrupt: Interrupt,
        grace_s: float = GRACE_S,
    ) -> SiteRun:
        """Run ``work(site, nodes)`` for every site in parallel, until all have ended or
        Ctrl-C stops the run.

        The first Ctrl-C (SIGINT, in the main thread) sets ``stopping``: no request starts
        any more (``work`` gets :class:`Stopped` instead), and the sites' requests in flight
        get ``grace_s`` seconds to end; the sites still in a request then are abandoned (their
        threads keep running until it ends, and write nothing more). A second Ctrl-C
        abandons them at once. The caller routes SIGINT to ``interrupt``
        (:func:`~dxt_core.runner.sigint_counted`).
        """
        sites = by_site(nodes)
        run = SiteRun(sites=list(sites))
        workers = self.max_workers or max(len(sites), 1)
        release_answers()  # the sites' fetches may wait for the budget this thread holds
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kwollect")
        futures = {pool.submit(work, s, ns): s for s, ns in sites.items()}
        pending = set(futures)
        while pending:
            if interrupt.count:
                if not stopping.is_set():
                    stopping.set()
                    for fut in pending:
                        if fut.cancel():
                            run.not_done[futures[fut]] = "not started"
                    pending = {f for f in pending if not f.cancelled()}
                    print(
                        f"\ninterrupted ({interrupt.what}): starting no more requests; the "
                        f"requests in flight of {len(pending)} site"
                        f"{'' if len(pending) == 1 else 's'} get {grace_s:.0f} s to end "
                        f"({interrupt.what} again to stop now)",
                        file=sys.stderr,
                        flush=True,
                    )
                assert interrupt.first_at is not None
                waited = time.monotonic() - interrupt.first_at
                if interrupt.count >= 2 or waited >= grace_s:
                    break
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                site = futures[fut]
                try:
                    run.results[site] = fut.result()
                except Stopped:
                    run.not_done[site] = "stopped"
                except DxtError as exc:
                    run.errors[site] = exc
                except BaseException as exc:  # a bug: raised as it is, after the others
                    run.bugs.append(exc)
        for fut in pending:
            run.not_done[futures[fut]] = "abandoned in flight"
        # Ctrl-C when every site had its last request in flight: the backup is whole
        run.interrupted = interrupt.count > 0 and len(run.results) < len(sites)
        run.reason = "Ctrl-C (SIGINT)" if interrupt.what == "Ctrl-C" else interrupt.what
        # Threads cannot be stopped: abandoned ones end after their request, on their own.
        pool.shutdown(wait=not pending, cancel_futures=True)
        return run

    def _each_site(
        self,
        nodes: list[G5kNode],
        work: Callable[[str, list[G5kNode]], Any],
        stopping: threading.Event,
    ) -> dict[str, Any]:
        """:meth:`_run_sites`, all errors in one; an interruption is a KeyboardInterrupt."""
        interrupt = Interrupt()
        with sigint_counted(interrupt, STOP_SIGNALS):
            run = self._run_sites(nodes, work, stopping, interrupt)
        if run.bugs:
            raise run.bugs[0]
        if run.interrupted:
            raise KeyboardInterrupt(
                f"interrupted: {len(run.results)} of {len(run.sites)} sites fetched; nothing "
                "returned"
            )
        run.raise_errors()
        return run.results

    def iter_site_points(
        self,
        site: str,
        nodes: list[G5kNode],
        metrics: Sequence[str] | None,
        stats: RequestStats,
        stopping: threading.Event | None = None,
        window: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> Iterator[list[Point]]:
        """The points of ``site``'s ``nodes`` over ``window`` (default :meth:`window`: a
        run over several sites passes the one it took, so that every site ends at the same
        "now" and none after the stop the run records)."""
        start, stop = window or self.window()
        windows = self.client.plan(site, nodes, metrics, start, stop, self.monitored)
        return self.client.iter_batches(windows, stats, stopping)

    @property
    def monitored(self) -> catalog.Monitor:
        """What the job (``from_job``) promotes by being of type ``monitor``: False (not such a
        job), True (``monitor``: every on-demand metric) or the regular expression of
        ``monitor=REGEX`` (several are joined). Promoted metrics come at their
        ``optional_period`` (wattmetre: 20 ms), and requests are planned for that."""
        patterns: list[str] = []
        for t in (self.job or {}).get("types") or []:
            kind, sep, pattern = str(t).partition("=")
            if kind.strip() != "monitor":
                continue
            if not sep:
                return True
            patterns.append(pattern)
        if not patterns:
            return False
        return patterns[0] if len(patterns) == 1 else "|".join(f"(?:{p})" for p in patterns)

    def get_metrics(
        self,
        metrics: Sequence[str] | str | None = None,
        nodes: Iterable[object] | None = None,
        roles: Iterable[object] | None = None,
    ) -> dict[str, list[Point]]:
        """``{node FQDN: [point, ...]}``, all metrics of a node in one chronological list.

        ``nodes`` (or ``roles``, EnOSlib style) restricts the nodes; default: all of them.
        """
        return self._get_metrics(self._select(nodes, roles), metric_list(metrics), True)

    def _get_metrics(
        self,
        chosen: list[G5kNode],
        mets: Sequence[str] | None,
        check_names: bool,
        window: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> dict[str, list[Point]]:
        merged: dict[str, list[Point]] = {}
        for part in self._collect(chosen, mets, check_names, window, frame.PointLists):
            merged.update(part.points)
        return {n.fqdn: merged.get(n.fqdn, []) for n in chosen}

    def _collect(
        self,
        chosen: list[G5kNode],
        mets: Sequence[str] | None,
        check_names: bool,
        window: tuple[dt.datetime, dt.datetime] | None,
        collector: type[C],
    ) -> list[C]:
        """Each site's points into a ``collector`` of its own, batch by batch as they come."""
        if mets and check_names:
            self.check_metrics(mets, chosen)
        stats = KwollectStats()
        t0 = time.perf_counter()
        stopping = threading.Event()
        window = window or self.window()  # one "now" for every site

        def one_site(site: str, site_nodes: list[G5kNode]) -> C:
            into = collector({n.name: n.fqdn for n in site_nodes})
            for batch in self.iter_site_points(site, site_nodes, mets, stats, stopping, window):
                into.add(batch)
            return into

        parts = list(self._each_site(chosen, one_site, stopping).values())
        stats.seconds = time.perf_counter() - t0
        self.last_stats = stats
        return parts

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
        frame.pandas()  # before any request
        chosen = self._select(nodes, roles)
        parts = self._collect(chosen, metric_list(metrics), True, None, frame.PointColumns)
        return frame.to_frame(parts, [n.fqdn for n in chosen])

    # -- energy --------------------------------------------------------------------------

    def energy(
        self, nodes: Iterable[object] | None = None, roles: Iterable[object] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Energy per node from its best power metric (wattmetre > PDU outlet > BMC).

        A node's metric is the first of :data:`POWER_METRICS` that has samples in
        ``[start, stop]``; a BMC series that reads 0 throughout is skipped (some BMCs do).
        Joules are a trapezoidal integral between the first and last samples
        (:func:`~dxt_core.backends.kwollect.energy.node_energy`); ``uncovered`` gives the
        seconds of the window before the first sample and after the last, which it does not
        cover (nothing is extrapolated).
        """
        chosen = self._select(nodes, roles)
        window = self.window()
        # the three power metrics are ours to ask: a site without one is not a typo
        data = self._get_metrics(chosen, list(POWER_METRICS), check_names=False, window=window)
        return {
            node.fqdn: node_energy(
                data.get(node.fqdn, []), functools.partial(self._period_s, node), window
            )
            for node in chosen
        }

    def total_energy(
        self, nodes: Iterable[object] | None = None, roles: Iterable[object] | None = None
    ) -> dict[str, Any]:
        """The experiment's energy: the sum of :meth:`energy` over its nodes (``joules``),
        with how many nodes it covers, the nodes without a usable power metric (not in
        the sum), and whether it is an estimate (a node's samples have gaps, or leave
        seconds of the window uncovered: ``uncovered_node_seconds``; or a node is not in
        the sum)."""
        per_node = self.energy(nodes, roles)
        measured = {n: e for n, e in per_node.items() if e.get("metric")}
        uncovered = sum(
            float(v) for e in measured.values() for v in (e.get("uncovered") or {}).values()
        )
        return {
            "joules": math.fsum(float(e["joules"]) for e in measured.values()),
            "nodes": len(measured),
            "nodes_without_power": sorted(set(per_node) - set(measured)),
            # a node left out: the experiment used more than the sum says
            "estimate": uncovered > 0
            or len(measured) < len(per_node)
            or any(e.get("gaps") for e in measured.values()),
            "uncovered_node_seconds": uncovered,
            "per_node": per_node,
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

    def _backup_doc(
        self,
        chosen: Sequence[G5kNode],
        mets: Sequence[str] | None,
        format: BackupFormat,
        start: dt.datetime,
        stop: dt.datetime,
    ) -> dict[str, Any]:
        """What a backup's manifest says it covers (the fields of ``BACKUP_IDENTITY``)."""
        return {
            "api_url": self.client.safe_url,
            "start": start.isoformat(),
            "stop": stop.isoformat(),
            "bounds": "inclusive",
            "format": format,
            "nodes": [n.fqdn for n in chosen],
            "metrics": list(mets) if mets else None,
            "job": self.job.get("uid") if self.job else None,
        }

    def backup(
        self,
        backup_dir: str | Path | None = None,
        metrics: Sequence[str] | str | None = None,
        nodes: Iterable[object] | None = None,
        format: BackupFormat = "jsonl",
        *,
        roles: Iterable[object] | None = None,
        replace: bool = False,
    ) -> Path:
        """Stream ``[start, stop]`` to ``<backup_dir>/<node FQDN>/<metric>.<jsonl|csv>.gz``.

        JSON Lines keep every point as the API sent it; CSV flattens labels into
        ``label:<key>`` columns. Files are staged and come under their final names at the end,
        before ``manifest.json`` (written last; returned). A failure commits nothing; Ctrl-C
        commits the complete sites (:class:`BackupInterrupted` says what was done).

        ``backup_dir`` defaults to ``kwollect-backup/<start>_<stop>`` (UTC): one directory per
        window. A directory holding another backup (other nodes, metrics, format, server or
        start, or a later stop) is refused, unless ``replace``: the earlier one then goes to
        ``.versions/<time>/`` when this one commits. The same backup again rewrites it.
        """
        plan = self._backup_plan(backup_dir, metrics, nodes, roles, format, replace)
        root, chosen, mets, (start, stop) = plan.root, plan.nodes, plan.metrics, plan.span
        stats = KwollectStats()
        t0 = time.perf_counter()
        stopping = threading.Event()
        gone = threading.Event()  # the run has ended: a site still running writes nothing
        created = not root.exists()
        staging = new_staging(root)
        site_stats: dict[str, KwollectStats] = {}
        site_files_of: dict[str, SiteBackup] = {}

        def site_files(site: str, site_nodes: list[G5kNode]) -> list[dict[str, Any]]:
            mine = site_stats[site] = KwollectStats()
            with contextlib.ExitStack() as stack:
                files = site_files_of[site] = SiteBackup(staging, site, site_nodes, format, stack)
                try:
                    # The next window is fetched while this one is written (one ahead).
                    points = self.iter_site_points(
                        site, site_nodes, mets, mine, stopping, (start, stop)
                    )
                    for batch in prefetched(points):
                        if gone.is_set():  # abandoned: its staging is gone
                            raise Stopped(f"site {site}: abandoned")
                        files.add(batch)
                        batch.clear()  # free this answer now, not when the next one arrives
                    return files.close()
                except BaseException:
                    files.abort()
                    raise

        def one_site(site: str, site_nodes: list[G5kNode]) -> list[dict[str, Any]]:
            try:
                return site_files(site, site_nodes)
            finally:
                if gone.is_set():  # the last one out: what it left in the staging
                    discard_staging(staging)

        interrupt = Interrupt()
        written: Path | None = None
        try:
            with sigint_counted(interrupt, STOP_SIGNALS):
                try:
                    run = self._run_sites(chosen, one_site, stopping, interrupt)
                finally:
                    self.last_stats = summed(stats, site_stats.values(), t0)
                if run.bugs:
                    raise run.bugs[0]
                if not run.interrupted:
                    run.raise_errors()
                written = self._commit_sites(plan, staging, run, stats, site_files_of)
                return written
        finally:
            gone.set()
            discard_staging(staging)
            if created and written is None:
                with contextlib.suppress(OSError):
                    root.rmdir()  # only when empty: the directory this run made for nothing

    def _backup_plan(
        self,
        backup_dir: str | Path | None,
        metrics: Sequence[str] | str | None,
        nodes: Iterable[object] | None,
        roles: Iterable[object] | None,
        format: BackupFormat,
        replace: bool,
    ) -> BackupPlan:
        """What :meth:`backup` is asked for, checked before any of its requests."""
        if format not in ("jsonl", "csv"):
            raise ConfigError(f"unknown backup format {format!r}: use 'jsonl' or 'csv'")
        chosen = self._select(nodes, roles)
        mets = metric_list(metrics)
        if mets:
            self.check_metrics(mets, chosen)
        start, stop = self.window()
        root = Path(backup_dir or default_backup_dir(start, stop)).expanduser()
        doc = self._backup_doc(chosen, mets, format, start, stop)
        return BackupPlan(
            root, chosen, mets, (start, stop), doc, earlier_backup(root, doc, replace)
        )

    def _commit_sites(
        self,
        plan: BackupPlan,
        staging: Path,
        run: SiteRun,
        stats: KwollectStats,
        site_files_of: dict[str, SiteBackup],
    ) -> Path:
        """The end of :meth:`backup`: every site complete, the files committed with their
        manifest. Interrupted (Ctrl-C stops starting requests; those in flight get
        :data:`~dxt_core.runner.GRACE_S` to end; a second Ctrl-C stops at once): the complete
        sites committed with a manifest marked ``"complete": false`` (none: nothing is
        written, an earlier backup there stays whole), and :class:`BackupInterrupted`
        raised with what was done."""
        complete = [s for s in run.sites if s in run.results]
        files = sorted((f for s in complete for f in run.results[s]), key=lambda f: f["file"])
        doc = {
            "software": {"name": "dxt-archive", "version": __version__},
            **plan.doc,
            "requests": stats.as_dict(),
            "complete": not run.interrupted,
        }
        root, chosen, replaced = plan.root, plan.nodes, plan.replaced
        start, stop = plan.span
        written: Path | None = None
        if not run.interrupted:
            written = commit_backup(root, staging, doc, files, replaced)
            log.info(
                "backup of %d files (%d rows) into %s",
                len(files),
                sum(f["rows"] for f in files),
                root,
            )
            with_points = {f["node"] for f in files}
            empty = [n.fqdn for n in chosen if n.fqdn not in with_points]
            if empty:  # said where a notebook shows it (a WARNING), not only by absence
                log.warning(
                    "backup %s: no points for %d of %d nodes in [%s, %s]: %s",
                    written,
                    len(empty),
                    len(chosen),
                    start.isoformat(),
                    stop.isoformat(),
                    ", ".join(empty),
                )
            return written
        not_done = {
            s: run.not_done.get(s) or failed(run.errors.get(s))
            for s in run.sites
            if s not in run.results
        }
        missing_nodes = [n.fqdn for n in chosen if n.site in not_done]
        if complete:
            doc["interrupted"] = {
                "reason": run.reason,
                "sites_complete": complete,
                "sites_not_backed_up": not_done,
                "nodes_not_backed_up": missing_nodes,
            }
            written = commit_backup(root, staging, doc, files, replaced)
        raise BackupInterrupted(
            root,
            written,
            files if written else [],
            run.sites,
            not_done,
            missing_nodes,
            sum(site_files_of[s].rows for s in not_done if s in site_files_of),
            stats,
        )
