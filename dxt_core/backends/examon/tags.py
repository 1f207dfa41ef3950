"""A metric's tag keys (ExamonQL ``SELECT('*')``): asked with ``query/tags`` over the
metric's whole history once, then kept in the archive and grown by each day's own keys.

``query/tags`` over all time is the most expensive query sent to a large KairosDB
(examon-client cached it on disk). The keys found are kept in the archive, out of its day
directories (:class:`TagCache`: ``<root>/.dxt-tag-keys/`` on disk, ``<prefix>/.dxt/tag-keys/``
in a bucket, where every worker finds them); keys only grow, so a later metric-day asks only
its own window. The plugin named in the catalog is checked against the metric's ``plugin`` tag
values on every path.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from dxt_core import masking
from dxt_core.archive import Archive
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.client import KairosDBClient, rate_limited
from dxt_core.backends.examon.decode import _results
from dxt_core.errors import QueryRejected, SourceUnavailable, WindowTooLarge
from dxt_core.http import RequestStats
from dxt_core.records import SeriesSchema
from dxt_core.windows import Window

log = masking.logger("dxt_core.kairosdb")

#: The schema of the tag-key cache record.
TAG_CACHE_SCHEMA = "dxt-archive/examon-tag-keys/1"
#: The archive's internal records it is one of (:meth:`Archive.internal_path`).
TAG_CACHE_NAME = "tag-keys"


@dataclass(frozen=True, slots=True)
class TagCache:
    """One metric's tag-key record in the archive: ``tag-keys/<source>/<plugin>/<metric>.json``
    among the archive's internal records."""

    archive: Archive
    parts: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.parts[-1]

    def read(self) -> dict[str, Any] | None:
        return _parse_tag_cache(self.archive.read_internal(TAG_CACHE_NAME, *self.parts))

    def update(self, update: Callable[[dict[str, Any] | None], dict[str, Any]]) -> None:
        self.archive.update_internal(
            TAG_CACHE_NAME, self.parts, lambda raw: update(_parse_tag_cache(raw))
        )


def _parse_tag_cache(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != TAG_CACHE_SCHEMA:
        return None
    keys = doc.get("keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return doc


#: The tag Examon's publishers put on every series: the plugin that published it.
PLUGIN_TAG = "plugin"
#: The Parquet archive's folder keys (``plugin=<p>/metric=<m>``) that no tag repeats: a tag
#: ``metric`` is written as ``exported_metric`` (in both formats: a day's CSV and Parquet
#: files have the same columns), else pandas, pyarrow and DuckDB would read every row's
#: value as the folder's. The ``plugin`` tag holds the folder's value (:func:`check_plugin`).
FOLDER_KEYS = ("metric",)


def examon_schema(metric: str, keys: Iterable[str]) -> SeriesSchema:
    """The columns of a metric's day files: its tag keys, sorted, none read as a folder."""
    return SeriesSchema(metric, tuple(sorted(keys)), reserved=FOLDER_KEYS)


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


class TagKeys(KairosDBClient):
    """The tag-key queries of the Examon source."""

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
        return examon_schema(entry.metric, keys)

    def cluster_note(self, entry: CatalogEntry, stats: RequestStats | None = None) -> str:
        """For a metric without series of the configured cluster (its plugin's queries
        filter on the ``cluster`` tag): which clusters it has series of, else "". A mistyped
        cluster (``--cluster``, the connection's ``cluster`` extra) archives every
        metric-day of the plugin as empty; a metric another cluster has and this one has
        not is empty indeed: the note, in the log and the day's manifest, tells them apart.
        Asked once per metric and source (``query/tags`` over all time, unfiltered)."""
        wanted = self.tag_filter(entry).get("cluster")
        notes: dict[str, str] = self.__dict__.setdefault("_cluster_notes", {})
        if not wanted:
            return ""
        if entry.metric in notes:
            return notes[entry.metric]
        body = {"start_absolute": 0, "cache_time": 0, "metrics": [{"name": entry.metric}]}
        path = self.api_path("datapoints/query/tags", stats)
        doc = rate_limited(self._http.post_json, path, body, stats=stats)
        tags = [r.get("tags") or {} for r in _results(doc, self._http.url(path))]
        found = sorted(
            {str(v) for t in tags if isinstance(t, dict) for v in t.get("cluster") or ()}
        )
        note = ""
        if any(isinstance(t, dict) and t for t in tags) and not set(wanted) & set(found):
            have = (
                f"its series' cluster values are {', '.join(found)}"
                if found
                else "its series have no cluster tag (cluster_tag = false for the plugin in "
                "the plugin options reads them)"
            )
            note = (
                f"no series of {entry.metric!r} has cluster={wanted[0]!r}: {have}; if the "
                "cluster is mistyped, fix it (--cluster, or the connection's cluster extra)"
            )
        notes[entry.metric] = note
        return note

    def _tag_keys(
        self, entry: CatalogEntry, start_ms: int, end_ms: int | None, stats: RequestStats | None
    ) -> set[str]:
        body: dict[str, Any] = {
            "start_absolute": start_ms,
            "cache_time": 0,
            "metrics": [{"name": entry.metric, "tags": self.tag_filter(entry)}],
        }
        if end_ms is not None:
            body["end_absolute"] = end_ms - 1
        path = self.api_path("datapoints/query/tags", stats)
        doc = rate_limited(self._http.post_json, path, body, stats=stats)
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
        cache: TagCache,
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
            cached = cache.read()
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
            return examon_schema(entry.metric, keys), note
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
            return examon_schema(entry.metric, keys), {
                "from": "this day's query/tags + cached keys: the query over all time failed",
                "error": str(exc)[:300],
            }
        self._write_tag_cache(cache, entry, keys, True)
        return examon_schema(entry.metric, keys), {
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
        self, cache: TagCache, entry: CatalogEntry, keys: set[str], complete: bool
    ) -> None:
        def merged(old: dict[str, Any] | None) -> dict[str, Any]:
            # keys only grow, also when two days (or two workers) write at once
            grown = keys | set((old or {}).get("keys") or ())
            return {
                "schema": TAG_CACHE_SCHEMA,
                "metric": entry.metric,
                "plugin": entry.plugin,
                "tags_filter": self.tag_filter(entry),
                "keys": sorted(grown),
                # complete: the keys of the whole history were read once
                "complete": complete or bool((old or {}).get("complete")),
                "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }

        with self._lock:
            cache.update(merged)
