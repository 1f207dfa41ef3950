"""The reference API's metric catalogue of a cluster: known names and sampling rates.

``GET /sites/<site>/clusters/<cluster>`` has a ``metrics`` list (grid5000/reference-repository,
``data/grid5000/sites/<site>/clusters/<cluster>/<cluster>.json``, generated from
``input/.../<cluster>_metrics.yaml``). Its real shapes, which request sizing must follow:

* ``period`` and ``optional_period`` are milliseconds. ``period: 0`` means "collected only when
  promoted" (an OAR job of type ``monitor[=regex]``), at ``optional_period``; a ``period``
  with a faster ``optional_period`` (``wattmetre_power_watt``: 1000 and 20 or 10) is sampled
  that fast while a monitor job runs (refrepo ``lib/refrepo/gen/puppet/templates/
  kwollect-node.erb``: ``update_every = period > 0 ? period : optional_period``).
* One name may have several entries, told apart by ``labels`` (dahu: 8 x
  ``bmc_fan_speed_rpm``, ``{"fan": "1a"}`` ...); a few clusters repeat an entry exactly. Each
  entry is one series per node.
* ``prom_default_metrics`` and ``prom_all_metrics`` are bundles, not stored names: the stored
  metric ids are ``prom_<exporter metric>`` (kwollect ``kwollector.py``), listed in
  ``source.id`` for the default bundle and open-ended for ``prom_all_metrics``. A Prometheus
  name has one series per label set (per CPU and mode, per device ...).
* ``only_for`` restricts an entry to the listed nodes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

Entry = dict[str, Any]

#: Points per second assumed for a metric the catalogue does not describe.
UNKNOWN_RATE: Final = 1.0
#: Label sets assumed per Prometheus metric name (``node_cpu_seconds_total``: CPUs x modes,
#: ``node_network_*``: devices ...): an upper estimate for sizing, not a count.
PROM_SERIES_PER_NAME: Final = 32
#: Series assumed for an open-ended bundle (``prom_all_metrics``: all of node exporter).
PROM_ALL_SERIES: Final = 2000
PROM_PREFIX: Final = "prom_"


def _ms(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


#: What a monitor job promotes: False (no monitor job), True (``-t monitor``: every on-demand
#: entry) or the regular expression of ``-t monitor=REGEX``.
Monitor = bool | str
#: The metric whose high rate kwollect's wattmetre collector sets apart (see :func:`promotes`).
WATTMETRE = "wattmetre_power_watt"


def promotes(monitored: Monitor, entry: Entry) -> bool:
    """Whether a monitor job of type ``monitored`` promotes ``entry`` to its ``optional_period``.

    As kwollect 1.3.1 does it (``db/kwollect_setup_db_oar.py``, view ``promoted_metrics_job``:
    plain ``monitor`` is ``.*``, ``monitor=REGEX`` is REGEX; ``kwollector.py``,
    ``filter_optional_metrics``, keeps an optional metric when
    ``re.compile(REGEX).match(name)``; the wattmetre's collector takes a node's high rate when
    ``'wattmetre_power_watt' ~ REGEX``, PostgreSQL's unanchored match:
    ``kwollector_wattmetre.py``, ``get_highfreq_node``). A pattern Python cannot compile
    promotes nothing, as kwollector would fail on it.
    """
    if isinstance(monitored, bool):
        return monitored
    name = str(entry.get("name", ""))
    find = re.search if name == WATTMETRE else re.match
    try:
        return find(monitored, name) is not None
    except re.error:
        return False


def entry_period_ms(entry: Entry, monitored: Monitor = False) -> float | None:
    """The sampling period of one catalogue entry, or None when it gives none.

    Normally ``period``, or ``optional_period`` when ``period`` is 0 (on demand only); promoted
    by a monitor job (:func:`promotes`): the faster of the two.
    """
    period, optional = _ms(entry.get("period")), _ms(entry.get("optional_period"))
    if promotes(monitored, entry):
        fastest = [p for p in (period, optional) if p is not None]
        return min(fastest) if fastest else None
    return period if period is not None else optional


def _prom_ids(entry: Entry) -> list[str] | None:
    """Exporter metric names of a Prometheus bundle, or None when it is open-ended."""
    ids = (entry.get("source") or {}).get("id")
    if isinstance(ids, list):
        return [str(i) for i in ids]
    return None


def _is_prom_bundle(entry: Entry) -> bool:
    return (entry.get("source") or {}).get("protocol") == "prometheus" and str(
        entry.get("name", "")
    ).endswith("_metrics")


def applies_to(entry: Entry, node: str) -> bool:
    only = entry.get("only_for")
    return not only or node in only


def known_names(entries: Iterable[Entry]) -> tuple[set[str], bool]:
    """Stored metric names the catalogue knows, and whether any ``prom_*`` name may exist."""
    names: set[str] = set()
    open_prom = False
    for e in entries:
        if _is_prom_bundle(e):
            ids = _prom_ids(e)
            if ids is None:
                open_prom = True
            else:
                names.update(PROM_PREFIX + i for i in ids)
        else:
            names.add(str(e.get("name")))
    return names, open_prom


def bundle_names(entries: Iterable[Entry]) -> set[str]:
    """The catalogue's Prometheus exporter bundles (``prom_default_metrics``): entries that
    name a set of metrics, each stored under its own name ``prom_<name>``, never their own."""
    return {str(e.get("name")) for e in entries if _is_prom_bundle(e)}


def unknown_metrics(metrics: Sequence[str], entries: Iterable[Entry]) -> list[str]:
    """The names of ``metrics`` that the catalogue ``entries`` have never heard of (a
    bundle's name among them: nothing is stored under it)."""
    entries = list(entries)
    names, open_prom = known_names(entries)
    bundles = bundle_names(entries)
    return [
        m
        for m in metrics
        if m in bundles or (m not in names and not (open_prom and m.startswith(PROM_PREFIX)))
    ]


def closest(name: str, entries: Iterable[Entry], n: int = 3) -> list[str]:
    names, _ = known_names(entries)
    return difflib.get_close_matches(name, sorted(names), n=n, cutoff=0.6)


def node_rate(entries: Iterable[Entry], metrics: Sequence[str] | None, monitored: Monitor) -> float:
    """Points per second of one node for ``metrics`` (all when None), from its entries.

    Every entry counts (duplicates by labels are separate series); bundles count their
    exporter names times :data:`PROM_SERIES_PER_NAME`; a requested name no entry describes
    counts :data:`UNKNOWN_RATE`.

    All metrics (``metrics`` None) are what the node really collects: an entry of
    ``period: 0`` is collected only when a monitor job promotes it (the real catalogue of
    gros has 17 such entries, both Prometheus bundles among them), and the open-ended
    ``prom_all_metrics`` holds the default bundle's names, which are not counted twice.
    Counting them regardless planned an all-metrics request 40 to 145 times larger than
    the points stored. A name asked for by name counts whatever its period: a past monitor
    job may have promoted it.
    """
    entries = list(entries)
    wanted = set(metrics) if metrics is not None else None
    if wanted is None:
        entries = [e for e in entries if _ms(e.get("period")) is not None or promotes(monitored, e)]
        if any(_is_prom_bundle(e) and _prom_ids(e) is None for e in entries):
            entries = [e for e in entries if not (_is_prom_bundle(e) and _prom_ids(e) is not None)]
    described: set[str] = set()
    open_prom_rate = 0.0
    total = 0.0
    for e in entries:
        period = entry_period_ms(e, monitored)
        rate = 1000.0 / period if period else UNKNOWN_RATE
        if _is_prom_bundle(e):
            ids = _prom_ids(e)
            if ids is None:
                open_prom_rate = max(open_prom_rate, rate)
                if wanted is None:
                    total += rate * PROM_ALL_SERIES
                continue
            names = {PROM_PREFIX + i for i in ids}
            chosen = names if wanted is None else names & wanted
            described |= chosen
            total += rate * PROM_SERIES_PER_NAME * len(chosen)
            continue
        name = str(e.get("name"))
        if wanted is None or name in wanted:
            described.add(name)
            total += rate
    if wanted is not None:
        for m in wanted - described:
            if open_prom_rate and m.startswith(PROM_PREFIX):
                total += open_prom_rate * PROM_SERIES_PER_NAME
            else:
                total += UNKNOWN_RATE
    return total
