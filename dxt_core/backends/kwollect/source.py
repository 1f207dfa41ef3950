"""Kwollect (Grid'5000 metrics service) client: node names, catalogs, request planning, splitting.

The metrics API (``GET <api>/sites/<site>/metrics``) has no paging and fails large requests
with "Request timeout, too much data to process" after the server's query timeout. So a query
is planned before it is sent: nodes of a site are cut into groups of at most ``max_nodes`` and
the time range into windows whose estimated size (from the reference API's metric periods)
stays under ``max_points``. A request the server still refuses is split again, in time first
and then by nodes, down to ``min_window_s`` and one node. Bounds are inclusive as in the API;
consecutive windows end one microsecond before the next one starts so no point is fetched
twice. Transient errors are retried by :class:`dxt_core.http.HttpClient`.
"""

from __future__ import annotations

import datetime as dt
import heapq
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypedDict

import httpx
import orjson

from dxt_core import masking
from dxt_core.backends.kwollect import catalog
from dxt_core.backends.kwollect.catalog import Monitor
from dxt_core.backends.kwollect.requests import (  # re-exported: see __all__
    _NODE_RE,
    _UNKNOWN_RATE,
    _UNSET,
    _US,
    ANSWER_BYTES_PER_POINT,
    DEFAULT_API_URL,
    DEFAULT_MAX_POINTS,
    DOMAIN,
    MIN_WINDOW_FLOOR_S,
    OPTION_LIMITS,
    POWER_METRICS,
    PROBE_TIMEOUT_S,
    REFERENCE_TIMEOUT_S,
    TOO_MUCH_DATA,
    G5kNode,
    KwollectStats,
    MetricsRequest,
    Point,
    Stopped,
    _closest,
    _iso,
    _Limit,
    _members,
    by_site,
    check_component,
    check_options,
    drop_outside,
    merge_chronological,
    option_problem,
    parse_node,
    parse_nodes,
    parse_time,
    plan_requests,
    point_time,
    sites_path,
    time_windows,
    too_much_data,
    unknown_metric_error,
)
from dxt_core.errors import ConfigError, DxtError, SourceError, SourceUnavailable, WindowTooLarge
from dxt_core.http import HttpClient, RequestStats, RetryPolicy, redact_url
from dxt_core.masking import excerpt
from dxt_core.reconcile import SourceCount
from dxt_core.urls import check_no_query

log = masking.logger("dxt_core.backends.kwollect.source")


class ClientOptions(TypedDict, total=False):
    """The keyword options of :class:`KwollectClient` that the notebook service
    (:class:`~dxt_core.backends.kwollect.experiment.Kwollect`) passes on; each as
    :class:`KwollectClient` documents it."""

    timeout_s: float
    retry: RetryPolicy | None
    max_points: int
    max_nodes: int
    min_window_s: float
    verify_tls: bool
    transport: httpx.BaseTransport | None
    max_answer_bytes: int | None


class KwollectClient:
    """The Grid'5000 reference and Kwollect metrics APIs over one :class:`HttpClient`.

    Args:
        api_url: base URL, e.g. ``https://api.grid5000.fr/stable`` (credentials in the URL
            are moved out of it).
        auth: ``(login, password)`` for HTTP Basic, needed from outside Grid'5000.
        timeout_s: read timeout of one request; a read timeout counts as "too much data".
        max_points: estimated points per request above which a request is split up front.
        max_nodes: nodes per request.
        min_window_s: shortest time window a refused request is split down to.
    """

    def __init__(
        self,
        api_url: str = DEFAULT_API_URL,
        auth: tuple[str, str] | None = None,
        *,
        timeout_s: float = 330.0,
        retry: RetryPolicy | None = None,
        max_points: int = DEFAULT_MAX_POINTS,
        max_nodes: int = 50,
        min_window_s: float = 1.0,
        verify_tls: bool = True,
        transport: httpx.BaseTransport | None = None,
        max_answer_bytes: int | None = None,
    ) -> None:
        if auth is not None and (len(auth) != 2 or not all(isinstance(a, str) for a in auth)):
            raise ConfigError("auth must be a (login, password) pair of strings")
        check_no_query(api_url, "the Kwollect API URL")
        check_options(
            {
                "timeout_s": timeout_s,
                "max_points": max_points,
                "max_nodes": max_nodes,
                "min_window_s": min_window_s,
            }
        )

        def client(timeout: float, policy: RetryPolicy) -> HttpClient:
            return HttpClient(
                api_url,
                user=auth[0] if auth else None,
                password=auth[1] if auth else None,
                timeout_s=timeout,
                retry=policy,
                verify_tls=verify_tls,
                transport=transport,
            )

        self.http = client(timeout_s, retry or RetryPolicy())
        self._ref_http = client(min(timeout_s, REFERENCE_TIMEOUT_S), retry or RetryPolicy())
        # A read timeout is taken for "too much data" only once a tiny request has been
        # answered: a server that answers nothing costs two timeouts, not a split cascade.
        self._probe_http = client(min(timeout_s, PROBE_TIMEOUT_S), RetryPolicy(attempts=1))
        self.max_points = int(max_points)
        self.max_nodes = int(max_nodes)
        self.max_answer_bytes = max_answer_bytes or max_points * ANSWER_BYTES_PER_POINT
        self.min_window = dt.timedelta(seconds=min_window_s)
        self._lock = threading.Lock()
        self._catalogs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._catalog_errors: dict[tuple[str, str], SourceError] = {}
        self._nodes: dict[str, dict[str, list[str]]] = {}

    @property
    def safe_url(self) -> str:
        return redact_url(self.http.base_url)

    def close(self) -> None:
        self.http.close()
        self._probe_http.close()
        self._ref_http.close()

    def __enter__(self) -> KwollectClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reference API -------------------------------------------------------------------

    def get(self, path: str, stats: RequestStats | None = None) -> Any:
        """A reference API document (small: a shorter read timeout than metrics requests).

        Raises:
            SourceUnavailable: the API did not answer through the retries; the message says
                what to check.
        """
        try:
            return self._ref_http.get_json(path, stats=stats)
        except SourceUnavailable as exc:
            raise SourceUnavailable(
                f"the Grid'5000 API does not answer ({exc.message}). Check the API URL "
                f"({self.safe_url}) and that the service is up",
                url=self._ref_http.url(path),
                status=exc.status,
            ) from exc

    def sites(self) -> list[str]:
        return [str(item["uid"]) for item in self.get("sites").get("items", [])]

    def site_nodes(self, site: str) -> dict[str, list[str]]:
        """``{cluster: [node, ...]}`` of a site (cached)."""
        with self._lock:
            cached = self._nodes.get(site)
        if cached is not None:
            return cached
        clusters = [str(c["uid"]) for c in self.get(sites_path(site, "clusters")).get("items", [])]
        found = {
            c: [str(n["uid"]) for n in self.get(sites_path(site, "clusters", c, "nodes"))["items"]]
            for c in clusters
        }
        with self._lock:
            self._nodes[site] = found
        return found

    def cluster_nodes(self, site: str, cluster: str) -> list[str] | None:
        """Node names of one cluster, or None when the site or cluster does not exist."""
        with self._lock:
            cached = self._nodes.get(site, {}).get(cluster)
        if cached is not None:
            return cached
        try:
            doc = self.get(sites_path(site, "clusters", cluster, "nodes"))
        except SourceError as exc:
            if exc.status == 404:
                return None
            raise
        names = [str(n["uid"]) for n in doc.get("items", [])]
        with self._lock:
            self._nodes.setdefault(site, {})[cluster] = names
        return names

    def site_exists(self, site: str) -> bool:
        """Whether the reference API knows ``site``."""
        try:
            self.get(sites_path(site))
        except SourceError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _uids(self, path: str) -> list[str] | None:
        """The ``uid`` of each item of a reference API listing, sorted; None when the API
        refuses it (for an error's hint only)."""
        try:
            return sorted(str(item["uid"]) for item in self.get(path).get("items", []))
        except SourceUnavailable:
            raise
        except (SourceError, AttributeError, KeyError, TypeError) as exc:
            log.warning("cannot list %s (%s)", path, exc)
            return None

    def check_nodes(self, nodes: Sequence[G5kNode]) -> None:
        """Refuse nodes the reference API does not list: the metrics API answers ``[]`` for
        them, a backup that looks like "no data" (an experiment's nodes are current ones).

        Raises:
            ConfigError: names every unknown node (:meth:`node_problems`).
        """
        problems = self.node_problems(nodes)
        if problems:
            raise ConfigError(
                f"unknown node{'s' if len(problems) > 1 else ''}: {'; '.join(problems)} -- "
                "check the node names (Grid'5000 reference API)"
            )

    def node_problems(self, nodes: Sequence[G5kNode]) -> list[str]:
        """The nodes the reference API does not list, each with its cluster's nodes, or the
        site's clusters, or the known sites (the closest first when there is one). One
        reference request per cluster in use (cached), more only to explain a problem."""
        problems: list[str] = []
        for site, site_nodes in sorted(by_site(nodes).items()):
            in_use = sorted({n.cluster for n in site_nodes})
            clusters = {c: self.cluster_nodes(site, c) for c in in_use}
            bad = [n for n in site_nodes if n.name not in (clusters[n.cluster] or ())]
            if not bad:
                continue
            if any(m is None for m in clusters.values()) and not self.site_exists(site):
                names = ", ".join(n.fqdn for n in bad)
                problems.append(
                    f"{names}: site {site!r} is unknown to {self.safe_url} "
                    f"({_closest(site, self._uids('sites'), 'sites')})"
                )
                continue
            listed: list[str] | None = None
            for n in bad:
                members = clusters[n.cluster]
                if members is None:
                    if listed is None:
                        listed = self._uids(sites_path(site, "clusters"))
                    problems.append(
                        f"{n.fqdn}: no cluster {n.cluster!r} on site {site} "
                        f"({_closest(n.cluster, listed, 'clusters')})"
                    )
                else:
                    problems.append(
                        f"{n.fqdn}: not a node of cluster {n.cluster} of site {site} "
                        f"({_members(n.cluster, members)})"
                    )
        return problems

    def catalog(self, site: str, cluster: str) -> list[dict[str, Any]]:
        """The ``metrics`` of a cluster in the reference API (cached)."""
        key = (site, cluster)
        with self._lock:
            cached = self._catalogs.get(key)
        if cached is not None:
            return cached
        with self._lock:
            failed = self._catalog_errors.get(key)
        if failed is not None:
            raise failed
        try:
            doc = self.get(sites_path(site, "clusters", cluster))
        except SourceError as exc:
            if not isinstance(exc, SourceUnavailable):  # a refusal: the same next time
                with self._lock:
                    self._catalog_errors[key] = exc
            raise
        metrics = list(doc.get("metrics") or [])
        with self._lock:
            self._catalogs[key] = metrics
        return metrics

    def node_metrics(self, node: G5kNode) -> list[dict[str, Any]]:
        """Catalog entries that apply to ``node`` (``only_for`` honoured)."""
        return [
            m
            for m in self.catalog(node.site, node.cluster)
            if not m.get("only_for") or node.name in m["only_for"]
        ]

    def job(self, site: str, job_id: int | str) -> dict[str, Any]:
        if not str(job_id).strip().isdigit():
            raise ConfigError(f"job id {str(job_id)!r} of site {site}: expected an OAR job number")
        doc = self.get(sites_path(site, "jobs", str(job_id).strip()))
        if not isinstance(doc, dict):
            raise SourceError(f"job {job_id} of site {site}: unexpected answer {doc!r:.200}")
        return doc

    def rate(
        self, node: G5kNode, metrics: Sequence[str] | None, monitored: Monitor = False
    ) -> float:
        """Estimated points per second of ``node`` for ``metrics`` (all when None).

        From the real catalogue shapes (:mod:`dxt_core.backends.kwollect.catalog`): every
        entry, ``period: 0`` entries at their ``optional_period``, Prometheus bundles
        expanded; ``monitored`` (a ``monitor`` job runs on the node: True, or its regular
        expression): the faster ``optional_period`` of what it promotes (wattmetre: 50 or 100
        times the ``period``).
        """
        try:
            entries = self.node_metrics(node)
        except SourceUnavailable:
            raise
        except SourceError as exc:
            log.warning("no metrics catalog for %s (%s); assuming 1 point/s per metric", node, exc)
            return _UNKNOWN_RATE * (len(metrics) if metrics else 10)
        return catalog.node_rate(entries, metrics, monitored)

    def unknown_metrics(
        self, site: str, nodes: Sequence[G5kNode], metrics: Sequence[str]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """The names of ``metrics`` that the site's catalogue has never heard of, and the
        catalogue entries read (for suggestions); ``[]`` when it cannot be checked.

        The API answers ``[]`` for a name it does not know, which would be archived as an
        "empty" day forever. The catalogues of the nodes' clusters are read first; a name
        they lack is looked up in the site's other clusters (``pdu_outlet_power_watt`` on a
        cluster without PDU data is a known name with empty days, not a typo). A catalogue
        that cannot be had (refused) disables the check.
        """
        mine = sorted({n.cluster for n in nodes})
        entries = self._catalogs_of(site, mine)
        if entries is None:
            return [], []
        unknown = catalog.unknown_metrics(metrics, entries)
        if not unknown:
            return [], entries
        try:
            listed = self.get(sites_path(site, "clusters")).get("items", [])
            others = sorted({str(c["uid"]) for c in listed} - set(mine))
        except SourceUnavailable:
            raise
        except (SourceError, AttributeError, KeyError, TypeError) as exc:
            log.warning("cannot list the clusters of %s to check metric names (%s)", site, exc)
            return [], entries
        more = self._catalogs_of(site, others)
        if more is None:
            return [], entries
        entries += more
        return catalog.unknown_metrics(unknown, entries), entries

    def check_metrics(self, site: str, nodes: Sequence[G5kNode], metrics: Sequence[str]) -> None:
        """Refuse metric names the site's catalogue has never heard of (see
        :meth:`unknown_metrics`).

        Raises:
            ConfigError: names the metric, the site and the closest known names.
        """
        unknown, entries = self.unknown_metrics(site, nodes, metrics)
        if unknown:
            raise unknown_metric_error(unknown, entries, f"site {site}", self.safe_url)

    def _catalogs_of(self, site: str, clusters: Sequence[str]) -> list[dict[str, Any]] | None:
        entries: list[dict[str, Any]] = []
        for cluster in clusters:
            try:
                entries += self.catalog(site, cluster)
            except SourceUnavailable:
                raise
            except SourceError as exc:
                log.warning("cannot check metric names on %s/%s (%s)", site, cluster, exc)
                return None
        return entries

    # -- metrics -------------------------------------------------------------------------

    def plan(
        self,
        site: str,
        nodes: Sequence[G5kNode],
        metrics: Sequence[str] | None,
        start: dt.datetime,
        stop: dt.datetime,
        monitored: Monitor = False,
    ) -> list[list[MetricsRequest]]:
        rates = {n: self.rate(n, metrics, monitored) for n in nodes}
        return plan_requests(
            site, nodes, metrics, start, stop, rates, self.max_points, self.max_nodes
        )

    def fetch(
        self,
        req: MetricsRequest,
        stats: RequestStats | None = None,
        stop: threading.Event | None = None,
    ) -> list[Point]:
        """One planned request's points, oldest first (:meth:`iter_parts`, joined)."""
        return [p for part in self.iter_parts(req, stats, stop) for p in part]

    def iter_parts(
        self,
        req: MetricsRequest,
        stats: RequestStats | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[list[Point]]:
        """One planned request, split again while the server says it is too large; its
        points oldest first, one answer at a time (a part split in time is asked for when
        the one before it has been taken, so data denser than planned costs requests, not
        memory; parts split by nodes are merged, at the shortest window only).

        A read timeout is taken for "too much data" (the server answers that only after its
        query timeout) while the request can still be split; at the shortest window for one
        node it is retried with backoff, as a 503 is, before the request fails.

        Raises:
            Stopped: ``stop`` is set: no request is sent (neither this one nor a split).
        """
        stats = stats if stats is not None else KwollectStats()
        if stop is not None and stop.is_set():
            raise Stopped(f"site {req.site}: stopped before a request")
        parts: list[MetricsRequest] = []
        by_nodes = False
        try:
            data = self._get(req, stats)
        except WindowTooLarge as exc:
            if exc.status is None:  # no answer at all (read timeout), not a refusal
                self._check_alive(req, stats)
            if req.stop - req.start >= 2 * self.min_window:
                parts = req.split_time()
                stats.splits += 1
                log.info(
                    "%s: splitting [%s, %s] in time (%s)", req.site, req.start, req.stop, str(exc)
                )
            elif len(req.nodes) > 1:
                stats.splits += 1
                parts, by_nodes = req.split_nodes(), True
            else:
                raise self._refused_at_the_floor(req, exc) from exc
        if parts:
            # outside the except block: its traceback would keep the refused answer alive
            # while the parts are taken
            if by_nodes:
                yield merge_chronological([self.fetch(h, stats, stop) for h in parts])
            else:
                for part in parts:
                    yield from self.iter_parts(part, stats, stop)
            return
        yield from self._kept(data, req, stats)

    def _refused_at_the_floor(self, req: MetricsRequest, exc: WindowTooLarge) -> WindowTooLarge:
        return WindowTooLarge(
            f"site {req.site}: even one node ({req.nodes[0]}) over "
            f"{self.min_window.total_seconds():g} s is too much data for the server; "
            "ask fewer metrics (--metrics), or a shorter shortest window (--min-window "
            "on the command line, min_window_s in the library, extra min_window of the "
            "connection)",
            url=exc.url,
            status=exc.status,
        )

    def _kept(
        self, data: list[Point], req: MetricsRequest, stats: RequestStats
    ) -> Iterator[list[Point]]:
        """``data`` inside the request's window (a point outside it is dropped, counted)."""
        kept, dropped = drop_outside(data, req)
        if dropped:
            log.warning(
                "%s: dropped %d points outside the window [%s, %s] the server was asked for",
                req.site,
                dropped,
                _iso(req.start),
                _iso(req.stop),
            )
            if isinstance(stats, KwollectStats):
                stats.outside_window += dropped
        yield kept

    def _get(self, req: MetricsRequest, stats: RequestStats) -> list[Point]:
        """The points of one request, as the server sent them (a JSON array).

        Raises:
            WindowTooLarge: "too much data", an answer denser than planned, or (unless the
                request is at the shortest window for one node) a read timeout.
        """
        path = sites_path(req.site, "metrics")
        at_floor = req.stop - req.start < 2 * self.min_window and len(req.nodes) == 1
        body = self.http.request(
            "GET",
            path,
            params=req.params(),
            stats=stats,
            too_large=too_much_data,
            timeout_is_too_large=not at_floor,
            # at the floor a timeout is retried, and a persistent one names the request
            context=f"site {req.site}, {req.nodes[0]} over [{_iso(req.start)}, "
            f"{_iso(req.stop)}], the shortest window"
            if at_floor
            else "",
        )
        if len(body) > self.max_answer_bytes:
            # Denser than planned (a monitor job the plan did not know of): never parse more
            # than the bound; the halves are asked again.
            raise WindowTooLarge(
                f"answer of {len(body)} bytes is above max_answer_bytes "
                f"({self.max_answer_bytes}): denser than planned",
                url=self.http.url(path),
                status=200,
            )
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise SourceError(
                f"site {req.site}: answer is not valid JSON ({exc}): {excerpt(body, 200)!r}",
                url=self.http.url(path),
            ) from exc
        if not isinstance(data, list):
            raise SourceError(
                f"site {req.site}: expected a JSON array of points, got {type(data).__name__}",
                url=self.http.url(path),
            )
        return data

    def _check_alive(self, req: MetricsRequest, stats: RequestStats) -> None:
        """After a read timeout: does the server answer a one-node, one-second request?

        Raises:
            SourceUnavailable: it does not either; splitting the window cannot help.
        """
        stop = min(req.stop, req.start + dt.timedelta(seconds=1) - _US)
        probe = MetricsRequest(
            req.site, req.nodes[:1], req.metrics[:1] if req.metrics else None, req.start, stop
        )
        path = sites_path(req.site, "metrics")
        try:
            self._probe_http.get_json(path, params=probe.params(), stats=stats)
        except SourceUnavailable as exc:
            if exc.status is not None:
                return  # it answered (a 502-504 or 429 too): the big request was too big
            raise SourceUnavailable(
                f"the Kwollect API does not answer: no answer to a request of "
                f"{len(req.nodes)} nodes over {(req.stop - req.start).total_seconds():g} s "
                f"within {self.http.timeout_s:g} s, nor to a one-node, one-second request "
                f"within {self._probe_http.timeout_s:g} s ({exc.message}). Check the API URL "
                f"({self.safe_url}) and that the service is up; --timeout (the "
                "connection's extra timeout, timeout_s in the library) sets the wait",
                url=self.http.url(path),
            ) from exc
        except DxtError:
            pass  # it answered (even with an error): the big request was too big

    def iter_batches(
        self,
        windows: Iterable[list[MetricsRequest]],
        stats: RequestStats | None = None,
        stopping: threading.Event | None = None,
    ) -> Iterator[list[Point]]:
        """The points of planned ``windows`` (:meth:`plan`), one window at a time.

        Each batch is oldest first and follows the previous one in time, so the whole stream is
        chronological. A window of one request comes answer by answer; a window's requests
        (node groups) are merged as they come, in batches of at most :data:`BATCH_POINTS`:
        memory holds one answer per request of the window, however much denser than planned
        the data is. Once ``stopping`` is set no request starts: :class:`Stopped` is raised
        instead.
        """
        for window in windows:
            if len(window) == 1:
                yield from (b for b in self.iter_parts(window[0], stats, stopping) if b)
                continue
            streams = [
                (p for part in self.iter_parts(req, stats, stopping) for p in part)
                for req in window
            ]
            batch: list[Point] = []
            for p in heapq.merge(*streams, key=point_time):
                batch.append(p)
                if len(batch) >= BATCH_POINTS:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def count_points(
        self,
        site: str,
        nodes: Sequence[G5kNode],
        metric: str,
        start: dt.datetime,
        stop: dt.datetime,
        stats: RequestStats | None = None,
    ) -> SourceCount:
        """How many points of ``metric`` the API returns for ``[start, stop]`` (inclusive).

        Kwollect has no count: ``api.get_metrics`` (``kwollect/db/kwollect_setup_db.py``)
        returns rows only, and ``summary=true`` gives one mean (or maximum) per 5-minute
        bucket, no count. So the points are asked for and counted, with the archive's own
        requests and filter, and nothing is kept; the method says so.
        """
        n = 0
        for batch in self.iter_batches(self.plan(site, nodes, [metric], start, stop), stats):
            n += sum(1 for p in batch if p.get("metric_id") == metric)
            batch.clear()
        return SourceCount(n, KWOLLECT_COUNT_METHOD)


#: Points in a batch of a window merged from several requests (:meth:`iter_batches`)
BATCH_POINTS = 50_000

#: How Kwollect's count is taken (it has no count API).
KWOLLECT_COUNT_METHOD = (
    "Kwollect has no count (api.get_metrics returns rows; summary=true gives 5-minute means): "
    "the points of the archive's own requests, counted"
)


__all__ = [
    "ANSWER_BYTES_PER_POINT",
    "DEFAULT_API_URL",
    "DEFAULT_MAX_POINTS",
    "DOMAIN",
    "KWOLLECT_COUNT_METHOD",
    "MIN_WINDOW_FLOOR_S",
    "OPTION_LIMITS",
    "POWER_METRICS",
    "PROBE_TIMEOUT_S",
    "REFERENCE_TIMEOUT_S",
    "TOO_MUCH_DATA",
    "_NODE_RE",
    "_UNKNOWN_RATE",
    "_UNSET",
    "_US",
    "ClientOptions",
    "G5kNode",
    "KwollectClient",
    "KwollectStats",
    "MetricsRequest",
    "Point",
    "Stopped",
    "_Limit",
    "_closest",
    "_iso",
    "_members",
    "by_site",
    "check_component",
    "check_options",
    "drop_outside",
    "merge_chronological",
    "option_problem",
    "parse_node",
    "parse_nodes",
    "parse_time",
    "plan_requests",
    "point_time",
    "sites_path",
    "time_windows",
    "too_much_data",
    "unknown_metric_error",
]
