"""URLs of the servers we read: credentials moved out of them, and safe for messages.

A connection's URL may carry ``user:password@``; :class:`dxt_core.http.HttpClient` moves the
credentials to its auth object, and every URL that reaches a log, an error or a manifest goes
through :func:`redact_url` first.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    import httpx


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the (percent-decoded) user and password.

    The credentials end at the *last* ``@`` of the URL, so a password holding an unencoded
    ``/``, ``?``, ``#`` or ``@`` still comes out whole instead of being read as a path or
    fragment (an ``@`` in a base URL's path must then be written ``%40``). Percent-encoded
    characters (``p%2Fss``) are decoded, as user agents do before Basic auth.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        # no scheme (``user:pass@host:port``): still cut at the last "@", so that an error
        # about the missing scheme never quotes the password
        scheme, rest = "", url
    if "@" not in rest:
        return url, None, None
    userinfo, _, hostpart = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    clean = f"{scheme}://{hostpart}" if sep else hostpart
    return clean, unquote(user), unquote(password) if colon else None


def redact_url(url: str) -> str:
    """``url`` without user name, password, query string or fragment (safe for logs)."""
    clean, _, _ = split_credentials(url)
    try:
        parts = urlsplit(clean)
    except ValueError:  # "Invalid IPv6 URL": no host to show
        scheme = clean.partition("://")[0] if "://" in clean else ""
        return f"{scheme}://(unreadable host)" if scheme else "(unreadable URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep it out of the message rather than fail here
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*:/+)[^\s\"'<>]*@")
#: A URL with a user name (``scheme://user@``, ``scheme://user:password@``): an ``@`` before
#: the first ``/``, ``?`` or ``#`` of its authority, or after ``user:`` that is not a port
#: (a password may hold ``/``, ``?``, ``#``)
_CREDENTIALS = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s/?#@]*@|[^\s/?#@:]+:(?!\d*(?:[/?#\s]|$))[^\s@]*@)"
)


def has_credentials(text: str) -> bool:
    """Whether a URL in ``text`` holds a user name or password (``@`` in a URL's path or
    query, ``https://fosstodon.org/@cineca``, does not count)."""
    return _CREDENTIALS.search(text) is not None


def redact_text(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it replaced by ``***@`` (a
    library's message may quote a URL as it was given); up to the last ``@`` of the URL,
    so that a password holding ``/`` or ``@`` goes whole."""
    return _USERINFO.sub(r"\1***@", text)


def redact_value(value: str) -> str:
    """One value given as a URL (an option, a setting), safe to quote whole: its
    ``user:password@`` replaced by ``***@`` up to its *last* ``@``, whatever the password
    holds (a quote, a space, ``<``: :func:`redact_text`, which finds URLs in free text,
    stops at those). A value without ``://`` goes through :func:`redact_text`."""
    if "://" not in value:
        return redact_text(value)
    clean, user, password = split_credentials(value)
    if user is None and password is None:
        return redact_text(value)
    scheme, _, rest = clean.partition("://")
    return f"{scheme}://***@{rest}"


def without_credentials(value: str) -> str:
    """One value given as a URL (a word of a command to print: ``http://h:1`` or
    ``--jobs-url=http://h:1``) without its ``user:password@`` (cut at its last ``@``, as
    :func:`split_credentials` reads it); a value without ``://`` as it is."""
    if "://" not in value:
        return value
    clean, user, password = split_credentials(value)
    return clean if user is not None or password is not None else value


def normalise_base_url(url: str, what: str = "URL") -> str:
    """Check a base URL and drop a trailing slash; the error says what a good one looks like.

    Credentials stay in the returned URL (:class:`HttpClient` moves them out); error
    messages never show them.
    """
    clean, _, _ = split_credentials(url.strip())
    try:
        parts = urlsplit(clean)
    except ValueError as exc:  # an unclosed "[" of an IPv6 address
        raise ConfigError(
            f"bad {what} {redact_url(url)!r}: {exc}; an IPv6 address is written in brackets, "
            "e.g. http://[::1]:8083"
        ) from None
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme in ("http", "https") and parts.hostname and not port_ok:
        # redact_url drops a port that is not one: name it here (no credentials in it)
        port = parts.netloc.rpartition(":")[2]
        raise ConfigError(
            f"bad {what} {redact_url(url)!r}: its port {port!r} is not a number from 1 to "
            "65535, e.g. https://metrics.example.org:8083"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"bad {what} {redact_url(url)!r}: expected http(s)://host[:port][/path], "
            "e.g. https://metrics.example.org:8083 (characters such as / # ? @ in a password "
            "may be percent-encoded: %2F %23 %3F %40)"
        )
    return url.strip().rstrip("/")


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url``, the port made explicit: where credentials may go."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return (url.scheme, url.host, url.port or default)


#: How answers travel: ``gzip`` asks for them compressed, ``none`` as they are, ``auto`` as
#: they are from a server on this machine (a loopback address or ``localhost``: compressing
#: costs the server and this client CPU and saves nothing) and compressed from any other.
COMPRESSIONS = ("auto", "gzip", "none")


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine: ``localhost`` or a loopback address."""
    host = (urlsplit(split_credentials(url)[0]).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def wants_gzip(compression: str, url: str) -> bool:
    """Whether to ask ``url``'s server for gzip answers (see :data:`COMPRESSIONS`)."""
    if compression not in COMPRESSIONS:
        raise ConfigError(
            f"compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}"
        )
    if compression == "auto":
        return not is_loopback(url)
    return compression == "gzip"


def check_no_query(url: str, what: str) -> None:
    """A ConfigError when the base URL ``url`` (its ``user:password@`` part aside: a password
    may hold ``?`` or ``#``) has a query or fragment: clients ask their own paths below a
    server's address, so it would be dropped in silence."""
    from dxt_core.errors import ConfigError

    clean, _, _ = split_credentials(url.strip())
    if "?" in clean or "#" in clean:
        cut = min(i for i in (clean.find("?"), clean.find("#")) if i >= 0)
        raise ConfigError(
            f"{what} {redact_url(clean[:cut])!r}... has a query (?...) or fragment (#...), "
            "which dxt cannot keep (it asks its own paths below the server's address): remove "
            "it (a password holding ? or # is fine)"
        )


def redacted_repr(obj: Any) -> str:
    """The ``repr`` of a connection dataclass with each URL as :func:`redact_url` shows it
    (no ``user:password@``, no query), the fields declared ``repr=False`` left out as
    dataclasses leave them: a notebook's variable view or a debugger shows no password a
    URL holds."""
    import dataclasses

    shown = []
    for f in dataclasses.fields(obj):
        if f.repr:
            value = getattr(obj, f.name)
            if isinstance(value, str) and "://" in value:
                value = redact_url(value)
            shown.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"
