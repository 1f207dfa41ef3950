"""The dataset's licence: an SPDX identifier and the URL of its text.

The URL is filled in for the licences data is usually published under; any other licence
needs its URL given (``--licence-url``), so that a typo'd identifier never goes out with
another licence's URL (a ``licenses`` entry of datapackage.json and Croissant's
``license`` carry both).
"""

from __future__ import annotations

import difflib
import re
from typing import Final

from dxt_core.errors import ConfigError

#: SPDX identifier -> the licence text's URL (https://spdx.org/licenses/, each licence's
#: "Other web pages" link).
KNOWN: Final[dict[str, str]] = {
    "CC-BY-4.0": "https://creativecommons.org/licenses/by/4.0/",
    "CC-BY-SA-4.0": "https://creativecommons.org/licenses/by-sa/4.0/",
    "CC-BY-NC-4.0": "https://creativecommons.org/licenses/by-nc/4.0/",
    "CC-BY-NC-SA-4.0": "https://creativecommons.org/licenses/by-nc-sa/4.0/",
    "CC-BY-ND-4.0": "https://creativecommons.org/licenses/by-nd/4.0/",
    "CC-BY-NC-ND-4.0": "https://creativecommons.org/licenses/by-nc-nd/4.0/",
    "CC-BY-3.0": "https://creativecommons.org/licenses/by/3.0/legalcode",
    "CC0-1.0": "https://creativecommons.org/publicdomain/zero/1.0/",
    "ODbL-1.0": "https://opendatacommons.org/licenses/odbl/1-0/",
    "ODC-By-1.0": "https://opendatacommons.org/licenses/by/1-0/",
    "PDDL-1.0": "https://opendatacommons.org/licenses/pddl/1-0/",
    "CDLA-Permissive-2.0": "https://cdla.dev/permissive-2-0",
    "CDLA-Sharing-1.0": "https://cdla.io/sharing-1-0",
    "MIT": "https://opensource.org/license/mit/",
    "Apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0",
}

#: An SPDX licence expression's parts (specification, annex D): identifiers (letters,
#: digits, '.', '-', an optional trailing '+'), the operators and parentheses.
_TOKENS = re.compile(r"\(|\)|[^\s()]+")
_ID = re.compile(r"(DocumentRef-[A-Za-z0-9.\-]+:)?[A-Za-z0-9.\-]+\+?")
_OPERATORS: Final = frozenset({"AND", "OR", "WITH", "and", "or", "with"})


def _is_expression(text: str) -> bool:
    """Whether ``text`` reads as an SPDX identifier or expression (``A``, ``A OR B``,
    ``(A AND B) WITH C``): identifiers and operators alternate, parentheses nest and each
    holds an expression."""
    tokens = _TOKENS.findall(text)
    depth, want_id = 0, True
    for t in tokens:
        if t == "(":
            if not want_id:
                return False
            depth += 1
        elif t == ")":
            if want_id or depth == 0:
                return False
            depth -= 1
        elif want_id:
            if t in _OPERATORS or not _ID.fullmatch(t):
                return False
            want_id = False
        else:
            if t not in _OPERATORS:
                return False
            want_id = True
    return bool(tokens) and depth == 0 and not want_id


def licence_and_url(
    licence: str, url: str, names: tuple[str, str] = ("--licence", "--licence-url")
) -> tuple[str, str]:
    """The licence as its SPDX identifier is spelled, and the URL of its text.

    Raises:
        ConfigError: the licence is empty or not an SPDX identifier or expression, or it is
            not one of :data:`KNOWN` and no URL was given.
    """
    text = licence.strip()
    if not _is_expression(text):
        raise ConfigError(
            f"{names[0]} {licence!r} is not an SPDX licence identifier: give one such as "
            "CC-BY-4.0 or CC0-1.0 (the list: https://spdx.org/licenses/)"
        )
    # SPDX identifiers match case-insensitively (specification, annex D.2)
    known = {k.lower(): k for k in KNOWN}
    spelled = known.get(text.lower(), text)
    if url.strip():
        return spelled, url.strip()
    if spelled in KNOWN:
        return spelled, KNOWN[spelled]
    single = len(_TOKENS.findall(text)) == 1  # an expression: no "did you mean" one licence
    close = difflib.get_close_matches(text.lower(), list(known), n=3, cutoff=0.7) if single else []
    hint = f" (did you mean {', '.join(known[c] for c in close)}?)" if close else ""
    raise ConfigError(
        f"{names[0]} {text!r}: give the URL of its text with {names[1]}{hint}; this tool "
        f"fills it in only for {', '.join(KNOWN)}"
    )
