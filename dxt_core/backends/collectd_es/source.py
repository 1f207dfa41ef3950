"""collectd metrics stored in Elasticsearch or OpenSearch (NERSC Cori's burst buffer nodes,
pytokio style): the bulk export of one family over a window, and the server's count of it.

The families and their queries are :mod:`~dxt_core.backends.collectd_es.query`'s; saved
exports (``--input``) are read by :mod:`~dxt_core.backends.collectd_es.saved`.

Bulk export reads every matching document once, in parallel slices (threads,
:mod:`~dxt_core.backends.collectd_es.slices`). **A slice is a part of the time window**
(``[start, end)`` cut into equal ``@timestamp`` ranges), not an Elasticsearch ``slice``:
Elasticsearch assigns its slices to shards first (whole shards per slice when there are at
least as many shards as slices; only within a shard by a field's hash otherwise,
``SliceBuilder.java``), so which documents an Elasticsearch slice holds depends on the shards
the search context resolved. A context reopened after expiry may resolve other shards (a new
daily index, one deleted by retention) and the same slice id would then cover other
documents. A time range covers the same documents in every context.

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
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from dxt_core import masking
from dxt_core.backends.collectd_es.columnar_hits import columnar_available
from dxt_core.backends.collectd_es.connection import (
    DEFAULT_HOST_PREFIX,
    DEFAULT_INDEX,
    ENV_PASSWORD,
    ENV_USER,
    CollectdEsConnection,
    EsClient,
    ServerInfo,
    connection_from_fields,
    endpoint_missing,
    index_path,
)
from dxt_core.backends.collectd_es.query import (
    FAMILIES,
    SOURCE_FIELDS,
    Hit,
    Page,
    check_family,
    family_of,
    family_query,
    family_query_ms,
    parse_timestamp_ms,
    time_slices,
    to_ms,
)
from dxt_core.backends.collectd_es.saved import (
    iter_saved_pages,
    load_saved_pages,
    select_saved_hits,
)
from dxt_core.backends.collectd_es.slices import (
    ExportStats,
    SliceFeeds,
    _Pit,
    _PitUnsupported,
    _SliceReader,
    shard_problem,
)
from dxt_core.budget import release_answers
from dxt_core.errors import ConfigError, SourceError, SourceUnavailable
from dxt_core.http import RequestStats, RetryPolicy, json_answer
from dxt_core.masking import excerpt
from dxt_core.reconcile import SourceCount

log = masking.logger("dxt_core.backends.collectd_es.source")

__all__ = [  # the source's public names, wherever they are defined
    "DEFAULT_HOST_PREFIX",
    "DEFAULT_INDEX",
    "ENV_PASSWORD",
    "ENV_USER",
    "FAMILIES",
    "SOURCE_FIELDS",
    "CollectdEsConnection",
    "CollectdEsSource",
    "ExportStats",
    "Hit",
    "Page",
    "ServerInfo",
    "check_family",
    "connection_from_fields",
    "family_of",
    "family_query",
    "family_query_ms",
    "iter_saved_pages",
    "load_saved_pages",
    "parse_timestamp_ms",
    "select_saved_hits",
    "shard_problem",
    "time_slices",
    "to_ms",
]


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

    def server(self, stats: ExportStats | None = None) -> ServerInfo:
        """The server answering (asked once, with ``GET /``: counted among the other
        requests of ``stats``, the export that needed it first)."""
        with self._open_lock:
            known = self._server
        if known is None:
            known = self.client.server_info(_counted(stats))
            log.info("%s is %s", self.conn.safe_url, known)
            with self._open_lock:
                self._server = known
        return known

    # -- counts -------------------------------------------------------------------------

    def count(
        self,
        family: str,
        start: dt.datetime,
        end: dt.datetime,
        stats: ExportStats | None = None,
    ) -> SourceCount:
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
        what = f"counting {family} documents"
        r = self.client.json("POST", path, body=body, what=what, stats=_counted(stats))
        problem = shard_problem(r) if isinstance(r, Mapping) else "the answer is not an object"
        n = r.get("count") if isinstance(r, Mapping) else None
        if problem is not None or not isinstance(n, int):
            raise SourceUnavailable(
                f"counting {family} in [{start.isoformat()}, {end.isoformat()}): "
                f"{problem or 'no count in the answer'}; rerun later",
                url=self.client.url(path),
            )
        product = self.server(stats).product
        name = {"opensearch": "OpenSearch"}.get(product, "Elasticsearch")
        return SourceCount(n, f"{name} _count with the export's query (_shards checked)")

    # -- contexts -----------------------------------------------------------------------

    def _open_pit(self, api: str, stats: ExportStats | None = None) -> _Pit:
        index = index_path(self.conn.index)
        if api == "_pit":
            path, params = f"/{index}/_pit", {"keep_alive": self.keep_alive}
        else:  # OpenSearch: a partial PIT would silently miss a shard's documents
            path = f"/{index}/_search/point_in_time"
            params = {"keep_alive": self.keep_alive, "allow_partial_pit_creation": "false"}
        what = f"opening a point in time on {self.conn.index}"
        status, data, _ = self.client.request(
            "POST", path, params=params, what=what, stats=_counted(stats)
        )
        if not 200 <= status < 300:
            if endpoint_missing(status, data):
                raise _PitUnsupported(masking.scrub(data[:300].decode("utf-8", "replace")))
            raise self.client.error(status, data, path, what)
        r = json_answer(data, self.client.url(path), what)
        pit_id = r.get("id") if api == "_pit" else r.get("pit_id")
        if not isinstance(pit_id, str) or not pit_id:
            raise SourceError(
                f"{what}: the answer holds no point in time id: {excerpt(data, 200)!r}",
                url=self.client.url(path),
            )
        pit = _Pit(api, pit_id)
        with self._open_lock:
            self._open_pits.append(pit)
        problem = shard_problem(r)
        if problem is not None:
            self._forget_pit(pit, stats)
            raise SourceUnavailable(
                f"{what}: {problem}; rerun when every shard is available",
                url=self.client.url(path),
            )
        return pit

    def _forget_pit(self, pit: _Pit, stats: ExportStats | None = None) -> None:
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
            self.client.request(
                "DELETE", path, body=body, what="closing a point in time", stats=_counted(stats)
            )
        except SourceError as exc:
            log.debug("closing a point in time failed: %s", exc)

    def _forget_scroll(self, scroll_id: str, stats: ExportStats | None = None) -> None:
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
                stats=_counted(stats),
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
        mode, shared = self._export_mode(stats)
        windows = time_slices(lo, hi, self.slices, align_s * 1000)
        stats.mode, stats.server, stats.slices = mode, str(self.server(stats)), len(windows)
        src = list(fields) if fields is not None else None
        columnar = columnar and columnar_available()
        readers = [
            _SliceReader(self, family, w, i, mode, shared, src, stats, columnar)
            for i, w in enumerate(windows)
        ]
        feeds = SliceFeeds(readers, self.page_size, family, self.conn.safe_url)
        try:
            release_answers()  # the slices' fetches may wait for the budget this thread holds
            feeds.start()
            yield from feeds.pages(stats)
        finally:
            feeds.stop()
            if shared is not None:
                self._forget_pit(shared, stats)

    def _export_mode(self, stats: ExportStats) -> tuple[str, _Pit | None]:
        """How the slices page (``pit``, ``pit-keyset`` or ``scroll``) and the point in time
        they share (opened here; None for scrolls)."""
        server = self.server(stats)
        api = server.pit_api if self.use_pit else None
        if api is not None:
            try:
                shared = self._open_pit(api, stats)
            except _PitUnsupported as exc:
                log.warning(
                    "%s has no point-in-time endpoint (%s); reading with scrolls", server, exc
                )
            else:
                return ("pit" if server.shard_doc else "pit-keyset"), shared
        return "scroll", None


class _Counted(RequestStats):
    """A request's counters that also count it among an export's other requests."""

    def __init__(self, export: ExportStats) -> None:
        super().__init__()
        self._export = export

    def add(self, other: RequestStats) -> None:
        super().add(other)
        self._export.add(other_requests=other.requests)


def _counted(stats: ExportStats | None) -> RequestStats | None:
    """Where a context or count request of an export is counted: in ``stats``'
    ``other_requests`` (:class:`_Counted`), or nowhere."""
    return None if stats is None else _Counted(stats)
