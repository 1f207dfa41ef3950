"""collectd metrics stored in Elasticsearch (NERSC Cori's burst buffer nodes, pytokio style).

The families pytokio archived, queried over a half-open window ``[start, end)``:

* ``disk``: ``plugin:disk``, ``plugin_instance:nvme*``, ``collectd_type`` disk_octets/disk_ops
* ``cpu``: ``plugin:cpu``, ``type_instance`` idle/user/system
* ``memory``: ``plugin:memory``

Bulk export reads every matching document once with a point in time (PIT) and
``search_after``, in parallel ``slice`` readers (threads); servers without PIT fall back to
sliced scrolls. Each slice is sorted on ``@timestamp`` (then ``_shard_doc``): when a context
expires mid-export the slice opens a new one, restarts at its last timestamp and skips the
documents it already emitted at that timestamp, so nothing is read twice or missed, even if
the server merged segments in between (``_shard_doc`` values alone would not survive that).
Slices are keyed on ``@timestamp`` values (not Lucene doc ids) for the same reason.

Pages are handed to the caller one at a time, in a fixed order (slice 0 page 1, slice 1
page 1, ..., slice 0 page 2, ...), each slice re-chunked to exactly ``page_size`` hits: the
output order does not depend on thread timing or on resumed contexts. Memory is bounded by
``slices x 2`` pages in flight.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson

from dxt_core.backends.collectd_es.columnar_hits import ColumnarHits, columnar_available
from dxt_core.errors import ConfigError, QueryRejected, SourceError, SourceUnavailable

log = logging.getLogger("dxt_core.backends.collectd_es.source")

FAMILIES: tuple[str, ...] = ("disk", "cpu", "memory")
DEFAULT_INDEX = "cori-collectd-*"
DEFAULT_HOST_PREFIX = "bb"
ENV_USER = "PYTOKIO_ES_USER"
ENV_PASSWORD = "PYTOKIO_ES_PASSWORD"

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


def family_query(
    family: str,
    start: dt.datetime,
    end: dt.datetime,
    host_prefix: str = DEFAULT_HOST_PREFIX,
    since_ms: int | None = None,
) -> dict[str, Any]:
    """The query of one family over ``[start, end)``; ``since_ms`` narrows the start (resume)."""
    lo = to_ms(start) if since_ms is None else max(to_ms(start), since_ms)
    must: list[dict[str, Any]] = [
        {"range": {"@timestamp": {"gte": lo, "lt": to_ms(end), "format": "epoch_millis"}}},
    ]
    if host_prefix:
        must.append({"prefix": {"hostname": host_prefix}})
    must.extend(family_filters(family))
    return {"constant_score": {"filter": {"bool": {"must": must}}}}


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


# --------------------------------------------------------------------------- connection


@dataclass(frozen=True)
class CollectdEsConnection:
    """Where the collectd indices live. ``safe_url`` never holds credentials."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    index: str = DEFAULT_INDEX
    host_prefix: str = DEFAULT_HOST_PREFIX
    verify_certs: bool = True
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"Elasticsearch URL {self.safe_url!r} is not http(s)://host[:port]: "
                "pass e.g. --url http://es.example.org:9200"
            )
        if parts.username or parts.password:
            raise ConfigError(
                f"Elasticsearch URL {self.safe_url} holds credentials: pass them in "
                f"{ENV_USER}/{ENV_PASSWORD} or the Airflow connection's login/password"
            )
        if not self.index:
            raise ConfigError("empty Elasticsearch index pattern: pass --index cori-collectd-*")
        if (self.user is None) != (self.password is None):
            raise ConfigError(
                f"Elasticsearch user and password go together: set both {ENV_USER} and "
                f"{ENV_PASSWORD} (or neither)"
            )

    @property
    def safe_url(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))

    @classmethod
    def from_env(
        cls, url: str, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> CollectdEsConnection:
        """Credentials from ``PYTOKIO_ES_USER``/``PYTOKIO_ES_PASSWORD`` (as pytokio)."""
        env = os.environ if env is None else env
        user = env.get(ENV_USER) or None
        password = env.get(ENV_PASSWORD) or None
        return cls(url=url, user=user, password=password, **kwargs)


# --------------------------------------------------------------------------- export


@dataclass
class ExportStats:
    """What one export did (merged into manifests and reports)."""

    mode: str = ""
    slices: int = 0
    pages: int = 0
    hits: int = 0
    requests: int = 0
    resumed: int = 0
    skipped_duplicates: int = 0
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
            "slices": self.slices,
            "pages": self.pages,
            "hits": self.hits,
            "requests": self.requests,
            "resumed": self.resumed,
            "skipped_duplicates": self.skipped_duplicates,
            "request_s": round(self.request_s, 3),
        }


class _Stop(Exception):
    """The consumer went away; a slice worker ends quietly."""


def _context_expired(exc: BaseException) -> bool:
    """True for Elasticsearch's 'search context missing' answers (PIT or scroll expired)."""
    status = getattr(getattr(exc, "meta", None), "status", None)
    if status != 404:
        return False
    text = f"{getattr(exc, 'body', '')} {exc}"
    return "search_context_missing" in text or "No search context found" in text


def _pit_unsupported(exc: BaseException) -> bool:
    status = getattr(getattr(exc, "meta", None), "status", None)
    return status in (400, 404, 405, 501)


class CollectdEsSource:
    """Reads collectd families from Elasticsearch with elasticsearch-py 8/9."""

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
        client: Any = None,
    ) -> None:
        if page_size < 1 or page_size > 10_000:
            raise ConfigError(
                f"page_size {page_size} is outside 1..10000 (index.max_result_window)"
            )
        if slices < 1:
            raise ConfigError(f"slices must be >= 1, not {slices}")
        self.conn = conn
        self.page_size = page_size
        self.slices = slices
        self.keep_alive = keep_alive
        self.max_resumes = max_resumes
        self.use_pit = use_pit
        if client is None:
            from elasticsearch import Elasticsearch

            kwargs: dict[str, Any] = {
                "request_timeout": conn.timeout_s,
                "max_retries": max_retries,
                "retry_on_timeout": True,
                "retry_on_status": (429, 502, 503, 504),
            }
            if conn.url.startswith("https"):
                kwargs["verify_certs"] = conn.verify_certs
            if conn.user is not None and conn.password is not None:
                kwargs["basic_auth"] = (conn.user, conn.password)
            with contextlib.suppress(ImportError):
                # orjson decodes pages several times faster than the json module
                from elasticsearch.serializer import OrjsonSerializer

                kwargs["serializer"] = OrjsonSerializer()
            client = Elasticsearch(conn.url, **kwargs)
            self._client_kwargs: dict[str, Any] | None = kwargs
        else:
            self._client_kwargs = None  # a client given by the caller: pages as it decodes them
        self.es = client
        self._columnar_es: Any = None
        self._open_lock = threading.Lock()
        self._open_pits: set[str] = set()
        self._open_scrolls: set[str] = set()

    def __enter__(self) -> CollectdEsSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close_contexts()
        with contextlib.suppress(Exception):
            self.es.close()
        if self._columnar_es is not None:
            with contextlib.suppress(Exception):
                self._columnar_es.close()

    def _pages_client(self, columnar: bool) -> Any:
        """The client that reads pages: with ``columnar``, one whose search responses are
        :class:`ColumnarHits` (a second connection pool; opened on first use)."""
        if not columnar or self._client_kwargs is None or not columnar_available():
            return self.es
        with self._open_lock:
            if self._columnar_es is None:
                from elasticsearch import Elasticsearch

                from dxt_core.backends.collectd_es.columnar_hits import columnar_serializer

                kwargs = dict(self._client_kwargs)
                kwargs.pop("serializer", None)
                serializer = columnar_serializer()
                kwargs["serializers"] = {
                    "application/json": serializer,
                    "application/vnd.elasticsearch+json": serializer,
                }
                self._columnar_es = Elasticsearch(self.conn.url, **kwargs)
            return self._columnar_es

    # -- errors -------------------------------------------------------------------------

    def _error(self, exc: BaseException, what: str) -> SourceError:
        """Our exception for an elasticsearch-py one (never with credentials)."""
        from elastic_transport import TransportError
        from elasticsearch import ApiError, AuthenticationException, AuthorizationException

        url = self.conn.safe_url
        if isinstance(exc, AuthenticationException | AuthorizationException):
            return QueryRejected(
                f"{what}: authentication or authorisation failed; check {ENV_USER}/"
                f"{ENV_PASSWORD} (CLI) or the connection's login/password (Airflow)",
                url=url,
                status=exc.meta.status,
            )
        if isinstance(exc, ApiError):
            status = exc.meta.status
            detail = str(exc.message)
            cls = SourceUnavailable if status >= 500 or status == 429 else QueryRejected
            return cls(f"{what}: {detail}", url=url, status=status)
        if isinstance(exc, TransportError):
            return SourceUnavailable(
                f"{what}: {type(exc).__name__} after retries ({exc.message}); is the server up?",
                url=url,
            )
        return SourceError(f"{what}: {exc}", url=url)

    # -- contexts -----------------------------------------------------------------------

    def _open_pit(self) -> str:
        r = self.es.open_point_in_time(index=self.conn.index, keep_alive=self.keep_alive)
        pit_id = str(r["id"])
        with self._open_lock:
            self._open_pits.add(pit_id)
        return pit_id

    def _forget_pit(self, pit_id: str) -> None:
        with self._open_lock:
            self._open_pits.discard(pit_id)
        with contextlib.suppress(Exception):
            self.es.close_point_in_time(id=pit_id)

    def _forget_scroll(self, scroll_id: str) -> None:
        with self._open_lock:
            self._open_scrolls.discard(scroll_id)
        with contextlib.suppress(Exception):
            self.es.clear_scroll(scroll_id=scroll_id)

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
    ) -> Iterator[Page]:
        """Every document of ``family`` in ``[start, end)``, page by page.

        ``fields`` restricts ``_source`` (None: the whole document). Hits carry ``_index``,
        ``_id``, ``_source`` and ``sort`` (``sort[0]`` is ``@timestamp`` in epoch ms).
        With ``columnar``, pages are :class:`ColumnarHits` where the response allows it
        (for the HDF5 conversion; they still read as lists of hit dicts).
        Contexts opened here are closed when the iterator ends or is closed.
        """
        check_family(family)
        if to_ms(end) <= to_ms(start):
            raise ConfigError(f"empty window [{start.isoformat()}, {end.isoformat()})")
        stats = stats if stats is not None else ExportStats()
        shared_pit: str | None = None
        mode = "scroll"
        if self.use_pit:
            try:
                shared_pit = self._open_pit()
                mode = "pit"
            except Exception as exc:
                if not _pit_unsupported(exc):
                    raise self._error(exc, f"opening a point in time on {self.conn.index}") from exc
                log.info("point in time unsupported (%s); falling back to scroll", exc)
        stats.mode, stats.slices = mode, self.slices
        src = list(fields) if fields is not None else None
        stop = threading.Event()
        es = self._pages_client(columnar)
        queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=2) for _ in range(self.slices)]
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
            try:
                buf: Page = []
                for hits in self._slice_hits(
                    family, start, end, slice_id, shared_pit, src, stats, stop, es
                ):
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

        threads = [
            threading.Thread(target=worker, args=(i,), name=f"es-slice-{i}", daemon=True)
            for i in range(self.slices)
        ]
        try:
            for t in threads:
                t.start()
            active = list(range(self.slices))
            while active:
                for i in list(active):
                    item = queues[i].get()
                    if item is done:
                        active.remove(i)
                        continue
                    if isinstance(item, BaseException):
                        if isinstance(item, SourceError | ConfigError):
                            raise item
                        raise self._error(item, f"reading {family} slice {i}") from item
                    stats.add(pages=1, hits=len(item))
                    yield item
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
            if shared_pit is not None:
                self._forget_pit(shared_pit)

    def _slice_hits(
        self,
        family: str,
        start: dt.datetime,
        end: dt.datetime,
        slice_id: int,
        shared_pit: str | None,
        fields: list[str] | None,
        stats: ExportStats,
        stop: threading.Event,
        es: Any = None,
    ) -> Iterator[Sequence[Hit]]:
        """One slice, in ``@timestamp`` order; resumes expired contexts at the last timestamp."""
        last_ts: int | None = None
        seen_at_last: set[str] = set()
        resumes = 0
        slice_doc = (
            {"field": "@timestamp", "id": slice_id, "max": self.slices} if self.slices > 1 else None
        )
        own_pit: str | None = None
        pit_id = shared_pit
        try:
            while True:
                query = family_query(family, start, end, self.conn.host_prefix, since_ms=last_ts)
                es = es if es is not None else self.es
                pages = (
                    self._pit_pages(pit_id, query, slice_doc, fields, stats, es)
                    if pit_id is not None
                    else self._scroll_pages(query, slice_doc, fields, stats, es)
                )
                try:
                    for hits in pages:
                        if stop.is_set():
                            return
                        fresh = _drop_seen(hits, last_ts, seen_at_last)
                        if len(fresh) != len(hits):
                            stats.add(skipped_duplicates=len(hits) - len(fresh))
                        if fresh:
                            ts, ids = _tail(fresh)
                            if ts != last_ts:
                                last_ts = ts
                                seen_at_last = set()
                            seen_at_last.update(ids)
                            yield fresh
                    return
                except Exception as exc:
                    if not _context_expired(exc):
                        raise
                    resumes += 1
                    if resumes > self.max_resumes:
                        raise SourceUnavailable(
                            f"search context of {family} slice {slice_id} expired {resumes} "
                            f"times; raise keep_alive (now {self.keep_alive}) or page size",
                            url=self.conn.safe_url,
                        ) from exc
                    stats.add(resumed=1)
                    log.warning(
                        "%s slice %d: search context expired; resuming at @timestamp %s ms",
                        family,
                        slice_id,
                        last_ts,
                    )
                    if pit_id is not None:
                        if own_pit is not None:
                            self._forget_pit(own_pit)
                        own_pit = pit_id = self._open_pit()
        finally:
            if own_pit is not None:
                self._forget_pit(own_pit)

    def _pit_pages(
        self,
        pit_id: str,
        query: dict[str, Any],
        slice_doc: dict[str, Any] | None,
        fields: list[str] | None,
        stats: ExportStats,
        es: Any,
    ) -> Iterator[Page]:
        search_after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "pit": {"id": pit_id, "keep_alive": self.keep_alive},
                "query": query,
                "sort": [{"@timestamp": "asc"}, {"_shard_doc": "asc"}],
                "size": self.page_size,
                "track_total_hits": False,
            }
            if slice_doc is not None:
                body["slice"] = slice_doc
            if search_after is not None:
                body["search_after"] = search_after
            if fields is not None:
                body["_source"] = fields
            t0 = time.perf_counter()
            r = es.search(**body)
            stats.add(requests=1, request_s=time.perf_counter() - t0)
            hits = r["hits"]["hits"]
            if not hits:
                return
            yield hits
            if len(hits) < self.page_size:
                return
            search_after = _last_sort(hits)

    def _scroll_pages(
        self,
        query: dict[str, Any],
        slice_doc: dict[str, Any] | None,
        fields: list[str] | None,
        stats: ExportStats,
        es: Any,
    ) -> Iterator[Page]:
        body: dict[str, Any] = {
            "index": self.conn.index,
            "scroll": self.keep_alive,
            "query": query,
            "sort": [{"@timestamp": "asc"}],
            "size": self.page_size,
        }
        if slice_doc is not None:
            body["slice"] = slice_doc
        if fields is not None:
            body["_source"] = fields
        t0 = time.perf_counter()
        r = es.search(**body)
        stats.add(requests=1, request_s=time.perf_counter() - t0)
        scroll_id: str | None = r.get("_scroll_id")
        if scroll_id:
            with self._open_lock:
                self._open_scrolls.add(scroll_id)
        try:
            while True:
                hits = r["hits"]["hits"]
                if not hits:
                    return
                yield hits
                if scroll_id is None:
                    return
                t0 = time.perf_counter()
                r = es.scroll(scroll_id=scroll_id, scroll=self.keep_alive)
                stats.add(requests=1, request_s=time.perf_counter() - t0)
                new_id = r.get("_scroll_id")
                if new_id and new_id != scroll_id:
                    with self._open_lock:
                        self._open_scrolls.discard(scroll_id)
                        self._open_scrolls.add(new_id)
                    scroll_id = new_id
        finally:
            if scroll_id:
                self._forget_scroll(scroll_id)


def _first_ts(hits: Sequence[Hit]) -> Any:
    if isinstance(hits, ColumnarHits) and hits.sort0 is not None:
        return int(hits.sort0[0])
    return hits[0]["sort"][0]


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
    resume can hold any)."""
    if last_ts is None or not seen or _first_ts(hits) != last_ts:
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


# --------------------------------------------------------------------------- connection fields


def connection_from_fields(**fields: Any) -> CollectdEsConnection:
    """A connection from an Airflow connection's fields (see ``connection.SPEC``)."""
    from dxt_core.backends.collectd_es.connection import SPEC

    conn: CollectdEsConnection = SPEC.from_fields(**fields)
    return conn
