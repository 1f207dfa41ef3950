"""Pseudonyms for people: HMAC-SHA256 keyed with the site's secret.

The same value gets the same pseudonym in every month and every run with the same key, so a
user's jobs stay linked; without the key nobody can recompute a pseudonym from a list of
user names (a plain hash could be). The key is read from a file and never written anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from pathlib import Path

from dxt_core.errors import ConfigError

#: Job-table columns that identify people, by kind (the kind prefixes the pseudonym).
IDENTITY_COLUMNS: dict[str, str] = {
    "user": "user",
    "user_name": "user",
    "username": "user",
    "user_id": "user",
    "uid": "user",
    "account": "account",
    "group": "group",
    "group_name": "group",
    "group_id": "group",
    "gid": "group",
    "job_name": "job",
}

#: Identities shorter than this are not searched for inside other text (they would match
#: inside unrelated words and numbers); they are still replaced in their own columns.
MIN_EMBEDDED = 3


class Pseudonymiser:
    """Maps (kind, value) to ``<kind>_<16 hex digits>`` with a keyed HMAC."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ConfigError(
                "the pseudonymisation key is shorter than 16 bytes: use a long random secret "
                "(e.g. head -c 32 /dev/urandom > key)"
            )
        self._key = key
        self._cache: dict[tuple[str, str], str] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> Pseudonymiser:
        p = Path(path)
        try:
            key = p.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the pseudonymisation key file {p}: {exc.strerror}"
            ) from exc
        try:
            return cls(key)
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc}") from exc

    def pseudonym(self, kind: str, value: str) -> str:
        k = (kind, value)
        got = self._cache.get(k)
        if got is None:
            mac = hmac.new(self._key, f"{kind}\0{value}".encode(), hashlib.sha256)
            got = self._cache[k] = f"{kind}_{mac.hexdigest()[:16]}"
        return got


class EmbeddedScrubber:
    """Replaces identities that appear inside other text (a user name in a work directory or
    a job name) with their pseudonyms; the longest identity wins where two overlap."""

    def __init__(self, pseudo: Pseudonymiser, identities: Iterable[tuple[str, str]]) -> None:
        self._map: dict[str, str] = {}
        for kind, value in sorted(set(identities)):
            if len(value) >= MIN_EMBEDDED and not value.isdigit():
                self._map.setdefault(value, pseudo.pseudonym(kind, value))
        words = sorted(self._map, key=lambda v: (-len(v), v))
        self._re = re.compile("|".join(re.escape(w) for w in words)) if words else None

    def scrub(self, text: str) -> str:
        if self._re is None:
            return text
        return self._re.sub(lambda m: self._map[m.group(0)], text)
