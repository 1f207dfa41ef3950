"""PromQL text: metric and label names, selectors narrowed by a label's values (each value
quoted for RE2 and for PromQL's strings), the API's times, and how a set of series is split
in two."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def is_metric_name(text: str) -> bool:
    return bool(_METRIC.match(text))


_LEADING_NAME = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")


def leading_name(selector: str) -> str | None:
    """The metric name a selector begins with (``hpc_temp`` of ``hpc_temp{job="n"}``), else
    None (``{__name__=~"..."}``, or a bare name: :func:`is_metric_name`)."""
    m = _LEADING_NAME.match(selector)
    return m.group(1) if m else None


def shown(selector: str, limit: int = 300) -> str:
    """``selector`` as error messages and logs show it: whole up to ``limit`` characters,
    else its start and its length (a split into thousands of label values is 100 KB)."""
    if len(selector) <= limit:
        return selector
    return f"{selector[: limit - 60]}... ({len(selector):,} characters)"


def api_seconds(ms: int) -> str:
    """Epoch ms as the API's decimal seconds (exact: no float on the way)."""
    sign = "-" if ms < 0 else ""
    q, r = divmod(abs(ms), 1000)
    return f"{sign}{q}.{r:03d}"


def _string(value: str) -> str:
    """``value`` inside a PromQL double-quoted string (Go's escapes: a raw newline, carriage
    return or tab is a parse error there)."""
    return (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )


def _regex_quote(value: str) -> str:
    """``value`` as a literal inside a PromQL ``=~"..."`` (RE2, then the string's escapes)."""
    return _string(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value))


def _label(name: str, victoriametrics: bool = False) -> str:
    """A label name in a selector: as it is when it is a classic one; else, for
    VictoriaMetrics, each other character escaped with a backslash (MetricsQL's identifiers:
    VictoriaMetrics/metricsql lexer.go ``scanIdent``; VictoriaMetrics 1.79 refuses the
    quoted form, 422, and holds such names, ``k8s.pod`` say, as it was sent them), and
    quoted for Prometheus (only Prometheus 3, which takes that form, can hold them)."""
    if _LABEL.match(name):
        return name
    if victoriametrics:
        return "".join(
            c if c.isascii() and (c.isalpha() or c == "_" or (i and c.isdigit())) else f"\\{c}"
            for i, c in enumerate(name)
        )
    return f'"{_string(name)}"'


def selector_of(metric: str) -> str:
    """The selector of every series of ``metric``: the name itself, or ``{__name__="name"}``
    for a name that is not a classic one (a UTF-8 name listed by Prometheus 3, or any name
    VictoriaMetrics was sent): every server accepts that form, while ``{"name"}`` is
    Prometheus 3's only (Prometheus 2.42 and VictoriaMetrics 1.79 refuse it with 400/422)."""
    return metric if is_metric_name(metric) else f'{{__name__="{_string(metric)}"}}'


def with_matcher(
    selector: str,
    label: str,
    values: Sequence[str],
    negate: bool = False,
    victoriametrics: bool = False,
) -> str:
    """``selector`` narrowed to series whose ``label`` is one of ``values`` ("" = absent),
    or with ``negate`` none of them; ``victoriametrics``: the label name as MetricsQL takes
    it (:func:`_label`)."""
    alternatives = "|".join(_regex_quote(v) for v in values)
    op = "!~" if negate else "=~"
    matcher = f'{_label(label, victoriametrics)}{op}"{alternatives}"'
    s = selector.strip()
    if label == "__name__" and s.startswith("{"):
        # first: VictoriaMetrics 1.79 answers nothing for a second name matcher after
        # another label's (measured: {job="node",__name__=~"a|b",__name__=~"a"} lists no
        # series; with the new one first, the right ones)
        rest = s[1:].lstrip()
        return f"{{{matcher}{'' if rest.startswith('}') else ','}{rest}"
    if s.endswith("}"):
        head = s[:-1].rstrip()
        sep = "" if head.endswith("{") or head.endswith(",") else ","
        return f"{head}{sep}{matcher}}}"
    return f"{s}{{{matcher}}}"


def split_label(series: Sequence[Mapping[str, str]]) -> tuple[str | None, list[str]]:
    """The label with the most distinct values among ``series`` (ties: by name) and its
    sorted values ("" for series without it); ``None`` when no label tells them apart."""
    best: tuple[int, str] | None = None
    keys = sorted({k for s in series for k in s})
    for k in keys:
        n = len({s.get(k, "") for s in series})
        if n >= 2 and (best is None or n > best[0]):
            best = (n, k)
    if best is None:
        return None, []
    label = best[1]
    return label, sorted({s.get(label, "") for s in series})
