"""What to archive: metric names, or named series selectors, one a line.

A catalog file::

    # comments and blank lines are ignored
    node_cpu_seconds_total
    gpu_temp = {__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_MEMORY_TEMP", job="dcgm"}

A bare line is a metric name and archives under ``prometheus/<name>/``; ``NAME = SELECTOR``
archives the series the selector matches under ``prometheus/<NAME>/``. Without a catalog
the units are every metric name the server lists.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dxt_core.errors import CatalogError, ConfigError
from dxt_core.paths import check_unit_name

_UNIT = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:.\-]*$")
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One unit: its archive name and the series selector it stands for."""

    name: str
    selector: str

    @property
    def is_metric(self) -> bool:
        return self.name == self.selector


def entry(text: str, where: str | None = "--metrics") -> CatalogEntry:
    """One catalog line (``metric`` or ``NAME = SELECTOR``); an error begins with ``where``
    (``None``: the caller names the place)."""

    def bad(problem: str) -> ConfigError:
        return ConfigError(f"{where}: {problem}" if where else problem)

    name, sep, selector = text.partition("=")
    name, selector = name.strip(), selector.strip()
    if sep and selector and not selector.startswith("~") and _UNIT.match(name):
        if not (selector.startswith("{") or _METRIC.match(selector.split("{", 1)[0].strip())):
            raise bad(f"{selector!r} is not a series selector (m or {{...}})")
        if "{" in selector and not selector.endswith("}"):
            raise bad(f"{selector!r} does not end with the }} that closes its label matchers")
        return _named(CatalogEntry(name, selector), bad)
    text = text.strip()
    if not _METRIC.match(text):
        raise bad(
            f"{text!r} is neither a metric name nor NAME = SELECTOR "
            '(e.g. node_load1, or gpu_temp = {__name__=~"DCGM_.*_TEMP"})'
        )
    return _named(CatalogEntry(text, text), bad)


def _named(e: CatalogEntry, bad: Callable[[str], ConfigError]) -> CatalogEntry:
    """``e`` if its name can name its folder (its length: the pattern allows the rest)."""
    problem = check_unit_name(e.name, "name")
    if problem:
        raise bad(problem)
    return e


def load_catalog(path: str | Path) -> list[CatalogEntry]:
    """The entries of a catalog file; the error names the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(str(p), None, f"cannot read it ({exc})") from exc
    out: list[CatalogEntry] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            e = entry(text, None)
        except ConfigError as exc:
            raise CatalogError(str(p), n, str(exc)) from exc
        if e.name in seen:
            raise CatalogError(str(p), n, f"{e.name!r} already on line {seen[e.name]}")
        seen[e.name] = n
        out.append(e)
    if not out:
        raise CatalogError(str(p), None, "no entries: one metric name or NAME = SELECTOR a line")
    return out


def from_names(text: str | None, where: str = "--metrics") -> list[CatalogEntry]:
    """``--metrics a,b`` (bare names only: a selector holds commas); an error begins with
    ``where`` (the option, or the variable ``DXT_PROMETHEUS_METRICS``)."""
    found = [entry(x, where) for x in (text or "").split(",") if x.strip()]
    if text is not None and text.strip() and not found:
        raise ConfigError(f"{where} {text!r} names no metric: give names separated by commas")
    twice = sorted({e.name for e in found if sum(f.name == e.name for f in found) > 1})
    if twice:  # two units of one metric-day: the second was refused by the first's lock
        raise ConfigError(f"{where} names {', '.join(map(repr, twice))} twice: name each once")
    return found


def listed_entries(names: Sequence[str]) -> tuple[list[CatalogEntry], list[str]]:
    """The units of the metric names a server lists (no catalog given), and why each name
    that cannot name a unit's folder is left out (:func:`dxt_core.paths.check_unit_name`):
    one such name must not stop the others."""
    from dxt_core.backends.prometheus.promql import selector_of

    entries: list[CatalogEntry] = []
    left_out: list[str] = []
    for n in names:
        problem = check_unit_name(n, "metric name")
        if problem:
            left_out.append(problem)
        else:
            entries.append(CatalogEntry(n, selector_of(n)))
    return entries, left_out


def left_out_note(left_out: Sequence[str], where: str) -> str:
    """What to say of the listed names :func:`listed_entries` left out."""
    shown = "; ".join(left_out[:5]) + (
        f"; and {len(left_out) - 5} more" if len(left_out) > 5 else ""
    )
    return (
        f"{len(left_out)} metric name(s) listed by {where} left out, as they cannot name a "
        f"folder: {shown}. Archive one under a name of your own with a catalog line "
        'NAME = {__name__="<the name>"}'
    )
