"""The HTTP client of the Prometheus family: the shared client with bearer auth, and the API's
parameters sent as a form when they are too long for a URL."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from urllib.parse import urlencode

import httpx

from dxt_core.http import HttpClient
from dxt_core.masking import hide

#: A query string longer than this is sent as a POST form instead (a selector split into many
#: label values, a long catalog selector): httpx refuses a URL query over 64 KiB, and proxies
#: often refuse request lines over 8 KiB (nginx's default header buffers answer 414). Both
#: servers read every API parameter from a form too (Prometheus web/api/v1/api.go registers
#: POST for query, query_range, series and labels; VictoriaMetrics reads ``r.Form`` on every
#: handler), except Prometheus's label values, GET only (measured: 405 to a POST on 2.42).
LONG_QUERY_BYTES = 4096


def long_form(
    params: Mapping[str, str] | Sequence[tuple[str, str]],
) -> list[tuple[str, str]] | None:
    """``params`` as a form's items when they are too long for a URL, else ``None``."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    return items if len(urlencode(items)) > LONG_QUERY_BYTES else None


class BearerAuth(httpx.Auth):
    """``Authorization: Bearer <token>`` on the configured origin's requests only (the
    client for other origins a redirect leads to has no auth)."""

    def __init__(self, token: str) -> None:
        hide(token)
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class PromHttp(HttpClient):
    """The shared client, with bearer auth when the connection says so."""

    bearer: str | None = None

    @property
    def client(self) -> httpx.Client:
        if self.bearer is None:
            return super().client
        if self._client is None:
            with self._lock:
                if self._client is None:
                    auth = BearerAuth(self.bearer)
                    self._client = self._new_client(auth, https=self.base_url.startswith("https:"))
        return self._client
