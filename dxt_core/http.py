"""HTTP access with timeouts, retries and credential-free URLs, shared by every source.

Retries live here and nowhere else, under one :class:`RetryPolicy` (exponential backoff with
jitter). Every answer is classified once:

- **rate limited**: 429, or 503 with ``Retry-After`` or a "Too Many Requests" body. Retried,
  waiting at least ``Retry-After`` (capped) and the backoff; never read as "window too
  large", so never split. Persisting, it raises :class:`RateLimited`.
- **quota**: 403 saying "quota exceeded": :class:`QueryRejected` at once (waiting seconds
  does not reset a quota).
- **too large**: a source may declare that some answers mean "this window is too large"
  (``too_large``); raised at once as :class:`WindowTooLarge` so that the caller splits.
- **transient**: connection errors, timeouts, other 5xx: retried, then
  :class:`SourceUnavailable`.
- **rejected**: any other 4xx fails at once with the server's own error text.

Each attempt has a total deadline (``deadline_s``, not only the per-read timeout) and a cap
on the decoded size of the answer (``max_answer_bytes``); the body is decoded as it streams
in, so a compressed bomb stops at the cap. Redirects are followed by hand: every TLS hop is
verified (also after an ``http://`` start), and credentials go to the configured origin only.
"""

from __future__ import annotations

import functools
import math
import os
import random
import re
import ssl
import sys
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from urllib.parse import urlencode


def _httpx_cli(*args: Any, **kwargs: Any) -> Any:
    """``httpx.main`` (httpx's own command line), imported when it is called."""
    from httpx._main import main

    return main(*args, **kwargs)


# `import httpx` runs `from ._main import main` for httpx's own command line, which imports
# click, rich and pygments whenever they are installed (they are, beside Airflow): 28 of the
# 44 ms of `import httpx` under `python -X importtime`, and 34-106 ms of a fresh
# interpreter's start on a shared 2-core machine (benchmarks/command.py measures it as
# `httpx_cli_ms`, and lists what `dxt extract examon` imports). A stand-in takes the place
# of `httpx._main` while httpx imports, then leaves sys.modules, so `httpx.main()` and
# `import httpx._main` still load the real one. When httpx is already imported (Airflow's
# task processes), nothing changes.
if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    _stub = types.ModuleType("httpx._main", "stand-in while dxt_core.http imports httpx")
    _stub.__dict__["main"] = _httpx_cli
    sys.modules["httpx._main"] = _stub
    try:
        import httpx
    finally:
        if sys.modules.get("httpx._main") is _stub:
            del sys.modules["httpx._main"]
        del _stub

import httpx  # noqa: E402  (after the stand-in above)
import orjson  # noqa: E402

from dxt_core import masking  # noqa: E402
from dxt_core.budget import (  # noqa: E402
    ANSWER_BUDGET,
    Deadline,
    TooBig,
    Yield,
    read_answer,
)
from dxt_core.errors import (  # noqa: E402
    AnswerTooLarge,
    ConfigError,
    QueryRejected,
    RateLimited,
    SourceError,
    SourceUnavailable,
    WindowTooLarge,
)

# Imported from here by several backends' connections (the names live in dxt_core.urls).
from dxt_core.masking import Secret, excerpt, hide, hide_proxies, scrub  # noqa: E402
from dxt_core.urls import normalise_base_url as normalise_base_url  # noqa: E402
from dxt_core.urls import origin, split_credentials  # noqa: E402
from dxt_core.urls import redact_url as redact_url  # noqa: E402

log = masking.logger("dxt_core.http")
# httpx's own request lines (INFO: an Airflow task's log, dxt -v) quote each URL it asks,
# a redirect's with the credentials its Location holds: masked as dxt_core's are
masking.logger("httpx")

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
_RATE_LIMIT_TEXT = re.compile(rb"too many requests|rate.?limit", re.I)
_QUOTA_TEXT = re.compile(rb"quota", re.I)

ENV_MAX_ANSWER_MB = "DXT_MAX_ANSWER_MB"
ENV_REQUEST_DEADLINE_S = "DXT_REQUEST_DEADLINE_S"
#: Set to 1 to follow a redirect from https to http (clear text) instead of refusing it.
ENV_ALLOW_HTTP_REDIRECT = "DXT_ALLOW_HTTP_REDIRECT"
DEFAULT_MAX_ANSWER_BYTES = 512 << 20
DEFAULT_DEADLINE_S = 900.0


# --------------------------------------------------------------------------------------------
# Retry policy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures and rate limits.

    Attributes:
        attempts: total tries per request (1 = no retry).
        backoff_s: first delay; doubles each retry.
        max_backoff_s: ceiling of one delay (also caps ``Retry-After``).
        jitter: fraction of each backoff drawn at random (0 = none): delays fall in
            ``[(1 - jitter) * b, b]`` so that many clients retrying at once spread out.
    """

    attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be >= 1, got {self.attempts}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("retry delays must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry jitter must be within [0, 1], got {self.jitter}")

    def delay(
        self,
        retry_number: int,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float:
        """Delay before retry ``retry_number`` (1-based): the jittered backoff, at least the
        server's ``Retry-After``, never above ``max_backoff_s``."""
        base = min(self.backoff_s * (2 ** (retry_number - 1)), self.max_backoff_s)
        delay = base * (1.0 - self.jitter * rand())
        if retry_after is not None:
            delay = max(delay, retry_after)
        return float(min(max(delay, 0.0), self.max_backoff_s))


@dataclass(slots=True)
class RequestStats:
    """Counters of one unit of work (a metric-day), reported in task logs and manifests."""

    requests: int = 0
    retries: int = 0
    splits: int = 0
    bytes_received: int = 0
    seconds: float = 0.0
    #: The URL (without query) of the last answer a redirect led to, "" when none was
    #: redirected: the manifest records it as ``source_url_used``.
    url_used: str = ""

    def add(self, other: RequestStats) -> None:
        """Count in these the requests of ``other`` (made for the same unit on another
        thread, with counters of their own)."""
        self.requests += other.requests
        self.retries += other.retries
        self.splits += other.splits
        self.bytes_received += other.bytes_received
        self.seconds += other.seconds
        self.url_used = other.url_used or self.url_used

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
    """The server's error message: KairosDB's ``{"errors": [...]}`` or the start of the body,
    without a credential it echoes (:func:`dxt_core.masking.scrub`: it goes to log lines)."""
    return scrub(_error_text(body, limit + 4096))[:limit]  # masked before it is cut


def _error_text(body: bytes, limit: int) -> str:
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


def is_rate_limited(status: int, headers: Mapping[str, str], body: bytes) -> bool:
    """429, or a 503 that says so (``Retry-After``, or "Too Many Requests" in the body)."""
    if status == 429:
        return True
    return status == 503 and (
        "retry-after" in {k.lower() for k in headers} or bool(_RATE_LIMIT_TEXT.search(body[:2000]))
    )


def is_quota_exceeded(status: int, body: bytes) -> bool:
    """403 naming a quota: waiting seconds does not help, so it is not retried."""
    return status == 403 and bool(_QUOTA_TEXT.search(body[:2000]))


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a number above 0, not {raw!r}")
    return value


def default_max_answer_bytes() -> int:
    """``DXT_MAX_ANSWER_MB`` (MiB) if set, else 512 MiB."""
    mib = _env_float(ENV_MAX_ANSWER_MB, DEFAULT_MAX_ANSWER_BYTES / (1 << 20))
    if mib * (1 << 20) < 1:
        raise ConfigError(f"{ENV_MAX_ANSWER_MB} must be at least one byte (1e-6 MiB), not {mib}")
    return int(mib * (1 << 20))


def default_allow_http_redirect() -> bool:
    from dxt_core.config import as_bool

    return as_bool(os.environ.get(ENV_ALLOW_HTTP_REDIRECT, ""), ENV_ALLOW_HTTP_REDIRECT)


def default_deadline_s() -> float:
    """``DXT_REQUEST_DEADLINE_S`` if set, else 900 s."""
    return _env_float(ENV_REQUEST_DEADLINE_S, DEFAULT_DEADLINE_S)


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


@dataclass
class HttpClient:
    """A small synchronous client: one base URL, Basic auth, timeouts, retries.

    The password is held by httpx's auth object only; it never appears in URLs, logs or
    exception messages. Credentials embedded in ``base_url`` (percent-encoded or not) move
    to the auth object; :meth:`sibling` gives another service of the same connection the
    same credentials.

    Attributes:
        timeout_s: per-read (and per-write) timeout.
        connect_timeout_s: TCP and TLS connect timeout.
        deadline_s: total time one attempt (request and whole answer) may take; a server
            that trickles its answer is cut off there. Default ``DXT_REQUEST_DEADLINE_S``
            or 900 s.
        max_answer_bytes: cap on the decoded size of one answer, and on the answers all
            threads of the process hold at once (being read, or read and not yet released:
            :class:`AnswerBudget`). Default ``DXT_MAX_ANSWER_MB`` or 512 MiB.
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
    deadline_s: float = field(default_factory=default_deadline_s)
    max_answer_bytes: int = field(default_factory=default_max_answer_bytes)
    #: Follow redirects (by hand: TLS verified on every hop, credentials to the configured
    #: origin only). Off: a redirect is answered to :meth:`exchange`'s ``accept``.
    follow_redirects: bool = True
    #: Follow a redirect from https to http (the rest of the exchange in clear text).
    #: Default ``DXT_ALLOW_HTTP_REDIRECT``; off, such a redirect fails with QueryRejected.
    allow_http_redirect: bool = field(default_factory=default_allow_http_redirect)
    #: Ask for gzip answers (``Accept-Encoding: gzip``); off: ``identity``, answers as they
    #: are (:func:`dxt_core.urls.wants_gzip` decides it from a connection's setting).
    accept_gzip: bool = True
    _client: httpx.Client | None = field(default=None, init=False, repr=False)
    _foreign: httpx.Client | None = field(default=None, init=False, repr=False)
    #: Threads share one client (the CLI's units): its httpx clients are made once.
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.base_url = normalise_base_url(self.base_url)
        clean, user, password = split_credentials(self.base_url)
        if user and self.user is None:
            # Credentials embedded in the URL move to the auth object, out of the URL.
            self.user = user
            self.password = password
        hide(self.password, self.user)
        hide_proxies()
        if self.password is not None:
            self.password = Secret(self.password)  # masked in reprs and variable inspectors
        self.base_url = redact_url(clean).rstrip("/")
        if self.deadline_s <= 0 or self.max_answer_bytes <= 0:
            raise ConfigError("deadline_s and max_answer_bytes must be > 0")

    def sibling(self, base_url: str) -> HttpClient:
        """A client for another service of the same connection (e.g. Examon's jobs service):
        same credentials (unless ``base_url`` carries its own), timeouts, retries and TLS
        settings."""
        _, user, _ = split_credentials(base_url.strip())
        return replace(
            self,
            base_url=base_url,
            user=None if user else self.user,
            password=None if user else self.password,
        )

    @property
    def client(self) -> httpx.Client:
        """The client for the configured origin (with the credentials)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    auth = httpx.BasicAuth(self.user, self.password or "") if self.user else None
                    https = self.base_url.startswith("https:")
                    self._client = self._new_client(auth, https=https)
        return self._client

    def _foreign_client(self) -> httpx.Client:
        """The client for other origins a redirect leads to: no credentials, TLS verified."""
        if self._foreign is None:
            with self._lock:
                if self._foreign is None:
                    self._foreign = self._new_client(None, https=True)
        return self._foreign

    def _new_client(self, auth: httpx.Auth | None, https: bool) -> httpx.Client:
        return httpx.Client(
            auth=auth,
            timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
            # Loading the CA bundle costs ~0.2 s, paid by every Airflow task process: only
            # https needs it (a redirect from http to https gets the foreign client, which
            # has it).
            verify=_ssl_context(self.verify_tls) if https else False,
            headers={
                "Accept-Encoding": "gzip" if self.accept_gzip else "identity",
                "User-Agent": "dxt-archive",
            },
            transport=self.transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        for c in (self._client, self._foreign):
            if c is not None:
                c.close()
        self._client = self._foreign = None

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    # -- one attempt --------------------------------------------------------------------------
    def _attempt(self, req: _Request) -> tuple[httpx.Response, bytes, str]:
        """One attempt of the retry policy, under its own deadline: the request and the
        redirects it leads to (:meth:`_follow`). Asked again (not a new attempt) when the
        process's answer budget made this reader give way to an older one. Raises
        ``Deadline`` or ``TooBig`` (classified by :meth:`_classify_failure`)."""
        deadline = time.monotonic() + self.deadline_s
        while True:
            try:
                return self._follow(req, deadline)
            except Yield as y:
                oldest = y.oldest
            # Outside the handler: the traceback, and the partial answer its frames hold,
            # are gone while this reader waits.
            log.debug("%s %s: waiting for the answer budget", req.method, redact_url(req.url))
            ANSWER_BUDGET.wait_until_done(oldest, max(deadline - time.monotonic(), 0))
            if time.monotonic() > deadline:
                raise Deadline

    def _follow(self, req: _Request, deadline: float) -> tuple[httpx.Response, bytes, str]:
        """``req``, following redirects by hand; returns the last answer, its decoded body
        and its URL."""
        method, content, params, headers = req.method, req.content, req.params, req.headers
        home = origin(httpx.URL(self.url("")))
        target: httpx.URL = httpx.URL(req.url)
        for _hop in range(_MAX_REDIRECTS + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Deadline
            same = origin(target) == home
            client = self.client if same else self._foreign_client()
            timeout = httpx.Timeout(
                min(self.timeout_s, left), connect=min(self.connect_timeout_s, left)
            )
            with client.stream(
                method, target, content=content, params=params, headers=headers, timeout=timeout
            ) as resp:
                location = resp.headers.get("Location")
                if resp.status_code in _REDIRECT_STATUS and location and self.follow_redirects:
                    nxt = resp.url.join(location)
                    if target.scheme == "https" and nxt.scheme != "https":
                        self._refuse_downgrade(target, nxt)
                    log.info(
                        "%s %s redirected (HTTP %d) to %s%s",
                        method,
                        redact_url(str(target)),
                        resp.status_code,
                        redact_url(str(nxt)),
                        "" if origin(nxt) == home else " (another origin: no credentials sent)",
                    )
                    if resp.status_code == 303:
                        # "see other": a GET of it. A 301 or 302 keeps the method and body
                        # (every request here is a query: a proxy's http -> https move must
                        # not turn a POSTed query into a GET without it)
                        method, content, headers = "GET", None, None
                    target, params = nxt, None
                    continue
                return resp, read_answer(resp, self.max_answer_bytes, deadline), str(resp.url)
        raise QueryRejected(
            f"more than {_MAX_REDIRECTS} redirects; set the URL the server redirects to",
            url=redact_url(req.url),
        )

    def _refuse_downgrade(self, target: httpx.URL, nxt: httpx.URL) -> None:
        """A redirect from https to http: refused (credentials, queries and data would
        travel in clear text), unless ``allow_http_redirect``."""
        if self.allow_http_redirect:
            log.warning(
                "%s redirected to %s: following it in clear text (%s is set)",
                redact_url(str(target)),
                redact_url(str(nxt)),
                ENV_ALLOW_HTTP_REDIRECT,
            )
            return
        raise QueryRejected(
            f"the server redirected from https to http ({redact_url(str(nxt))}); refused: "
            "the rest would travel in clear text. Fix the server's redirect, or set "
            f"{ENV_ALLOW_HTTP_REDIRECT}=1 if you accept that",
            url=redact_url(str(target)),
        )

    # -- the retry loop -----------------------------------------------------------------------
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
        context: str = "",
    ) -> bytes:
        """Send a request and return the (decompressed) body of a 2xx answer.

        See :meth:`exchange` for the errors.
        """
        _, body, _ = self.exchange(
            method,
            path,
            json_body=json_body,
            params=params,
            stats=stats,
            too_large=too_large,
            timeout_is_too_large=timeout_is_too_large,
            context=context,
        )
        return body

    def exchange(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        form: Sequence[tuple[str, str]] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        stats: RequestStats | None = None,
        too_large: TooLarge | None = None,
        timeout_is_too_large: bool = False,
        context: str = "",
        accept: Callable[[int, bytes], bool] | None = None,
        attempts: int | None = None,
    ) -> tuple[int, bytes, httpx.Headers]:
        """Send a request with the retry policy; return (status, decoded body, headers) of a
        2xx answer, or of an answer ``accept(status, body)`` takes (a backend that reads its
        server's error bodies itself). ``headers`` are added to this request's. ``form`` is
        sent as the body, URL-encoded (parameters too long for a URL).
        ``attempts`` (default: the policy's) is 1 for a request that must not be sent again
        (one that moves a server-side cursor: a lost answer is not a failed request).

        ``context`` (e.g. the metric and window) is added to error messages.

        Raises:
            WindowTooLarge: ``too_large`` matched the answer; or, with
                ``timeout_is_too_large``, a read timeout, the deadline or the size cap.
            RateLimited: 429 (or 503 saying so) through every retry.
            AnswerTooLarge: the answer decoded to more than ``max_answer_bytes``.
            QueryRejected: a 4xx other than 429 (a 403 "quota exceeded" included).
            SourceUnavailable: transient failures outlasted the retry policy.
        """
        # This thread's previous answers are done with: their bytes leave the budget before
        # this one takes its own (a thread never waits for budget it holds itself).
        ANSWER_BUDGET.release()
        url = self.url(path)
        where = f" ({context})" if context else ""
        content = orjson.dumps(json_body) if json_body is not None else None
        sent = dict(headers or {})
        if content is not None:
            sent.setdefault("Content-Type", "application/json")
        elif form is not None:
            content = urlencode(form).encode()
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        req = _Request(method, url, content, params, sent or None)
        stats = stats if stats is not None else RequestStats()
        failure = _NO_ATTEMPT
        tries = self.retry.attempts if attempts is None else attempts
        for attempt in range(1, tries + 1):
            if attempt > 1:
                stats.retries += 1
            stats.requests += 1
            t0 = time.perf_counter()
            try:
                resp, body, final_url = self._attempt(req)
            except httpx.InvalidURL as exc:  # httpx: a query over 64 KiB, say; never sent
                raise QueryRejected(
                    f"the request was not sent: {exc}{where}; shorten its parameters",
                    url=redact_url(url),
                ) from exc
            except (TooBig, Deadline, httpx.TransportError) as exc:
                stats.seconds += time.perf_counter() - t0
                failure = self._classify_failure(exc, url, where, too_large, timeout_is_too_large)
            else:
                stats.seconds += time.perf_counter() - t0
                stats.bytes_received += len(body)
                if redact_url(final_url) != redact_url(url):
                    stats.url_used = redact_url(final_url)
                status = resp.status_code
                if 200 <= status < 300 or (accept is not None and accept(status, body)):
                    return status, body, resp.headers
                failure = _classify_answer(resp, body, url, final_url, where, too_large)
            if attempt < tries:
                self._wait_to_retry(method, url, attempt, failure)
        raise self._give_up(url, where, failure, tries)

    def _classify_failure(
        self,
        exc: Exception,
        url: str,
        where: str,
        too_large: TooLarge | None,
        timeout_is_too_large: bool,
    ) -> _Failure:
        """An attempt that got no complete answer: raised at once when retrying cannot help
        (the answer is over the cap, the certificate fails, or to this source a slow answer
        means "window too large"); otherwise why, for the retry loop."""
        if isinstance(exc, TooBig):
            cap = f"{self.max_answer_bytes / (1 << 20):g} MiB"
            msg = (
                f"answer larger than {cap} once decoded{where}; narrow the window or raise "
                f"the cap ({ENV_MAX_ANSWER_MB})"
            )
            if timeout_is_too_large or too_large is not None:
                raise WindowTooLarge(msg, url=url) from None
            raise AnswerTooLarge(msg, url=url) from None
        if isinstance(exc, Deadline):
            if timeout_is_too_large:
                raise WindowTooLarge(
                    f"no complete answer within the {self.deadline_s:g} s deadline{where}",
                    url=url,
                ) from None
            return _Failure(f"no complete answer within {self.deadline_s:g} s")
        if isinstance(exc, httpx.TimeoutException):
            if timeout_is_too_large and isinstance(exc, httpx.ReadTimeout):
                raise WindowTooLarge(
                    f"no answer within {self.timeout_s:g} s (read timeout){where}", url=url
                ) from exc
            return _Failure(f"timeout ({type(exc).__name__})")
        assert isinstance(exc, httpx.TransportError)
        tls = _tls_failure(exc)
        if tls is not None:
            raise SourceError(
                f"TLS certificate check failed ({tls}){where}; fix the server's "
                "certificate, or, if you trust this network, turn the check off (the "
                "connection's verify_tls extra false, or verify_certs where the connection "
                "names it so; on the command line --no-verify-tls)",
                url=redact_url(str(exc.request.url)) if _has_request(exc) else url,
            ) from None
        return _Failure(scrub(f"connection error ({type(exc).__name__}: {exc})"))

    def _wait_to_retry(self, method: str, url: str, attempt: int, failure: _Failure) -> None:
        delay = self.retry.delay(attempt, failure.retry_after)
        log.warning(
            "%s %s failed (%s%s); retry %d/%d in %.1f s",
            method,
            url,
            failure.text,
            f", HTTP {failure.status}" if failure.status else "",
            attempt,
            self.retry.attempts - 1,
            delay,
        )
        self.sleep(delay)

    def _give_up(self, url: str, where: str, failure: _Failure, tries: int) -> SourceUnavailable:
        """The error once the ``tries`` attempts are spent (``failure``: the last one's)."""
        plural_attempts = f"{tries} attempt{'' if tries == 1 else 's'}"
        if failure.rate_limited:
            return RateLimited(
                f"the server (or a proxy in front of it) limits the request rate: still "
                f"refused after {plural_attempts}{where} ({failure.text}); run "
                "fewer workers at once (an Airflow pool) or retry later",
                url=url,
                status=failure.status,
                retry_after_s=failure.retry_after,
            )
        return SourceUnavailable(
            f"gave up after {plural_attempts}{where}: {failure.text}; run it again once the "
            "server answers",
            url=url,
            status=failure.status,
        )

    def get_json(self, path: str, **kw: Any) -> Any:
        return json_answer(self.request("GET", path, **kw), self.url(path))

    def post_json(self, path: str, body: Any, **kw: Any) -> Any:
        return json_answer(self.request("POST", path, json_body=body, **kw), self.url(path))


class _Request(NamedTuple):
    """One request as the caller asked for it (redirects may change all but ``url``)."""

    method: str
    url: str
    content: bytes | None
    params: Mapping[str, str] | None
    headers: Mapping[str, str] | None


@dataclass(slots=True)
class _Failure:
    """Why an attempt failed when retrying may help: the log line's text, the answer's HTTP
    status (None without an answer), and for a rate limit the server's ``Retry-After``."""

    text: str
    status: int | None = None
    retry_after: float | None = None
    rate_limited: bool = False


_NO_ATTEMPT = _Failure("no attempt")


def _classify_answer(
    resp: httpx.Response,
    body: bytes,
    url: str,
    final_url: str,
    where: str,
    too_large: TooLarge | None,
) -> _Failure:
    """An answer that is not a success: raised at once when retrying cannot help (a quota,
    a window the server refuses as too large, authentication, another 4xx); otherwise why
    (a rate limit or a server error), for the retry loop."""
    status = resp.status_code
    text = error_text(body)
    shown = redact_url(final_url)
    moved = "" if shown == redact_url(url) else f" (redirected to {shown})"
    if is_quota_exceeded(status, body):
        raise QueryRejected(
            f"quota exceeded ({text}){where}; not retried: wait until the server's quota "
            "resets, then rerun",
            url=shown,
            status=status,
        )
    if is_rate_limited(status, resp.headers, body):
        retry_after = _retry_after(resp.headers.get("Retry-After"))
        return _Failure(f"rate limited: {text}", status, retry_after, rate_limited=True)
    if too_large is not None and too_large(status, body):
        raise WindowTooLarge(f"server refused the window: {text}{where}", url=shown, status=status)
    if status == 401 or status == 403:
        hint = (
            "; credentials are sent to the configured origin only: set the URL the server "
            "redirects to"
            if moved
            else "; check the user name and password (or the token) given for this server"
        )
        raise QueryRejected(
            f"authentication failed ({text}){moved}{hint}", url=shown, status=status
        )
    if status not in _RETRY_STATUS:
        raise QueryRejected(f"server rejected the request: {text}{where}", url=shown, status=status)
    return _Failure(f"server error: {text}", status)


def _has_request(exc: httpx.TransportError) -> bool:
    try:
        exc.request  # noqa: B018 - raises RuntimeError when unset
    except RuntimeError:
        return False
    return True


def _tls_failure(exc: BaseException) -> str | None:
    """The certificate problem behind a connection error, if that is what it is."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen)
        if isinstance(seen, ssl.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return "certificate verify failed"
    return None


@functools.cache
def _ssl_context(verify: bool) -> ssl.SSLContext:
    """One TLS context per process: building one costs ~0.2 s, more than a small query."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def html_hint(body: bytes) -> str:
    """``; ...`` advice when an answer that should be JSON is a web page, else ``""``."""
    if body.lstrip()[:1] != b"<":
        return ""
    return (
        "; the server answered a web page (HTML): is the URL the API's (not a web UI, a "
        "login page or a proxy's error page)?"
    )


def json_answer(body: bytes, url: str, what: str = "") -> Any:
    """The JSON of an answer from ``url``; when it is not JSON, a :class:`SourceError` naming
    ``what`` was asked (when given), quoting the answer's start, with :func:`html_hint`."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        asked = f"{what}: " if what else ""
        raise SourceError(
            f"{asked}answer is not valid JSON ({exc}): {excerpt(body, 200)!r}{html_hint(body)}",
            url=url,
        ) from exc


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
