"""Kwollect requests planned before they are sent: node names, time windows and node groups
sized to the points budget, the checks of the client's options, and the answers' helpers
(merging, dropping points outside a window, the errors that name the closest names).

No request is made here: :mod:`dxt_core.backends.kwollect.source` sends them.
"""

from __future__ import annotations

import datetime as dt
import difflib
import heapq
import math
import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dxt_core import masking
from dxt_core.backends.kwollect import catalog
from dxt_core.errors import ConfigError, DxtError, SourceError
from dxt_core.http import RequestStats
from dxt_core.paths import check_path_component

log = masking.logger("dxt_core.backends.kwollect.requests")

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
#: Shortest ``min_window_s``: a window is never split below a millisecond (the fastest
#: metric, the wattmetre under a monitor job, samples every 20 ms: a shorter window cannot
#: make an answer smaller, and a server that refuses everything would be split forever).
MIN_WINDOW_FLOOR_S = 0.001


class Stopped(Exception):
    """Raised instead of sending a metrics request once the caller has asked to stop (the
    first Ctrl-C of a backup): the request in flight ends, no new one starts."""


@dataclass(frozen=True, slots=True)
class _Limit:
    """The allowed range of one client option, and where else it is set."""

    flag: str | None  # the command line's option
    extra: str  # the connection's extra
    low: float
    inclusive: bool
    unit: str
    integer: bool = False
    why: str = ""


#: The client options checked before any request, by their library name.
OPTION_LIMITS: dict[str, _Limit] = {
    "timeout_s": _Limit("--timeout", "timeout", 0.0, False, "seconds"),
    "max_points": _Limit("--max-points", "max_points", 1, True, "points", integer=True),
    "max_nodes": _Limit(None, "max_nodes", 1, True, "nodes", integer=True),
    "min_window_s": _Limit(
        "--min-window",
        "min_window",
        MIN_WINDOW_FLOOR_S,
        True,
        "seconds",
        why="; a shorter window cannot make an answer smaller: the fastest metric samples "
        "every 20 ms",
    ),
}


def option_problem(name: str, value: object, *, cli: bool = False) -> str | None:
    """Why ``value`` is not allowed for the client option ``name`` (see
    :data:`OPTION_LIMITS`), or None. ``cli``: the message names the command line's flag
    first, else the library's name and the other places the option is set."""
    lim = OPTION_LIMITS[name]
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        whole = not lim.integer or float(value).is_integer()
        if whole and (value >= lim.low if lim.inclusive else value > lim.low):
            return None
    bound = f"{lim.low:g} or more" if lim.inclusive else f"above {lim.low:g}"
    need = f"give {'a whole number of' if lim.integer else 'a number of'} {lim.unit}, {bound}"
    if cli and lim.flag:
        return f"{lim.flag} {value}: {need}{lim.why}"
    where = [f"{lim.flag} on the command line"] if lim.flag else []
    where.append(f"extra {lim.extra} of the connection")
    return f"{name}={value!r}: {need}{lim.why} ({', '.join(where)})"


def check_options(options: dict[str, object], *, cli: bool = False) -> None:
    """Refuse client options out of their range, all problems in one error.

    Raises:
        ConfigError: names each option (its flag when ``cli``) and its allowed range.
    """
    problems = [p for name, value in options.items() if (p := option_problem(name, value, cli=cli))]
    if problems:
        raise ConfigError("; ".join(problems))


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
    """A UTC datetime from an aware datetime, an epoch in seconds (int/float) or an ISO 8601
    string with an offset.

    In UTC: Python adds, subtracts and compares two datetimes of one ``ZoneInfo`` by their
    wall clocks, so on a DST change day windows cut from local times overlapped or left gaps
    (points fetched twice, out of order) and a stop 40 minutes after the start (``fold``)
    read as before it."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError(
                f"{what} {value!r} is naive: attach a time zone (e.g. tzinfo=datetime.UTC)"
            )
        if type(value) is not dt.datetime:  # a pandas Timestamp: its nanoseconds dropped
            value = dt.datetime(
                *value.timetuple()[:6], value.microsecond, tzinfo=value.tzinfo, fold=value.fold
            )
        return value.astimezone(dt.UTC)
    if type(value).__name__ == "datetime64":
        raise ConfigError(
            f"{what} {value!r} is a NumPy datetime64, which has no time zone: give an aware "
            "datetime, e.g. pandas.Timestamp(value, tz='UTC')"
        )
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(float(value), dt.UTC)
        except (ValueError, OverflowError, OSError) as exc:
            raise ConfigError(
                f"bad {what} {value!r}: an epoch is in seconds ({exc}); for milliseconds "
                "divide by 1000"
            ) from None
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise ConfigError(
                f"bad {what} {value!r}: use ISO 8601 with an offset, an epoch, or a datetime"
            ) from exc
        if t.tzinfo is None:
            raise ConfigError(f"{what} {value!r} has no UTC offset: add one, e.g. '+01:00'")
        return t.astimezone(dt.UTC)
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
    # a catalogue that promises nothing (empty, or on-demand entries only): one window
    seconds = min(max_points / max(rate, 1e-9), (stop - start).total_seconds() + 1.0)
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
    bundles = catalog.bundle_names(entries)
    for m in unknown:
        near = catalog.closest(m, entries)
        hint = f"closest known: {', '.join(near)}" if near else "no close name"
        if "," in m:  # metrics="a,b": one string, where the Python API takes a list
            listed = ", ".join(repr(x.strip()) for x in m.split(",") if x.strip())
            hint = f"one name holding commas: give the metrics as a list, [{listed}]"
        elif m in bundles:
            hint = (
                "a bundle of Prometheus exporter metrics: each is stored under its own name, "
                f"{catalog.PROM_PREFIX}<exporter metric>, e.g. {catalog.PROM_PREFIX}node_load1"
            )
        problems.append(f"{m!r} ({hint})")
    return ConfigError(
        f"unknown metric {'; '.join(problems)}: in no metric catalogue of {where} "
        f"({url}/sites/<site>/clusters/<cluster>); check the spelling"
    )


def _closest(name: str, known: Sequence[str] | None, what: str) -> str:
    """``known`` as an error's hint, the closest names to ``name`` first."""
    if known is None:
        return f"the API does not list its {what}"
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    listed = ", ".join(known) if known else "none"
    return (f"closest: {', '.join(near)}; " if near else "") + f"{what}: {listed}"


def _members(cluster: str, members: Sequence[str]) -> str:
    """A cluster's nodes in a few words: ``its 4 nodes are nova-1 to nova-4``."""
    if not members:
        return "it lists no nodes"
    numbers = sorted(int(m.rsplit("-", 1)[1]) for m in members if m.rsplit("-", 1)[-1].isdigit())
    if len(numbers) == len(members) and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"its {len(members)} nodes are {cluster}-{numbers[0]} to {cluster}-{numbers[-1]}"
    shown = sorted(members, key=lambda m: (len(m), m))
    more = f", ... ({len(members)} nodes)" if len(shown) > 12 else ""
    return f"its nodes: {', '.join(shown[:12])}{more}"


def too_much_data(status: int, body: bytes) -> bool:
    """The server's answer to a request it could not finish in its query timeout."""
    return status >= 500 and TOO_MUCH_DATA in body[:2000].decode("utf-8", "replace").lower()
