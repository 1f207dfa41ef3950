"""Secrets kept out of every message.

The passwords, tokens and keys a process is given are registered where they enter
(:func:`hide`: the connections, the HTTP clients, the bearer auth, the S3 credentials).
:func:`scrub` replaces them, their percent-encoded and Basic-auth (base64 of
``user:password``) forms, and any ``Authorization`` header value or ``Basic``/``Bearer``
credential, with ``***``. It is applied to every :class:`~dxt_core.errors.DxtError` message
and to the text the HTTP client quotes from a server's answer: an error page or proxy that
echoes the request's headers must not carry them into an error, a log line, a task log or a
connection's Test answer.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from urllib.parse import quote, quote_plus

MASK = "***"
#: Shorter values are not registered: masking them would hide ordinary words and numbers of
#: messages ("test", "2024", "http"); their Basic-auth form (base64 of ``user:password``) and
#: any quoted ``Authorization`` value are masked whatever the length.
MIN_LENGTH = 5

_lock = threading.Lock()
#: The registered forms, longest first (a secret that holds another is masked whole).
_secrets: tuple[str, ...] = ()

#: An echoed header (``Authorization: Basic ...``, ``"authorization": "Bearer ..."``).
_HEADER = re.compile(r"(?i)((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n,}]+")
#: A ``Basic``/``Bearer`` credential elsewhere: base64 or token characters holding a digit
#: or ``+/=`` (so "Basic authentication" is left as it is).
_CREDENTIAL = re.compile(
    r"(?i)\b(basic|bearer)(\s+)(?=[A-Za-z._~-]*[0-9+/=])[A-Za-z0-9+/=._~-]{8,}"
)
#: A password in a URL (``scheme://user:password@host``), registered or not (a redirect's
#: ``Location``, a URL an error quotes).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")


class Secret(str):
    """A password or token as a string whose ``repr`` is masked: a notebook's variable
    inspector, a debugger or ``vars()`` of the object holding it show ``'***'``; the value
    itself (``str()``, formatting, an HTTP auth object) is the secret."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(MASK)


def hide(secret: str | None, user: str | None = None) -> None:
    """Register ``secret`` (with ``user``: also the Basic-auth form of the pair) so that
    :func:`scrub` masks it for the rest of the process."""
    if not secret:
        return
    # as given, percent-encoded (a URL's path or query) and form-encoded (``+`` for a space)
    encoded = (quote(secret, safe=""), quote_plus(secret, safe=""))
    forms = {f for f in (secret, *encoded) if len(f) >= MIN_LENGTH}
    if user is not None:
        forms.add(base64.b64encode(f"{user}:{secret}".encode()).decode())
    new = forms
    global _secrets
    with _lock:
        if not new.issubset(_secrets):
            _secrets = tuple(sorted(new.union(_secrets), key=len, reverse=True))


def hide_proxies() -> None:
    """Register the credentials of the proxies the environment names (``HTTP_PROXY``,
    ``HTTPS_PROXY``, ``ALL_PROXY``, any case: what httpx and boto3 read), as the password
    and its Basic-auth form a proxy sees in ``Proxy-Authorization``. A URL quoting them is
    masked anyway (:data:`_USERINFO`); this covers the bare password an error might quote."""
    from urllib.parse import unquote, urlsplit
    from urllib.request import getproxies

    for scheme, url in getproxies().items():
        if scheme == "no":  # no_proxy: host names, not a proxy
            continue
        if "://" not in url:  # user:pass@host:port: httpx and botocore take it as http://
            url = f"http://{url}"
        try:
            parts = urlsplit(url)
            password, user = parts.password, parts.username
        except ValueError:  # a malformed variable: the client that reads it says so
            continue
        if password:
            hide(unquote(password), unquote(user or ""))
        elif user:  # a token alone (TOKEN@host, TOKEN:@host): the user part is the secret
            token = unquote(user)
            hide(token)
            hide(base64.b64encode(f"{token}:".encode()).decode())  # its Basic-auth form


def scrub(text: str) -> str:
    """``text`` with every registered secret and every credential it quotes masked."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _HEADER.sub(rf"\1{MASK}", text)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    return _CREDENTIAL.sub(rf"\1\2{MASK}", text)


class _Scrubbed(logging.Filter):
    """Masks a record's message as :func:`scrub` does, once its arguments are in it (a log
    line may quote a server's answer, an exception, a header)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = scrub(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            # its traceback, as a formatter writes it (they reuse exc_text), masked too
            record.exc_text = scrub(_TRACEBACKS.formatException(record.exc_info))
        return True


_TRACEBACKS = logging.Formatter()


_SCRUBBED = _Scrubbed()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` whose records never show a registered secret or a quoted
    credential (every dxt_core module logs through one)."""
    log = logging.getLogger(name)
    if _SCRUBBED not in log.filters:
        log.addFilter(_SCRUBBED)
    return log


#: How far past a quote's cut :func:`excerpt` masks, so that a secret the cut falls in is
#: recognised whole.
_MARGIN = 4096


def excerpt(data: bytes | str, limit: int) -> str:
    """The start of ``data`` (a server's answer) to quote in a message: masked as
    :func:`scrub` does *before* it is cut to ``limit`` characters (a secret cut in two is no
    longer recognised, and its first part would show) and before any ``repr`` (which escapes
    a quote or a backslash of a secret, so that it no longer matches)."""
    if isinstance(data, bytes):
        data = data[: (limit + _MARGIN) * 4].decode("utf-8", "replace")
    return scrub(data[: limit + _MARGIN])[:limit]


def excerpt_near(data: bytes, pos: int, before: int, after: int) -> str:
    """``before`` bytes of ``data`` up to ``pos`` and ``after`` from it (where a parser
    stopped), masked as :func:`excerpt` masks. Where masking changed the bytes around it,
    the masked start of that stretch, as masking shortens the text."""
    start = max(0, pos - before)
    plain = data[start : pos + after].decode("utf-8", "replace")
    wide = data[max(0, start - _MARGIN) : pos + after + _MARGIN].decode("utf-8", "replace")
    if scrub(wide) == wide:
        return plain
    return excerpt(data[start:], before + after)
