"""One slice of an export: a ``@timestamp`` range of the window read with a point in time
(``pit``, ``pit-keyset``) or a scroll, resuming expired contexts, checking every page's
shards and dropping hits outside the range; and the feeds that run the slices on threads and
hand their pages over in a fixed order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dxt_core import masking
from dxt_core.backends.collectd_es.columnar_hits import (
    ColumnarHits,
    decode_search_response,
    hit_key,
)
from dxt_core.backends.collectd_es.connection import ContextExpired, index_path
from dxt_core.backends.collectd_es.query import Hit, Page, family_query_ms
from dxt_core.backends.collectd_es.ties import ordered_feed
from dxt_core.errors import ConfigError, SourceError, SourceUnavailable
from dxt_core.http import RequestStats, json_answer

if TYPE_CHECKING:
    from dxt_core.backends.collectd_es.source import CollectdEsSource

log = masking.logger("dxt_core.backends.collectd_es.source")


@dataclass
class ExportStats:
    """What one export did (merged into manifests and reports)."""

    mode: str = ""
    server: str = ""
    slices: int = 0
    pages: int = 0
    hits: int = 0
    #: search requests sent, each attempt of a retried one counted
    requests: int = 0
    #: the other requests of the export: its contexts opened and closed (points in time,
    #: scrolls), the day's ``_count`` and, for the export that first needed it, the
    #: server's ``GET /``, each attempt counted
    other_requests: int = 0
    #: search attempts after a transient failure (connection error, timeout, 429, 502-504)
    retries: int = 0
    resumed: int = 0
    skipped_duplicates: int = 0
    #: hits the server sent from outside the range asked for (dropped)
    outside_window: int = 0
    #: partial pages (a shard missing) asked again
    partial_retries: int = 0
    #: seconds spent waiting for (and decoding) answers, summed over slices
    request_s: float = 0.0
    #: bytes of the search answers (as decoded by the HTTP client)
    bytes_received: int = 0
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
            "other_requests": self.other_requests,
            "retries": self.retries,
            "resumed": self.resumed,
            "skipped_duplicates": self.skipped_duplicates,
            "outside_window": self.outside_window,
            "partial_retries": self.partial_retries,
            "request_s": round(self.request_s, 3),
            "bytes_received": self.bytes_received,
        }

    def request_stats(self) -> RequestStats:
        """These counts as every backend's day report gives them (:class:`RequestStats`):
        every request sent (searches, contexts opened and closed, the count); as retries, the
        searches asked again (after a transient failure, a partial page or an expired
        context), each also counted in the requests; no split (a window is paged, never
        split); the bytes of the search answers."""
        with self._lock:
            return RequestStats(
                requests=self.requests + self.other_requests,
                retries=self.retries + self.partial_retries + self.resumed,
                bytes_received=self.bytes_received,
            )


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
            self.src._forget_pit(self.own_pit, self.stats)
            self.own_pit = None
        if self.scroll_id is not None:
            self.src._forget_scroll(self.scroll_id, self.stats)
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
                self.src._forget_scroll(self.scroll_id, self.stats)
                self.scroll_id = None
            return
        if self.own_pit is not None:
            self.src._forget_pit(self.own_pit, self.stats)
            self.own_pit = None
        assert self.pit is not None
        self.own_pit = self.pit = self.src._open_pit(self.pit.api, self.stats)

    def _search(
        self,
        path: str,
        params: Mapping[str, str] | None,
        body: dict[str, Any],
        *,
        again: bool,
        cursor: bool = False,
    ) -> Mapping[str, Any]:
        """One search answer; a partial one is asked again (``again``) or raises
        :class:`_PartialPage`. A ``cursor`` request (a scroll's next page: the server moves
        the scroll on when it answers) is sent once: a transient failure may have lost an
        answer the server made, so it raises :class:`ContextExpired` and the slice resumes
        at its last ``@timestamp``, where asking again would skip that page."""
        what = f"reading {self.where}"
        problem = ""
        attempts = self.src.retry.attempts if again else 1
        for attempt in range(1, attempts + 1):
            t0, sent = time.perf_counter(), RequestStats()
            try:
                status, data, _ = self.client.request(
                    "POST", path, params=params, body=body, what=what, stats=sent, retry=not cursor
                )
            except ContextExpired:
                raise
            except SourceUnavailable as exc:
                if not cursor:
                    raise
                self._count(sent, t0)
                raise ContextExpired(
                    f"the answer to the scroll's next page was lost ({exc.message}); the "
                    "server may have moved the scroll on",
                    url=exc.url,
                ) from exc
            if not 200 <= status < 300:
                self._count(sent, t0)
                raise self.client.error(status, data, path, what)
            r = self._decode(data, path, what)
            self._count(sent, t0)
            problem = shard_problem(r) or ""
            if not problem:
                return r
            if not again:
                raise _PartialPage(problem)
            self.stats.add(partial_retries=1)
            pit = body.get("pit")
            if isinstance(pit, dict) and self.pit is not None:
                # a partial answer may carry a new PIT id too: ask again with it (the most
                # recent id is always the one used; the one sent may be refused by now)
                self.pit.update(r.get("pit_id"))
                body = {**body, "pit": {**pit, "id": self.pit.id}}
            if attempt < attempts:
                delay = self.src.retry.delay(attempt)
                log.warning("%s: %s; asking again in %.1f s", self.where, problem, delay)
                self.client.sleep(delay)
        raise SourceUnavailable(
            f"{what}: {problem}, {attempts} times; the cluster is missing shards: rerun when "
            "it is green (nothing partial was archived)",
            url=self.client.url(path),
        )

    def _count(self, sent: RequestStats, t0: float) -> None:
        """One search's HTTP attempts, retries and bytes in the export's statistics."""
        self.stats.add(
            requests=sent.requests,
            retries=sent.retries,
            bytes_received=sent.bytes_received,
            request_s=time.perf_counter() - t0,
        )

    def _decode(self, data: bytes, path: str, what: str) -> Mapping[str, Any]:
        if self.columnar:
            page = decode_search_response(data)
            if page is not None:
                return page
        r = json_answer(data, self.client.url(path), what)
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
            r = self._search("/_search/scroll", None, body, again=False, cursor=True)
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
    """``sort[0]`` of the last hit, and the key (:func:`hit_key`) of every hit that shares
    it."""
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        last = hits.sort0[-1]
        same = hits.sort0 == last
        first = len(same) - int(np.argmin(same[::-1])) if not same.all() else 0
        return int(last), hits.keys(first)
    ts = hits[-1]["sort"][0]
    keys = []
    for h in reversed(hits):
        if h["sort"][0] != ts:
            break
        keys.append(hit_key(h))
    return ts, keys


def _drop_seen(hits: Sequence[Hit], last_ts: int | None, seen: set[str]) -> Sequence[Hit]:
    """Hits minus those already emitted at the resume timestamp (only the first page after a
    resume, or every page of ``pit-keyset``, can hold any)."""
    if last_ts is None or not seen or not len(hits) or _first_ts(hits) != last_ts:
        return hits
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        at_last = np.flatnonzero(hits.sort0 == last_ts)
        index = hits.hits.field("_index").take(at_last).to_pylist()
        ids = hits.hits.field("_id").take(at_last).to_pylist()
        drop = np.zeros(len(hits), dtype=bool)
        drop[at_last] = [f"{i}/{d}" in seen for i, d in zip(index, ids, strict=True)]
        return hits.where(~drop) if drop.any() else hits
    return [h for h in hits if not (h["sort"][0] == last_ts and hit_key(h) in seen)]


_DONE = object()


class SliceFeeds:
    """The slices of one export, each read on a thread of its own, its ties ordered
    (:mod:`.ties`; not columnar pages) and re-chunked to ``page_size`` hits (a columnar page
    passes as it is), their pages handed over in a fixed order: slice 0 page 1, slice 1
    page 1, ..., slice 0 page 2, ... Memory holds at most two pages per slice in flight,
    and one group of equal timestamps."""

    def __init__(self, readers: list[_SliceReader], page_size: int, family: str, url: str) -> None:
        self.readers = readers
        self.page_size = page_size
        self.family = family
        self.url = url
        self.halt = threading.Event()
        self.queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=2) for _ in readers]
        self.threads = [
            threading.Thread(target=self._work, args=(i,), name=f"es-slice-{i}", daemon=True)
            for i in range(len(readers))
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(timeout=30)

    def pages(self, stats: ExportStats) -> Iterator[Page]:
        """The slices' pages in the fixed order; a slice's error is raised here."""
        active = list(range(len(self.readers)))
        while active:
            for i in list(active):
                item = self.queues[i].get()
                if item is _DONE:
                    active.remove(i)
                    continue
                if isinstance(item, SourceError | ConfigError):
                    raise item
                if isinstance(item, BaseException):
                    raise SourceError(
                        f"reading {self.family} slice {i}: {type(item).__name__}: {item}",
                        url=self.url,
                    ) from item
                stats.add(pages=1, hits=len(item))
                yield item

    def _put(self, q: queue.Queue[Any], item: Any) -> None:
        while True:
            if self.halt.is_set():
                raise _Stop
            try:
                q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _work(self, slice_id: int) -> None:
        q, reader, size = self.queues[slice_id], self.readers[slice_id], self.page_size
        try:
            buf: Page = []
            # whole hits (every export that writes JSON Lines): one millisecond's documents
            # in a fixed order, not the server's (see .ties)
            feed = (
                reader.hits(self.halt) if reader.columnar else ordered_feed(reader.hits(self.halt))
            )
            for hits in feed:
                if isinstance(hits, ColumnarHits):
                    if buf:
                        self._put(q, buf)
                        buf = []
                    self._put(q, hits)
                    continue
                buf.extend(hits)
                while len(buf) >= size:
                    self._put(q, buf[:size])
                    buf = buf[size:]
            if buf:
                self._put(q, buf)
            self._put(q, _DONE)
        except _Stop:
            pass
        except BaseException as exc:
            with contextlib.suppress(_Stop):
                self._put(q, exc)
        finally:
            reader.close()
