"""Data model of the Examon simulator: which series each metric has, their values, and the
job accounting records. Every value is a pure function of the metric name, the series and
the timestamp, so two runs (and two processes) always serve the same data.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dxt_core.backends.examon.catalog import load_catalog as _load_catalog
from dxt_core.backends.examon.simulator.faults import Faults
from dxt_core.errors import ConfigError

NODES_PER_RACK: Final = 20
FIRST_RACK: Final = 201
ORG: Final = "cineca"
#: One job of the accounting table starts every JOB_PERIOD_S seconds (epoch aligned), so one
#: starts at every midnight of a zone with a whole-hour offset.
JOB_PERIOD_S: Final = 360
_PARTITIONS: Final = ("m100_usr_prod", "m100_usr_prod", "m100_usr_dbg", "m100_all_serial")

#: Realistic mode: a sample lands 0 to JITTER_MS - 1 ms after its grid time. Marconi's
#: samples do (examon-client 0.4 ``examples/Demo_ExamonQL.ipynb``: 19:41:00.029,
#: 20:00:00.099, 09:45:00.100).
JITTER_MS: Final = 128

JsonObj = dict[str, Any]


@dataclass
class SimConfig:
    """What the simulator serves.

    Attributes:
        catalog: ``(metric, plugin)`` pairs; rows whose plugin is ``job_table`` name the job
            accounting tables served by the jobs endpoint instead of KairosDB metrics.
        nodes: number of compute nodes (see :func:`node_names`).
        interval_s: sample period. Each series has one sample per period: on the epoch
            multiple itself in tidy mode (so with a period that divides a day there is a
            sample at every midnight), up to :data:`JITTER_MS` later in realistic mode.
        cluster: value of the ``cluster`` tag.
        user: when set, every endpoint but ``/_sim/*`` requires HTTP Basic auth.
        password: password for ``user``.
        faults: faults to inject (mutable at runtime).
        data_start_ms: no data (and no job) before this epoch-millisecond instant.
        realistic: serve data that looks like a real Marconi100 KairosDB (the default):
            millisecond jitter on every timestamp and doubles computed as a sensor
            pipeline would (``0.30000000000000004``). ``False`` is the tidy mode: samples
            on the grid, doubles rounded to a few decimals. Numbers are printed as
            KairosDB's org.json prints them in both modes.
    """

    catalog: list[tuple[str, str]]
    nodes: int = 8
    interval_s: int = 20
    cluster: str = "marconi100"
    user: str | None = None
    password: str | None = None
    faults: Faults = field(default_factory=Faults)
    data_start_ms: int | None = None
    realistic: bool = True

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ConfigError(f"nodes must be >= 1, got {self.nodes}")
        if self.interval_s < 1:
            raise ConfigError(f"interval_s must be >= 1 second, got {self.interval_s}")
        if not self.cluster:
            raise ConfigError("cluster must not be empty")
        if self.password is not None and self.user is None:
            raise ConfigError("a simulator password needs a user too (--user)")
        for i, row in enumerate(self.catalog):
            if len(row) != 2 or not row[0] or not row[1]:
                raise ConfigError(f"catalog row {i} must be a (metric, plugin) pair, got {row!r}")


def node_names(count: int) -> list[str]:
    """Names of the first ``count`` compute nodes: 20 per rack, racks from 201.

    Args:
        count: number of nodes.

    Returns:
        ``["r201n01", ..., "r201n20", "r202n01", ...]``.
    """
    return [
        f"r{FIRST_RACK + i // NODES_PER_RACK:03d}n{i % NODES_PER_RACK + 1:02d}"
        for i in range(count)
    ]


def load_catalog(path: Path | str | None = None) -> list[tuple[str, str]]:
    """Read a catalog with dxt_core's own loader (same checks, same error messages).

    Args:
        path: the CSV file; ``None`` reads the Marconi100 catalog shipped with dxt_core.

    Returns:
        The ``(metric, plugin)`` pairs in file order.
    """
    return [(e.metric, e.plugin) for e in _load_catalog(path)]


# Facility plugins have no cluster tag: a few devices named by one tag instead.
_DEVICE_PLUGINS: Final[dict[str, tuple[str, tuple[str, ...], str, int]]] = {
    # plugin: (device tag key, device names, value kind, decimals)
    "schneider_pub": ("panel", ("QE-A1", "QE-A2", "QE-B1", "QE-B2"), "float", 2),
    "vertiv_pub": ("unit", ("CRAC-01", "CRAC-02", "CRAC-03"), "float", 1),
    "logics_pub": ("device", ("PLC_Q101", "PLC_Q102"), "int", 0),
    "weather_pub": ("site", ("bologna-casalecchio",), "float", 1),
}
_NAGIOS_DESCRIPTIONS: Final = ("alive", "batchs::client::state", "filesys::m100_work")
_NAGIOS_MESSAGES: Final = (
    "OK - load average: 0.12, 0.08, 0.05",
    'WARNING - filesystem "/m100_work" is 91% full',
    "OK",
    'CRITICAL - service "slurmd" is not running, restart requested',
    "OK - node idle, 0 jobs; last check 'fine'",
    "UNKNOWN - plugin timed out after 10s",
)
_NAGIOS_STATES: Final = ("0", "0", "0", "1", "0", "2", "0", "3")
_DOWNTIME_COMMENTS: Final = (
    "",
    'maintenance "GPU swap", ticket #4411',
    "firmware upgrade, see CINECA notice",
)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _ipmi_units(metric: str) -> str:
    m = metric.lower()
    if "temp" in m or m == "ambient":
        return "degrees C"
    if "power" in m or m.startswith("gv100card"):
        return "Watts"
    if m.startswith("fan"):
        return "RPM"
    if "volt" in m:
        return "Volts"
    if "curr" in m:
        return "Amps"
    return "unspecified"


@dataclass(frozen=True, slots=True)
class _Metric:
    """One metric's series: their tags (same keys for all) and how values are made."""

    name: str
    plugin: str
    kind: str  # "float", "int" or "str"
    decimals: int
    tag_keys: tuple[str, ...]
    series: tuple[dict[str, str], ...]
    crc: int
    base: float
    amplitude: float


def _build_metric(name: str, plugin: str, nodes: Sequence[str], cluster: str) -> _Metric:
    crc = _crc(name)
    base_tags = {"org": ORG, "plugin": plugin}
    series: list[dict[str, str]] = []
    kind, decimals = "float", 3
    if plugin in _DEVICE_PLUGINS:
        key, devices, kind, decimals = _DEVICE_PLUGINS[plugin]
        series = [{**base_tags, key: device} for device in devices]
    elif plugin == "ipmi_pub":
        units = _ipmi_units(name)
        # Fans read whole RPM, stored as doubles: KairosDB prints them "3000", and once in a
        # while a reading with a fraction ("2999.5") comes along (see _series_values).
        decimals = {"degrees C": 1, "RPM": 0}.get(units, 2)
        for node in nodes:
            series.append(
                {
                    **base_tags,
                    "chnl": "data",
                    "cluster": cluster,
                    "node": node,
                    "rack": node[1:4],
                    "slot": node[5:7],
                    "units": units,
                }
            )
    elif plugin == "nagios_pub":
        kind, decimals = "str", 0
        for i, node in enumerate(nodes):
            series.append(
                {
                    **base_tags,
                    "chnl": "data",
                    "cluster": cluster,
                    "description": _NAGIOS_DESCRIPTIONS[i % len(_NAGIOS_DESCRIPTIONS)],
                    "host_group": "compute,cincompute" if i % 2 else "compute",
                    "nagiosdrained": "1" if i % 10 == 9 else "0",
                    "node": node,
                    "rack": node[1:4],
                    "slot": node[5:7],
                    "state": _NAGIOS_STATES[(i + crc) % len(_NAGIOS_STATES)],
                    "state_type": "0" if i % 4 == 3 else "1",
                }
            )
    else:
        # ganglia_pub, slurm_pub and any plugin we do not know: one series per node.
        if plugin == "slurm_pub":
            kind, decimals = "int", 0
        series = [{**base_tags, "cluster": cluster, "node": node} for node in nodes]
    # Integer metrics look like counters of a few hundred; floats span sensor-like ranges.
    base = float(10 + crc % 490) if kind == "int" else 20.0 + (crc % 20_000) / 10.0
    return _Metric(
        name=name,
        plugin=plugin,
        kind=kind,
        decimals=decimals,
        tag_keys=tuple(sorted(series[0])),
        series=tuple(series),
        crc=crc,
        base=base,
        amplitude=base * 0.25 + 1.0,
    )


def _series_values(
    metric: _Metric, series_idx: int, ts_ms: npt.NDArray[np.int64], realistic: bool
) -> Any:
    """Values of one series at the given timestamps (a 1-D array).

    Integer arithmetic reduces the timestamps modulo the periods before the sine, so the
    result does not depend on float precision at epoch-sized arguments. Tidy doubles are
    rounded to the metric's decimals; realistic ones are a count of units times the unit
    (``3 * 0.1``), so some carry the float noise real readings have (``0.30000000000000004``)
    and whole ones come out too (printed ``24`` by KairosDB).
    """
    ts_s = ts_ms // 1000
    idx = series_idx
    if metric.kind == "str":
        palette: tuple[str, ...] = _NAGIOS_MESSAGES
        if "downtime" in metric.name:
            palette = _DOWNTIME_COMMENTS
        # Messages change every 10 minutes, not every sample, like real check results.
        pick = (ts_s // 600 + idx * 3 + metric.crc) % len(palette)
        return np.asarray(palette, dtype=object)[pick]
    day = 86_400
    hour = 3_600
    day_phase = ((ts_s + metric.crc + idx * 7_919) % day).astype(np.float64) / day
    hour_phase = ((ts_s + idx * 131) % hour).astype(np.float64) / hour
    raw = metric.base + metric.amplitude * (
        np.sin(2.0 * math.pi * day_phase) + 0.2 * np.sin(2.0 * math.pi * hour_phase)
    )
    if metric.kind == "int":
        return np.rint(raw).astype(np.int64)
    if metric.decimals == 0:
        # Whole doubles, but for the samples in minute 7 of every six hours (UTC), which
        # read half a unit more: a day's first windows hold only whole numbers.
        return np.rint(raw) + np.where((ts_s % 21_600) // 60 == 7, 0.5, 0.0)
    if realistic:
        return np.rint(raw * 10**metric.decimals) * 10.0**-metric.decimals
    return np.round(raw, metric.decimals)


def _slurm_hostlist(names: list[str]) -> str:
    """Names as Slurm writes a job's node list (``r207n[07-08],r208n01``): sorted, one
    bracket group per prefix of the names' trailing numbers, consecutive numbers of the same
    width as ranges (Slurm src/common/hostlist.c, hostlist_ranged_string, after
    hostlist_uniq sorts the list)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        digits = len(name) - len(name.rstrip("0123456789"))
        prefix, num = name[: len(name) - digits], name[len(name) - digits :]
        groups.setdefault(prefix, []).append(num)
    parts = []
    for prefix, nums in groups.items():
        if nums == [""]:
            parts.append(prefix)
            continue
        ranges: list[list[str]] = []
        for n in nums:
            last = ranges[-1][-1] if ranges else None
            if last is not None and len(last) == len(n) and int(n) == int(last) + 1:
                ranges[-1] = [ranges[-1][0], n]
            else:
                ranges.append([n])
        text = ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[1]}" for r in ranges)
        one = len(ranges) == 1 and len(ranges[0]) == 1
        parts.append(f"{prefix}{text}" if one else f"{prefix}[{text}]")
    return ",".join(parts)


def _iso(epoch_s: int) -> str:
    """A UTC time as pandas' ``to_json(date_format='iso')`` writes a naive Cassandra
    timestamp: milliseconds and a literal ``Z`` (``2019-09-29T09:06:45.000Z``)."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class DataModel:
    """What the simulator holds: the catalog's metrics (built on first use) and job tables.

    Args:
        config: what to serve.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.nodes = node_names(config.nodes)
        self.plugins: dict[str, str] = {}
        self.job_tables: set[str] = set()
        for metric, plugin in config.catalog:
            if plugin == "job_table":
                self.job_tables.add(metric)
            else:
                self.plugins.setdefault(metric, plugin)
        self._metrics: dict[str, _Metric] = {}
        #: Points added at runtime (``POST /_sim/points``): metric -> series index ->
        #: ``(timestamp ms, value)`` pairs, e.g. late data or a stored NaN.
        self.extra: dict[str, dict[int, list[tuple[int, Any]]]] = {}

    def add_points(self, name: str, tags: dict[str, str], points: Sequence[Any]) -> int:
        """Store ``points`` (``[ts_ms, value]``; a value may be ``"NaN"``, ``"Infinity"`` or
        ``"-Infinity"`` for a double metric) in the series of ``name`` whose tags include
        ``tags``. Returns how many were added.

        Raises:
            ConfigError: no such metric or series, or a value of the wrong type.
        """
        metric = self.metric(name)
        if metric is None:
            raise ConfigError(f"no metric {name!r} in the simulator's catalog")
        matches = [
            i for i, s in enumerate(metric.series) if all(s.get(k) == v for k, v in tags.items())
        ]
        if len(matches) != 1:
            raise ConfigError(
                f"tags {tags!r} select {len(matches)} series of {name!r}; name exactly one"
            )
        parsed: list[tuple[int, Any]] = []
        for p in points:
            if not isinstance(p, list) or len(p) != 2 or type(p[0]) is not int:
                raise ConfigError(f"a point must be [timestamp ms, value], got {p!r}")
            ts, value = p
            if metric.kind == "float":
                if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                    value = float(value.replace("Infinity", "inf"))
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(f"{name} holds doubles: {value!r} is not one")
                value = float(value)
            elif metric.kind == "int":
                if type(value) is not int:
                    raise ConfigError(f"{name} holds longs: {value!r} is not one")
            elif not isinstance(value, str):
                raise ConfigError(f"{name} holds strings: {value!r} is not one")
            parsed.append((ts, value))
        self.extra.setdefault(name, {}).setdefault(matches[0], []).extend(parsed)
        return len(parsed)

    def extra_points(self, metric: _Metric, series_idx: int, lo: int, hi: int) -> list[Any]:
        """The added points of one series within ``[lo, hi]``, in time order."""
        pts = self.extra.get(metric.name, {}).get(series_idx, ())
        return sorted((p for p in pts if lo <= p[0] <= hi), key=lambda p: p[0])

    def metric(self, name: str) -> _Metric | None:
        plugin = self.plugins.get(name)
        if plugin is None:
            return None
        metric = self._metrics.get(name)
        if metric is None:
            metric = _build_metric(name, plugin, self.nodes, self.config.cluster)
            self._metrics[name] = metric
        return metric

    @property
    def step_ms(self) -> int:
        return self.config.interval_s * 1000

    def slots(self, start_ms: int, end_ms: int, now_ms: int) -> tuple[int, int, int, int]:
        """Sample slots that may hold a sample in ``[start_ms, end_ms]`` (both inclusive).

        Returns:
            ``(first slot, slot count, lo, hi)``: slot ``k`` holds one sample per series at
            ``k * step`` plus its jitter; only samples in ``[lo, hi]`` exist (``lo`` and ``hi``
            are the window clipped to the data start and the current time).
        """
        step = self.step_ms
        lo = start_ms
        if self.config.data_start_ms is not None:
            lo = max(lo, self.config.data_start_ms)
        hi = min(end_ms, now_ms)
        first = -(-(lo - self.jitter_span + 1) // step)
        last = hi // step
        return first, max(0, last - first + 1), lo, hi

    @property
    def jitter_span(self) -> int:
        """Samples land ``0 .. jitter_span - 1`` ms after their slot's grid time."""
        return min(JITTER_MS, self.step_ms) if self.config.realistic else 1

    def times(self, metric: _Metric, series_idx: Any, slots: Any) -> Any:
        """Sample times (epoch ms) of series ``series_idx`` in ``slots`` (NumPy, broadcast)."""
        k = np.asarray(slots, dtype=np.int64)
        base = k * self.step_ms
        span = self.jitter_span
        if span == 1:
            return base + np.zeros_like(np.asarray(series_idx, dtype=np.int64))
        seed = (metric.crc + np.asarray(series_idx, dtype=np.int64) * 7_919) * 40_503
        return base + ((k * 2_654_435_761 + seed) >> 7) % span

    def sample_times(
        self, metric: _Metric, series_idx: int, first: int, count: int, lo: int, hi: int
    ) -> Any:
        """The sample times of one series within ``[lo, hi]``, from ``count`` slots."""
        t = self.times(metric, series_idx, np.arange(first, first + count, dtype=np.int64))
        if count and (t[0] < lo or t[-1] > hi):
            t = t[(t >= lo) & (t <= hi)]
        return t

    def sample_counts(
        self, metric: _Metric, series: list[int], first: int, count: int, lo: int, hi: int
    ) -> list[int]:
        """How many samples each of ``series`` has in ``[lo, hi]`` (only edge slots can miss)."""
        if count == 0:
            return [0] * len(series)
        idx = np.asarray(series, dtype=np.int64)
        t0 = self.times(metric, idx, first)
        in0 = (t0 >= lo) & (t0 <= hi)
        if count == 1:
            return [int(x) for x in in0]
        t1 = self.times(metric, idx, first + count - 1)
        in1 = (t1 >= lo) & (t1 <= hi)
        return [count - 2 + int(a) + int(b) for a, b in zip(in0, in1, strict=True)]

    def job_span_ms(self, k: int) -> tuple[int, int]:
        """``(start_time, end_time)`` of job ``k`` in epoch milliseconds."""
        start_s = k * JOB_PERIOD_S
        return start_s * 1000, (start_s + self._run_time(k)[0]) * 1000

    def _run_time(self, k: int) -> tuple[int, str, str, int, int]:
        """``(run_time s, state, reason, exit code, time limit min)`` of job ``k``."""
        h = _crc(f"job:{k}")
        partition = _PARTITIONS[h % len(_PARTITIONS)]
        time_limit = (30, 60, 240, 1440)[(h >> 12) % 4]  # minutes
        if partition == "m100_usr_dbg":
            time_limit = 30
        roll = (h >> 16) % 10
        run_time = 60 + (h >> 3) % max(1, time_limit * 60 - 60)
        if roll == 7:
            return run_time, "FAILED", "NonZeroExitCode", 1 + (h >> 20) % 255, time_limit
        if roll == 8:
            # Cancelled at launch: Slurm records the same start and end time.
            return 0, "CANCELLED", "None", 0, time_limit
        if roll == 9:
            return time_limit * 60, "TIMEOUT", "TimeLimit", 0, time_limit
        return run_time, "COMPLETED", "None", 0, time_limit

    def job(self, k: int) -> JsonObj:
        """The job that starts at ``k * JOB_PERIOD_S``; every field derives from its id.

        Like a Cassandra row, every record has every column; a column a job lacks is None.
        """
        job_id = k
        h = _crc(f"job:{job_id}")
        h2 = _crc(f"wait:{job_id}")
        partition = _PARTITIONS[h % len(_PARTITIONS)]
        qos = {"m100_usr_dbg": "m100_qos_dbg", "m100_all_serial": "normal"}.get(
            partition, "normal" if h % 3 else "m100_qos_bprod"
        )
        max_nodes = {"m100_usr_dbg": 2, "m100_all_serial": 1}.get(partition, 16)
        num_nodes = min(1 + (h >> 4) % max_nodes, len(self.nodes))
        cpus_per_node = 4 if partition == "m100_all_serial" else 128
        first_node = (h >> 8) % len(self.nodes)
        nodes = [self.nodes[(first_node + j) % len(self.nodes)] for j in range(num_nodes)]
        run_time, state, reason, exit_code, time_limit = self._run_time(k)
        start_s = k * JOB_PERIOD_S
        end_s = start_s + run_time
        submit_s = start_s - h2 % 7_200
        user_no = h2 % 60
        user = f"a08tra{user_no:02d}"
        account = f"IscrC_PRJ{(h2 >> 8) % 25:02d}"
        names = ("lammps_md", "gromacs", "train_resnet", "cp2k_scf", "wrf_bo", "interactive")
        num_cpus = num_nodes * cpus_per_node
        gpus = 0 if partition == "m100_all_serial" else num_nodes * 4
        record: JsonObj = {
            "job_id": job_id,
            "job_name": f"{names[h2 % len(names)]}_{job_id % 1000:03d}",
            "user_id": 30_000 + user_no,
            "user_name": user,
            "group_id": 25_000 + (h2 >> 8) % 25,
            "account": account,
            "partition": partition,
            "qos": qos,
            "num_nodes": num_nodes,
            "num_cpus": num_cpus,
            "num_tasks": num_nodes * (4 if gpus else 1),
            "cpus_per_task": 32 if gpus else 4,
            "nodes": _slurm_hostlist(nodes),
            "batch_host": nodes[0],
            "tres_alloc_str": (
                f"cpu={num_cpus},mem={num_nodes * 237_000}M,node={num_nodes},"
                f"billing={num_cpus}" + (f",gres/gpu={gpus}" if gpus else "")
            ),
            "submit_time": _iso(submit_s),
            "eligible_time": _iso(submit_s),
            "start_time": _iso(start_s),
            "end_time": _iso(end_s),
            "run_time": run_time,
            "time_limit": time_limit,
            "job_state": state,
            "state_reason": reason,
            "exit_code": exit_code,
            "priority": 100_000 + h % 50_000,
            "command": f"/m100/home/userexternal/{user}/job_{job_id}.sh",
            "work_dir": f"/m100_work/{account}/{user}",
            "std_out": f"/m100/home/userexternal/{user}/slurm-{job_id}.out",
            "cluster": self.config.cluster,
        }
        # Columns that only some jobs fill: the others hold null (None).
        array = h % 6 == 0
        record["array_job_id"] = job_id - (h >> 5) % 8 if array else None
        record["array_task_id"] = (h >> 5) % 8 if array else None
        record["dependency"] = f"afterok:{job_id - 1}" if h % 5 == 0 else None
        record["comment"] = 'rerun of "baseline", step 2' if h % 4 == 0 else None
        record["features"] = "gpu,ib" if h % 3 == 0 else None
        record["resv_name"] = None
        return record
