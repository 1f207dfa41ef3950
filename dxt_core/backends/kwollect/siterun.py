"""How the sites of one Kwollect fetch ended, and the small helpers of
:class:`~dxt_core.backends.kwollect.experiment.Kwollect` around it."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dxt_core.backends.kwollect.source import G5kNode, KwollectStats
from dxt_core.errors import ConfigError, DxtError, SourceError


@dataclass(frozen=True)
class BackupPlan:
    """What a backup is asked for: its directory, nodes, metrics (None: every one), window,
    the manifest's description of it, and the earlier backup it replaces (``replace``)."""

    root: Path
    nodes: list[G5kNode]
    metrics: list[str] | None
    span: tuple[dt.datetime, dt.datetime]
    doc: dict[str, Any]
    replaced: dict[str, Any] | None


def metric_list(metrics: Sequence[str] | str | None) -> list[str] | None:
    """The metrics asked for: None for every one; an empty list is refused (it would have
    fetched every metric)."""
    if metrics is None:
        return None
    mets = [metrics] if isinstance(metrics, str) else list(metrics)
    if not mets:
        raise ConfigError("metrics names no metric: give metric names, or None for every metric")
    bad = [m for m in mets if not isinstance(m, str)]
    if bad:
        raise ConfigError(f"metrics must be names (strings), not {bad[0]!r}")
    return mets


def summed(stats: KwollectStats, parts: Iterable[KwollectStats], t0: float) -> KwollectStats:
    """``stats`` with the sites' own added, and the seconds since ``t0``."""
    for part in list(parts):
        stats.add(part)
        stats.outside_window += part.outside_window
    stats.seconds = time.perf_counter() - t0
    return stats


@dataclass
class SiteRun:
    """How the sites of one fetch ended (see
    :meth:`~dxt_core.backends.kwollect.experiment.Kwollect._run_sites`)."""

    sites: list[str]
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, DxtError] = field(default_factory=dict)
    #: sites stopped by an interrupt: "stopped", "abandoned in flight" or "not started"
    not_done: dict[str, str] = field(default_factory=dict)
    bugs: list[BaseException] = field(default_factory=list)
    interrupted: bool = False
    #: what interrupted it: "Ctrl-C (SIGINT)", or the stop signal's name
    reason: str = ""

    def raise_errors(self) -> None:
        """The sites' errors in one (the only one as it is)."""
        if len(self.errors) == 1:
            raise next(iter(self.errors.values()))
        if self.errors:
            raise SourceError("; ".join(f"site {s}: {e}" for s, e in self.errors.items()))


def failed(exc: DxtError | None) -> str:
    return f"failed: {exc}" if exc is not None else "stopped"
