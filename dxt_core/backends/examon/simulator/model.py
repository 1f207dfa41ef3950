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
#: One job of the accounting table ends every JOB_PERIOD_S seconds (epoch aligned).
JOB_PERIOD_S: Final = 420

JsonObj = dict[str, Any]


@dataclass
class SimConfig:
    """What the simulator serves.

    Attributes:
        catalog: ``(metric, plugin)`` pairs; rows whose plugin is ``job_table`` name the job
            accounting tables served by the jobs endpoint instead of KairosDB metrics.
        nodes: number of compute nodes (see :func:`node_names`).
        interval_s: sample period; samples sit on epoch multiples of it, so with a period
            that divides a day there is a sample at every midnight.
        cluster: value of the ``cluster`` tag.
        user: when set, every endpoint but ``/_sim/*`` requires HTTP Basic auth.
        password: password for ``user``.
        faults: faults to inject (mutable at runtime).
        data_start_ms: no data (and no job) before this epoch-millisecond instant.
    """

    catalog: list[tuple[str, str]]
    nodes: int = 8
    interval_s: int = 20
    cluster: str = "marconi100"
    user: str | None = None
    password: str | None = None
    faults: Faults = field(default_factory=Faults)
    data_start_ms: int | None = None

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
        decimals = 1 if units == "degrees C" else 2
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
                    "cluster": cluster,
                    "description": _NAGIOS_DESCRIPTIONS[i % len(_NAGIOS_DESCRIPTIONS)],
                    "host_group": "compute",
                    "nagiosdrained": "1" if i % 10 == 9 else "0",
                    "node": node,
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


def _series_values(metric: _Metric, series_idx: Sequence[int], ts_ms: npt.NDArray[np.int64]) -> Any:
    """Values of the given series at the given timestamps, shape ``(len(series_idx), n)``.

    Integer arithmetic reduces the timestamps modulo the periods before the sine, so the
    result does not depend on float precision at epoch-sized arguments.
    """
    ts_s = ts_ms // 1000
    idx = np.asarray(series_idx, dtype=np.int64)[:, None]
    if metric.kind == "str":
        palette: tuple[str, ...] = _NAGIOS_MESSAGES
        if "downtime" in metric.name:
            palette = _DOWNTIME_COMMENTS
        # Messages change every 10 minutes, not every sample, like real check results.
        pick = (ts_s[None, :] // 600 + idx * 3 + metric.crc) % len(palette)
        return np.asarray(palette, dtype=object)[pick]
    day = 86_400
    hour = 3_600
    day_phase = ((ts_s[None, :] + metric.crc + idx * 7_919) % day).astype(np.float64) / day
    hour_phase = ((ts_s[None, :] + idx * 131) % hour).astype(np.float64) / hour
    raw = metric.base + metric.amplitude * (
        np.sin(2.0 * math.pi * day_phase) + 0.2 * np.sin(2.0 * math.pi * hour_phase)
    )
    if metric.kind == "int":
        return np.rint(raw).astype(np.int64)
    return np.round(raw, metric.decimals)


def _iso(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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

    def metric(self, name: str) -> _Metric | None:
        plugin = self.plugins.get(name)
        if plugin is None:
            return None
        metric = self._metrics.get(name)
        if metric is None:
            metric = _build_metric(name, plugin, self.nodes, self.config.cluster)
            self._metrics[name] = metric
        return metric

    def grid(self, start_ms: int, end_ms: int, now_ms: int) -> tuple[int, int]:
        """First sample time and sample count in ``[start_ms, end_ms]`` (both inclusive)."""
        step = self.config.interval_s * 1000
        lo = start_ms
        if self.config.data_start_ms is not None:
            lo = max(lo, self.config.data_start_ms)
        hi = min(end_ms, now_ms)
        first = -(-lo // step) * step
        last = hi // step * step
        if last < first:
            return first, 0
        return first, (last - first) // step + 1

    def job(self, k: int) -> JsonObj:
        """The job that ends at ``k * JOB_PERIOD_S``; every field derives from its id."""
        job_id = k
        h = _crc(f"job:{job_id}")
        h2 = _crc(f"wait:{job_id}")
        partitions = ("m100_usr_prod", "m100_usr_prod", "m100_usr_dbg", "m100_all_serial")
        partition = partitions[h % len(partitions)]
        qos = {"m100_usr_dbg": "m100_qos_dbg", "m100_all_serial": "normal"}.get(
            partition, "normal" if h % 3 else "m100_qos_bprod"
        )
        max_nodes = {"m100_usr_dbg": 2, "m100_all_serial": 1}.get(partition, 16)
        num_nodes = min(1 + (h >> 4) % max_nodes, len(self.nodes))
        cpus_per_node = 4 if partition == "m100_all_serial" else 128
        first_node = (h >> 8) % len(self.nodes)
        nodes = [self.nodes[(first_node + j) % len(self.nodes)] for j in range(num_nodes)]
        time_limit = (30, 60, 240, 1440)[(h >> 12) % 4]  # minutes
        if partition == "m100_usr_dbg":
            time_limit = 30
        roll = (h >> 16) % 10
        state, reason, exit_code = "COMPLETED", "None", 0
        run_time = 60 + (h >> 3) % max(1, time_limit * 60 - 60)
        if roll == 7:
            state, reason, exit_code = "FAILED", "NonZeroExitCode", 1 + (h >> 20) % 255
        elif roll == 9:
            state, reason, run_time = "TIMEOUT", "TimeLimit", time_limit * 60
        end_s = k * JOB_PERIOD_S
        start_s = end_s - run_time
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
            "nodes": ",".join(nodes),
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
        # Optional fields appear on some records only: clients must take the union of keys.
        if h % 6 == 0:
            record["array_job_id"] = job_id - (h >> 5) % 8
            record["array_task_id"] = (h >> 5) % 8
        if h % 5 == 0:
            record["dependency"] = f"afterok:{job_id - 1}"
        if h % 4 == 0:
            record["comment"] = 'rerun of "baseline", step 2'
        if h % 3 == 0:
            record["features"] = "gpu,ib"
        if h % 7 == 0:
            record["resv_name"] = None
        return record
