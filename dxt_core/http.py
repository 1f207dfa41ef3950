"""HTTP access with timeouts, retries and credential-free URLs, shared by every source.

Retries live here and nowhere else: connection errors, timeouts, 429 and 5xx are retried with
exponential backoff (``Retry-After`` honoured); any other 4xx fails at once with the server's
own error text. A source may declare that some answers mean "this window is too large"
(``too_large``), which is raised at once as :class:`WindowTooLarge` so that the caller splits
the window instead of hammering the server with the same query.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson

from dxt_core.errors import (
    ConfigError,
    QueryRejected,
    SourceError,
    SourceUnavailable,
    WindowTooLarge,
)

log = logging.getLogger("dxt_core.http")

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def redact_url(url: str) -> str:
    """``url`` without user name, password, query string or fragment (safe for logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def normalise_base_url(url: str, what: str = "URL") -> str:
    """Check a base URL and drop a trailing slash; the error says what a good one looks like."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"bad {what} {redact_url(url)!r}: expected http(s)://host[:port][/path], "
            "e.g. http://examon.example.org:8083"
        )
    return url.strip().rstrip("/")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures.

    Attributes:
        attempts: total tries per request (1 = no retry).
        backoff_s: first delay; doubles each retry.
        max_backoff_s: ceiling of one delay (also caps ``Retry-After``).
    """

    attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be >= 1, got {self.attempts}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("retry delays must be >= 0")

    def delay(self, retry_number: int, retry_after: float | None = None) -> float:
        """Delay before retry ``retry_number`` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        return float(min(self.backoff_s * (2 ** (retry_number - 1)), self.max_backoff_s))


@dataclass(slots=True)
class RequestStats:
    """Counters of one unit of work (a metric-day), reported in task logs and manifests."""

    requests: int = 0
    retries: int = 0
    splits: int = 0
    bytes_received: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "retries": self.retries,
            "splits": self.splits,
            "bytes_received": self.bytes_received,
            "seconds": round(self.seconds, 3),
        }


TooLarge = Callable[[int, bytes], bool]


def error_text(body: bytes, limit: int = 500) -> str:
    """The server's error message: KairosDB's ``{"errors": [...]}`` or the start of the body."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:limit].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(doc, dict):
        errs = doc.get("errors") or doc.get("error") or doc.get("message")
        if isinstance(errs, list):
            return "; ".join(str(e) for e in errs)[:limit]
        if errs is not None:
            return str(errs)[:limit]
    return str(doc)[:limit]


@dataclass
class HttpClient:
    """A small synchronous client: one base URL, Basic auth, timeouts, retries.

    The password is held by httpx's auth object only; it never appears in URLs, logs or
    exception messages.
    """

    base_url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    verify_tls: bool = True
    sleep: Callable[[float], None] = time.sleep
    transport: httpx.BaseTransport | None = None
    _client: httpx.Client | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base_url = normalise_base_url(self.base_url)
        parts = urlsplit(self.base_url)
        if parts.username and self.user is None:
            # Credentials embedded in the URL move to the auth object, out of the URL.
            self.user = parts.username
            self.password = parts.password
        self.base_url = redact_url(self.base_url).rstrip("/")

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            auth = httpx.BasicAuth(self.user, self.password or "") if self.user else None
            self._client = httpx.Client(
                auth=auth,
                timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                # Loading the CA bundle costs ~0.2 s, paid by every Airflow task process:
                # only https URLs need it.
                verify=_ssl_context(self.verify_tls)
                if self.base_url.startswith("https:")
                else False,
                headers={"Accept-Encoding": "gzip", "User-Agent": "dxt-archive"},
                transport=self.transport,
                follow_redirects=True,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
        stats: RequestStats | None = None,
        too_large: TooLarge | None = None,
        timeout_is_too_large: bool = False,
    ) -> bytes:
        """Send a request and return the (decompressed) body of a 2xx answer.

        Raises:
            WindowTooLarge: ``too_large`` matched the answer, or a read timeout with
                ``timeout_is_too_large``.
            QueryRejected: a 4xx other than 429.
            SourceUnavailable: transient failures outlasted the retry policy.
        """
        url = self.url(path)
        content = orjson.dumps(json_body) if json_body is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        stats = stats if stats is not None else RequestStats()
        last: str = ""
        last_status: int | None = None
        for attempt in range(1, self.retry.attempts + 1):
            if attempt > 1:
                stats.retries += 1
            retry_after: float | None = None
            t0 = time.perf_counter()
            stats.requests += 1
            try:
                resp = self.client.request(
                    method, url, content=content, params=params, headers=headers
                )
                body = resp.content
            except httpx.TimeoutException as exc:
                stats.seconds += time.perf_counter() - t0
                if timeout_is_too_large and isinstance(exc, httpx.ReadTimeout):
                    raise WindowTooLarge(
                        f"no answer within {self.timeout_s:g} s (read timeout)", url=url
                    ) from exc
                last, last_status = f"timeout ({type(exc).__name__})", None
            except httpx.TransportError as exc:
                stats.seconds += time.perf_counter() - t0
                last, last_status = f"connection error ({type(exc).__name__}: {exc})", None
            else:
                stats.seconds += time.perf_counter() - t0
                stats.bytes_received += len(body)
                status = resp.status_code
                if 200 <= status < 300:
                    return body
                text = error_text(body)
                if too_large is not None and too_large(status, body):
                    raise WindowTooLarge(
                        f"server refused the window: {text}", url=url, status=status
                    )
                if status == 401 or status == 403:
                    raise QueryRejected(
                        f"authentication failed ({text}); check the user name and password "
                        "of the connection",
                        url=url,
                        status=status,
                    )
                if status not in _RETRY_STATUS:
                    raise QueryRejected(
                        f"server rejected the request: {text}", url=url, status=status
                    )
                last, last_status = f"server error: {text}", status
                retry_after = _retry_after(resp.headers.get("Retry-After"))
            if attempt < self.retry.attempts:
                delay = self.retry.delay(attempt, retry_after)
                log.warning(
                    "%s %s failed (%s%s); retry %d/%d in %.1f s",
                    method,
                    url,
                    last,
                    f", HTTP {last_status}" if last_status else "",
                    attempt,
                    self.retry.attempts - 1,
                    delay,
                )
                self.sleep(delay)
        raise SourceUnavailable(
            f"gave up after {self.retry.attempts} attempts: {last}; the task can be retried "
            "later (Airflow retries it, or clear it)",
            url=url,
            status=last_status,
        )

    def get_json(self, path: str, **kw: Any) -> Any:
        return _loads(self.request("GET", path, **kw), self.url(path))

    def post_json(self, path: str, body: Any, **kw: Any) -> Any:
        return _loads(self.request("POST", path, json_body=body, **kw), self.url(path))


@functools.cache
def _ssl_context(verify: bool) -> ssl.SSLContext:
    """One TLS context per process: building one costs ~0.2 s, more than a small query."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _loads(body: bytes, url: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"answer is not valid JSON ({exc}): {body[:200]!r}", url=url) from exc


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
