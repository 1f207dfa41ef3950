"""Talking to Elasticsearch or OpenSearch: connection settings, which server it is, requests.

We speak plain HTTP (httpx), not elasticsearch-py. elasticsearch-py N sends
``Accept``/``Content-Type: application/vnd.elasticsearch+json; compatible-with=N`` on every
request, and servers accept only their own major or the one before
(elastic/elasticsearch ``server/src/main/java/org/elasticsearch/rest/
RestCompatibleVersionHelper.java``): the 9.x client that ``elasticsearch>=8,<10`` installs
is refused by Elasticsearch 8 with HTTP 400 ``media_type_header_exception``, and servers
that predate the vendor media type (Elasticsearch <= 7.10, every OpenSearch before 3) refuse
any ``vnd.elasticsearch`` content type with HTTP 406 "Content-Type header [...] is not
supported" (``RestController.java`` of those versions). ``application/json`` without a
version is every server's own current version, so that is what we send, to all of them.

``GET /`` tells which server and version answers (:class:`ServerInfo`); the export picks
its paging API from it (see ``docs/compatibility.md``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import orjson

from dxt_core import masking
from dxt_core.connection import (
    ConnectionFields,
    ConnectionSpec,
    Extra,
    probe_once,
    timeout_extra,
    verify_tls_extra,
)
from dxt_core.errors import (
    AnswerTooLarge,
    ConfigError,
    QueryRejected,
    SourceError,
    SourceUnavailable,
)
from dxt_core.http import HttpClient, RequestStats, RetryPolicy, json_answer
from dxt_core.masking import excerpt
from dxt_core.urls import check_no_query, redacted_repr

log = masking.logger("dxt_core.backends.collectd_es.connection")

DEFAULT_INDEX = "cori-collectd-*"
DEFAULT_HOST_PREFIX = "bb"
ENV_USER = "PYTOKIO_ES_USER"
ENV_PASSWORD = "PYTOKIO_ES_PASSWORD"

#: what elasticsearch-py retries by default (``retry_on_status``): overload and gateways
RETRY_STATUS = frozenset({429, 502, 503, 504})


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

    def __repr__(self) -> str:  # its URLs without credentials
        return redacted_repr(self)

    def __post_init__(self) -> None:
        after_scheme = self.url.split("://", 1)[-1]
        if "@" in after_scheme:
            # never echo such a URL: a password with an unencoded '/', '#' or '?' moves part
            # of itself into what urlsplit calls the path or the fragment
            raise ConfigError(
                "the Elasticsearch URL holds '@' (a user name and password?): give the URL "
                f"without them and pass the credentials in {ENV_USER}/{ENV_PASSWORD} or the "
                "Airflow connection's login/password"
            )
        check_no_query(self.url, "the Elasticsearch URL")
        try:
            parts = urlsplit(self.url)
            _ = parts.port
        except ValueError as exc:
            raise ConfigError(
                f"the Elasticsearch URL cannot be read ({exc}): pass e.g. "
                "--url http://es.example.org:9200"
            ) from exc
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
        try:
            parts = urlsplit(self.url)
            host = parts.hostname or ""
            port = parts.port
        except ValueError:
            return "(unparsable URL)"
        if ":" in host:
            host = f"[{host}]"
        if port:
            host = f"{host}:{port}"
        return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))

    @classmethod
    def from_env(
        cls, url: str, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> CollectdEsConnection:
        """Credentials from ``PYTOKIO_ES_USER``/``PYTOKIO_ES_PASSWORD`` (as pytokio)."""
        user, password = SPEC.credentials(env=env)
        return cls(url=url, user=user, password=password, **kwargs)


# --------------------------------------------------------------------------- server identity


@dataclass(frozen=True)
class ServerInfo:
    """Which server answers, from ``GET /``.

    ``product`` is ``elasticsearch``, ``opensearch`` or ``unknown``; ``version`` is None when
    the server hid it (a user without the ``monitor`` privilege gets HTTP 403 on ``GET /``).
    """

    product: str
    version: tuple[int, int, int] | None
    number: str = ""

    @property
    def pit_api(self) -> str | None:
        """``_pit`` (Elasticsearch), ``point_in_time`` (OpenSearch) or None (scroll).

        Elasticsearch opened points in time in 7.10 (x-pack only, no tiebreaker) and added
        the ``_shard_doc`` tiebreaker in 7.12 (elastic/elasticsearch#66093, automatic since
        #68833): we page with PIT from 7.12 on and scroll before. OpenSearch has its own PIT
        API (``POST /<index>/_search/point_in_time``) since 2.4 (``RestCreatePitAction.java``).
        A hidden Elasticsearch version is at least 7.14 (it sends ``X-Elastic-Product``)."""
        if self.product == "elasticsearch":
            if self.version is None or self.version >= (7, 12, 0):
                return "_pit"
            return None
        if self.product == "opensearch" and self.version is not None:
            return "point_in_time" if self.version >= (2, 4, 0) else None
        return None

    @property
    def shard_doc(self) -> bool:
        """Whether PIT searches can sort on ``_shard_doc`` (a unique tiebreaker). OpenSearch
        has it from 3.3 (opensearch-project/OpenSearch#18924); before, "No mapping found for
        [_shard_doc] in order to sort on"."""
        if self.product == "elasticsearch":
            return self.pit_api is not None
        return (
            self.product == "opensearch"
            and self.version is not None
            and self.version
            >= (
                3,
                3,
                0,
            )
        )

    def __str__(self) -> str:
        name = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}.get(
            self.product, "an unknown server"
        )
        if self.version is None:
            return f"{name} (version hidden)" if self.product != "unknown" else name
        return f"{name} {self.number}"

    @classmethod
    def from_main(cls, doc: Any, headers: Mapping[str, str]) -> ServerInfo:
        """From the body of ``GET /`` (and its headers)."""
        version = doc.get("version") if isinstance(doc, dict) else None
        number = version.get("number") if isinstance(version, dict) else None
        distribution = version.get("distribution") if isinstance(version, dict) else None
        tagline = doc.get("tagline") if isinstance(doc, dict) else None
        opensearch_tagline = isinstance(tagline, str) and tagline.startswith("The OpenSearch")
        if distribution == "opensearch" or opensearch_tagline:
            product = "opensearch"
            if distribution != "opensearch":
                # compatibility.override_main_response_version: the number is "7.10.2",
                # not OpenSearch's own (opensearch-project/OpenSearch#847)
                number = None
        elif (
            headers.get("x-elastic-product") == "Elasticsearch"
            or (isinstance(doc, dict) and doc.get("tagline") == "You Know, for Search")
            or isinstance(number, str)
        ):
            product = "elasticsearch"
        else:
            product = "unknown"
        parsed = _parse_version(number) if isinstance(number, str) else None
        if parsed is None:
            return cls("unknown" if product == "unknown" else product, None, "")
        return cls(product, parsed, str(number))


def _parse_version(number: str) -> tuple[int, int, int] | None:
    head = number.split("-", 1)[0].split(".")
    try:
        nums = [int(x) for x in head[:3]]
    except ValueError:
        return None
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


# --------------------------------------------------------------------------- requests


class EsApiError(QueryRejected):
    """The server refused a request; ``error_type`` is Elasticsearch's ``error.type``."""

    def __init__(
        self,
        message: str,
        *,
        url: str,
        status: int,
        error_type: str,
        reason: str,
        product: str | None = None,
    ) -> None:
        super().__init__(message, url=url, status=status)
        self.error_type = error_type
        self.reason = reason
        #: the ``X-Elastic-Product`` header of the answer (Elasticsearch >= 7.14 sends it)
        self.product = product


class ContextExpired(SourceUnavailable):
    """A point in time or scroll is gone (``search_context_missing_exception``, HTTP 404)."""


def error_parts(body: bytes) -> tuple[str, str]:
    """(``error.type``, a one-line reason with the root cause) of an error answer, without
    a credential it quotes (:func:`dxt_core.masking.scrub`: reasons go to log lines)."""
    kind, reason = _error_parts(body)
    return kind, excerpt(reason, 500)  # masked before it is cut


def _error_parts(body: bytes) -> tuple[str, str]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = excerpt(body, 300).strip()
        return "", text or "(empty body)"
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, str):  # {"error": "Content-Type header [...] is not supported"}
        return "", err
    if not isinstance(err, dict):
        return "", excerpt(str(doc), 300)
    kind = str(err.get("type", ""))
    reason = str(err.get("reason", ""))
    causes = [err.get("caused_by")]
    roots = err.get("root_cause")
    if isinstance(roots, list):
        causes.extend(roots)
    for cause in causes:
        if isinstance(cause, dict):
            sub = f"{cause.get('type', '')}: {cause.get('reason', '')}"
            if sub.strip(": ") and sub not in reason:
                reason = f"{reason} ({sub})"
                break
    return kind, reason


def context_missing(status: int, body: bytes) -> bool:
    return status == 404 and (
        b"search_context_missing_exception" in body or b"No search context found" in body
    )


def endpoint_missing(status: int, body: bytes) -> bool:
    """The answer says the endpoint does not exist (so the server has no such API): not a
    refusal of what we sent. ``no handler found for uri`` is the text of ``RestController``
    (Elasticsearch 7.x/8.x, OpenSearch) for a path without a handler; 405 names a method the
    path does not take."""
    if status not in (400, 404, 405):
        return False
    _, reason = error_parts(body)
    text = reason.lower()
    return "no handler found for uri" in text or (status == 405 and "incorrect http method" in text)


def index_path(index: str) -> str:
    """An index pattern as a path segment (``*`` and ``,`` stay as they are)."""
    return quote(index, safe="*,")


class EsClient:
    """Requests to one Elasticsearch or OpenSearch; thread-safe (slices share it).

    The retry loop is dxt_core's (:meth:`dxt_core.http.HttpClient.exchange`): connection
    errors, timeouts, HTTP 429 and 502/503/504 are retried with the shared policy (jitter,
    ``Retry-After`` honoured, a total deadline per attempt, a cap on the decoded answer);
    other answers come back to the caller as they are, who reads Elasticsearch's error body,
    except 401/403 (credentials) and redirects, which raise at once. Redirects are not
    followed: a server that redirects is named in the error, so no credential goes to
    another address.
    """

    def __init__(
        self,
        conn: CollectdEsConnection,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.conn = conn
        self.safe_base = conn.safe_url
        self.retry = retry or RetryPolicy(attempts=4, backoff_s=0.5, max_backoff_s=30.0)
        self.sleep = sleep
        self.http = HttpClient(
            conn.url,
            user=conn.user,
            password=conn.password,
            timeout_s=conn.timeout_s,
            connect_timeout_s=min(conn.timeout_s, 10.0),
            retry=self.retry,
            verify_tls=conn.verify_certs,
            sleep=sleep,
            transport=transport,
            # a page of 10,000 collectd hits is ~5 MB decoded
            max_answer_bytes=256 << 20,
            follow_redirects=False,
        )
        _ = self.http.client  # made now, not raced for by the slice threads
        self._lock = threading.Lock()
        self.requests = 0

    @property
    def max_answer_bytes(self) -> int:
        return self.http.max_answer_bytes

    @max_answer_bytes.setter
    def max_answer_bytes(self, value: int) -> None:
        self.http.max_answer_bytes = value

    def close(self) -> None:
        self.http.close()

    def url(self, path: str) -> str:
        return f"{self.safe_base}{path}"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        what: str,
        stats: RequestStats | None = None,
        retry: bool = True,
    ) -> tuple[int, bytes, httpx.Headers]:
        """(status, body, headers) of the answer; retries transient failures (unless
        ``retry`` is false: a request that moves a server-side cursor, a scroll's next page).

        ``stats``, when given, gets the request's attempts, retries and bytes added (also
        when it raises).

        Raises:
            QueryRejected: 401/403, or a redirect.
            SourceUnavailable: transient failures outlasted the retry policy (RateLimited
                when the server kept limiting the rate).
            SourceError: the answer was larger than :attr:`max_answer_bytes`.
        """
        sent = RequestStats()
        try:
            status, data, headers = self.http.exchange(
                method,
                path,
                json_body=body,
                params=params,
                # every server's own current version (see the module docstring); no
                # compression, as elasticsearch-py (pages are decoded at once, on loopback
                # or a LAN: gzip costs the server and us more than it saves)
                headers={"Accept": "application/json", "Accept-Encoding": "identity"},
                stats=sent,
                context=what,
                accept=lambda status, _: status not in RETRY_STATUS,
                attempts=None if retry else 1,
            )
        except AnswerTooLarge as exc:
            raise SourceError(
                f"{what}: the answer is larger than {self.max_answer_bytes} bytes; "
                "lower the page size (--page-size)",
                url=self.url(path),
            ) from exc
        finally:
            with self._lock:
                self.requests += sent.requests
                if stats is not None:
                    stats.add(sent)
        if status in (401, 403):
            kind, reason = error_parts(data)
            hint = (
                f"check {ENV_USER}/{ENV_PASSWORD} (CLI) or the connection's login/password "
                "(Airflow)"
                if status == 401
                else "the user lacks a privilege on the cluster or the index"
            )
            raise EsApiError(
                f"{what}: authentication or authorisation failed ({reason}); {hint}",
                url=self.url(path),
                status=status,
                error_type=kind,
                reason=reason,
                product=headers.get("x-elastic-product"),
            )
        if 300 <= status < 400:
            target = headers.get("location", "")
            raise QueryRejected(
                f"{what}: the server redirects to {_safe_location(target)}; pass that URL as "
                "the Elasticsearch URL (redirects are not followed, so that credentials never "
                "go to another address)",
                url=self.url(path),
                status=status,
            )
        return status, data, headers

    def json(self, method: str, path: str, *, what: str, **request: Any) -> Any:
        """The decoded body of a 2xx answer to :meth:`request` (``params``, ``body``); any
        other answer raises (:meth:`error`)."""
        status, data, _ = self.request(method, path, what=what, **request)
        if not 200 <= status < 300:
            raise self.error(status, data, path, what)
        return json_answer(data, self.url(path), what)

    def error(self, status: int, data: bytes, path: str, what: str) -> SourceError:
        """Our exception for an error answer (never with credentials)."""
        url = self.url(path)
        if context_missing(status, data):
            return ContextExpired(
                f"{what}: the search context expired or was closed", url=url, status=status
            )
        kind, reason = error_parts(data)
        text = f"{kind}: {reason}" if kind else reason
        if status >= 500:
            return SourceUnavailable(f"{what}: {text}", url=url, status=status)
        return EsApiError(f"{what}: {text}", url=url, status=status, error_type=kind, reason=reason)

    def server_info(self, stats: RequestStats | None = None) -> ServerInfo:
        """``GET /``: which server and version answers (the request counted in ``stats``)."""
        try:
            status, data, headers = self.request(
                "GET", "/", what="asking the server its version", stats=stats
            )
        except EsApiError as exc:
            if exc.status != 403:
                raise
            # a user without the monitor privilege: Elasticsearch >= 7.14 still says it is
            # Elasticsearch in a header of every answer (``X-Elastic-Product``)
            if exc.product == "Elasticsearch" or elasticsearch_refusal(exc.error_type, exc.reason):
                return ServerInfo("elasticsearch", None)
            log.warning("%s: GET / refused (%s); reading with scrolls", self.safe_base, exc.reason)
            return ServerInfo("unknown", None)
        if not 200 <= status < 300:
            raise self.error(status, data, "/", "asking the server its version")
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = None
        info = ServerInfo.from_main(doc, headers)
        if info.product == "unknown":
            log.warning(
                "%s did not say which server it is (GET / answered %r); reading with scrolls",
                self.safe_base,
                data[:200],
            )
        return info


def elasticsearch_refusal(error_type: str, reason: str) -> bool:
    """Whether a 403 is Elasticsearch's own authorization refusal, told by its wording.

    Elasticsearch 8.8 and later leave ``X-Elastic-Product`` out of 403 answers (the header
    is added in ``RestController.dispatchRequest``, elastic/elasticsearch
    ``server/src/main/java/org/elasticsearch/rest/RestController.java``; security's
    refusal comes before it), so the body is read: x-pack security words it ``action
    [<action>] is unauthorized for user [<user>]`` (``AuthorizationService`` /
    ``Exceptions.authorizationError``); the OpenSearch security plugin says ``no
    permissions for [<action>] and User [...]``. Elasticsearch >= 7.14 is meant (a
    version that still sends no header on 403 is newer than 8.8), so PIT paging applies.
    """
    return error_type == "security_exception" and " is unauthorized for user [" in reason


def _safe_location(location: str) -> str:
    try:
        parts = urlsplit(location)
    except ValueError:
        return "(an unparsable address)"
    if not parts.scheme:
        return parts.path or "(no address)"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# --------------------------------------------------------------------------- connection spec


def _build(f: ConnectionFields) -> CollectdEsConnection:
    extras = ("index", "host_prefix", "verify_certs", "timeout")
    return CollectdEsConnection(**f.as_kwargs(*extras))


def probe(conn: CollectdEsConnection) -> str:
    """The server's name and version from ``GET /`` (and the paging the export will use)."""
    info = probe_once(EsClient, conn, lambda client: client.server_info())
    paging = (
        "scroll"
        if info.pit_api is None
        else ("point in time" + (" + _shard_doc" if info.shard_doc else ", keyset"))
    )
    return f"{info} at {conn.safe_url} (reads with {paging})"


#: Elasticsearch (or OpenSearch) holding collectd documents.
SPEC: ConnectionSpec[CollectdEsConnection] = ConnectionSpec(
    backend="collectd_es",
    default_conn_id="elasticsearch_default",
    hook_name="collectd in Elasticsearch (dxt-archive)",
    hook_kwarg="elasticsearch_conn_id",
    build=_build,
    probe=probe,
    default_port=9200,
    user_env=ENV_USER,
    password_env=ENV_PASSWORD,
    host_example="es.example.org",
    labels={"schema": "Scheme (http or https)"},
    extras=(
        Extra("index", str, DEFAULT_INDEX, "Index pattern", "index pattern", flag=""),
        Extra("host_prefix", str, DEFAULT_HOST_PREFIX, "Host prefix", "hostname prefix", flag=""),
        verify_tls_extra(name="verify_certs", flag=""),
        timeout_extra(60.0, "request timeout, seconds", flag=""),
    ),
)


def connection_from_fields(**fields: Any) -> CollectdEsConnection:
    """A connection from an Airflow connection's fields (see :data:`SPEC`)."""
    conn: CollectdEsConnection = SPEC.from_fields(**fields)
    return conn
