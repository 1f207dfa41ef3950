"""Whether a numeric ``values`` text of KairosDB (``[t,v],[t,v],...``) holds only JSON
numbers (RFC 8259), checked with one regular expression over the text.

The fast patterns use possessive quantifiers (Python 3.11+): a number can be read one way
only, so nothing backtracks. Early CPython 3.11 releases match possessive repeats of groups
wrongly (measured: Debian 12's 3.11.2 refuses ``[1,2]``; 3.11.7 accepts it), which made every
numeric metric-day fail there ("a value is not a JSON number"). The patterns are checked
once, at import, against texts whose answers are known; an interpreter that gets one wrong
uses the same patterns without possessive quantifiers (the same answers, about five times
slower: 70 ms against 15 ms for a window of 100,000 points, measured on 3.11.7).

This module imports nothing but :mod:`re` (a test runs it under other interpreters).
"""

from __future__ import annotations

import re


def _patterns(possessive: bool) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """(the longest run of ``[t,v],`` pairs, a whole text of pairs)."""
    p = b"+" if possessive else b""
    digits = b"[0-9]*" + p
    some = b"[0-9]+" + p
    number = (
        (rb"-?(?:0|[1-9]" + digits + rb")(?:\." + some + rb")?" + p + rb"(?:[eE][-+]?" + some)
        + rb")?"
        + p
    )
    pair = rb"\[(?:0|[1-9]" + digits + rb")," + number + rb"\]"
    pairs = rb"(?:" + pair + rb",)*" + p
    return re.compile(pairs), re.compile(pairs + pair)


#: Texts whose answers every interpreter must give (True: only JSON numbers).
KNOWN: tuple[tuple[bytes, bool], ...] = (
    (b"[1,2]", True),
    (b"[0,-0.5]", True),
    (b"[1,2],[3,-4.5e+3],[10,1E9]", True),
    (b"[1,2],[3,4]", True),
    (b"[1,]", False),
    (b"[1,2],[3,1-2e]", False),
    (b"[1,2],[3,01]", False),
    (b"[1,2.],[3,4]", False),
    (b"[1,2],", False),
)


def _right(patterns: tuple[re.Pattern[bytes], re.Pattern[bytes]]) -> bool:
    return all((patterns[1].fullmatch(text) is not None) is ok for text, ok in KNOWN)


_FAST = _patterns(possessive=True)
#: Whether this interpreter's possessive quantifiers give the known answers.
POSSESSIVE_OK = _right(_FAST)
PAIRS, ALL_PAIRS = _FAST if POSSESSIVE_OK else _patterns(possessive=False)


def valid_numbers(inner: bytes) -> bool:
    """Whether every token of a numeric ``values`` text is a JSON number."""
    return ALL_PAIRS.fullmatch(inner) is not None


def bad_pair(inner: bytes) -> bytes:
    """The first ``[t,v]`` of a ``values`` text that is not two JSON numbers."""
    at = PAIRS.match(inner)
    start = at.end() if at else 0
    end = inner.find(b"]", start)
    return inner[start : end + 1 if end >= 0 else start + 40]
