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
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.errors import ConfigError, SourceError, WindowTooLarge
from dxt_core.http import HttpClient, RequestStats, RetryPolicy
from dxt_core.records import RawPoints, Record, Series, SeriesBatch, SeriesSchema
from dxt_core.windows import Window, next_window_ms, zone

log = logging.getLogger("dxt_core.kairosdb")

_TOO_LARGE = re.compile(
    r"query_limit|MemoryMonitor|too (many|much|large)|exceed|narrow the time range", re.I
)


def _too_large(status: int, body: bytes) -> bool:
    return status >= 400 and bool(_TOO_LARGE.search(body[:2000].decode("utf-8", "replace")))


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
        self._api: str | None = None

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

    def version(self) -> str:
        doc = self._http.get_json(self.api_path("version"))
        return str(doc.get("version", "")) if isinstance(doc, dict) else str(doc)

    def metric_names(self, prefix: str | None = None) -> list[str]:
        params = {"prefix": prefix} if prefix else None
        doc = self._http.get_json(self.api_path("metricnames"), params=params)
        names = doc.get("results", []) if isinstance(doc, dict) else []
        return [n for n in names if not str(n).startswith("kairosdb.")]

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
        self, entry: CatalogEntry, window: Window, stats: RequestStats | None = None
    ) -> SeriesSchema:
        """Discover the metric's tag keys in ``window`` (ExamonQL ``SELECT('*')``)."""
        body = self._body(entry, window.start_ms, window.end_ms, None)
        doc = self._http.post_json(self.api_path("datapoints/query/tags", stats), body, stats=stats)
        keys: set[str] = set()
        for result in _results(doc, self._http.url("datapoints/query/tags")):
            tags = result.get("tags") or {}
            if isinstance(tags, dict):
                keys.update(k for k, v in tags.items() if v)
        return SeriesSchema(name=entry.metric, tag_keys=tuple(sorted(keys)))

    def query(
        self,
        entry: CatalogEntry,
        start_ms: int,
        end_ms: int,
        schema: SeriesSchema,
        stats: RequestStats | None = None,
    ) -> SeriesBatch:
        """One query for ``[start_ms, end_ms)``; series ordered by their tag values."""
        body = self._body(entry, start_ms, end_ms, schema.tag_keys)
        path = self.api_path("datapoints/query", stats)
        raw = self._http.request(
            "POST",
            path,
            json_body=body,
            stats=stats,
            too_large=_too_large,
            timeout_is_too_large=True,
        )
        url = self._http.url(path)
        doc, arrays = _decode_keeping_values(raw, url)
        results = _results(doc, url)
        if arrays is not None and len(arrays) != len(results):
            doc, arrays = _loads_answer(raw, url), None
            results = _results(doc, url)
        batch = SeriesBatch(start_ms, end_ms)
        for i, result in enumerate(results):
            points: Sequence[Any]
            if arrays is None:
                points = result.get("values") or []
            elif not arrays[i]:
                continue
            else:
                points = RawPoints.from_json(arrays[i]) or _loads_answer(
                    b"[" + arrays[i] + b"]", url
                )
            if not points:
                continue
            group = _group_tags(result)
            batch.series.append(Series(str(result.get("name", entry.metric)), group, points))
        keys = schema.tag_keys
        batch.series.sort(key=lambda s: tuple(s.tags.get(k, "") for k in keys))
        return batch

    def iter_batches(
        self,
        entry: CatalogEntry,
        window: Window,
        schema: SeriesSchema,
        stats: RequestStats | None = None,
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
                batch = self.query(entry, cursor, stop, schema, stats)
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

    # -- job tables ------------------------------------------------------------------------
    def fetch_jobs(
        self, table: str, window: Window, stats: RequestStats | None = None
    ) -> list[Record]:
        """Job records of ``table`` whose end time falls in ``window`` (half-open)."""
        if self._jobs_http is None:
            self._jobs_http = HttpClient(
                self.conn.jobs_url or self.conn.default_jobs_url(),
                user=self.conn.user,
                password=self.conn.password,
                timeout_s=self.conn.timeout_s,
                retry=self.retry,
                verify_tls=self.conn.verify_tls,
            )
        path = "api/v1/examon/jobs/query"
        body = {"table": table, "tstart": window.start_ms, "tstop": window.end_ms}
        doc = self._jobs_http.post_json(path, body, stats=stats)
        if isinstance(doc, str):  # the service answers with a JSON string holding the list
            import orjson

            try:
                doc = orjson.loads(doc)
            except orjson.JSONDecodeError as exc:
                raise SourceError(
                    f"jobs answer is not a JSON list ({exc})", url=self._jobs_http.url(path)
                ) from exc
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise SourceError(
                "jobs answer is not a list of job records", url=self._jobs_http.url(path)
            )
        return doc

    def day_tz(self) -> dt.tzinfo:
        return self.tz


def _blocks(size_ms: int, block_ms: int) -> int:
    """``size_ms`` rounded down to a whole number of blocks, at least one."""
    return max(block_ms, size_ms // block_ms * block_ms)


_VALUES_KEY = b'"values":['


def _loads_answer(raw: bytes, url: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"answer is not valid JSON ({exc}): {raw[:200]!r}", url=url) from exc


def _decode_keeping_values(raw: bytes, url: str) -> tuple[Any, list[bytes] | None]:
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
                return _loads_answer(raw, url), None
            end += 1
        inner = raw[start:end]
        if b'"' in inner:
            return _loads_answer(raw, url), None
        pieces.append(raw[pos:start])
        arrays.append(inner)
        pos = end
    if not arrays:
        return _loads_answer(raw, url), None
    pieces.append(raw[pos:])
    try:
        return orjson.loads(b"".join(pieces)), arrays
    except orjson.JSONDecodeError:
        return _loads_answer(raw, url), None


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
