"""The source's own count of a metric-day: KairosDB's ``count`` aggregator, no data sent.

One sampling range the window's length (kairosdb v1.2.2
``core/aggregator/RangeAggregator.java``: ranges start at the query's start;
``CountAggregator.java``: one long per range with points), so one number per tag group comes
back. A catalog day is counted a few metrics per request: a KairosDB query holds a list of
metric queries and answers one ``queries[i]`` each (``MetricsResource.runQuery``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.client import rate_limited
from dxt_core.backends.examon.decode import _group_tags, _results, counted
from dxt_core.backends.examon.jobs import JOBS_COUNT_METHOD, ExamonJobs
from dxt_core.backends.examon.policy import blocks
from dxt_core.errors import DxtError, SourceError, WindowTooLarge
from dxt_core.http import RequestStats
from dxt_core.reconcile import SourceCount
from dxt_core.windows import Window


def count_method(window: Window) -> str:
    """How a metric-day's count is taken (the manifest's ``source_count.method``)."""
    return (
        f"KairosDB count aggregator, one sampling range of {window.end_ms - window.start_ms}"
        " ms from start_absolute, no group_by"
    )


def _count_aggregator(length_ms: int) -> list[dict[str, Any]]:
    return [{"name": "count", "sampling": {"value": length_ms, "unit": "milliseconds"}}]


class KairosDBCounts(ExamonJobs):
    """Counts at the source, for the manifests' ``source_count`` and for reconciling."""

    def count_groups(
        self,
        entry: CatalogEntry,
        start_ms: int,
        end_ms: int,
        stats: RequestStats | None = None,
        group_keys: tuple[str, ...] | None = None,
    ) -> list[tuple[dict[str, str], int]]:
        """The source's count of the points in ``[start_ms, end_ms)``, per tag group.

        Without ``group_keys`` all series form one group. A window refused as too large is
        halved and summed.
        """
        body = self._body(entry, start_ms, end_ms, group_keys)
        body["metrics"][0]["aggregators"] = _count_aggregator(end_ms - start_ms)
        path = self.api_path("datapoints/query", stats)
        try:
            doc = self._ask(path, body, stats, end_ms - start_ms > self.windows.min_s * 1000)
        except WindowTooLarge:
            if end_ms - start_ms <= self.windows.min_s * 1000:
                raise
            mid = start_ms + blocks((end_ms - start_ms) // 2, 1000)
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
            n = counted(result, entry.key, url)
            if n:
                out.append((_group_tags(result) if group_keys is not None else {}, n))
        return out

    def _ask(
        self, path: str, body: dict[str, Any], stats: RequestStats | None, splittable: bool
    ) -> Any:
        """A count query's decoded answer; a refusal (or, when ``splittable``, a read
        timeout) is :class:`WindowTooLarge`."""
        return rate_limited(
            self._http.post_json,
            path,
            body,
            stats=stats,
            too_large=self._too_large,
            timeout_is_too_large=splittable,
        )

    def count_day(
        self, entry: CatalogEntry, window: Window, stats: RequestStats | None = None
    ) -> SourceCount:
        """The source's own count of ``entry`` in ``window`` (see :meth:`count_groups`)."""
        if self.options.for_plugin(entry.plugin).job_table:
            return SourceCount(len(self.fetch_jobs(entry.metric, window, stats)), JOBS_COUNT_METHOD)
        n = sum(c for _, c in self.count_groups(entry, window.start_ms, window.end_ms, stats))
        return SourceCount(n, count_method(window))

    def count_day_many(
        self,
        entries: Sequence[CatalogEntry],
        window: Window,
        stats: RequestStats | None = None,
        per_request: int = 64,
        errors: dict[str, DxtError] | None = None,
    ) -> dict[str, SourceCount]:
        """:meth:`count_day` of many metrics, ``per_request`` of them in one query.

        Reconciling a catalog day so takes a few requests, not one per metric. A batch
        refused as too large (KairosDB's ``query_limit`` counts every point read, counted or
        not) is asked one metric at a time (:meth:`count_day` splits the window further). Job
        tables are asked apart.

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
        for i in range(0, len(metrics), per_request):
            self._count_batch(metrics[i : i + per_request], window, stats, out, errors)
        return out

    def _count_batch(
        self,
        batch: Sequence[CatalogEntry],
        window: Window,
        stats: RequestStats | None,
        out: dict[str, SourceCount],
        errors: dict[str, DxtError] | None,
    ) -> None:
        """Count ``batch`` in one query into ``out`` (see :meth:`count_day_many`)."""
        body = self._body(batch[0], window.start_ms, window.end_ms, None)
        aggregators = _count_aggregator(window.end_ms - window.start_ms)
        body["metrics"] = [
            {"name": e.metric, "tags": self.tag_filter(e), "aggregators": aggregators}
            for e in batch
        ]
        path = self.api_path("datapoints/query", stats)
        url = self._http.url(path)
        try:
            doc = self._ask(path, body, stats, True)
            queries = doc["queries"] if isinstance(doc, dict) else None
            if not isinstance(queries, list) or len(queries) != len(batch):
                raise SourceError(
                    f"a count of {len(batch)} metrics answered "
                    f"{len(queries) if isinstance(queries, list) else 'no'} queries",
                    url=url,
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
            self._count_batch(batch[:half], window, stats, out, errors)
            self._count_batch(batch[half:], window, stats, out, errors)
            return
        method = count_method(window)
        for e, q in zip(batch, queries, strict=True):
            n = sum(counted(r, e.key, url) for r in _results({"queries": [q]}, url))
            out[e.key] = SourceCount(n, method)
