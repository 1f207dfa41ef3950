"""The simulator's data model: sites, clusters, nodes, metric catalogues, jobs and values.

Every value is a pure function of the node, the metric and the timestamp: two runs (and two
processes) serve the same bytes. Power is a triangle wave (period 600 s, breakpoints on whole
seconds), so trapezoidal integration of the 1 s wattmetre series is exact and tests can compare
energy with a closed form (:func:`power_watts`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

import numpy as np

from dxt_core.errors import ConfigError

PARIS: Final = ZoneInfo("Europe/Paris")
DOMAIN: Final = "grid5000.fr"
#: Power triangle wave: period and amplitude (watts).
WAVE_PERIOD_S: Final = 600
WAVE_AMPLITUDE_W: Final = 60.0


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    description: str
    period_ms: int
    kind: str  # power | bmc | counter | gauge
    protocol: str
    source_id: str
    phase_ms: int = 0
    optional_period_ms: int | None = None
    only_for: tuple[str, ...] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    #: the catalogue entries that collect it, whose names a monitor job's regex is matched
    #: against (a Prometheus metric: its bundles); empty: its own entry
    bundles: tuple[str, ...] = ()


#: The Prometheus bundles of a cluster's catalogue (reference-repository ``<c>.json``).
PROM_DEFAULT: Final = "prom_default_metrics"
PROM_ALL: Final = "prom_all_metrics"
#: node exporter's port, as the real bundles give it
PROM_PORT: Final = 9100


def _cluster_metrics(cluster: str, nodes: list[str]) -> list[MetricSpec]:
    bmc = MetricSpec(
        "bmc_node_power_watt",
        "Power consumption of node reported by BMC, in watt",
        5000,
        "bmc",
        "ipmisensor",
        "1",
        phase_ms=250,
    )
    net = MetricSpec(
        "network_ifacein_bytes_total",
        "Input byte counter for the network device port",
        15000,
        "counter",
        "snmp",
        "1.3.6.1.2.1.2.2.1.10.{{ 1.3.6.1.2.1.2.2.1.2 == %SNMP_IFACE% }}",
        phase_ms=460,
        labels={"interface": "eth0"},
    )
    # node exporter's load, stored as prom_node_load1, collected only under a monitor job
    # that promotes one of the bundles listing it (period 0)
    load = MetricSpec(
        "prom_node_load1",
        "1m load average (Prometheus node exporter)",
        0,
        "gauge",
        "prometheus",
        "node_load1",
        phase_ms=120,
        optional_period_ms=15000,
        bundles=(PROM_DEFAULT, PROM_ALL),
    )
    wattmetre = MetricSpec(
        "wattmetre_power_watt",
        "Power consumption of node reported by wattmetre, in watt",
        1000,
        "power",
        "wattmetre",
        f"wattmetre-{cluster}",
        optional_period_ms=20,
    )
    if cluster == "taurus":
        pdu = MetricSpec(
            "pdu_outlet_power_watt",
            "Power consumption of PDU outlet, in watt",
            1000,
            "power",
            "snmp",
            "1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.%PDU_PORT%",
            only_for=tuple(nodes[:2]),
        )
        return [pdu, bmc, net, load]
    return [wattmetre, bmc, net, load]


def cluster_catalogue(specs: list[MetricSpec]) -> list[dict[str, Any]]:
    """The ``metrics`` list of ``GET /sites/<site>/clusters/<cluster>``, shaped as the real
    one (grid5000/reference-repository ``data/grid5000/sites/nancy/clusters/gros/gros.json``):

    * keys sorted, as the generator writes them; ``labels`` only where an entry has some;
    * ``source.id`` only for the protocols that need one (snmp, ipmisensor, prometheus
      bundles): none for ``wattmetre``, ``pdu`` and ``network_equipment`` entries;
    * entries of ``"period": 0`` (collected only under an OAR job of type ``monitor``, at
      ``optional_period``), one name repeated and told apart by ``labels``
      (``bmc_fan_speed_rpm``);

    * the Prometheus bundles ``prom_default_metrics`` (``source.id``: the exporter names it
      keeps) and ``prom_all_metrics`` (no ``id``: every name node exporter gives), both
      ``period: 0``, ``optional_period: 15000``, ``source.port`` 9100; their metrics are
      stored as ``prom_<name>`` (kwollect ``kwollector.py``). The default list here names
      only ``node_load1``, the one exporter metric the simulator serves (the real list has 23).

    The served series are :func:`_cluster_metrics`'; the ``period: 0`` BMC entries here
    have no series (no monitor job names them).
    """
    doc: list[dict[str, Any]] = []
    for m in specs:
        if m.bundles:
            doc.extend(_bundle_entries(m))
            continue
        protocol = {"power": "pdu" if m.name.startswith("pdu") else "wattmetre"}.get(
            m.kind, "network_equipment" if m.kind == "counter" else m.protocol
        )
        entry: dict[str, Any] = {
            "description": m.description,
            "name": m.name,
            "period": m.period_ms,
            "source": {"protocol": protocol},
        }
        if protocol in ("snmp", "ipmisensor", "prometheus"):
            entry["source"]["id"] = m.source_id
        if m.labels:
            entry["labels"] = dict(m.labels)
        if m.optional_period_ms is not None:
            entry["optional_period"] = m.optional_period_ms
        if m.only_for is not None:
            entry["only_for"] = list(m.only_for)
        doc.append(dict(sorted(entry.items())))
        if m.kind == "bmc":
            for i, fan in enumerate(("1a", "1b"), start=1):
                doc.append(
                    {
                        "description": f"Speed of Fan {fan.upper()} reported by BMC, in rpm",
                        "labels": {"fan": fan},
                        "name": "bmc_fan_speed_rpm",
                        "optional_period": 5000,
                        "period": 0,
                        "source": {
                            "id": f"1.3.6.1.4.1.674.10892.5.4.700.12.1.6.1.{i}",
                            "protocol": "snmp",
                        },
                    }
                )
    return doc


def _bundle_entries(m: MetricSpec) -> list[dict[str, Any]]:
    """The catalogue entries of a Prometheus metric's bundles, keys sorted."""
    out: list[dict[str, Any]] = []
    for bundle in m.bundles:
        source: dict[str, Any] = {"port": PROM_PORT, "protocol": "prometheus"}
        if bundle == PROM_DEFAULT:
            source = {"id": [m.source_id], **source}
        entry = {"name": bundle, "optional_period": m.optional_period_ms, "period": 0}
        out.append({**entry, "source": source})
    return out


#: The stop of a running job's monitoring (year 3000): past any time a query reaches.
_FOREVER_S: Final = 32_503_680_000

#: site -> clusters. The benchmark and tests use nova (lyon) and gros (nancy).
SITE_CLUSTERS: Final = {"lyon": ["nova", "taurus"], "nancy": ["gros"]}


#: Extra watts per cluster, so that nodes of different clusters draw different curves.
CLUSTER_OFFSET_W: Final = {"nova": 0.0, "taurus": 1.5, "gros": 3.0}


def power_watts(node_index: int, t_s: float, kind: str = "power", cluster: str = "nova") -> float:
    """The simulated power of node number ``node_index`` at epoch second ``t_s``.

    A triangle wave between ``base`` and ``base + 60`` W with a 600 s period (minimum at
    multiples of 600 s, maximum 300 s later), ``base = 90 + 7 * node_index`` plus
    :data:`CLUSTER_OFFSET_W`; BMC readings are 5 W above the wattmetre's.
    """
    base = 90.0 + 7.0 * node_index + CLUSTER_OFFSET_W.get(cluster, 0.0)
    base += 5.0 if kind == "bmc" else 0.0
    x = (t_s % WAVE_PERIOD_S) / (WAVE_PERIOD_S / 2)
    return base + WAVE_AMPLITUDE_W * (1.0 - abs(x - 1.0))


@dataclass(frozen=True, slots=True)
class SimJob:
    site: str
    uid: int
    nodes: tuple[str, ...]
    started_at: int
    #: None: still running (grid5000/g5k-api ``lib/oar/job.rb``: ``stopped_at`` is nil while
    #: OAR's ``stop_time`` is 0, and ``to_reservation`` drops nil keys)
    stopped_at: int | None
    types: tuple[str, ...] = ()


@dataclass
class SimSettings:
    """What the simulator serves and how it misbehaves (changeable at run time)."""

    nodes_per_cluster: int = 4
    delay_s: float = 0.0
    site_delay_s: dict[str, float] = field(default_factory=dict)
    max_points: int | None = None
    timeout_delay_s: float = 0.0
    #: fault: the next ``slow_requests`` metrics requests wait ``slow_delay_s`` before answering
    #: (a database busy for a while: a small request outlasts the client's read timeout)
    slow_requests: int = 0
    slow_delay_s: float = 0.0
    #: fault: every metrics answer starts with a point this many seconds before its window
    stray_offset_s: float | None = None
    #: retention: rows before this time (epoch seconds) are gone, as when TimescaleDB's
    #: retention policy has dropped their chunks (answers start there; none: all kept)
    expired_before_s: float | None = None
    zero_bmc_node: str = "taurus-3"
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    jobs: list[SimJob] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nodes_per_cluster < 3:
            raise ConfigError("--nodes must be >= 3 (taurus-3 is the node whose BMC reads 0)")


@dataclass(frozen=True, slots=True)
class Series:
    node: str
    index: int
    metric: MetricSpec
    labels_json: bytes
    #: inclusive [start, end] microsecond intervals sampled at ``optional_period`` (monitor jobs)
    monitor: tuple[tuple[int, int], ...] = ()


def node_index(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


class SimModel:
    """Sites, clusters, nodes, catalogues and jobs; sample times and values of a series."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        #: Points added at run time (``POST /_sim/points``, late data): (node, metric) ->
        #: {epoch microseconds: value}.
        self.extra: dict[tuple[str, str], dict[int, float]] = {}
        self.clusters: dict[str, dict[str, list[str]]] = {}
        self.specs: dict[tuple[str, str], list[MetricSpec]] = {}
        for site, clusters in SITE_CLUSTERS.items():
            self.clusters[site] = {}
            for cluster in clusters:
                nodes = [f"{cluster}-{i}" for i in range(1, settings.nodes_per_cluster + 1)]
                self.clusters[site][cluster] = nodes
                self.specs[(site, cluster)] = _cluster_metrics(cluster, nodes)
        if not settings.jobs:
            start = int(datetime(2024, 11, 26, 14, 0, tzinfo=UTC).timestamp())
            settings.jobs = [
                # node exporter's metrics asked for (the default bundle promoted)
                SimJob(
                    "lyon",
                    1930000,
                    ("nova-1", "nova-2"),
                    start,
                    start + 1800,
                    (f"monitor={PROM_DEFAULT}",),
                ),
                # a 50 Hz wattmetre job, on a day the other examples do not use
                SimJob(
                    "nancy",
                    5200000,
                    ("gros-1", "gros-2", "gros-3"),
                    start + 3 * 86_400,
                    start + 3 * 86_400 + 3600,
                    ("monitor=wattmetre_power_watt",),
                ),
            ]

    def monitor_intervals(self, site: str, node: str, m: MetricSpec) -> tuple[tuple[int, int], ...]:
        """Periods of jobs of type ``monitor=<regex>`` matching ``m`` on ``node``."""
        if m.optional_period_ms is None:
            return ()
        found = []
        for job in self.settings.jobs:
            if job.site != site or node not in job.nodes:
                continue
            for t in job.types:
                if any(_promotes(t, name) for name in m.bundles or (m.name,)):
                    # a running job monitors up to now: no sample exists after now anyway
                    stop = _FOREVER_S if job.stopped_at is None else job.stopped_at
                    found.append((job.started_at * 1_000_000, stop * 1_000_000))
        return tuple(sorted(found))

    @staticmethod
    def segments(s: Series, start_us: int, end_us: int) -> list[tuple[int, int, int, int]]:
        """``(start, end, period, phase)`` pieces of [start, end] with one sampling grid each."""
        m = s.metric
        slow, phase = m.period_ms * 1000, m.phase_ms * 1000
        fast = (m.optional_period_ms or m.period_ms) * 1000
        segs: list[tuple[int, int, int, int]] = []
        cur = start_us
        for js, je in s.monitor:
            if je < cur or js > end_us:
                continue
            if js > cur and slow:
                segs.append((cur, js - 1, slow, phase))
            segs.append((max(js, cur), min(je, end_us), fast, phase))
            cur = min(je, end_us) + 1
        if cur <= end_us and slow:  # period 0: nothing outside a monitor job
            segs.append((cur, end_us, slow, phase))
        return segs

    @staticmethod
    def grid(p: int, ph: int, start_us: int, end_us: int) -> tuple[int, int]:
        """First and last sample numbers k (t = k * p + ph) in [start, end]."""
        first = -((ph - start_us) // p)  # ceil((start - ph) / p)
        last = (end_us - ph) // p
        return first, last

    def times(
        self, s: Series, start_us: int, end_us: int, late: bool = True
    ) -> np.ndarray[Any, Any]:
        """Sample times of ``s`` in ``[start_us, end_us]``, with the late points (``late``)."""
        parts = []
        for a, b, p, ph in self.segments(s, start_us, end_us):
            k0, k1 = self.grid(p, ph, a, b)
            if k1 >= k0:
                parts.append(np.arange(k0, k1 + 1, dtype=np.int64) * p + ph)
        added = self._late(s, start_us, end_us) if late else []
        if added:
            return np.sort(np.concatenate([*parts, np.array(added, dtype=np.int64)]))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def _late(self, s: Series, start_us: int, end_us: int) -> list[int]:
        extra = self.extra.get((s.node, s.metric.name)) if self.extra else None
        return [us for us in extra if start_us <= us <= end_us] if extra else []

    def count_points(self, series: list[Series], start_us: int, end_us: int) -> int:
        total = 0
        for s in series:
            for a, b, p, ph in self.segments(s, start_us, end_us):
                k0, k1 = self.grid(p, ph, a, b)
                total += max(0, k1 - k0 + 1)
            total += len(self._late(s, start_us, end_us))
        return total

    def value(self, s: Series, us: int, as_rate: bool = False) -> float | int:
        if self.extra:
            late = self.extra.get((s.node, s.metric.name), {}).get(us)
            if late is not None:
                return late
        t = us / 1_000_000
        kind = s.metric.kind
        if kind == "power":
            return power_watts(s.index, t, "power", s.node.rsplit("-", 1)[0])
        if kind == "bmc":
            if s.node == self.settings.zero_bmc_node:
                return 0
            return power_watts(s.index, t, "bmc", s.node.rsplit("-", 1)[0])
        if kind == "counter":
            rate = 125_000 * (1 + s.index % 3)
            return s.index * 1_000_000_000 + us * rate // 1_000_000
        return round(abs(math.sin(t / 300 + s.index)) * 4, 2)


def _promotes(job_type: str, name: str) -> bool:
    """Whether a running job of type ``job_type`` promotes the on-demand metric ``name``, as
    kwollect 1.3.1 decides it: only types ``monitor...``; ``monitor=REGEX`` promotes REGEX,
    any other ``monitor...`` type ``.*`` (``db/kwollect_setup_db_oar.py``, view
    ``promoted_metrics_job``); a metric is collected when ``re.compile(REGEX).match(name)``
    (``kwollector.py``, ``filter_optional_metrics``), the wattmetre at its high rate when
    ``'wattmetre_power_watt' ~ REGEX`` (PostgreSQL's unanchored match,
    ``kwollector_wattmetre.py``, ``get_highfreq_node``). Quotes around REGEX, as a shell
    leaves them in ``oarsub -t "monitor='...'"``, are dropped. A pattern that does not compile
    promotes nothing."""
    if not job_type.startswith("monitor"):
        return False
    pattern = job_type[len("monitor=") :].strip("'\"") if job_type.startswith("monitor=") else ".*"
    find = re.search if name == "wattmetre_power_watt" else re.match
    try:
        return find(pattern, name) is not None
    except re.error:
        return False
