"""Examon telemetry from KairosDB (directly, or through Grafana's data source proxy).

What the examon-client library did with ExamonQL is done here with plain REST calls:

* ``SELECT('*')``: the metric's tag keys are discovered with ``query/tags``
  (:mod:`~dxt_core.backends.examon.tags`) and every query groups by all of them, so each tag
  combination is its own series.
* ``WHERE(cluster=...)``: a ``tags`` filter, for plugins that carry the ``cluster`` tag.
* Job tables (``job_info_marconi100``) come from the Examon jobs endpoint, not KairosDB
  (:mod:`~dxt_core.backends.examon.jobs`).

KairosDB has no paging and refuses or times out on over-large queries, so a day is fetched in
windows sized to a point budget from the density seen so far; a refused window is halved
(down to a floor) and the halves are fetched in order
(:mod:`~dxt_core.backends.examon.policy`). KairosDB's ends are inclusive, so the half-open
window ``[a, b)`` is queried as ``a .. b-1 ms``. The answers are read by
:mod:`~dxt_core.backends.examon.decode`; the source's own counts are
:mod:`~dxt_core.backends.examon.count`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from dxt_core import masking
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.client import rate_limited
from dxt_core.backends.examon.count import KairosDBCounts
from dxt_core.backends.examon.decode import (
    _decode_keeping_values,
    decode_series,
)
from dxt_core.backends.examon.policy import (
    HOLE_MS,
    REFUSAL_RULES,
    QueryCounts,
    WindowPolicy,
    blocks,
    unserialisable,
)
from dxt_core.backends.examon.tags import TagKeys
from dxt_core.errors import UnreadablePoint, WindowTooLarge
from dxt_core.http import RequestStats, error_text
from dxt_core.prefetch import Background
from dxt_core.records import Series, SeriesBatch, SeriesSchema
from dxt_core.windows import Window, from_ms, next_window_ms

log = masking.logger("dxt_core.kairosdb")

__all__ = [  # besides what is defined here, for the code that imports it from the source
    "REFUSAL_RULES",
    "QueryCounts",
    "WindowPolicy",
    "_decode_keeping_values",
]


@dataclass(frozen=True, slots=True)
class _Answer:
    """A query's answer as it came, not yet read: the window ``[start_ms, end_ms)`` it
    answers, and the URL and words that name it in messages."""

    raw: bytes
    url: str
    where: str
    start_ms: int
    end_ms: int

    def points(self) -> int:
        """The points the answer holds, counted in its text (``],[`` between two points of a
        series, and each series' first): what the next window is sized from, before the
        answer is read. A string value holding either sequence only sizes a window."""
        return self.raw.count(b"],[") + self.raw.count(b'"values":[[')


@dataclass(frozen=True, slots=True)
class _Fetch:
    """What the queries of one :meth:`KairosDBSource.iter_batches` share: the metric, its
    series' tag keys, the request counters and the counts of what the queries drop."""

    entry: CatalogEntry
    schema: SeriesSchema
    stats: RequestStats
    counts: QueryCounts


class KairosDBSource(TagKeys, KairosDBCounts):
    """Reads Examon metrics from KairosDB, one metric and window at a time."""

    def _send(
        self,
        fetch: _Fetch,
        start_ms: int,
        end_ms: int,
        *,
        series: dict[str, str] | None = None,
        at_floor: bool = False,
    ) -> _Answer:
        """The answer to one query for ``[start_ms, end_ms)``, not yet read
        (:meth:`_read` reads it).

        ``series`` narrows the query to the series with these tag values. ``at_floor``: the
        window cannot be split further, so a read timeout is retried with backoff (as a 503
        is) instead of being read as "too large".

        Raises:
            UnreadablePoint: the server cannot serialise a point of the window (NaN).
        """
        entry, schema, stats = fetch.entry, fetch.schema, fetch.stats
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
        status, raw, _ = rate_limited(
            self._http.exchange,
            "POST",
            path,
            json_body=body,
            stats=stats,
            too_large=self._too_large,
            timeout_is_too_large=not at_floor,
            accept=unserialisable,
        )
        url = self._http.url(path)
        if status >= 300:
            raise UnreadablePoint(
                f"{where}: the server cannot serialise a stored point: {error_text(raw)}",
                url=url,
                status=status,
            )
        return _Answer(raw, url, where, start_ms, end_ms)

    def _read(self, fetch: _Fetch, answer: _Answer) -> SeriesBatch:
        """The series of ``answer`` with points in its window, ordered by their tag values;
        points outside the window are dropped and counted in ``fetch.counts``.

        Raises:
            SourceError: the answer holds a value that is not a JSON number or string.
        """
        start_ms, end_ms = answer.start_ms, answer.end_ms
        batch = SeriesBatch(start_ms, end_ms)
        batch.series, dropped = decode_series(
            answer.raw, answer.url, answer.where, fetch.entry.metric, start_ms, end_ms
        )
        if dropped:
            log.warning("%s: dropped %d points outside the queried window", answer.where, dropped)
            fetch.counts.dropped_outside_window += dropped
        keys = fetch.schema.tag_keys
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
        """Fetch ``window`` as consecutive batches, adapting and splitting windows as needed.

        The next window is asked for as soon as an answer has arrived, sized from the points
        the answer holds, so the server works on it while this one is read (KairosDB serves
        requests concurrently, see archive_day's ``_counting_alongside``); at most one
        request of the metric is in flight, and one answer waits to be read.
        """
        stats = stats if stats is not None else RequestStats()
        fetch = _Fetch(entry, schema, stats, counts if counts is not None else QueryCounts())
        pol = self.windows
        min_ms, max_ms = pol.min_s * 1000, pol.max_s * 1000
        cursor, end = window.start_ms, window.end_ms
        size = blocks(pol.initial_s * 1000, min_ms)
        cap = max_ms  # lowered on each refusal so that refused sizes are not tried again
        ahead: Background[_Answer] | None = None  # the window from cursor, asked already
        try:
            while cursor < end:
                stop = min(cursor + size, end)
                answer: _Answer | None = None
                try:
                    if ahead is not None:
                        asked, ahead = ahead, None
                        answer = asked.result()
                    else:
                        answer = self._send(fetch, cursor, stop, at_floor=stop - cursor <= min_ms)
                except UnreadablePoint:
                    batch = self.read_around_holes(fetch, cursor, stop)
                except WindowTooLarge as exc:
                    if stop - cursor <= min_ms:
                        raise WindowTooLarge(
                            f"{entry.key}: even a {min_ms // 1000} s window is refused "
                            f"({exc}); lower the window floor (min_s) or raise the server's "
                            "query limit",
                            url=exc.url,
                            status=exc.status,
                        ) from exc
                    size = blocks((stop - cursor) // 2, min_ms)
                    cap = size
                    stats.splits += 1
                    log.info(
                        "%s: window of %d s refused, splitting to %d s",
                        entry.key,
                        (stop - cursor) // 1000,
                        size // 1000,
                    )
                    continue
                points = answer.points() if answer is not None else batch.points
                size = blocks(
                    next_window_ms(stop - cursor, points, pol.target_points, min_ms, cap), min_ms
                )
                if answer is not None:
                    if stop < end:  # the server answers the next while this one is read
                        nxt = min(stop + size, end)
                        ahead = Background(
                            partial(self._send, fetch, stop, nxt, at_floor=nxt - stop <= min_ms),
                            "dxt-ask-ahead",
                        )
                    batch = self._read(fetch, answer)
                yield batch
                cursor = stop
        finally:
            if ahead is not None:
                ahead.wait()  # its answer is dropped; its thread is not left running

    # -- unreadable points ----------------------------------------------------------------
    def read_around_holes(self, fetch: _Fetch, start_ms: int, end_ms: int) -> SeriesBatch:
        """``[start_ms, end_ms)`` without the points the server cannot serialise.

        The window is halved (on whole minutes) until each unreadable part is at most
        :data:`HOLE_MS` long; there each series is asked alone (found with a ``count``
        query, which KairosDB can answer: a count is a long), and the series that still
        fail are holes: recorded in ``fetch.counts.holes`` with the server's message and the
        source's count of their points. Everything else is returned as one batch.
        """
        pieces: list[SeriesBatch] = []
        self._around(fetch, start_ms, end_ms, pieces)
        merged: dict[tuple[str, ...], Series] = {}
        keys = fetch.schema.tag_keys
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

    def _around(self, fetch: _Fetch, a: int, b: int, pieces: list[SeriesBatch]) -> None:
        if b - a > HOLE_MS:
            mid = a + (b - a) // 2 // HOLE_MS * HOLE_MS
            if mid <= a:
                mid = a + (b - a) // 2
            for lo, hi in ((a, mid), (mid, b)):
                try:
                    pieces.append(self._read(fetch, self._send(fetch, lo, hi, at_floor=True)))
                except UnreadablePoint:
                    fetch.stats.splits += 1
                    self._around(fetch, lo, hi, pieces)
            return
        entry = fetch.entry
        for tags, n in self.count_groups(entry, a, b, fetch.stats, fetch.schema.tag_keys):
            try:
                answer = self._send(fetch, a, b, series=tags, at_floor=True)
                pieces.append(self._read(fetch, answer))
            except UnreadablePoint as exc:
                message = str(exc).split(": the server cannot serialise a stored point: ", 1)[-1]
                fetch.counts.holes.append(
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

    def day_tz(self) -> dt.tzinfo:
        return self.tz
