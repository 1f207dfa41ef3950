"""The KairosDB client the Examon source builds on: the HTTP client (direct, or through
Grafana's data-source proxy), metric names, and the body of a query for one metric."""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.policy import WindowPolicy, too_large
from dxt_core.errors import QueryRejected, RateLimited, SourceError, SourceUnavailable
from dxt_core.http import HttpClient, RequestStats, RetryPolicy
from dxt_core.windows import zone

_T = TypeVar("_T")


class KairosDBClient:
    """The HTTP side of :class:`~dxt_core.backends.examon.source.KairosDBSource`: its
    connection, the endpoints (direct or through Grafana), names, and request bodies."""

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

    def __enter__(self) -> Self:
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
        doc = rate_limited(self._http.get_json, self.api_path("version"))
        return str(doc.get("version", "")) if isinstance(doc, dict) else str(doc)

    def metric_names(self, prefix: str | None = None) -> list[str]:
        """Metric names KairosDB knows (``GET /api/v1/metricnames``), internal ones left out."""
        params = {"prefix": prefix} if prefix else None
        path = self.api_path("metricnames")
        doc = rate_limited(self._http.get_json, path, params=params)
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
    def tag_filter(self, entry: CatalogEntry) -> dict[str, list[str]]:
        if self.options.for_plugin(entry.plugin).cluster_tag:
            return {"cluster": [self.options.cluster]}
        return {}

    def _body(
        self, entry: CatalogEntry, start_ms: int, end_ms: int, tag_keys: tuple[str, ...] | None
    ) -> dict[str, Any]:
        metric: dict[str, Any] = {"name": entry.metric, "tags": self.tag_filter(entry)}
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


def rate_limited(call: Callable[..., _T], *args: Any, **kw: Any) -> _T:
    """``call(*args, **kw)``; a 429 that outlasted the client's retries is :class:`RateLimited`."""
    try:
        return call(*args, **kw)
    except SourceUnavailable as exc:
        if exc.status == 429 and not isinstance(exc, RateLimited):
            raise RateLimited(
                f"the server (or a proxy in front of it) limits the request rate and kept "
                f"refusing ({exc.message}); run fewer workers at once or retry later",
                url=exc.url,
                status=exc.status,
            ) from exc
        raise
