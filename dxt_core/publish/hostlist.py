"""Slurm host lists: ``r207n[07-08],r208n01`` -> ``["r207n07", "r207n08", "r208n01"]``.

Slurm compresses node lists as ``prefix[ranges]suffix`` groups separated by commas; a
range keeps the zero padding of its first bound (``[07-10]`` -> 07, 08, 09, 10), a bracket may
hold a comma list of numbers and ranges (``[01,03-04]``) and a name may hold several bracket
groups (``r[1-2]n[01-02]`` -> r1n01, r1n02, r2n01, r2n02), expanded left to right.
"""

from __future__ import annotations

import itertools

from dxt_core.errors import ConfigError


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"host list {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"host list {text!r}: '[' without ']'")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_bracket(body: str, text: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ConfigError(f"host list {text!r}: [{body}] is not a list of numbers and ranges")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise ConfigError(f"host list {text!r}: range {item} runs backwards")
        width = len(lo)
        out.extend(f"{n:0{width}d}" for n in range(a, b + 1))
    return out


def _expand_name(name: str, text: str) -> list[str]:
    pieces: list[list[str]] = []
    rest = name
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, close, rest = tail.partition("]")
        if not close:
            raise ConfigError(f"host list {text!r}: '[' without ']'")
        pieces.append([head])
        pieces.append(_expand_bracket(body, text))
    pieces.append([rest])
    return ["".join(p) for p in itertools.product(*pieces)]


def expand_hostlist(text: str | None) -> list[str]:
    """The node names of a Slurm host list, in Slurm's order; ``[]`` for None or ``""``."""
    if not text:
        return []
    return [host for part in _split_top(text) for host in _expand_name(part, text)]
