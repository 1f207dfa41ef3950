"""Examon telemetry from KairosDB (directly, or through Grafana's data source proxy).

What the examon-client library did with ExamonQL is done here with plain REST calls:

* ``SELECT('*')``: the metric's tag keys are discovered with ``query/tags`` and every query
  groups by all of them, so each tag combination is its own series.
* ``WHERE(cluster=...)``: a ``tags`` filter, for plugins that carry the ``cluster`` tag.
* Job tables (``job_info_marconi100``) come from the Examon jobs endpoint, not KairosDB.

KairosDB has no paging and refuses or times out on over-large queries, so a day is fetched in
windows sized to a point budget from the density seen so far; a refused window is halved
(down to a floor) and the halves are fetched in order. KairosDB's ends are inclusive, so the
half-open window ``[a, b)`` is queried as ``a .. b-1 ms``.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.errors import (
    ConfigError,
    DxtError,
    QueryRejected,
    RateLimited,
    SourceError,
    SourceUnavailable,
    UnreadablePoint,
    WindowTooLarge,
)
from dxt_core.http import HttpClient, RequestStats, RetryPolicy, error_text
from dxt_core.reconcile import SourceCount
from dxt_core.records import RawPoints, Record, Series, SeriesBatch, SeriesSchema
from dxt_core.windows import Window, from_ms, next_window_ms, zone

_T = TypeVar("_T")

log = logging.getLogger("dxt_core.kairosdb")


@dataclass(frozen=True, slots=True)
class RefusalRule:
    """How one kind of refusal is read: what the server sends, what it means, what we do.

    Attributes:
        status: HTTP status the rule applies to.
        pattern: a regular expression the error text must match (``None``: any text;
            ``""``: an empty body).
        meaning: ``too_large`` (split the window), ``rate_limited`` (wait and retry the same
            window), or ``rejected`` (fail at once).
        proxy_only: the rule applies only when going through Grafana's data-source proxy.
        upstream: the source of the rule (repository and file).
    """

    status: int
    pattern: str | None
    meaning: str
    action: str
    upstream: str
    proxy_only: bool = False


#: The one table of how KairosDB, Grafana's proxy and a reverse proxy refuse a query, and
#: what we do. Only wording the real servers use is matched (docs/compatibility.md shows
#: it). The HTTP client (dxt_core.http) retries 429 and 5xx, honouring ``Retry-After``, and
#: fails other 4xx at once; the rules marked ``too_large`` are checked first and split the
#: window instead; 429s that outlast the retries become :class:`RateLimited`.
REFUSAL_RULES: tuple[RefusalRule, ...] = (
    RefusalRule(
        500,
        r"Query exceeded limit of \d+ data points",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 src/main/java/org/kairosdb/datastore/cassandra/"
        "QueryMonitor.java (kairosdb.datastore.cassandra.query_limit), wrapped twice in "
        "DatastoreException",
    ),
    RefusalRule(
        500,
        r"Insufficient memory to perform request",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 src/main/java/org/kairosdb/util/MemoryMonitorException.java, "
        "caught in core/http/rest/MetricsResource.java runQuery",
    ),
    RefusalRule(
        500,
        r"Java heap space|GC overhead limit exceeded",
        "too_large",
        "split the window",
        "kairosdb/kairosdb v1.2.2 core/http/rest/MetricsResource.java runQuery: catch "
        "(OutOfMemoryError e) answers the JVM's message",
    ),
    RefusalRule(
        504,
        "",
        "too_large",
        "split the window",
        "grafana/grafana pkg/util/proxyutil/reverse_proxy.go (errorHandler: 504 on a timeout, "
        "no body); conf/defaults.ini [dataproxy] timeout = 30",
        proxy_only=True,
    ),
    RefusalRule(
        429,
        None,
        "rate_limited",
        "wait Retry-After (else back off) and retry the same window; never split",
        "nginx/nginx src/http/modules/ngx_http_limit_req_module.c (limit_req_status 429), "
        "page from src/http/ngx_http_special_response.c",
    ),
    RefusalRule(
        503,
        None,
        "rate_limited",
        "wait Retry-After (else back off) and retry the same window; never split",
        "nginx/nginx src/http/modules/ngx_http_limit_req_module.c (limit_req's default status "
        "is 503, no Retry-After unless added)",
    ),
    RefusalRule(
        403,
        None,
        "rejected",
        "fail at once (permission or quota): no retry, no split",
        "RFC 9110 section 15.5.4 (403 Forbidden: the server refuses to authorize it)",
    ),
)

_TOO_LARGE_RULES = [
    (r.status, re.compile(r.pattern) if r.pattern else None, r.proxy_only, r.pattern == "")
    for r in REFUSAL_RULES
    if r.meaning == "too_large"
]


def too_large(status: int, body: bytes, *, proxy: bool = False) -> bool:
    """Whether an error answer is a "window too large" refusal (see :data:`REFUSAL_RULES`)."""
    text = body[:4000].decode("utf-8", "replace")
    for rule_status, pattern, proxy_only, empty in _TOO_LARGE_RULES:
        if status != rule_status or (proxy_only and not proxy):
            continue
        if empty and not body.strip():
            return True
        if pattern is not None and pattern.search(text):
            return True
    return False


@dataclass(slots=True)
class QueryCounts:
    """What a metric-day's queries dropped, reported with it.

    Attributes:
        dropped_outside_window: points the server sent outside the queried window.
    """

    dropped_outside_window: int = 0
    #: Windows the server could not serialise (one series, at most :data:`HOLE_MS`), each
    #: ``{"series", "start", "end", "start_ms", "end_ms", "message", "points"}``.
    holes: list[dict[str, Any]] = field(default_factory=list)


#: The smallest unreadable window a stored NaN costs: one series, at most a minute.
HOLE_MS = 60_000

# KairosDB 1.2.2 core/datapoints/DoubleDataPoint.java writeValueToJson throws
# IllegalStateException("NaN or Infinity:" + value + " data point=" + this); MetricsResource
# runQuery's catch (Exception e) answers it as HTTP 500 {"errors": [message]}.
_NOT_FINITE = re.compile(rb"NaN or Infinity:")


def _unserialisable(status: int, body: bytes) -> bool:
    return status == 500 and _NOT_FINITE.search(body[:4000]) is not None


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How a day is cut into queries.

    Attributes:
        initial_s: length of the first query window.
        target_points: aim for this many points per query (bounds memory per window).
        min_s: never split below this; a refusal at this size is an error. Every window
            is a whole number of ``min_s`` blocks from the day start, and the writers group
            rows by these blocks, so the files do not depend on how a day was windowed.
        max_s: never query more than this at once.
    """

    initial_s: int = 900
    target_points: int = 100_000
    min_s: int = 300
    max_s: int = 86_400 + 3600

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.initial_s <= self.max_s:
            raise ConfigError("window policy needs 0 < min_s <= initial_s <= max_s")
        if self.target_points < 1:
            raise ConfigError("target_points must be >= 1")


#: The tag Examon's publishers put on every series: the plugin that published it.
PLUGIN_TAG = "plugin"


def check_plugin(entry: CatalogEntry, plugins: set[str], url: str) -> None:
    """Refuse an entry whose plugin is not among the metric's ``plugin`` tag values.

    The plugin does not filter the query (the metric name does), so a misspelled plugin
    (``ipmi_pubb``) would archive the metric's rows under a directory of that name. The
    server decides, as for metric names: its ``plugin`` tag values of the metric. A metric
    whose series carry no ``plugin`` tag is not checked.

    Raises:
        QueryRejected: names the plugins that publish the metric, the closest first.
    """
    if not plugins or entry.plugin in plugins:
        return
    close = difflib.get_close_matches(entry.plugin, sorted(plugins), n=3, cutoff=0.0)
    raise QueryRejected(
        f"{entry.key}: the metric {entry.metric!r} is published by plugin "
        f"{' or '.join(repr(p) for p in close)}, not {entry.plugin!r} (the server's "
        f"'{PLUGIN_TAG}' tag values); fix the plugin (--plugin or the catalog line)",
        url=url,
    )


class KairosDBSource:
    """Reads Examon metrics from KairosDB, one metric and window at a time."""

    name = "examon"

    def __init__(
        self,
        conn: ExamonConnection,
        options: ExamonOptions | None = None,
        retry: RetryPolicy | None = None,
        windows: WindowPolicy | None = None,
    ) -> None:
        self.conn = conn
        self.options = (options or ExamonOptions()).with_cluster(conn.cluster)
        self.retry = retry or RetryPolicy()
        self.windows = windows or WindowPolicy()
        self.tz = zone(conn.time_zone)
        self._http = HttpClient(
            conn.url,
            user=conn.user,
            password=conn.password,
            timeout_s=conn.timeout_s,
            retry=self.retry,
            verify_tls=conn.verify_tls,
        )
        self._jobs_http: HttpClient | None = None
        self._lock = threading.Lock()
        self._api: str | None = None
        self._metric_names: frozenset[str] | None = None

    def close(self) -> None:
        self._http.close()
        if self._jobs_http is not None:
            self._jobs_http.close()

    def __enter__(self) -> KairosDBSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoints -------------------------------------------------------------------------
    def api_path(self, endpoint: str, stats: RequestStats | None = None) -> str:
        """Path of a KairosDB endpoint, through Grafana's proxy when configured."""
        if self._api is None:
            if self.conn.grafana_proxy:
                doc = self._http.get_json("api/datasources/id/kairosdb", stats=stats)
                ds_id = doc.get("id") if isinstance(doc, dict) else None
                if ds_id is None:
                    raise SourceError(
                        "Grafana has no data source named 'kairosdb'; check the Grafana URL "
                        "or turn grafana_proxy off",
                        url=self._http.url("api/datasources/id/kairosdb"),
                    )
                self._api = f"api/datasources/proxy/{ds_id}/api/v1"
            else:
                self._api = "api/v1"
        return f"{self._api}/{endpoint}"

    def _too_large(self, status: int, body: bytes) -> bool:
        return too_large(status, body, proxy=self.conn.grafana_proxy)

    def version(self) -> str:
        doc = _rate_limited(self._http.get_json, self.api_path("version"))
        return str(doc.get("version", "")) if isinstance(doc, dict) else str(doc)

    def metric_names(self, prefix: str | None = None) -> list[str]:
        """Metric names KairosDB knows (``GET /api/v1/metricnames``), internal ones left out."""
        params = {"prefix": prefix} if prefix else None
        path = self.api_path("metricnames")
        doc = _rate_limited(self._http.get_json, path, params=params)
        names = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(names, list):
            raise SourceError(
                "unexpected answer to metricnames: no 'results' list", url=self._http.url(path)
            )
        return [str(n) for n in names if not str(n).startswith("kairosdb.")]

    def check_known(self, entry: CatalogEntry, stats: RequestStats | None = None) -> None:
        """Raise unless KairosDB knows ``entry``'s metric name (asked once per source).

        KairosDB answers a query for a name it has never stored exactly as one for a metric
        without data in the window (``KairosDatastore.groupByTypeAndTag``: an empty group),
        so a misspelled catalog entry would archive as "empty" forever.

        Raises:
            QueryRejected: the name is unknown; the message names the closest known names.
        """
        if self._metric_names is None:
            self._metric_names = frozenset(self.metric_names())
        if entry.metric in self._metric_names:
            return
        close = difflib.get_close_matches(entry.metric, self._metric_names, n=5, cutoff=0.6)
        hint = f"closest known names: {', '.join(close)}" if close else "no similar name"
        raise QueryRejected(
            f"{entry.key}: KairosDB has never stored a metric named {entry.metric!r} "
            f"({hint}); fix the catalog entry",
            url=self._http.url(self.api_path("metricnames")),
        )

    # -- queries ---------------------------------------------------------------------------
    def _tag_filter(self, entry: CatalogEntry) -> dict[str, list[str]]:
        if self.options.for_plugin(entry.plugin).cluster_tag:
            return {"cluster": [self.options.cluster]}
        return {}

    def _body(
        self, entry: CatalogEntry, start_ms: int, end_ms: int, tag_keys: tuple[str, ...] | None
    ) -> dict[str, Any]:
        metric: dict[str, Any] = {"name": entry.metric, "tags": self._tag_filter(entry)}
        if tag_keys is not None:
            metric["group_by"] = [{"name": "tag", "tags": list(tag_keys)}]
            metric["order"] = "asc"
        return {
            "start_absolute": start_ms,
            "end_absolute": end_ms - 1,  # KairosDB's end is inclusive; ours is exclusive.
            "time_zone": self.conn.time_zone,
            "cache_time": 0,
            "metrics": [metric],
        }

    def schema(
        self, entry: CatalogEntry, window: Window | None = None, stats: RequestStats | None = None
    ) -> SeriesSchema:
        """The metric's tag keys over all time (ExamonQL ``SELECT('*')``).

        As examon-client's ``query_metricstags`` did (``start_absolute: 0``, no end), so a
        metric's columns do not change from one day to the next; a tag key that first appears
        later is a new column from then on (and in reruns of earlier days). ``window`` is
        not used.
        """
        keys = self._tag_keys(entry, 0, None, stats)  # checks the plugin too
        return SeriesSchema(name=entry.metric, tag_keys=tuple(sorted(keys)))

    def _tag_keys(
        self, entry: CatalogEntry, start_ms: int, end_ms: int | None, stats: RequestStats | None
    ) -> set[str]:
        body: dict[str, Any] = {
            "start_absolute": start_ms,
            "cache_time": 0,
            "metrics": [{"name": entry.metric, "tags": self._tag_filter(entry)}],
        }
        if end_ms is not None:
            body["end_absolute"] = end_ms - 1
        path = self.api_path("datapoints/query/tags", stats)
        doc = _rate_limited(self._http.post_json, path, body, stats=stats)
        keys: set[str] = set()
        plugins: set[str] = set()
        for result in _results(doc, self._http.url(path)):
            tags = result.get("tags") or {}
            if isinstance(tags, dict):
                keys.update(k for k, v in tags.items() if v)
                values = tags.get(PLUGIN_TAG)
                if isinstance(values, list):
                    plugins.update(str(v) for v in values)
        # the plugin typo check of schema() holds on the cached path too
        check_plugin(entry, plugins, self._http.url(path))
        return keys

    def schema_cached(
        self,
        entry: CatalogEntry,
        window: Window,
        cache: Path,
        stats: RequestStats | None = None,
    ) -> tuple[SeriesSchema, dict[str, Any]]:
        """The metric's tag keys as :meth:`schema` gives them, asked over all time only once.

        ``query/tags`` over a metric's whole history is the most expensive query sent to a
        large KairosDB (examon-client cached it on disk): the keys it found are kept in
        ``cache`` (in the archive, beside the metric's days) and, since keys only grow, each
        later metric-day asks only its own window and adds what it shows. When the history
        query fails (a timeout outlasting the retries, a refusal), the history is asked in
        halves, and when that fails too the day's keys plus the cached ones are used. The
        second value (for the manifest) says which.
        """
        with self._lock:
            cached = _read_tag_cache(cache)
        if cached is not None and cached.get("complete"):
            day = self._tag_keys(entry, window.start_ms, window.end_ms, stats)
            keys = set(cached["keys"]) | day
            note: dict[str, Any] = {
                "from": "archive cache + this day's query/tags",
                "cache": cache.name,
            }
            if keys != set(cached["keys"]):
                note["added"] = sorted(keys - set(cached["keys"]))
                self._write_tag_cache(cache, entry, keys, True)
            return SeriesSchema(entry.metric, tuple(sorted(keys))), note
        now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
        try:
            keys = self._history_keys(entry, 0, now_ms, stats, depth=0)
        except (SourceUnavailable, WindowTooLarge) as exc:
            day = self._tag_keys(entry, window.start_ms, window.end_ms, stats)
            keys = day | set((cached or {}).get("keys") or ())
            log.warning(
                "%s: tag keys over all time could not be read (%s); using this day's keys "
                "and the cached ones",
                entry.key,
                exc,
            )
            self._write_tag_cache(cache, entry, keys, False)
            return SeriesSchema(entry.metric, tuple(sorted(keys))), {
                "from": "this day's query/tags + cached keys: the query over all time failed",
                "error": str(exc)[:300],
            }
        self._write_tag_cache(cache, entry, keys, True)
        return SeriesSchema(entry.metric, tuple(sorted(keys))), {
            "from": "query/tags over all time (kept in the archive for the next days)",
            "cache": cache.name,
        }

    def _history_keys(
        self, entry: CatalogEntry, lo: int, hi: int, stats: RequestStats | None, depth: int
    ) -> set[str]:
        """Tag keys of ``[lo, hi)``; halved (up to 4 levels: 16 parts) when refused."""
        try:
            return self._tag_keys(entry, lo, None if depth == 0 else hi, stats)
        except (SourceUnavailable, WindowTooLarge):
            if depth >= 4 or hi - lo < 2 * 86_400_000:
                raise
            if stats is not None:
                stats.splits += 1
            mid = lo + (hi - lo) // 2
            return self._history_keys(entry, lo, mid, stats, depth + 1) | self._history_keys(
                entry, mid, hi, stats, depth + 1
            )

    def _write_tag_cache(
        self, cache: Path, entry: CatalogEntry, keys: set[str], complete: bool
    ) -> None:
        from dxt_core.fsio import write_json_atomic

        with self._lock:
            old = _read_tag_cache(cache)
            if old is not None:  # keys only grow, also when two days write at once
                keys = keys | set(old.get("keys") or ())
                complete = complete or bool(old.get("complete"))
            write_json_atomic(
                cache,
                {
                    "schema": TAG_CACHE_SCHEMA,
                    "metric": entry.metric,
                    "plugin": entry.plugin,
                    "tags_filter": self._tag_filter(entry),
                    "keys": sorted(keys),
                    # complete: the keys of the whole history were read once
                    "complete": complete,
                    "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
            )

    def query(
        self,
        entry: CatalogEntry,
        start_ms: int,
        end_ms: int,
        schema: SeriesSchema,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
        *,
        series: dict[str, str] | None = None,
        at_floor: bool = False,
    ) -> SeriesBatch:
        """One query for ``[start_ms, end_ms)``; series ordered by their tag values.

        Points outside the window are dropped and counted in ``counts``. ``series`` narrows
        the query to the series with these tag values. ``at_floor``: the window cannot be
        split further, so a read timeout is retried with backoff (as a 503 is) instead of
        being read as "too large".

        Raises:
            SourceError: the answer holds a value that is not a JSON number or string.
            UnreadablePoint: the server cannot serialise a point of the window (NaN).
        """
        body = self._body(entry, start_ms, end_ms, schema.tag_keys)
        if series:
            body["metrics"][0]["tags"] = {
                **body["metrics"][0]["tags"],
                **{k: [v] for k, v in series.items() if v},
            }
        path = self.api_path("datapoints/query", stats)
        where = (
            f"{entry.key}, window [{from_ms(start_ms, self.tz).isoformat()}, "
            f"{from_ms(end_ms, self.tz).isoformat()})"
        )
        status, raw, _ = _rate_limited(
            self._http.exchange,
            "POST",
            path,
            json_body=body,
            stats=stats,
            too_large=self._too_large,
            timeout_is_too_large=not at_floor,
            accept=_unserialisable,
        )
        url = self._http.url(path)
        if status >= 300:
            raise UnreadablePoint(
                f"{where}: the server cannot serialise a stored point: {error_text(raw)}",
                url=url,
                status=status,
            )
        doc, arrays = _decode_keeping_values(raw, url, where)
        results = _results(doc, url)
        if arrays is not None and len(arrays) != len(results):
            doc, arrays = _loads_answer(raw, url, where), None
            results = _results(doc, url)
        batch = SeriesBatch(start_ms, end_ms)
        dropped = 0
        for i, result in enumerate(results):
            points: Sequence[Any]
            if arrays is None:
                points = _checked_points(result.get("values"), url, where)
            elif not arrays[i]:
                continue
            else:
                raw_points = RawPoints.from_json(arrays[i])
                if raw_points is not None and not _valid_numbers(arrays[i]):
                    raise SourceError(
                        f"{where}: a value is not a JSON number: "
                        f"{_bad_pair(arrays[i])[:100].decode('utf-8', 'replace')!r}; "
                        "nothing of the window is archived",
                        url=url,
                    )
                if raw_points is not None:
                    points = raw_points
                else:
                    points = _checked_points(
                        _loads_answer(b"[" + arrays[i] + b"]", url, where), url, where
                    )
            if not points:
                continue
            points, out = _inside(points, start_ms, end_ms)
            dropped += out
            if not points:
                continue
            group = _group_tags(result)
            batch.series.append(Series(str(result.get("name", entry.metric)), group, points))
        if dropped:
            log.warning("%s: dropped %d points outside the queried window", where, dropped)
            if counts is not None:
                counts.dropped_outside_window += dropped
        keys = schema.tag_keys
        batch.series.sort(key=lambda s: tuple(s.tags.get(k, "") for k in keys))
        return batch

    def iter_batches(
        self,
        entry: CatalogEntry,
        window: Window,
        schema: SeriesSchema,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
    ) -> Iterator[SeriesBatch]:
        """Fetch ``window`` as consecutive batches, adapting and splitting windows as needed."""
        stats = stats if stats is not None else RequestStats()
        pol = self.windows
        min_ms, max_ms = pol.min_s * 1000, pol.max_s * 1000
        cursor, end = window.start_ms, window.end_ms
        size = _blocks(pol.initial_s * 1000, min_ms)
        cap = max_ms  # lowered on each refusal so that refused sizes are not tried again
        while cursor < end:
            stop = min(cursor + size, end)
            try:
                batch = self.query(
                    entry, cursor, stop, schema, stats, counts, at_floor=stop - cursor <= min_ms
                )
            except UnreadablePoint:
                batch = self.read_around_holes(entry, cursor, stop, schema, stats, counts)
            except WindowTooLarge as exc:
                if stop - cursor <= min_ms:
                    raise WindowTooLarge(
                        f"{entry.key}: even a {min_ms // 1000} s window is refused ({exc}); "
                        "lower the window floor (min_s) or raise the server's query limit",
                        url=exc.url,
                        status=exc.status,
                    ) from exc
                size = _blocks((stop - cursor) // 2, min_ms)
                cap = size
                stats.splits += 1
                log.info(
                    "%s: window of %d s refused, splitting to %d s",
                    entry.key,
                    (stop - cursor) // 1000,
                    size // 1000,
                )
                continue
            yield batch
            size = _blocks(
                next_window_ms(stop - cursor, batch.points, pol.target_points, min_ms, cap), min_ms
            )
            cursor = stop

    # -- unreadable points ----------------------------------------------------------------
    def read_around_holes(
        self,
        entry: CatalogEntry,
        start_ms: int,
        end_ms: int,
        schema: SeriesSchema,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
    ) -> SeriesBatch:
        """``[start_ms, end_ms)`` without the points the server cannot serialise.

        The window is halved (on whole minutes) until each unreadable part is at most
        :data:`HOLE_MS` long; there each series is asked alone (found with a ``count``
        query, which KairosDB can answer: a count is a long), and the series that still
        fail are holes: recorded in ``counts.holes`` with the server's message and the
        source's count of their points. Everything else is returned as one batch.
        """
        counts = counts if counts is not None else QueryCounts()
        pieces: list[SeriesBatch] = []
        self._around(entry, start_ms, end_ms, schema, stats, counts, pieces)
        merged: dict[tuple[str, ...], Series] = {}
        keys = schema.tag_keys
        for piece in pieces:  # in time order
            for s in piece.series:
                k = (s.name, *(s.tags.get(t, "") for t in keys))
                have = merged.get(k)
                if have is None:
                    merged[k] = Series(s.name, s.tags, list(s.points))
                else:
                    have.points = [*have.points, *s.points]
        batch = SeriesBatch(start_ms, end_ms)
        batch.series = sorted(merged.values(), key=lambda s: tuple(s.tags.get(t, "") for t in keys))
        return batch

    def _around(
        self,
        entry: CatalogEntry,
        a: int,
        b: int,
        schema: SeriesSchema,
        stats: RequestStats | None,
        counts: QueryCounts,
        pieces: list[SeriesBatch],
    ) -> None:
        if b - a > HOLE_MS:
            mid = a + (b - a) // 2 // HOLE_MS * HOLE_MS
            if mid <= a:
                mid = a + (b - a) // 2
            for lo, hi in ((a, mid), (mid, b)):
                try:
                    pieces.append(self.query(entry, lo, hi, schema, stats, counts, at_floor=True))
                except UnreadablePoint:
                    if stats is not None:
                        stats.splits += 1
                    self._around(entry, lo, hi, schema, stats, counts, pieces)
            return
        for tags, n in self.count_groups(entry, a, b, stats, schema.tag_keys):
            try:
                pieces.append(
                    self.query(entry, a, b, schema, stats, counts, series=tags, at_floor=True)
                )
            except UnreadablePoint as exc:
                message = str(exc).split(": the server cannot serialise a stored point: ", 1)[-1]
                counts.holes.append(
                    {
                        "series": tags,
                        "start": from_ms(a, self.tz).isoformat(),
                        "end": from_ms(b, self.tz).isoformat(),
                        "start_ms": a,
                        "end_ms": b,
                        "message": message.split(" | HTTP ")[0],
                        "points": n,
                    }
                )
                log.warning(
                    "%s: series %s unreadable in [%s, %s): %s; recorded as a hole",
                    entry.key,
                    tags,
                    from_ms(a, self.tz).isoformat(),
                    from_ms(b, self.tz).isoformat(),
                    message,
                )

    # -- counts ----------------------------------------------------------------------------
    def count_groups(
        self,
        entry: CatalogEntry,
        start_ms: int,
        end_ms: int,
        stats: RequestStats | None = None,
        group_keys: tuple[str, ...] | None = None,
    ) -> list[tuple[dict[str, str], int]]:
        """The source's count of the points in ``[start_ms, end_ms)``, per tag group.

        KairosDB's ``count`` aggregator with one sampling range the window's length
        (kairosdb v1.2.2 ``core/aggregator/RangeAggregator.java``: ranges start at the
        query's start; ``CountAggregator.java``: one long per range with points), so one
        number per group comes back and no data point is sent. Without ``group_keys`` all
        series form one group. A window refused as too large is halved and summed.
        """
        body = self._body(entry, start_ms, end_ms, group_keys)
        body["metrics"][0]["aggregators"] = [
            {"name": "count", "sampling": {"value": end_ms - start_ms, "unit": "milliseconds"}}
        ]
        path = self.api_path("datapoints/query", stats)
        try:
            doc = _rate_limited(
                self._http.post_json,
                path,
                body,
                stats=stats,
                too_large=self._too_large,
                timeout_is_too_large=end_ms - start_ms > self.windows.min_s * 1000,
            )
        except WindowTooLarge:
            if end_ms - start_ms <= self.windows.min_s * 1000:
                raise
            mid = start_ms + _blocks((end_ms - start_ms) // 2, 1000)
            if stats is not None:
                stats.splits += 1
            total: dict[tuple[tuple[str, str], ...], int] = {}
            for lo, hi in ((start_ms, mid), (mid, end_ms)):
                for tags, n in self.count_groups(entry, lo, hi, stats, group_keys):
                    k = tuple(sorted(tags.items()))
                    total[k] = total.get(k, 0) + n
            return [(dict(k), n) for k, n in sorted(total.items())]
        out: list[tuple[dict[str, str], int]] = []
        url = self._http.url(path)
        for result in _results(doc, url):
            values = result.get("values") or []
            n = 0
            for p in values:
                if not (isinstance(p, list) and len(p) == 2 and type(p[1]) is int):
                    raise SourceError(
                        f"{entry.key}: a count answer is not [timestamp, integer]: {p!r}", url=url
                    )
                n += p[1]
            if n:
                out.append((_group_tags(result) if group_keys is not None else {}, n))
        return out

    def count_day(
        self, entry: CatalogEntry, window: Window, stats: RequestStats | None = None
    ) -> SourceCount:
        """The source's own count of ``entry`` in ``window`` (see :meth:`count_groups`)."""
        if self.options.for_plugin(entry.plugin).job_table:
            jobs = self.fetch_jobs(entry.metric, window, stats)
            return SourceCount(
                len(jobs), "Examon jobs query (the jobs service has no count: the records)"
            )
        n = sum(c for _, c in self.count_groups(entry, window.start_ms, window.end_ms, stats))
        return SourceCount(
            n,
            f"KairosDB count aggregator, one sampling range of {window.end_ms - window.start_ms}"
            " ms from start_absolute, no group_by",
        )

    def count_day_many(
        self,
        entries: Sequence[CatalogEntry],
        window: Window,
        stats: RequestStats | None = None,
        per_request: int = 64,
        errors: dict[str, DxtError] | None = None,
    ) -> dict[str, SourceCount]:
        """:meth:`count_day` of many metrics, ``per_request`` of them in one query.

        A KairosDB query holds a list of metric queries and answers one ``queries[i]``
        each (``MetricsResource.runQuery``), so reconciling a catalog day takes a few
        requests, not one per metric. A batch refused as too large (KairosDB's
        ``query_limit`` counts every point read, counted or not) is asked one metric at a
        time (:meth:`count_day` splits the window further). Job tables are asked apart.

        With ``errors``, a batch the server answers with an error (one metric it cannot
        answer fails the whole query) is halved until the failing metrics stand alone; each
        one's error goes into ``errors`` instead of failing the others. An error without an
        HTTP answer (the server is unreachable) is raised as it is.
        """
        out: dict[str, SourceCount] = {}
        metrics = [e for e in entries if not self.options.for_plugin(e.plugin).job_table]
        for e in entries:
            if self.options.for_plugin(e.plugin).job_table:
                try:
                    out[e.key] = self.count_day(e, window, stats)
                except DxtError as exc:
                    if errors is None:
                        raise
                    errors[e.key] = exc
        length = window.end_ms - window.start_ms
        method = (
            f"KairosDB count aggregator, one sampling range of {length} ms from "
            "start_absolute, no group_by"
        )

        def ask(batch: Sequence[CatalogEntry]) -> None:
            body = self._body(batch[0], window.start_ms, window.end_ms, None)
            body["metrics"] = [
                {
                    "name": e.metric,
                    "tags": self._tag_filter(e),
                    "aggregators": [
                        {"name": "count", "sampling": {"value": length, "unit": "milliseconds"}}
                    ],
                }
                for e in batch
            ]
            path = self.api_path("datapoints/query", stats)
            try:
                doc = _rate_limited(
                    self._http.post_json,
                    path,
                    body,
                    stats=stats,
                    too_large=self._too_large,
                    timeout_is_too_large=True,
                )
                queries = doc["queries"] if isinstance(doc, dict) else None
                if not isinstance(queries, list) or len(queries) != len(batch):
                    raise SourceError(
                        f"a count of {len(batch)} metrics answered "
                        f"{len(queries) if isinstance(queries, list) else 'no'} queries",
                        url=self._http.url(path),
                    )
            except WindowTooLarge:
                for e in batch:
                    out[e.key] = self.count_day(e, window, stats)
                return
            except SourceError as exc:
                if errors is None or exc.status is None:
                    raise
                if len(batch) == 1:
                    errors[batch[0].key] = exc
                    return
                half = len(batch) // 2
                ask(batch[:half])
                ask(batch[half:])
                return
            for e, q in zip(batch, queries, strict=True):
                n = 0
                for result in _results({"queries": [q]}, self._http.url(path)):
                    for p in result.get("values") or []:
                        if not (isinstance(p, list) and len(p) == 2 and type(p[1]) is int):
                            raise SourceError(
                                f"{e.key}: a count answer is not [timestamp, integer]: {p!r}",
                                url=self._http.url(path),
                            )
                        n += p[1]
                out[e.key] = SourceCount(n, method)

        for i in range(0, len(metrics), per_request):
            ask(metrics[i : i + per_request])
        return out

    # -- job tables ------------------------------------------------------------------------
    def fetch_jobs(
        self,
        table: str,
        window: Window,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
    ) -> list[Record]:
        """Job records of ``table`` whose start time falls in ``window`` (half-open).

        Asked as examon-client 0.4 asks (``jobsclient.py`` ``query_jobs``): the serialized
        ``Query`` (``tstart``, ``tstop`` in UTC epoch ms, ``metrics: [table]``, ...), as a JSON
        string for the ``v1`` handler, as the object itself for ``v2``. The Examon server
        selects on ``(start_time, end_time)`` tuples with both ends inclusive
        (``web/examon-server/server.py`` ``query_builder``), so a job of zero length starting
        at the next midnight comes back too: it is dropped here (and counted), to be
        archived with the next day, so each job lands in exactly one day.
        """
        if self._jobs_http is None:
            with self._lock:  # threads may share a source (the CLI's units)
                if self._jobs_http is None:
                    # the same connection: its credentials (also those in the URL) go along
                    jobs_url = self.conn.jobs_url or self.conn.default_jobs_url()
                    self._jobs_http = self._http.sibling(jobs_url)
        api = self.conn.jobs_api
        path = f"api/{api}/examon/jobs/query"
        url = self._jobs_http.url(path)
        query = {
            "tstart": window.start_ms,
            "tstop": window.end_ms,
            "metrics": [table],
            "tags": None,
            "groupby": [{"name": "tag", "tags": []}],  # every column, as SELECT('*') sends
            "aggrby": None,
            "limit": None,
            "time_zone": self.conn.time_zone,
        }
        body: Any = json.dumps(query) if api == "v1" else query
        try:
            doc = _rate_limited(self._jobs_http.post_json, path, body, stats=stats)
        except (QueryRejected, SourceUnavailable) as exc:
            if exc.status in (404, 405, 500):
                other = "v2" if api == "v1" else "v1"
                raise QueryRejected(
                    f"the Examon jobs service refused the {api} query of {table!r} ({exc}); "
                    f"if it runs the other handler, set jobs_api={other} (CLI --jobs-api "
                    f'{other}, connection extra "jobs_api": "{other}")',
                    url=url,
                    status=exc.status,
                ) from exc
            raise
        if isinstance(doc, str):  # v1: jsonify(df.to_json(...)), a JSON string of the list
            try:
                doc = orjson.loads(doc)
            except orjson.JSONDecodeError as exc:
                raise SourceError(f"jobs answer is not a JSON list ({exc})", url=url) from exc
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise SourceError("jobs answer is not a list of job records", url=url)
        kept: list[Record] = []
        for record in doc:
            start = _job_start_ms(record, url)
            if start is None or window.start_ms <= start < window.end_ms:
                kept.append(record)
        if len(kept) < len(doc):
            log.info(
                "%s: dropped %d jobs starting outside [%s, %s)",
                table,
                len(doc) - len(kept),
                window.start.isoformat(),
                window.end.isoformat(),
            )
            if counts is not None:
                counts.dropped_outside_window += len(doc) - len(kept)
        return kept

    def day_tz(self) -> dt.tzinfo:
        return self.tz


#: The schema of the tag-key cache kept beside a metric's days (``.tag_keys.json``).
TAG_CACHE_SCHEMA = "dxt-archive/examon-tag-keys/1"
TAG_CACHE_DIR = ".dxt-tag-keys"


def _read_tag_cache(path: Path) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != TAG_CACHE_SCHEMA:
        return None
    keys = doc.get("keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return doc


def _rate_limited(call: Callable[..., _T], *args: Any, **kw: Any) -> _T:
    """``call(*args, **kw)``; a 429 that outlasted the client's retries is :class:`RateLimited`."""
    try:
        return call(*args, **kw)
    except SourceUnavailable as exc:
        if exc.status == 429 and not isinstance(exc, RateLimited):
            raise RateLimited(
                f"the server (or a proxy in front of it) limits the request rate and kept "
                f"refusing ({exc}); run fewer workers at once or retry later",
                url=exc.url,
                status=exc.status,
            ) from exc
        raise


def _job_start_ms(record: Record, url: str) -> int | None:
    value = record.get("start_time")
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)  # pandas' default epoch ms
    try:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise SourceError(
            f"job {record.get('job_id')!r}: start_time {value!r} is not an ISO time", url=url
        ) from exc
    if when.tzinfo is None:  # Cassandra timestamps are UTC
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1000)


def _blocks(size_ms: int, block_ms: int) -> int:
    """``size_ms`` rounded down to a whole number of blocks, at least one."""
    return max(block_ms, size_ms // block_ms * block_ms)


_VALUES_KEY = b'"values":['


def _loads_answer(raw: bytes, url: str, where: str = "") -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        pos = exc.pos
        near = raw[max(0, pos - 60) : pos + 20] if pos else raw[:200]
        raise SourceError(
            f"{where + ': ' if where else ''}the answer is not valid JSON ({exc}) near "
            f"{near!r}; nothing of it is archived",
            url=url,
        ) from exc


# One [timestamp, value] pair of a numeric series, as strict JSON (RFC 8259 numbers).
# Possessive quantifiers: a number can be read one way only, so nothing backtracks.
_NUMBER = rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?[0-9]++)?+"
_PAIR = rb"\[(?:0|[1-9][0-9]*+)," + _NUMBER + rb"\]"
_PAIRS = re.compile(rb"(?:" + _PAIR + rb",)*+")
_ALL_PAIRS = re.compile(rb"(?:" + _PAIR + rb",)*+" + _PAIR)


def _valid_numbers(inner: bytes) -> bool:
    """Whether every token of a numeric ``values`` text is a JSON number.

    :meth:`RawPoints.from_json` checks the alphabet and the shape (``[t,v]`` pairs); this
    checks the numbers themselves, which the writers copy as they are (``[ts,]`` or
    ``[ts,1-2e]`` fail here), with one regular expression over the text: no Python object
    is made per point.
    """
    return _ALL_PAIRS.fullmatch(inner) is not None


def _bad_pair(inner: bytes) -> bytes:
    """The first ``[t,v]`` of a ``values`` text that is not two JSON numbers."""
    at = _PAIRS.match(inner)
    start = at.end() if at else 0
    end = inner.find(b"]", start)
    return inner[start : end + 1 if end >= 0 else start + 40]


def _checked_points(values: Any, url: str, where: str) -> list[Any]:
    """A decoded ``values`` list, checked: each point ``[int ms, number or string]``."""
    if values is None:
        return []
    if not isinstance(values, list):
        raise SourceError(f"{where}: 'values' is not a list: {str(values)[:100]!r}", url=url)
    for p in values:
        if (
            not isinstance(p, list)
            or len(p) != 2
            or type(p[0]) is not int
            or isinstance(p[1], bool)
            or not isinstance(p[1], int | float | str)
        ):
            raise SourceError(
                f"{where}: a point is not [timestamp, number or string]: "
                f"{orjson.dumps(p)[:100].decode()!r}; nothing of the window is archived",
                url=url,
            )
    return values


def _inside(points: Sequence[Any], start_ms: int, end_ms: int) -> tuple[Sequence[Any], int]:
    """The points in ``[start_ms, end_ms)`` and how many were outside.

    Every timestamp is looked at, not only the first and the last: a point of another day
    in the middle of a series (a server's or a proxy's bug) is dropped too. For points kept
    as the server's text the test is ``min``/``max`` over the timestamps' digit strings
    (one width, so they order as numbers), a C loop.
    """
    if isinstance(points, RawPoints):
        lo, hi = str(start_ms).encode(), str(end_ms).encode()
        ts = points.ts_tokens
        if len(lo) == len(hi) == points.width and lo <= min(ts) and max(ts) < hi:
            return points, 0
        points = list(points)
    if not points:
        return points, 0
    times = [p[0] for p in points]
    if start_ms <= min(times) and max(times) < end_ms:
        return points, 0
    kept = [p for p in points if start_ms <= p[0] < end_ms]
    return kept, len(points) - len(kept)


def _decode_keeping_values(raw: bytes, url: str, where: str = "") -> tuple[Any, list[bytes] | None]:
    """Decode a query answer, keeping each result's ``values`` array as its JSON text.

    Returns the document with every ``values`` emptied and the arrays' inner texts in
    document order. Only answers whose arrays hold no JSON string take this path (a ``]]``
    inside a string cannot then be mistaken for an array's end); others, and anything
    unexpected, are decoded whole and returned with ``None``.
    """
    pieces: list[bytes] = []
    arrays: list[bytes] = []
    pos = 0
    while (i := raw.find(_VALUES_KEY, pos)) >= 0:
        start = i + len(_VALUES_KEY)
        if raw[start : start + 1] == b"]":
            end = start
        else:
            end = raw.find(b"]]", start)
            if end < 0:
                return _loads_answer(raw, url, where), None
            end += 1
        inner = raw[start:end]
        if b'"' in inner:
            return _loads_answer(raw, url, where), None
        pieces.append(raw[pos:start])
        arrays.append(inner)
        pos = end
    if not arrays:
        return _loads_answer(raw, url, where), None
    pieces.append(raw[pos:])
    try:
        return orjson.loads(b"".join(pieces)), arrays
    except orjson.JSONDecodeError:
        return _loads_answer(raw, url, where), None


def _results(doc: Any, url: str) -> list[dict[str, Any]]:
    try:
        queries = doc["queries"]
        results = queries[0]["results"]
    except (KeyError, IndexError, TypeError) as exc:
        raise SourceError(
            "unexpected KairosDB answer: no queries[0].results; is this a KairosDB URL?", url=url
        ) from exc
    if not isinstance(results, list):
        raise SourceError("unexpected KairosDB answer: results is not a list", url=url)
    return results


def _group_tags(result: dict[str, Any]) -> dict[str, str]:
    for g in result.get("group_by") or ():
        if isinstance(g, dict) and g.get("name") == "tag" and isinstance(g.get("group"), dict):
            return {str(k): str(v) for k, v in g["group"].items()}
    tags = result.get("tags") or {}
    # Without a tag group, a tag with several values is joined so no value is lost.
    return {
        str(k): "|".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in tags.items()
    }
