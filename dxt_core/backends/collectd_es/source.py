"""collectd metrics stored in Elasticsearch or OpenSearch (NERSC Cori's burst buffer nodes,
pytokio style).

The families pytokio archived, queried over a half-open window ``[start, end)``:

* ``disk``: ``plugin:disk``, ``plugin_instance:nvme*``, ``collectd_type`` disk_octets/disk_ops
* ``cpu``: ``plugin:cpu``, ``type_instance`` idle/user/system
* ``memory``: ``plugin:memory``

Bulk export reads every matching document once, in parallel slices (threads). **A slice is
a part of the time window** (``[start, end)`` cut into equal ``@timestamp`` ranges), not an
Elasticsearch ``slice``: Elasticsearch assigns its slices to shards first (whole shards per
slice when there are at least as many shards as slices; only within a shard by a field's
hash otherwise, ``SliceBuilder.java``), so which documents an Elasticsearch slice holds
depends on the shards the search context resolved. A context reopened after expiry may
resolve other shards (a new daily index, one deleted by retention) and the same slice id
would then cover other documents. A time range covers the same documents in every context.

How a slice pages, by server (:class:`~dxt_core.backends.collectd_es.connection.ServerInfo`):

* ``pit``: a point in time (PIT) and ``search_after``, sorted on ``@timestamp`` then
  ``_shard_doc`` (Elasticsearch >= 7.12, OpenSearch >= 3.3);
* ``pit-keyset``: a PIT without a tiebreaker (OpenSearch 2.4 to 3.2): each page asks again
  for ``@timestamp >= last timestamp emitted`` and drops the documents of that timestamp
  already emitted (their ``_id`` s are remembered); more than a page of documents at one
  millisecond is an error that says to raise the page size;
* ``scroll``: a scroll sorted on ``@timestamp`` (older servers, or ``use_pit=False``).

Every search asks for ``allow_partial_search_results=false`` and every page's ``_shards`` is
checked (``failed > 0`` or ``successful + skipped < total`` is a partial page, as
elasticsearch-py's ``helpers.scan`` raises ``ScanError`` for): a partial PIT page is asked
again (the same request returns the same page), a partial scroll page restarts the slice
(below), and what persists fails the export. The most recent PIT and scroll ids returned
are the ones used (and closed).

When a context expires mid-export, the slice opens a new one, restarts at its last
timestamp and skips the documents it already emitted at that timestamp: nothing is read
twice or missed, even if the server merged segments in between (``_shard_doc`` values
would not survive that). Hits outside the slice's range (a server or proxy answering more
than was asked) are dropped and counted (``outside_window``).

Pages are handed to the caller one at a time, in a fixed order (slice 0 page 1, slice 1
page 1, ..., slice 0 page 2, ...), each slice re-chunked to exactly ``page_size`` hits: the
output order does not depend on thread timing or on resumed contexts. Memory is bounded by
``slices x 2`` pages in flight.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import itertools
import logging
import queue
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dxt_core.backends.collectd_es.columnar_hits import (
    ColumnarHits,
    columnar_available,
    decode_search_response,
)
from dxt_core.backends.collectd_es.connection import (
    DEFAULT_HOST_PREFIX,
    DEFAULT_INDEX,
    ENV_PASSWORD,
    ENV_USER,
    CollectdEsConnection,
    ContextExpired,
    EsClient,
    ServerInfo,
    connection_from_fields,
    endpoint_missing,
    index_path,
    loads,
)
from dxt_core.budget import release_answers
from dxt_core.errors import ConfigError, SourceError, SourceUnavailable
from dxt_core.http import RetryPolicy
from dxt_core.reconcile import SourceCount

log = logging.getLogger("dxt_core.backends.collectd_es.source")

FAMILIES: tuple[str, ...] = ("disk", "cpu", "memory")

__all__ = [
    "DEFAULT_HOST_PREFIX",
    "DEFAULT_INDEX",
    "ENV_PASSWORD",
    "ENV_USER",
    "FAMILIES",
    "CollectdEsConnection",
    "CollectdEsSource",
    "ExportStats",
    "ServerInfo",
    "connection_from_fields",
    "family_query",
    "iter_saved_pages",
    "load_saved_pages",
    "select_saved_hits",
    "time_slices",
]

#: ``_source`` fields the HDF5 conversion reads (the JSON Lines output keeps everything).
SOURCE_FIELDS: tuple[str, ...] = (
    "@timestamp",
    "hostname",
    "plugin",
    "plugin_instance",
    "collectd_type",
    "type_instance",
    "value",
    "read",
    "write",
)

Hit = dict[str, Any]
Page = list[Hit]


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ConfigError(f"unknown collectd family {family!r}: choose from {', '.join(FAMILIES)}")
    return family


def to_ms(t: dt.datetime) -> int:
    if t.tzinfo is None:
        raise ConfigError(f"naive datetime {t.isoformat()}: give a time zone (UTC if unsure)")
    return round(t.timestamp() * 1000)


def family_filters(family: str) -> list[dict[str, Any]]:
    """The query clauses selecting one family (pytokio's queries)."""
    check_family(family)
    if family == "disk":
        return [
            {"term": {"plugin": "disk"}},
            {"prefix": {"plugin_instance": "nvme"}},
            {"regexp": {"collectd_type": "disk_(octets|ops)"}},
        ]
    if family == "cpu":
        return [{"term": {"plugin": "cpu"}}, {"regexp": {"type_instance": "(idle|user|system)"}}]
    return [{"term": {"plugin": "memory"}}]


def family_query_ms(
    family: str, lo_ms: int, hi_ms: int, host_prefix: str = DEFAULT_HOST_PREFIX
) -> dict[str, Any]:
    """The query of one family over ``[lo_ms, hi_ms)`` (epoch milliseconds)."""
    must: list[dict[str, Any]] = [
        {"range": {"@timestamp": {"gte": lo_ms, "lt": hi_ms, "format": "epoch_millis"}}},
    ]
    if host_prefix:
        must.append({"prefix": {"hostname": host_prefix}})
    must.extend(family_filters(family))
    return {"constant_score": {"filter": {"bool": {"must": must}}}}


def family_query(
    family: str,
    start: dt.datetime,
    end: dt.datetime,
    host_prefix: str = DEFAULT_HOST_PREFIX,
    since_ms: int | None = None,
) -> dict[str, Any]:
    """The query of one family over ``[start, end)``; ``since_ms`` narrows the start (resume)."""
    lo = to_ms(start) if since_ms is None else max(to_ms(start), since_ms)
    return family_query_ms(family, lo, to_ms(end), host_prefix)


def time_slices(lo_ms: int, hi_ms: int, n: int, align_ms: int = 1) -> list[tuple[int, int]]:
    """``[lo_ms, hi_ms)`` cut into at most ``n`` consecutive ranges of about equal length,
    with inner bounds on multiples of ``align_ms`` after ``lo_ms`` (an HDF5 time step: a
    cell's documents then stay in one slice, so "the last document wins" means the latest).
    Fewer ranges when the window is too short to cut."""
    if n < 1 or hi_ms <= lo_ms:
        raise ConfigError(f"cannot cut [{lo_ms}, {hi_ms}) into {n} slices")
    align = max(1, align_ms)
    bounds = {lo_ms, hi_ms}
    for k in range(1, n):
        b = lo_ms + (hi_ms - lo_ms) * k // n
        b = lo_ms + (b - lo_ms) // align * align
        if lo_ms < b < hi_ms:
            bounds.add(b)
    s = sorted(bounds)
    return list(itertools.pairwise(s))


def family_of(source: Mapping[str, Any]) -> str | None:
    """Which family a ``_source`` belongs to (the query's filters, applied in Python).

    Used on saved hits (``--input``), which may hold documents of any kind.
    """
    plugin = source.get("plugin")
    if plugin == "disk":
        inst = source.get("plugin_instance")
        ok = isinstance(inst, str) and inst.startswith("nvme")
        if ok and source.get("collectd_type") in ("disk_octets", "disk_ops"):
            return "disk"
        return None
    if plugin == "cpu":
        return "cpu" if source.get("type_instance") in ("idle", "user", "system") else None
    if plugin == "memory":
        return "memory"
    return None


def parse_timestamp_ms(value: Any) -> int:
    """``@timestamp`` as epoch milliseconds: ISO 8601 strings (``Z`` or offset) or numbers
    (epoch milliseconds, Elasticsearch's default for numeric dates)."""
    if isinstance(value, bool):
        raise ValueError(f"bad @timestamp {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        t = dt.datetime.fromisoformat(value)
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.UTC)
        return round(t.timestamp() * 1000)
    raise ValueError(f"bad @timestamp {value!r}")


# --------------------------------------------------------------------------- export


@dataclass
class ExportStats:
    """What one export did (merged into manifests and reports)."""

    mode: str = ""
    server: str = ""
    slices: int = 0
    pages: int = 0
    hits: int = 0
    requests: int = 0
    resumed: int = 0
    skipped_duplicates: int = 0
    #: hits the server sent from outside the range asked for (dropped)
    outside_window: int = 0
    #: partial pages (a shard missing) asked again
    partial_retries: int = 0
    #: seconds spent waiting for (and decoding) answers, summed over slices
    request_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "server": self.server,
            "slices": self.slices,
            "pages": self.pages,
            "hits": self.hits,
            "requests": self.requests,
            "resumed": self.resumed,
            "skipped_duplicates": self.skipped_duplicates,
            "outside_window": self.outside_window,
            "partial_retries": self.partial_retries,
            "request_s": round(self.request_s, 3),
        }


class _Stop(Exception):
    """The consumer went away; a slice worker ends quietly."""


class _PartialPage(Exception):
    """A page that misses some shard's hits."""


class _PitUnsupported(Exception):
    """The server has no such endpoint."""


class _Pit:
    """A point in time; ``id`` is the most recent id the server returned for it."""

    def __init__(self, api: str, pit_id: str) -> None:
        self.api = api
        self.id = pit_id
        self._lock = threading.Lock()

    def update(self, new_id: Any) -> None:
        if isinstance(new_id, str) and new_id:
            with self._lock:
                self.id = new_id


def shard_problem(r: Mapping[str, Any]) -> str | None:
    """What is partial about a search answer, or None when every shard answered."""
    if r.get("timed_out") is True:
        return "the search timed out on some shards (timed_out: true)"
    shards = r.get("_shards")
    if not isinstance(shards, Mapping):
        return None  # servers that omit it (none we know of) cannot be checked
    try:
        total = int(shards.get("total") or 0)
        ok = int(shards.get("successful") or 0)
        skipped = int(shards.get("skipped") or 0)
        failed = int(shards.get("failed") or 0)
    except (TypeError, ValueError):
        return f"unreadable _shards {dict(shards)!r}"
    if failed > 0 or ok + skipped < total:
        reason = ""
        failures = shards.get("failures")
        if isinstance(failures, list) and failures and isinstance(failures[0], Mapping):
            cause = failures[0].get("reason")
            if isinstance(cause, Mapping):
                reason = f" (first failure: {cause.get('type')}: {cause.get('reason')})"
        return f"only {ok} (+{skipped} skipped) of {total} shards answered, {failed} failed{reason}"
    return None


class CollectdEsSource:
    """Reads collectd families from Elasticsearch 7.x/8.x/9.x or OpenSearch 1.x-3.x."""

    def __init__(
        self,
        conn: CollectdEsConnection,
        *,
        page_size: int = 5000,
        slices: int = 2,
        keep_alive: str = "2m",
        max_retries: int = 3,
        max_resumes: int = 5,
        use_pit: bool = True,
        client: EsClient | None = None,
    ) -> None:
        if page_size < 1 or page_size > 10_000:
            raise ConfigError(
                f"page_size {page_size} is outside 1..10000 (index.max_result_window)"
            )
        if slices < 1:
            raise ConfigError(f"slices must be >= 1, not {slices}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, not {max_retries}")
        self.conn = conn
        self.page_size = page_size
        self.slices = slices
        self.keep_alive = keep_alive
        self.max_resumes = max_resumes
        self.use_pit = use_pit
        self.retry = RetryPolicy(attempts=max_retries + 1, backoff_s=0.5, max_backoff_s=30.0)
        self.client = client if client is not None else EsClient(conn, retry=self.retry)
        self._server: ServerInfo | None = None
        self._open_lock = threading.Lock()
        self._open_pits: list[_Pit] = []
        self._open_scrolls: set[str] = set()

    def __enter__(self) -> CollectdEsSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close_contexts()
        with contextlib.suppress(Exception):
            self.client.close()

    def server(self) -> ServerInfo:
        """The server answering (asked once, with ``GET /``)."""
        with self._open_lock:
            known = self._server
        if known is None:
            known = self.client.server_info()
            log.info("%s is %s", self.conn.safe_url, known)
            with self._open_lock:
                self._server = known
        return known

    # -- counts -------------------------------------------------------------------------

    def count(self, family: str, start: dt.datetime, end: dt.datetime) -> SourceCount:
        """The server's own count of the export's documents in ``[start, end)``.

        ``POST /<index>/_count`` with the very query the export pages through (the count
        API takes a ``query`` and nothing else of a search: elastic/elasticsearch
        ``RestCountAction.java``; OpenSearch the same), so no document is sent. An answer
        with a failed shard is an error, never a smaller count.

        Raises:
            SourceUnavailable: some shards did not answer.
        """
        path = f"/{index_path(self.conn.index)}/_count"
        body = {"query": family_query(family, start, end, self.conn.host_prefix)}
        r = self.client.json("POST", path, body=body, what=f"counting {family} documents")
        problem = shard_problem(r) if isinstance(r, Mapping) else "the answer is not an object"
        n = r.get("count") if isinstance(r, Mapping) else None
        if problem is not None or not isinstance(n, int):
            raise SourceUnavailable(
                f"counting {family} in [{start.isoformat()}, {end.isoformat()}): "
                f"{problem or 'no count in the answer'}; rerun later",
                url=self.client.url(path),
            )
        product = self.server().product
        name = {"opensearch": "OpenSearch"}.get(product, "Elasticsearch")
        return SourceCount(n, f"{name} _count with the export's query (_shards checked)")

    # -- contexts -----------------------------------------------------------------------

    def _open_pit(self, api: str) -> _Pit:
        index = index_path(self.conn.index)
        if api == "_pit":
            path, params = f"/{index}/_pit", {"keep_alive": self.keep_alive}
        else:  # OpenSearch: a partial PIT would silently miss a shard's documents
            path = f"/{index}/_search/point_in_time"
            params = {"keep_alive": self.keep_alive, "allow_partial_pit_creation": "false"}
        what = f"opening a point in time on {self.conn.index}"
        status, data, _ = self.client.request("POST", path, params=params, what=what)
        if not 200 <= status < 300:
            if endpoint_missing(status, data):
                raise _PitUnsupported(data[:300].decode("utf-8", "replace"))
            raise self.client.error(status, data, path, what)
        r = loads(data, self.client.url(path), what)
        pit_id = r.get("id") if api == "_pit" else r.get("pit_id")
        if not isinstance(pit_id, str) or not pit_id:
            raise SourceError(
                f"{what}: the answer holds no point in time id: {data[:200]!r}",
                url=self.client.url(path),
            )
        pit = _Pit(api, pit_id)
        with self._open_lock:
            self._open_pits.append(pit)
        problem = shard_problem(r)
        if problem is not None:
            self._forget_pit(pit)
            raise SourceUnavailable(
                f"{what}: {problem}; rerun when every shard is available",
                url=self.client.url(path),
            )
        return pit

    def _forget_pit(self, pit: _Pit) -> None:
        with self._open_lock:
            if not any(p is pit for p in self._open_pits):
                return
            self._open_pits = [p for p in self._open_pits if p is not pit]
        body: dict[str, Any]
        if pit.api == "_pit":
            path, body = "/_pit", {"id": pit.id}
        else:
            path, body = "/_search/point_in_time", {"pit_id": [pit.id]}
        try:
            self.client.request("DELETE", path, body=body, what="closing a point in time")
        except SourceError as exc:
            log.debug("closing a point in time failed: %s", exc)

    def _forget_scroll(self, scroll_id: str) -> None:
        with self._open_lock:
            if scroll_id not in self._open_scrolls:
                return
            self._open_scrolls.discard(scroll_id)
        try:
            self.client.request(
                "DELETE",
                "/_search/scroll",
                body={"scroll_id": [scroll_id]},
                what="clearing a scroll",
            )
        except SourceError as exc:
            log.debug("clearing a scroll failed: %s", exc)

    def _close_contexts(self) -> None:
        with self._open_lock:
            pits, scrolls = list(self._open_pits), list(self._open_scrolls)
        for p in pits:
            self._forget_pit(p)
        for s in scrolls:
            self._forget_scroll(s)

    @property
    def open_contexts(self) -> int:
        with self._open_lock:
            return len(self._open_pits) + len(self._open_scrolls)

    # -- export -------------------------------------------------------------------------

    def iter_pages(
        self,
        family: str,
        start: dt.datetime,
        end: dt.datetime,
        *,
        fields: Iterable[str] | None = None,
        stats: ExportStats | None = None,
        columnar: bool = False,
        align_s: int = 1,
    ) -> Iterator[Page]:
        """Every document of ``family`` in ``[start, end)``, page by page.

        ``fields`` restricts ``_source`` (None: the whole document). Hits carry ``_index``,
        ``_id``, ``_source`` and ``sort`` (``sort[0]`` is ``@timestamp`` in epoch ms).
        With ``columnar``, pages are :class:`ColumnarHits` where the response allows it
        (for the HDF5 conversion; they still read as lists of hit dicts). ``align_s``: the
        slices' inner bounds fall on multiples of it after ``start``.
        Contexts opened here are closed when the iterator ends or is closed.
        """
        check_family(family)
        lo, hi = to_ms(start), to_ms(end)
        if hi <= lo:
            raise ConfigError(f"empty window [{start.isoformat()}, {end.isoformat()})")
        stats = stats if stats is not None else ExportStats()
        server = self.server()
        api = server.pit_api if self.use_pit else None
        shared: _Pit | None = None
        if api is not None:
            try:
                shared = self._open_pit(api)
            except _PitUnsupported as exc:
                log.warning(
                    "%s has no point-in-time endpoint (%s); reading with scrolls", server, exc
                )
                api = None
        mode = "scroll" if api is None else ("pit" if server.shard_doc else "pit-keyset")
        windows = time_slices(lo, hi, self.slices, align_s * 1000)
        stats.mode, stats.server, stats.slices = mode, str(server), len(windows)
        src = list(fields) if fields is not None else None
        columnar = columnar and columnar_available()
        stop = threading.Event()
        queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=2) for _ in windows]
        done = object()

        def put(q: queue.Queue[Any], item: Any) -> None:
            while True:
                if stop.is_set():
                    raise _Stop
                try:
                    q.put(item, timeout=0.2)
                    return
                except queue.Full:
                    continue

        def worker(slice_id: int) -> None:
            q = queues[slice_id]
            reader = _SliceReader(
                self, family, windows[slice_id], slice_id, mode, shared, src, stats, columnar
            )
            try:
                buf: Page = []
                for hits in reader.hits(stop):
                    if isinstance(hits, ColumnarHits):
                        if buf:
                            put(q, buf)
                            buf = []
                        put(q, hits)
                        continue
                    buf.extend(hits)
                    while len(buf) >= self.page_size:
                        put(q, buf[: self.page_size])
                        buf = buf[self.page_size :]
                if buf:
                    put(q, buf)
                put(q, done)
            except _Stop:
                pass
            except BaseException as exc:
                with contextlib.suppress(_Stop):
                    put(q, exc)
            finally:
                reader.close()

        threads = [
            threading.Thread(target=worker, args=(i,), name=f"es-slice-{i}", daemon=True)
            for i in range(len(windows))
        ]
        try:
            release_answers()  # the slices' fetches may wait for the budget this thread holds
            for t in threads:
                t.start()
            active = list(range(len(windows)))
            while active:
                for i in list(active):
                    item = queues[i].get()
                    if item is done:
                        active.remove(i)
                        continue
                    if isinstance(item, SourceError | ConfigError):
                        raise item
                    if isinstance(item, BaseException):
                        raise SourceError(
                            f"reading {family} slice {i}: {type(item).__name__}: {item}",
                            url=self.conn.safe_url,
                        ) from item
                    stats.add(pages=1, hits=len(item))
                    yield item
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
            if shared is not None:
                self._forget_pit(shared)


class _SliceReader:
    """One slice: a time range read with a PIT (``pit``, ``pit-keyset``) or a scroll."""

    def __init__(
        self,
        source: CollectdEsSource,
        family: str,
        window: tuple[int, int],
        slice_id: int,
        mode: str,
        shared: _Pit | None,
        fields: list[str] | None,
        stats: ExportStats,
        columnar: bool,
    ) -> None:
        self.src = source
        self.client = source.client
        self.family = family
        self.lo, self.hi = window
        self.where = f"{family} slice {slice_id}"
        self.mode = mode
        self.pit = shared
        self.own_pit: _Pit | None = None
        self.scroll_id: str | None = None
        self.fields = fields
        self.stats = stats
        self.columnar = columnar
        self.size = source.page_size

    def close(self) -> None:
        if self.own_pit is not None:
            self.src._forget_pit(self.own_pit)
            self.own_pit = None
        if self.scroll_id is not None:
            self.src._forget_scroll(self.scroll_id)
            self.scroll_id = None

    def _query(self, since: int | None) -> dict[str, Any]:
        lo = self.lo if since is None else max(self.lo, since)
        return family_query_ms(self.family, lo, self.hi, self.src.conn.host_prefix)

    def hits(self, stop: threading.Event) -> Iterator[Sequence[Hit]]:
        """The slice's hits in ``@timestamp`` order, resuming expired contexts."""
        last_ts: int | None = None
        seen: set[str] = set()
        resumes = 0
        search_after: list[Any] | None = None
        query = self._query(None)
        while not stop.is_set():
            try:
                if self.mode == "scroll":
                    r = self._scroll_page(query)
                else:
                    if self.mode == "pit-keyset":
                        query = self._query(last_ts)
                    r = self._pit_page(query, search_after)
            except (ContextExpired, _PartialPage) as exc:
                resumes += 1
                if resumes > self.src.max_resumes:
                    raise SourceUnavailable(
                        f"{self.where}: search context lost {resumes} times (last: {exc}); "
                        f"raise the keep-alive (now {self.src.keep_alive}) or lower the page "
                        "size, or rerun when every shard is available",
                        url=self.src.conn.safe_url,
                    ) from exc
                self.stats.add(resumed=1)
                log.warning(
                    "%s: %s; resuming at @timestamp %s ms", self.where, exc, last_ts or self.lo
                )
                self._reopen()
                search_after = None
                query = self._query(last_ts)
                continue
            raw = _hits_of(r, self.where, self.client.url("/_search"))
            if not len(raw):
                return
            hits = self._checked(raw)
            fresh = _drop_seen(hits, last_ts, seen)
            if len(fresh) != len(hits):
                self.stats.add(skipped_duplicates=len(hits) - len(fresh))
            if len(fresh):
                ts, ids = _tail(fresh)
                if ts != last_ts:
                    last_ts = ts
                    seen = set()
                seen.update(ids)
                yield fresh
            if self.mode == "scroll":
                continue
            if len(raw) < self.size:
                return
            if self.mode == "pit":
                search_after = _last_sort(raw)
            elif not len(fresh) or _first_ts(raw) == _last_ts_of(raw):
                raise SourceError(
                    f"{self.where}: more than {self.size} documents share @timestamp "
                    f"{_last_ts_of(raw)} ms, which paging without a tiebreaker (this server "
                    "has no _shard_doc) cannot step over; raise the page size (up to 10000) "
                    "or read with scrolls (--no-pit)",
                    url=self.src.conn.safe_url,
                )

    def _reopen(self) -> None:
        if self.mode == "scroll":
            if self.scroll_id is not None:
                self.src._forget_scroll(self.scroll_id)
                self.scroll_id = None
            return
        if self.own_pit is not None:
            self.src._forget_pit(self.own_pit)
            self.own_pit = None
        assert self.pit is not None
        self.own_pit = self.pit = self.src._open_pit(self.pit.api)

    def _search(
        self, path: str, params: Mapping[str, str] | None, body: dict[str, Any], *, again: bool
    ) -> Mapping[str, Any]:
        """One search answer; a partial one is asked again (``again``) or raises
        :class:`_PartialPage`."""
        what = f"reading {self.where}"
        problem = ""
        attempts = self.src.retry.attempts if again else 1
        for attempt in range(1, attempts + 1):
            t0 = time.perf_counter()
            status, data, _ = self.client.request("POST", path, params=params, body=body, what=what)
            if not 200 <= status < 300:
                self.stats.add(requests=1, request_s=time.perf_counter() - t0)
                raise self.client.error(status, data, path, what)
            r = self._decode(data, path, what)
            self.stats.add(requests=1, request_s=time.perf_counter() - t0)
            problem = shard_problem(r) or ""
            if not problem:
                return r
            if not again:
                raise _PartialPage(problem)
            self.stats.add(partial_retries=1)
            if attempt < attempts:
                delay = self.src.retry.delay(attempt)
                log.warning("%s: %s; asking again in %.1f s", self.where, problem, delay)
                self.client.sleep(delay)
        raise SourceUnavailable(
            f"{what}: {problem}, {attempts} times; the cluster is missing shards: rerun when "
            "it is green (nothing partial was archived)",
            url=self.client.url(path),
        )

    def _decode(self, data: bytes, path: str, what: str) -> Mapping[str, Any]:
        if self.columnar:
            page = decode_search_response(data)
            if page is not None:
                return page
        r = loads(data, self.client.url(path), what)
        if not isinstance(r, dict):
            raise SourceError(f"{what}: the answer is not a JSON object", url=self.client.url(path))
        return r

    def _body(self, query: dict[str, Any], sort: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "sort": sort, "size": self.size}
        if self.fields is not None:
            body["_source"] = self.fields
        return body

    def _pit_page(self, query: dict[str, Any], search_after: list[Any] | None) -> Mapping[str, Any]:
        assert self.pit is not None
        sort = [{"@timestamp": "asc"}]
        if self.mode == "pit":
            sort.append({"_shard_doc": "asc"})
        body = self._body(query, sort)
        body["pit"] = {"id": self.pit.id, "keep_alive": self.src.keep_alive}
        body["track_total_hits"] = False
        if search_after is not None:
            body["search_after"] = search_after
        r = self._search("/_search", {"allow_partial_search_results": "false"}, body, again=True)
        self.pit.update(r.get("pit_id"))  # always page on with the most recent id
        return r

    def _scroll_page(self, query: dict[str, Any]) -> Mapping[str, Any]:
        if self.scroll_id is None:
            params = {"scroll": self.src.keep_alive, "allow_partial_search_results": "false"}
            body = self._body(query, [{"@timestamp": "asc"}])
            path = f"/{index_path(self.src.conn.index)}/_search"
            r = self._search(path, params, body, again=False)
        else:
            body = {"scroll": self.src.keep_alive, "scroll_id": self.scroll_id}
            r = self._search("/_search/scroll", None, body, again=False)
        new_id = r.get("_scroll_id")
        if isinstance(new_id, str) and new_id and new_id != self.scroll_id:
            with self.src._open_lock:
                if self.scroll_id is not None:
                    self.src._open_scrolls.discard(self.scroll_id)
                self.src._open_scrolls.add(new_id)
            self.scroll_id = new_id
        return r

    def _checked(self, hits: Sequence[Hit]) -> Sequence[Hit]:
        """The page's hits inside the slice's range; a malformed hit is an error naming it."""
        lo, hi = self.lo, self.hi
        if isinstance(hits, ColumnarHits):
            if hits.sort0 is not None and not hits.hits.field("_id").null_count:
                inside = (hits.sort0 >= lo) & (hits.sort0 < hi)
                if inside.all():
                    return hits
                first_out = hits.ids(0)[int(np.argmin(inside))]
                self._outside(len(hits) - int(inside.sum()), first_out)
                return hits.where(inside)
            hits = hits.dicts()  # the hit-by-hit check names what is missing
        keep: list[Hit] = []
        outside: list[Any] = []
        for j, h in enumerate(hits):
            ts = _checked_sort0(h, j, self.where, self.client.url("/_search"))
            if lo <= ts < hi:
                keep.append(h)
            else:
                outside.append(h.get("_id"))
        if outside:
            self._outside(len(outside), outside[0])
        return keep

    def _outside(self, n: int, first_id: Any) -> None:
        self.stats.add(outside_window=n)
        log.warning(
            "%s: the server sent %d document(s) outside [%s, %s) (first: _id %s); dropped",
            self.where,
            n,
            _iso_ms(self.lo),
            _iso_ms(self.hi),
            first_id,
        )


def _iso_ms(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _hits_of(r: Mapping[str, Any], where: str, url: str) -> Sequence[Hit]:
    outer = r.get("hits")
    hits = outer.get("hits") if isinstance(outer, Mapping) else None
    if not isinstance(hits, list | ColumnarHits):
        keys = ", ".join(sorted(map(str, r))) or "none"
        raise SourceError(
            f"reading {where}: the answer has no hits.hits list (keys: {keys}); is this an "
            "Elasticsearch-compatible server?",
            url=url,
        )
    return hits


def _checked_sort0(h: Any, j: int, where: str, url: str) -> int:
    """``sort[0]`` of hit ``j`` (epoch ms); a clear error for a malformed hit."""
    if not isinstance(h, dict):
        raise SourceError(
            f"reading {where}: hit {j} of a page is {type(h).__name__}, not an object", url=url
        )
    name = f"hit {j} of a page (_index {h.get('_index')}, _id {h.get('_id')})"
    if not isinstance(h.get("_id"), str):
        raise SourceError(f"reading {where}: {name} has no '_id'", url=url)
    if not isinstance(h.get("_source"), dict):
        raise SourceError(f"reading {where}: {name} has no '_source' object", url=url)
    srt = h.get("sort")
    if not isinstance(srt, list) or not srt:
        raise SourceError(
            f"reading {where}: {name} has no 'sort' values; a sorted search must return them "
            "(is this an Elasticsearch-compatible server?)",
            url=url,
        )
    ts = srt[0]
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise SourceError(
            f"reading {where}: {name} has sort[0] = {ts!r}, not @timestamp in epoch "
            "milliseconds (is @timestamp mapped as a date?)",
            url=url,
        )
    return ts


def _first_ts(hits: Sequence[Hit]) -> Any:
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        return int(hits.sort0[0])
    return hits[0]["sort"][0]


def _last_ts_of(hits: Sequence[Hit]) -> Any:
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        return int(hits.sort0[-1])
    return hits[-1]["sort"][0]


def _last_sort(hits: Sequence[Hit]) -> Any:
    """``sort`` of the last hit (PIT ``search_after``)."""
    if isinstance(hits, ColumnarHits):
        return hits.hits.field("sort")[-1].as_py()
    return hits[-1]["sort"]


def _tail(hits: Sequence[Hit]) -> tuple[Any, list[Any]]:
    """``sort[0]`` of the last hit, and the ``_id`` of every hit that shares it."""
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        last = hits.sort0[-1]
        same = hits.sort0 == last
        first = len(same) - int(np.argmin(same[::-1])) if not same.all() else 0
        return int(last), hits.ids(first)
    ts = hits[-1]["sort"][0]
    ids = []
    for h in reversed(hits):
        if h["sort"][0] != ts:
            break
        ids.append(h["_id"])
    return ts, ids


def _drop_seen(hits: Sequence[Hit], last_ts: int | None, seen: set[str]) -> Sequence[Hit]:
    """Hits minus those already emitted at the resume timestamp (only the first page after a
    resume, or every page of ``pit-keyset``, can hold any)."""
    if last_ts is None or not seen or not len(hits) or _first_ts(hits) != last_ts:
        return hits
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        at_last = np.flatnonzero(hits.sort0 == last_ts)
        ids = hits.hits.field("_id").take(at_last).to_pylist()
        drop = np.zeros(len(hits), dtype=bool)
        drop[at_last] = [i in seen for i in ids]
        return hits.where(~drop) if drop.any() else hits
    return [h for h in hits if not (h["sort"][0] == last_ts and h["_id"] in seen)]


# --------------------------------------------------------------------------- saved input


def load_saved_pages(path: str | Path) -> list[Page]:
    """pytokio's saved format, whole: a JSON list of pages, each a list of hits (or a search
    response with ``hits.hits``); ``.gz`` is decompressed. Errors name the file and page.

    :func:`iter_saved_pages` reads the same files one page at a time."""
    return list(iter_saved_pages(path))


def _whole_file_pages(p: Path) -> list[Page]:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read input file ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ConfigError(f"{p}: corrupt gzip ({exc}); re-save the input") from exc
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(
            f"{p}: not JSON ({exc}); expected pytokio's saved format, a list of pages of hits"
        ) from exc
    if not isinstance(doc, list):
        raise ConfigError(
            f"{p}: top level is {type(doc).__name__}, expected a list of pages (each a list "
            "of hits with _index, _id, _source)"
        )
    return [_checked_page(p, i, page) for i, page in enumerate(doc)]


def _checked_page(p: Path, i: int, page: Any) -> Page:
    if isinstance(page, dict):
        hits = page.get("hits", {}).get("hits") if isinstance(page.get("hits"), dict) else None
        if not isinstance(hits, list):
            raise ConfigError(f"{p}: page {i} is an object without hits.hits")
        page = hits
    if not isinstance(page, list):
        raise ConfigError(f"{p}: page {i} is {type(page).__name__}, expected a list of hits")
    for j, hit in enumerate(page):
        if not isinstance(hit, dict) or not isinstance(hit.get("_source"), dict):
            raise ConfigError(f"{p}: page {i}, hit {j} has no _source object")
    return page


#: where a page that is a list of hits may end: a ``]`` followed by the next page or by the
#: end of the top-level list. Such a ``]`` inside a page (an array of arrays) only costs a
#: failed parse: a prefix of a page is never valid JSON.
_PAGE_END = re.compile(rb"\](?=\s*(?:,\s*\[|\]))")
_SPACE = b" \t\r\n"
_CHUNK = 1 << 20


def iter_saved_pages(path: str | Path) -> Iterator[Page]:
    """The pages of a saved export, one at a time: memory holds one page, not the file.

    Pages that are lists of hits (pytokio's format) are streamed; a file whose pages are
    search responses (objects) is read whole. Errors name the file, page and hit."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read input file ({exc.strerror})") from exc
    with fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        stream: Any = gzip.GzipFile(fileobj=fh, mode="rb") if gz else fh
        buf = b""
        pos = 0
        eof = False

        def more() -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            try:
                chunk = stream.read(_CHUNK)
            except (OSError, EOFError) as exc:
                raise ConfigError(f"{p}: corrupt gzip ({exc}); re-save the input") from exc
            if not chunk:
                eof = True
                return False
            buf = buf[pos:] + chunk
            pos = 0
            return True

        def next_byte() -> int | None:
            """The next non-space byte (not consumed), or None at the end of the file."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _SPACE:
                    pos += 1
                if pos < len(buf):
                    return buf[pos]
                if not more():
                    return None

        if next_byte() != ord("["):
            yield from _whole_file_pages(p)  # not a list: the whole-file reader says why
            return
        pos += 1
        i = 0
        while True:
            c = next_byte()
            if c == ord("]") and i == 0:
                pos += 1
                break
            if c != ord("["):
                # pages that are objects (search responses): read the file whole
                yield from _whole_file_pages(p)[i:]
                return
            start, scan = pos, pos
            page: Any = None
            while page is None:
                for m in _PAGE_END.finditer(buf, scan):
                    try:
                        page = orjson.loads(buf[start : m.end()])
                    except orjson.JSONDecodeError:
                        continue
                    pos = m.end()
                    break
                if page is None:
                    # The page goes on in the next chunk. A ']' at the end of this buffer
                    # may not have shown what follows it yet: rescan from the last one.
                    last = buf.rfind(b"]", start)
                    if not more():
                        yield from _whole_file_pages(p)[i:]  # names what is wrong
                        return
                    # more() dropped the bytes before the page (pos == start): shift indexes
                    scan = last - start if last >= 0 else 0
                    start = 0
            yield _checked_page(p, i, page)
            i += 1
            c = next_byte()
            if c == ord(","):
                pos += 1
                continue
            if c == ord("]"):
                pos += 1
                break
            yield from _whole_file_pages(p)[i:]
            return
        if next_byte() is not None:
            raise ConfigError(
                f"{p}: not JSON (data after the list of pages); expected pytokio's saved "
                "format, a list of pages of hits"
            )


def page_timestamps_ms(sources: list[Mapping[str, Any]]) -> list[int]:
    """``@timestamp`` of each ``_source`` in epoch ms; vectorised for the usual
    ``YYYY-MM-DDTHH:MM:SS[.fff]Z`` strings, :func:`parse_timestamp_ms` otherwise.
    Raises ValueError naming the index of the first bad value."""
    import numpy as np

    raw = [s.get("@timestamp") for s in sources]
    if all(type(v) is str and v.endswith("Z") for v in raw):
        try:
            stamps = np.array([str(v)[:-1] for v in raw], dtype="datetime64[ms]")
            return [int(x) for x in stamps.astype(np.int64)]
        except ValueError:
            pass  # fall through to the per-value parser, which names the bad one
    out: list[int] = []
    for i, v in enumerate(raw):
        try:
            out.append(parse_timestamp_ms(v))
        except ValueError as exc:
            raise _BadTimestamp(i, str(exc)) from exc
    return out


class _BadTimestamp(ValueError):
    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index


def select_saved_hits(
    pages: Iterable[Page],
    family: str,
    start: dt.datetime,
    end: dt.datetime,
    host_prefix: str = DEFAULT_HOST_PREFIX,
    where: str = "input",
) -> Iterator[Page]:
    """Saved hits of ``family`` in ``[start, end)`` with ``host_prefix``, as the server would
    answer the query. Each selected hit gets ``sort = [@timestamp ms]`` like exported hits
    (set in place: the pages are the caller's parsed copy of the file)."""
    check_family(family)
    lo, hi = to_ms(start), to_ms(end)
    for i, page in enumerate(pages):
        chosen = []
        for h in page:
            s = h["_source"]
            host = s.get("hostname")
            if family_of(s) == family and isinstance(host, str) and host.startswith(host_prefix):
                chosen.append(h)
        if not chosen:
            continue
        try:
            stamps = page_timestamps_ms([h["_source"] for h in chosen])
        except _BadTimestamp as exc:
            bad = chosen[exc.index]
            j = next(k for k, h in enumerate(page) if h is bad)
            raise ConfigError(f"{where}: page {i}, hit {j} (_id {bad.get('_id')}): {exc}") from exc
        out: Page = []
        for h, ts in zip(chosen, stamps, strict=True):
            if lo <= ts < hi:
                h["sort"] = [ts]
                out.append(h)
        if out:
            yield out
