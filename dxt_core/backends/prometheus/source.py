"""Raw stored samples from Prometheus or VictoriaMetrics, one selector and window at a time.

Never ``/api/v1/query_range``: its points are the expression evaluated at each step, not the
samples the server stored. Instead:

* **Prometheus**: an instant query of a range vector, ``GET /api/v1/query?query=<sel>[<d>ms]
  &time=<t>``, answers a matrix of the stored samples in the range
  (prometheus/prometheus web/api/v1/api.go ``query``; promql/engine.go evaluates a matrix
  selector to the samples themselves). Prometheus 2.x selects ``[t - d, t]``, both ends
  included; Prometheus 3 and VictoriaMetrics select ``(t - d, t]``.
* **VictoriaMetrics**: ``GET /api/v1/export?match[]=<sel>&start=<a>&end=<b>`` streams one
  JSON line per series, ``{"metric": {...}, "values": [...], "timestamps": [...]}``, both
  bounds included (VictoriaMetrics app/vmselect/prometheus/prometheus.go ``ExportHandler``,
  export.qtpl).

A window ``[a, b)`` is asked so that the answer certainly covers it on every range
semantics (Prometheus: ``d = b - a + 1 ms`` at ``t = b - 1 ms``; VictoriaMetrics:
``start = a``, ``end = b - 1 ms``); samples outside ``[a, b)`` are dropped here and counted.

The servers refuse over-large queries (see :data:`REFUSAL_RULES`): a refused window is
halved down to a floor; refused at the floor, its series are split in two by the values of a
label, recursively, and the parts merged back into one batch, so the files do not depend on
how the day was cut.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from dxt_core import masking
from dxt_core.backends.prometheus.columns import (
    Columns,
    concat,
    count_of,
    decode_export,
    decode_matrix,
    inside,
    without_nan,
)
from dxt_core.backends.prometheus.connection import PrometheusConnection
from dxt_core.backends.prometheus.labels import LabelCache, LabelCheck
from dxt_core.backends.prometheus.listing import list_series
from dxt_core.backends.prometheus.policy import (
    names_a_limit,
    refused_at_the_end,
    too_large,
)
from dxt_core.backends.prometheus.promql import (
    api_seconds,
    is_metric_name,
    leading_name,
    shown,
    split_label,
    with_matcher,
)
from dxt_core.backends.prometheus.transport import PromHttp, long_form
from dxt_core.errors import (
    ConfigError,
    QueryRejected,
    SourceError,
    SourceUnavailable,
    WindowTooLarge,
)
from dxt_core.http import RequestStats, RetryPolicy
from dxt_core.masking import excerpt
from dxt_core.prefetch import InFlight
from dxt_core.records import SeriesSchema
from dxt_core.urls import wants_gzip
from dxt_core.windows import Window, check_window_sizes, from_ms, next_window_ms, zone

log = masking.logger("dxt_core.prometheus")

PROMETHEUS = "prometheus"
VICTORIAMETRICS = "victoriametrics"
#: Series labels a source keeps decoded from day to day (:meth:`LabelCache.trim`): about
#: 1.5 KB each (measured with tracemalloc, seven labels), so some 75 MB at the bound; a day
#: of more series keeps its own (twice its listing).
LABEL_CACHE_SERIES = 50_000


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """Which server answers: its kind, its version, and how its range selectors end."""

    kind: str
    version: str = ""
    #: the connection's ``range_ends``: ``auto`` (from the kind and version), ``closed`` or
    #: ``left-open``
    range_ends: str = "auto"

    @property
    def left_open(self) -> bool:
        """Whether ``m[d]`` at ``t`` selects ``(t - d, t]`` (VictoriaMetrics, Prometheus 3)
        rather than ``[t - d, t]`` (Prometheus 2)."""
        if self.range_ends != "auto":
            return self.range_ends == "left-open"
        if self.kind == VICTORIAMETRICS:
            return True
        major = re.match(r"v?(\d+)\.", self.version)
        return bool(major) and int(major.group(1)) >= 3 if major else False

    def describe(self) -> str:
        name = "VictoriaMetrics" if self.kind == VICTORIAMETRICS else "Prometheus"
        said = "" if self.range_ends == "auto" else f" (range ends {self.range_ends})"
        return f"{name} {self.version}".strip() + said


@dataclass(slots=True)
class QueryCounts:
    """What a metric-day's queries dropped, reported with it."""

    dropped_outside_window: int = 0
    #: VictoriaMetrics' staleness markers, which its export sends as NaN (not samples)
    stale_markers: int = 0


@dataclass(slots=True)
class _Answer:
    """A window asked for on another thread: its end, its answer (or the server's refusal)
    and its own request counters."""

    stop: int
    raw: bytes | WindowTooLarge
    stats: RequestStats


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How a day is cut into queries.

    Attributes:
        initial_s: length of the first query window.
        target_points: samples in hand at once, aimed at (bounds memory): each query aims
            at ``target_points / in_flight`` samples, so asking windows ahead does not raise
            the peak.
        min_s: never split time below this; a refusal at this size splits the series.
            Windows are whole ``min_s`` blocks from the day start, as the writers need.
        max_s: never query more than this at once.
        in_flight: windows asked for at once, ahead of the one being written; 0: the
            connection's ``in_flight``, and when that is 0 too, by server: 2 on Prometheus
            (its engine evaluates a query on one core, and serves two at once), 1 on
            VictoriaMetrics (its export is cheap: the client's work bounds it).
    """

    initial_s: int = 3600
    target_points: int = 500_000
    min_s: int = 300
    max_s: int = 90_000
    in_flight: int = 0

    def __post_init__(self) -> None:
        check_window_sizes(self.initial_s, self.min_s, self.max_s, self.target_points)
        if self.in_flight < 0:
            raise ConfigError("in_flight must be >= 0 (0: chosen by the server)")


class PrometheusSource:
    """Reads raw samples from a Prometheus-compatible server (one client for the run)."""

    name = "prometheus"

    def __init__(
        self,
        conn: PrometheusConnection,
        retry: RetryPolicy | None = None,
        windows: WindowPolicy | None = None,
    ) -> None:
        self.conn = conn
        self.retry = retry or RetryPolicy()
        self.windows = windows or WindowPolicy()
        self.tz = zone(conn.time_zone)
        bearer = conn.auth == "bearer"
        self._http = PromHttp(
            conn.url,
            user=None if bearer else conn.user,
            password=None if bearer else conn.password,
            timeout_s=conn.timeout_s,
            retry=self.retry,
            verify_tls=conn.verify_tls,
            accept_gzip=wants_gzip(conn.compression, conn.url),
        )
        if bearer:
            self._http.bearer = conn.password
        self._lock = threading.Lock()
        self._server: ServerInfo | None = None
        self._names: dict[tuple[int, int] | None, list[str]] = {}
        #: labels of the export lines' metric JSON, decoded once per run
        self._label_cache = LabelCache()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server ------------------------------------------------------------------------
    def _get(
        self,
        path: str,
        params: Mapping[str, str] | Sequence[tuple[str, str]],
        stats: RequestStats | None = None,
        context: str = "",
        heavy: bool = False,
    ) -> bytes:
        form = long_form(params)
        label_values = path.startswith("api/v1/label/")
        if form is not None and label_values and self.server().kind == PROMETHEUS:
            form = None  # Prometheus answers label values to GET only (405 to a POST)
        _, body, _ = self._http.exchange(
            "GET" if form is None else "POST",
            path,
            params=params if form is None else None,  # type: ignore[arg-type]
            form=form,
            stats=stats,
            too_large=too_large,
            # a sample or count query that outlasts the read timeout is read as too large
            # (split), as the server's own --query.timeout refusal is
            timeout_is_too_large=heavy,
            context=context,
        )
        return body

    def _api(
        self, path: str, params: Mapping[str, str] | Sequence[tuple[str, str]], **get: Any
    ) -> Any:
        """The ``data`` of the API's JSON answer to ``GET path`` (``get``: :meth:`_get`'s
        keywords); a clear error for another answer."""
        body = self._get(path, params, **get)
        context = get.get("context", "")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise SourceError(
                f"answer is not valid JSON ({exc}){' (' + context + ')' if context else ''}: "
                f"{excerpt(body, 200)!r}; is this a Prometheus API URL?",
                url=self._http.url(path),
            ) from exc
        if not isinstance(doc, dict) or doc.get("status") != "success" or "data" not in doc:
            err = doc.get("error") if isinstance(doc, dict) else None
            raise SourceError(
                f"the server did not answer success: {excerpt(str(err or doc), 300)}"
                f"{' (' + context + ')' if context else ''}",
                url=self._http.url(path),
            )
        return doc["data"]

    def server(self) -> ServerInfo:
        """The server's kind and version: named by the connection, or asked once.

        VictoriaMetrics answers ``GET /health`` with ``OK`` (Prometheus: 404; its own is
        ``/-/healthy``); Prometheus's version comes from ``/api/v1/status/buildinfo``
        (VictoriaMetrics 1.79 answers it with empty data).
        """
        if self._server is not None:
            return self._server
        with self._lock:
            if self._server is None:
                self._server = self._detect()
        return self._server

    @property
    def compressed(self) -> bool:
        """Whether the server is asked for gzip answers (the connection's ``compression``)."""
        return self._http.accept_gzip

    def _default_in_flight(self) -> int:
        """Windows in flight when neither the policy nor the connection says: 2 on
        Prometheus (its engine evaluates a query on one core), 1 on VictoriaMetrics."""
        return 1 if self.server().kind == VICTORIAMETRICS else 2

    def _detect(self) -> ServerInfo:
        flavor = self.conn.flavor
        if flavor == "auto":
            status, body, _ = self._http.exchange(
                "GET", "health", accept=lambda s, b: 400 <= s < 500
            )
            flavor = VICTORIAMETRICS if status == 200 and body.strip() == b"OK" else PROMETHEUS
        version = ""
        if flavor == VICTORIAMETRICS:
            version = self._vm_version()
        else:
            try:
                doc = self._api("api/v1/status/buildinfo", {})
                version = str(doc.get("version", "")) if isinstance(doc, dict) else ""
            except QueryRejected as exc:
                if exc.status in (401, 403):
                    raise
                version = ""  # an older or proxied server: Prometheus 2 semantics
        info = ServerInfo(flavor, version, self.conn.range_ends)
        log.info("%s: %s", self.conn.safe_url, info.describe())
        if flavor == PROMETHEUS and not version and info.range_ends == "auto":
            log.warning(
                "%s does not say its version: its range selectors are taken as Prometheus "
                "2's (both ends included); if it is Prometheus 3 or another left-open engine, "
                "set range_ends=left-open (the connection's extra, --range-ends), else every "
                "past day's count disagrees with its samples",
                self.conn.safe_url,
            )
        return info

    def _vm_version(self) -> str:
        """``vm_app_version{version="victoria-metrics-..."}`` from ``/metrics``, if shown."""
        try:
            status, body, _ = self._http.exchange("GET", "metrics", accept=lambda s, b: s >= 400)
        except SourceError:
            return ""
        if status != 200:
            return ""
        m = re.search(rb'vm_app_version\{[^}]*version="([^"]+)"', body)
        if not m:
            return ""
        text = m.group(1).decode("utf-8", "replace")
        v = re.search(r"v(\d+\.\d+\.\d+)", text)
        return v.group(1) if v else text

    # -- names and series ------------------------------------------------------------------
    def metric_names(self, window: Window | None = None) -> list[str]:
        """Metric names the server knows (``/api/v1/label/__name__/values``), over
        ``window`` when given (``start``/``end``), else over all it holds."""
        key = (window.start_ms, window.end_ms) if window else None
        if key in self._names:
            return self._names[key]
        params = {}
        if window is not None:
            params = {"start": api_seconds(window.start_ms), "end": api_seconds(window.end_ms - 1)}
        data = self._api("api/v1/label/__name__/values", params)
        if not isinstance(data, list):
            raise SourceError(
                "unexpected answer to label values: not a list",
                url=self._http.url("api/v1/label/__name__/values"),
            )
        names = sorted(str(n) for n in data)
        self._names[key] = names
        return names

    def check_known(self, metric: str, window: Window | None = None) -> None:
        """Raise unless the server knows ``metric`` (over ``window``, else all it lists).

        A query of a name never stored answers an empty matrix, exactly as one for a metric
        without samples that day: without this check a misspelled catalog entry would
        archive as "empty" forever.

        Raises:
            QueryRejected: unknown name; the message names the closest known names.
        """
        if not is_metric_name(metric):
            # a selector may rightly match nothing on some days, but not name a metric the
            # server never stored: a typo there archived "empty" forever too
            named = leading_name(metric)
            if named is None:
                return
            metric = named
        names = self.metric_names(window)
        if metric in names:
            return
        if window is not None:
            names = self.metric_names(None)
            if metric in names:
                return
        close = difflib.get_close_matches(metric, names, n=5, cutoff=0.6)
        hint = f"closest known names: {', '.join(close)}" if close else "no similar name"
        raise QueryRejected(
            f"the server has no metric named {metric!r} ({hint}); fix the catalog entry "
            "or --metrics",
            url=self._http.url("api/v1/label/__name__/values"),
        )

    def series(
        self, selector: str, window: Window, stats: RequestStats | None = None
    ) -> list[dict[str, str]]:
        """Label sets of the series ``selector`` matches in ``window``
        (``/api/v1/series``; both servers answer a superset: whole blocks or index days),
        split by label values while the server refuses to list them all (:mod:`.listing`)."""
        span = [("start", api_seconds(window.start_ms)), ("end", api_seconds(window.end_ms - 1))]

        def get(path: str, params: Sequence[tuple[str, str]], context: str) -> Any:
            return self._api(path, params, stats=stats, context=context)

        url = self._http.url("api/v1/series")
        return list_series(get, selector, span, stats, url, self._is_vm())

    def schema(
        self, selector: str, window: Window, stats: RequestStats | None = None
    ) -> tuple[SeriesSchema, list[dict[str, str]]]:
        """Every label of the series the selector matches that day, sorted (``__name__`` is
        the ``name`` column); and those series. Both servers answer a superset (a series
        with no sample that day may be listed): the archive's columns are those of the
        series counted (:meth:`count`'s ``labels``)."""
        found = self.series(selector, window, stats)
        keys = sorted({k for s in found for k in s if k != "__name__"})
        name = selector if is_metric_name(selector) else ""
        return SeriesSchema(name=name, tag_keys=tuple(keys)), found

    # -- samples ---------------------------------------------------------------------------
    def _where(self, selector: str, start_ms: int, end_ms: int) -> str:
        a = from_ms(start_ms, self.tz).isoformat()
        b = from_ms(end_ms, self.tz).isoformat()
        return f"{shown(selector)}, window [{a}, {b})"

    def query(
        self,
        selector: str,
        start_ms: int,
        end_ms: int,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
        at_floor: bool = False,
    ) -> Columns:
        """One request for the raw samples of ``[start_ms, end_ms)``, as columns (series in
        the answer's order; samples outside the window dropped and counted).

        Above the window floor a read timeout is read as "too large" (the window is
        halved); ``at_floor`` (it cannot be halved) it is retried with backoff, as a 503 is,
        before the metric-day fails.

        Raises:
            WindowTooLarge: the server refused it (see :data:`REFUSAL_RULES`).
            SourceError: the answer is not what the API documents.
        """
        raw = self.ask(selector, start_ms, end_ms, stats, at_floor)
        return self.decode(raw, selector, start_ms, end_ms, counts)

    def ask(
        self,
        selector: str,
        start_ms: int,
        end_ms: int,
        stats: RequestStats | None = None,
        at_floor: bool = False,
    ) -> bytes:
        """The answer of :meth:`query`'s request, not decoded yet (see :meth:`_window`)."""
        where = self._where(selector, start_ms, end_ms)
        if self.server().kind != VICTORIAMETRICS:
            # [t - d, t] on Prometheus 2, (t - d, t] on 3: both cover [a, b - 1 ms] with
            # d = b - a + 1 ms at t = b - 1 ms; anything before a is dropped by decode.
            params = {"query": f"{selector}[{end_ms - start_ms + 1}ms]"}
            params["time"] = api_seconds(end_ms - 1)
            return self._get("api/v1/query", params, stats, context=where, heavy=not at_floor)
        # both bounds included: [a, b - 1 ms] is exactly [a, b) for ms timestamps
        export = [("match[]", selector), ("start", api_seconds(start_ms))]
        export.append(("end", api_seconds(end_ms - 1)))
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            body = self._get("api/v1/export", export, stats, context=where, heavy=not at_floor)
            if not body or body.endswith(b"\n"):
                _check_export_tail(body, where, self._http.url("api/v1/export"))
                return body
            cut = f"{where}: the export ends inside a line (a cut answer)"
            if attempt == attempts:
                raise SourceUnavailable(
                    f"{cut} after {attempts} attempts; nothing of the window is archived "
                    "(run it again later)",
                    url=self._http.url("api/v1/export"),
                )
            if stats is not None:
                stats.retries += 1
            log.warning("%s; retry %d/%d", cut, attempt, attempts - 1)
            self._http.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _is_vm(self) -> bool:
        return self.server().kind == VICTORIAMETRICS

    def _narrowed(self, selector: str, label: str, values: Sequence[str]) -> str:
        """``selector`` narrowed to ``label``'s ``values``, as this server's parser takes a
        label name that is not a classic one (:func:`.promql.with_matcher`)."""
        return with_matcher(selector, label, values, victoriametrics=self._is_vm())

    def decode(
        self,
        raw: bytes,
        selector: str,
        start_ms: int,
        end_ms: int,
        counts: QueryCounts | None = None,
    ) -> Columns:
        """:meth:`ask`'s answer as the window's columns; samples outside it dropped, counted."""
        where = self._where(selector, start_ms, end_ms)
        if self.server().kind == VICTORIAMETRICS:
            url = self._http.url("api/v1/export")
            cols, stale = without_nan(decode_export(raw, where, url, self._label_cache))
            if stale:
                log.info("%s: left out %d staleness markers (not samples)", where, stale)
                if counts is not None:
                    counts.stale_markers += stale
        else:
            cols = decode_matrix(raw, where, self._http.url("api/v1/query"), self._label_cache)
        cols, dropped = inside(concat([cols], start_ms, end_ms))
        if dropped:
            log.info("%s: dropped %d samples outside the window", where, dropped)
            if counts is not None:
                counts.dropped_outside_window += dropped
        return cols

    def fetch(
        self,
        selector: str,
        start_ms: int,
        end_ms: int,
        series: Sequence[Mapping[str, str]],
        stats: RequestStats,
        counts: QueryCounts | None = None,
        refused: WindowTooLarge | None = None,
    ) -> Columns:
        """``[start_ms, end_ms)`` of ``selector``, split by series while the server refuses
        (``refused``: it just did, do not ask again).

        ``series`` (label sets, from :meth:`series`) tell how to split: by the label with the
        most distinct values, in two halves of its sorted values, recursively. The parts'
        series are disjoint; they are joined into one window.
        """
        try:
            if refused is not None:
                raise refused
            return self.query(selector, start_ms, end_ms, stats, counts, at_floor=True)
        except WindowTooLarge as exc:
            label, values = split_label(series)
            if label is None:
                raise refused_at_the_end(self._where(selector, start_ms, end_ms), exc) from exc
            stats.splits += 1
            half = len(values) // 2
            log.info(
                "%s: refused; splitting %d series by %s",
                self._where(selector, start_ms, end_ms),
                len(series),
                label,
            )
            parts = []
            for part in (values[:half], values[half:]):
                chosen = set(part)
                sub = [s for s in series if s.get(label, "") in chosen]
                parts.append(
                    self.fetch(
                        self._narrowed(selector, label, part), start_ms, end_ms, sub, stats, counts
                    )
                )
            return concat(parts, start_ms, end_ms)

    def iter_batches(
        self,
        selector: str,
        window: Window,
        schema: SeriesSchema,
        series: Sequence[Mapping[str, str]],
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
        expected: int | None = None,
    ) -> Iterator[Columns]:
        """``window`` as consecutive query windows in time order, each whole blocks of the
        window floor from the day start.

        ``expected`` (the server's count of the window's samples) sizes the first window to
        the point budget, so that not even the first answer is larger than planned.

        Raises:
            SourceError: a series carries a label the day's schema does not list (it would
                lose a column).
        """
        stats = stats if stats is not None else RequestStats()
        counts = counts if counts is not None else QueryCounts()
        pol = self.windows
        min_ms, max_ms = pol.min_s * 1000, pol.max_s * 1000
        cursor, end = window.start_ms, window.end_ms
        ahead = pol.in_flight or self.conn.in_flight or self._default_in_flight()
        target = max(1, pol.target_points // ahead)  # the windows in flight share the budget
        size = _blocks(pol.initial_s * 1000, min_ms)
        if expected:
            planned = (end - cursor) * target // expected
            size = _blocks(max(min_ms, min(max_ms, planned)), min_ms)
        cap = max_ms
        # a day's series are decoded once; those of earlier days are let go past a bound
        self._label_cache.trim(max(LABEL_CACHE_SERIES, 2 * len(series)))
        check = LabelCheck({*schema.tag_keys, "__name__"})
        asked = cursor  # where the next window to ask for starts
        with InFlight[_Answer](ahead, "dxt-prometheus-query") as flight:

            def ask() -> None:  # windows up to the number in flight, in time order
                nonlocal asked
                while len(flight) < flight.size and asked < end:
                    a, asked = asked, min(asked + size, end)
                    at_floor = a + min_ms >= asked
                    flight.start(partial(self._window, selector, a, asked, at_floor))

            ask()
            while cursor < end:
                got = flight.take()
                stats.add(got.stats)
                if isinstance(got.raw, WindowTooLarge):
                    if got.stop - cursor > min_ms:
                        size = _blocks((got.stop - cursor) // 2, min_ms)
                        cap = size
                        stats.splits += 1
                        log.info(
                            "%s: refused, splitting the window",
                            self._where(selector, cursor, got.stop),
                        )
                        for dropped in flight.drop_all():  # asked with the refused size
                            stats.add(dropped.stats)
                        asked = cursor
                        ask()
                        continue
                    cols = self.fetch(
                        selector, cursor, got.stop, series, stats, counts, refused=got.raw
                    )
                else:
                    cols = self.decode(got.raw, selector, cursor, got.stop, counts)
                got.raw = b""  # the answer is in the columns: its bytes go
                if check.new_series(cols):
                    self._check_labels(cols, check, selector, cursor, got.stop)
                size = _blocks(
                    next_window_ms(got.stop - cursor, cols.rows, target, min_ms, cap),
                    min_ms,
                )
                cursor = got.stop
                ask()  # the next windows are on their way while this one is written
                yield cols
                del cols, got  # not kept while the next is fetched

    def _check_labels(
        self, cols: Columns, check: LabelCheck, selector: str, start_ms: int, end_ms: int
    ) -> None:
        """Each series seen for the first time carries only labels of the day's schema."""
        extra = check.extra_labels(cols)
        if extra:
            labels, names = extra
            raise SourceError(
                f"{self._where(selector, start_ms, end_ms)}: series {labels} has labels "
                f"{names} that /api/v1/series did not list for the day; rerun the day",
                url=self._http.url("api/v1/series"),
            )

    def _window(self, selector: str, start_ms: int, end_ms: int, at_floor: bool) -> _Answer:
        """One window's answer, asked for on a thread of its own with counters of its own;
        a refusal is an answer (the caller splits). The writing thread decodes the answers,
        one at a time: a decoder's intermediates are about twice an answer's size, and
        decoding the next window on its thread while the last is written measured, from
        VictoriaMetrics at 10,000 series, 206 MB peak RSS against 196 (1,000,000 samples
        a window) for the same wall time within the machine's noise (this also held for
        two windows in flight on the medium day: 21 MB more, 5 % more CPU, 6 % less wall)."""
        stats = RequestStats()
        try:
            raw = self.ask(selector, start_ms, end_ms, stats, at_floor)
        except WindowTooLarge as exc:
            return _Answer(end_ms, exc, stats)
        return _Answer(end_ms, raw, stats)

    # -- the source's own count ------------------------------------------------------------
    def count(
        self,
        selector: str,
        window: Window,
        stats: RequestStats | None = None,
        series: Sequence[Mapping[str, str]] | None = None,
        labels: set[str] | None = None,
        tz: dt.tzinfo | None = None,
    ) -> tuple[int, str]:
        """The samples the server holds for ``selector`` in ``window``, by its own count
        (``tz``: the zone the description gives the time in; default the connection's):
        ``count_over_time(<selector>[d])`` at ``t = end - 1 ms``, per series, summed.

        ``d`` is chosen for the server's range ends so that the range is exactly the
        half-open window: ``end - start - 1 ms`` where both ends are included (Prometheus
        2), ``end - start`` where the start is excluded (VictoriaMetrics, Prometheus 3).
        A refused count is split in halves of time down to the window floor, then by
        ``series`` (listed from the server when not given) as :meth:`fetch` splits, each
        part counted the same way. ``labels`` (when given) gets the label names of the
        series that have samples in the window: the day's columns.

        Returns:
            (count, the query for the whole window as the server would be asked it).
        """
        stats = stats if stats is not None else RequestStats()
        left_open = self.server().left_open
        known = None if series is None else list(series)
        parts = self._by_name(selector, window, stats, known)
        total = sum(
            self._count(sel, window.start_ms, window.end_ms, left_open, stats, part, labels)
            for sel, part in parts
        )
        d = window.end_ms - window.start_ms - (0 if left_open else 1)
        t = window.end_ms - 1
        # the time in the day's zone (the window's ends are UTC datetimes)
        local = from_ms(t, tz or self.tz).isoformat(timespec="milliseconds")
        method = (
            f"count_over_time({selector}[{d}ms]) at time={api_seconds(t)} ({local}), "
            "summed over series"
        )
        if len(parts) > 1:
            method += f", asked per metric name ({len(parts)})"
        return total, method

    def _by_name(
        self,
        selector: str,
        window: Window,
        stats: RequestStats,
        series: list[Mapping[str, str]] | None,
    ) -> list[tuple[str, list[Mapping[str, str]] | None]]:
        """The selector to count, one per metric name when it matches several:
        ``count_over_time`` drops ``__name__``, so two metrics' series with the same other
        labels would be one label set twice, which both servers refuse ("vector cannot
        contain metrics with the same labelset", promql/engine.go; "duplicate output
        timeseries", VictoriaMetrics app/vmselect/prometheus). A metric name is one name."""
        if is_metric_name(selector):
            return [(selector, series)]
        if series is None:
            series = list(self.series(selector, window, stats))
        names = sorted({s.get("__name__", "") for s in series})
        if len(names) < 2:
            return [(selector, series)]
        return [
            (
                self._narrowed(selector, "__name__", [n]),
                [s for s in series if s.get("__name__", "") == n],
            )
            for n in names
        ]

    def _count(
        self,
        selector: str,
        start_ms: int,
        end_ms: int,
        left_open: bool,
        stats: RequestStats,
        series: list[Mapping[str, str]] | None,
        labels: set[str] | None = None,
    ) -> int:
        d = end_ms - start_ms - (0 if left_open else 1)
        params = {"query": f"count_over_time({selector}[{d}ms])", "time": api_seconds(end_ms - 1)}
        if self.server().kind == VICTORIAMETRICS:
            # else a time within -search.latencyOffset (30 s) of now is moved to now - 30 s
            # (app/vmselect/prometheus/prometheus.go QueryHandler): a count of a day just
            # over would end early and disagree with its samples
            params["nocache"] = "1"
        where = self._where(selector, start_ms, end_ms)
        floor = end_ms - start_ms <= self.windows.min_s * 1000
        try:
            data = self._api(
                "api/v1/query", params, stats=stats, context=f"count of {where}", heavy=not floor
            )
        except WindowTooLarge as exc:
            stats.splits += 1
            if not floor:
                mid = start_ms + _blocks((end_ms - start_ms) // 2, self.windows.min_s * 1000)
                return sum(
                    self._count(selector, a, b, left_open, stats, series, labels)
                    for a, b in ((start_ms, mid), (mid, end_ms))
                )
            if series is None:
                span = Window(from_ms(start_ms, self.tz), from_ms(end_ms, self.tz))
                series = list(self.series(selector, span, stats))
            label, values = split_label(series)
            if label is None:
                raise refused_at_the_end(f"count of {where}", exc) from exc
            half = len(values) // 2
            total = 0
            for part in (values[:half], values[half:]):
                chosen = set(part)
                sub = [x for x in series if x.get(label, "") in chosen]
                total += self._count(
                    self._narrowed(selector, label, part),
                    *(start_ms, end_ms, left_open, stats, sub, labels),
                )
            return total
        return count_of(data, where, self._http.url("api/v1/query"), labels)

    def day_tz(self) -> dt.tzinfo:
        return self.tz


def _check_export_tail(body: bytes, where: str, url: str) -> None:
    """An export that failed after its answer began: VictoriaMetrics had sent 200 and some
    lines, then writes its error as the last line (lib/httpserver ``Errorf``:
    ``http.Error`` once the headers are out). A limit's text (its export time, its samples)
    is the window refused as too large, to be split; any other is an error naming it."""
    tail = body.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    if not tail or tail.startswith(b"{"):
        return
    text = tail[:2000].decode("utf-8", "replace")
    if names_a_limit(text):
        raise WindowTooLarge(f"{where}: the export stopped: {text}", url=url, status=200)
    raise SourceError(f"{where}: the export ends with an error line: {text}", url=url)


def _blocks(size_ms: int, block_ms: int) -> int:
    """``size_ms`` rounded down to a whole number of blocks, at least one."""
    return max(block_ms, size_ms // block_ms * block_ms)
