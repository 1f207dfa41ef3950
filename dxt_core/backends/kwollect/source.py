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
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import httpx
import orjson

from dxt_core.backends.kwollect import catalog
from dxt_core.errors import ConfigError, DxtError, SourceError, SourceUnavailable, WindowTooLarge
from dxt_core.http import HttpClient, RequestStats, RetryPolicy, redact_url
from dxt_core.paths import check_path_component
from dxt_core.reconcile import SourceCount

log = logging.getLogger("dxt_core.backends.kwollect.source")

DEFAULT_API_URL = "https://api.grid5000.fr/stable"
DOMAIN = "grid5000.fr"
TOO_MUCH_DATA = "too much data"
#: Points per planned request. A point parsed into Python objects takes ~1.4 kB: 25,000 points
#: keep one answer near 35 MB (measured: a 2-site backup peaks near 170 MB, whatever its length).
DEFAULT_MAX_POINTS = 25_000
#: JSON bytes per point above which an answer is denser than planned (a point is 120-200
#: bytes of JSON; labels make some longer): ``max_points`` of them bound one parsed answer.
ANSWER_BYTES_PER_POINT = 400
#: Energy metrics, best first.
POWER_METRICS = ("wattmetre_power_watt", "pdu_outlet_power_watt", "bmc_node_power_watt")
_US = dt.timedelta(microseconds=1)
_NODE_RE = re.compile(r"^(?P<cluster>[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*)-(?P<number>\d+)$")
#: Read timeout of reference API requests (small documents).
REFERENCE_TIMEOUT_S = 60.0
#: Read timeout of the "is the server alive?" request sent after a read timeout.
PROBE_TIMEOUT_S = 30.0
# Rate assumed for a metric missing from the reference API catalog (points per second).
_UNKNOWN_RATE = 1.0

Point = dict[str, Any]
_UNSET = object()


@dataclass(slots=True)
class KwollectStats(RequestStats):
    """Request counters plus the points the client dropped because they were outside the
    window it asked for (a server or proxy that adds, say, a point of the day before)."""

    outside_window: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**RequestStats.as_dict(self), "outside_window": self.outside_window}


def check_component(value: str, what: str, error: type[DxtError] = ConfigError) -> str:
    """``value`` if it can be one path component (of a file path or an API URL), else ``error``.

    Site, cluster, node and metric names end up in backup and archive paths and in API URLs:
    ``--job "../../x:1"`` must not write outside the backup directory (nor ask another URL).
    """
    problem = check_path_component(value, what)
    if problem:
        raise error(problem)
    return value


@dataclass(frozen=True, slots=True, order=True)
class G5kNode:
    """A Grid'5000 node: short name (``nova-1``) and site (``lyon``)."""

    site: str
    name: str

    @property
    def cluster(self) -> str:
        return self.name.rsplit("-", 1)[0]

    @property
    def fqdn(self) -> str:
        return f"{self.name}.{self.site}.{DOMAIN}"

    def __str__(self) -> str:
        return self.fqdn


def sites_path(site: str, *rest: object) -> str:
    """``sites/<site>/...`` of the API, each component checked (no ``..``, no ``/``)."""
    parts = [check_component(site, "site")]
    parts += [check_component(str(p), "API path component") for p in rest]
    return "/".join(["sites", *parts])


def parse_node(node: object, site: str | None = None) -> G5kNode:
    """A Grid'5000 node from a host name or an object with an ``address`` (EnOSlib ``Host``).

    Accepts ``nova-1.lyon.grid5000.fr``, ``nova-1.lyon`` and ``nova-1`` (with ``site``).

    Raises:
        ConfigError: the name is not a Grid'5000 node name; the message says which forms work.
    """
    if site is not None:
        check_component(site, "site")
    if isinstance(node, G5kNode):
        if site is not None and node.site != site:
            raise ConfigError(f"node {node.fqdn} is on site {node.site!r}, not {site!r}")
        return node
    raw = getattr(node, "address", node)
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(
            f"node {node!r} is neither a host name nor an object with an 'address' attribute"
        )
    text = raw.strip().lower().rstrip(".")
    parts = text.split(".")
    name = parts[0]
    node_site = parts[1] if len(parts) >= 2 else site
    domain = ".".join(parts[2:])
    hint = "use e.g. 'nova-1.lyon.grid5000.fr', 'nova-1.lyon', or 'nova-1' with site='lyon'"
    if len(parts) > 2 and domain != DOMAIN:
        raise ConfigError(f"node {raw!r} is not a Grid'5000 node (domain {domain!r}); {hint}")
    if not _NODE_RE.match(name):
        raise ConfigError(f"node {raw!r}: {name!r} is not a <cluster>-<number> name; {hint}")
    if not node_site:
        raise ConfigError(f"node {raw!r} has no site; {hint}")
    check_component(node_site, f"site of node {raw!r}")
    if site is not None and node_site != site:
        raise ConfigError(f"node {raw!r} is on site {node_site!r}, not {site!r}")
    return G5kNode(node_site, name)


def parse_nodes(nodes: Iterable[object], site: str | None = None) -> list[G5kNode]:
    """Parse and de-duplicate ``nodes`` (order kept); every bad name is listed in one error."""
    out: dict[G5kNode, None] = {}
    bad: list[str] = []
    for n in nodes:
        try:
            out[parse_node(n, site)] = None
        except ConfigError as exc:
            bad.append(str(exc))
    if bad:
        raise ConfigError("; ".join(bad))
    return list(out)


def by_site(nodes: Iterable[G5kNode]) -> dict[str, list[G5kNode]]:
    sites: dict[str, list[G5kNode]] = {}
    for n in nodes:
        sites.setdefault(n.site, []).append(n)
    return sites


def parse_time(value: object, what: str = "timestamp") -> dt.datetime:
    """An aware datetime from a datetime, an epoch (int/float) or an ISO 8601 string."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError(
                f"{what} {value!r} is naive: attach a time zone (e.g. tzinfo=datetime.UTC)"
            )
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(float(value), dt.UTC)
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise ConfigError(
                f"bad {what} {value!r}: use ISO 8601 with an offset, an epoch, or a datetime"
            ) from exc
        if t.tzinfo is None:
            raise ConfigError(f"{what} {value!r} has no UTC offset: add one, e.g. '+01:00'")
        return t
    raise ConfigError(f"bad {what} {value!r}: expected a datetime, an epoch or an ISO string")


def point_time(point: Point) -> dt.datetime:
    return dt.datetime.fromisoformat(point["timestamp"])


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat()


@dataclass(frozen=True, slots=True)
class MetricsRequest:
    """One ``/sites/<site>/metrics`` call: nodes and an inclusive time range."""

    site: str
    nodes: tuple[G5kNode, ...]
    metrics: tuple[str, ...] | None
    start: dt.datetime
    stop: dt.datetime

    def params(self) -> dict[str, str]:
        p = {
            "nodes": ",".join(n.name for n in self.nodes),
            "start_time": _iso(self.start),
            "end_time": _iso(self.stop),
        }
        if self.metrics:
            p["metrics"] = ",".join(self.metrics)
        return p

    def split_time(self) -> list[MetricsRequest]:
        mid = self.start + (self.stop - self.start) / 2
        return [
            MetricsRequest(self.site, self.nodes, self.metrics, self.start, mid),
            MetricsRequest(self.site, self.nodes, self.metrics, mid + _US, self.stop),
        ]

    def split_nodes(self) -> list[MetricsRequest]:
        half = len(self.nodes) // 2
        return [
            MetricsRequest(self.site, self.nodes[:half], self.metrics, self.start, self.stop),
            MetricsRequest(self.site, self.nodes[half:], self.metrics, self.start, self.stop),
        ]


def time_windows(
    start: dt.datetime, stop: dt.datetime, seconds: float
) -> list[tuple[dt.datetime, dt.datetime]]:
    """Cut the inclusive range ``[start, stop]`` into inclusive windows of ``seconds``.

    Each window ends one microsecond before the next begins: no instant is in two windows.
    """
    if stop < start:
        raise ConfigError(f"stop {stop.isoformat()} is before start {start.isoformat()}")
    step = dt.timedelta(seconds=max(seconds, 1e-3))
    out: list[tuple[dt.datetime, dt.datetime]] = []
    a = start
    while True:
        b = a + step - _US
        if b >= stop:
            out.append((a, stop))
            return out
        out.append((a, b))
        a = b + _US


def plan_requests(
    site: str,
    nodes: Sequence[G5kNode],
    metrics: Sequence[str] | None,
    start: dt.datetime,
    stop: dt.datetime,
    rates: dict[G5kNode, float],
    max_points: int,
    max_nodes: int,
) -> list[list[MetricsRequest]]:
    """Requests for one site, time-major: a list per window, one request per node group.

    ``rates`` is the estimated points per second of each node for ``metrics``.
    """
    if max_points < 1 or max_nodes < 1:
        raise ConfigError("max_points and max_nodes must be >= 1")
    ordered = sorted(nodes)
    groups = [tuple(ordered[i : i + max_nodes]) for i in range(0, len(ordered), max_nodes)]
    rate = max(sum(rates.get(n, _UNKNOWN_RATE) for n in g) for g in groups)
    seconds = max_points / max(rate, 1e-9)
    mets = tuple(metrics) if metrics else None
    return [
        [MetricsRequest(site, g, mets, a, b) for g in groups]
        for a, b in time_windows(start, stop, seconds)
    ]


def merge_chronological(batches: Sequence[list[Point]]) -> list[Point]:
    """Merge lists that are each oldest first into one list oldest first (stable)."""
    non_empty = [b for b in batches if b]
    if len(non_empty) <= 1:
        return non_empty[0] if non_empty else []
    return list(heapq.merge(*non_empty, key=point_time))


def drop_outside(points: list[Point], req: MetricsRequest) -> tuple[list[Point], int]:
    """``points`` of ``[req.start, req.stop]`` (inclusive, as asked) and how many were not.

    The API only answers points of the window it is asked for; a point outside it (a proxy's
    or a cache's mistake) would otherwise be archived in two days, or once per window.

    Raises:
        SourceError: a point without a readable ``timestamp``.
    """
    bad: list[int] = []
    last_text: object = _UNSET
    inside = True
    for i, p in enumerate(points):
        text = p.get("timestamp") if isinstance(p, dict) else None
        if text != last_text:  # points of one instant share a timestamp: parse it once
            last_text = text
            try:
                t = dt.datetime.fromisoformat(text)  # type: ignore[arg-type]
                inside = req.start <= t <= req.stop
            except (TypeError, ValueError) as exc:
                raise SourceError(
                    f"site {req.site}: point {str(p)[:200]} of the window "
                    f"[{_iso(req.start)}, {_iso(req.stop)}] has no readable timestamp"
                ) from exc
        if not inside:
            bad.append(i)
    if not bad:
        return points, 0
    skip = set(bad)
    return [p for i, p in enumerate(points) if i not in skip], len(bad)


def unknown_metric_error(
    unknown: Sequence[str], entries: list[dict[str, Any]], where: str, url: str
) -> ConfigError:
    """The error for metric names no catalogue knows, with the closest known names."""
    problems = []
    for m in unknown:
        near = catalog.closest(m, entries)
        hint = f"closest known: {', '.join(near)}" if near else "no close name"
        problems.append(f"{m!r} ({hint})")
    return ConfigError(
        f"unknown metric {'; '.join(problems)}: in no metric catalogue of {where} "
        f"({url}/sites/<site>/clusters/<cluster>); check the spelling"
    )


def too_much_data(status: int, body: bytes) -> bool:
    """The server's answer to a request it could not finish in its query timeout."""
    return status >= 500 and TOO_MUCH_DATA in body[:2000].decode("utf-8", "replace").lower()


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
        self.max_points = max_points
        self.max_nodes = max_nodes
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
                f"the Grid'5000 API does not answer ({exc}). Check the API URL ({self.safe_url}) "
                "and that the service is up, then retry",
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

    def rate(self, node: G5kNode, metrics: Sequence[str] | None, monitored: bool = False) -> float:
        """Estimated points per second of ``node`` for ``metrics`` (all when None).

        From the real catalogue shapes (:mod:`dxt_core.backends.kwollect.catalog`): every
        entry, ``period: 0`` entries at their ``optional_period``, Prometheus bundles
        expanded; ``monitored`` (a ``monitor`` job runs on the node): the faster
        ``optional_period`` where there is one (wattmetre: 50 or 100 times the ``period``).
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
        monitored: bool = False,
    ) -> list[list[MetricsRequest]]:
        rates = {n: self.rate(n, metrics, monitored) for n in nodes}
        return plan_requests(
            site, nodes, metrics, start, stop, rates, self.max_points, self.max_nodes
        )

    def fetch(self, req: MetricsRequest, stats: RequestStats | None = None) -> list[Point]:
        """One planned request, split again while the server says it is too large.

        A read timeout is taken for "too much data" (the server answers that only after its
        query timeout) while the request can still be split; at the shortest window for one
        node it is retried with backoff, as a 503 is, before the request fails.
        """
        stats = stats if stats is not None else KwollectStats()
        try:
            data = self._get(req, stats)
        except WindowTooLarge as exc:
            if exc.status is None:  # no answer at all (read timeout), not a refusal
                self._check_alive(req, stats)
            if req.stop - req.start >= 2 * self.min_window:
                parts = req.split_time()
                stats.splits += 1
                log.info("%s: splitting [%s, %s] in time (%s)", req.site, req.start, req.stop, exc)
                return [p for part in parts for p in self.fetch(part, stats)]
            if len(req.nodes) > 1:
                stats.splits += 1
                halves = req.split_nodes()
                return merge_chronological([self.fetch(h, stats) for h in halves])
            raise WindowTooLarge(
                f"site {req.site}: even one node ({req.nodes[0]}) over "
                f"{self.min_window.total_seconds():g} s is too much data for the server; "
                "ask fewer metrics (--metrics), or a shorter shortest window (--min-window "
                "on the command line, min_window_s in the library, extra min_window of the "
                "connection)",
                url=exc.url,
                status=exc.status,
            ) from exc
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
        return kept

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
                f"site {req.site}: answer is not valid JSON ({exc}): {body[:200]!r}",
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
            raise SourceUnavailable(
                f"the Kwollect API does not answer: no answer to a request of "
                f"{len(req.nodes)} nodes over {(req.stop - req.start).total_seconds():g} s "
                f"within {self.http.timeout_s:g} s, nor to a one-node, one-second request "
                f"within {self._probe_http.timeout_s:g} s ({exc}). Check the API URL "
                f"({self.safe_url}) and that the service is up, then retry; --timeout (the "
                "connection's extra timeout, timeout_s in the library) sets the wait",
                url=self.http.url(path),
            ) from exc
        except DxtError:
            pass  # it answered (even with an error): the big request was too big

    def iter_batches(
        self,
        site: str,
        nodes: Sequence[G5kNode],
        metrics: Sequence[str] | None,
        start: dt.datetime,
        stop: dt.datetime,
        stats: RequestStats | None = None,
        monitored: bool = False,
    ) -> Iterator[list[Point]]:
        """Points of ``[start, stop]`` (inclusive) on one site, one window at a time.

        Each batch is oldest first and follows the previous one in time, so the whole stream is
        chronological; at most one request's answer is held in memory.
        """
        for window in self.plan(site, nodes, metrics, start, stop, monitored):
            yield merge_chronological([self.fetch(req, stats) for req in window])

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
        for batch in self.iter_batches(site, nodes, [metric], start, stop, stats):
            n += sum(1 for p in batch if p.get("metric_id") == metric)
            batch.clear()
        return SourceCount(n, KWOLLECT_COUNT_METHOD)


#: How Kwollect's count is taken (it has no count API).
KWOLLECT_COUNT_METHOD = (
    "Kwollect has no count (api.get_metrics returns rows; summary=true gives 5-minute means): "
    "the points of the archive's own requests, counted"
)
