"""Where a fetch's points go as they arrive, one collector per site: lists of points per node
(:meth:`~dxt_core.backends.kwollect.experiment.Kwollect.get_metrics`), or the columns of a
DataFrame (:meth:`~dxt_core.backends.kwollect.experiment.Kwollect.get_metrics_pandas`),
which keep a point's values and drop the point itself: a frame of a day never holds the day
as dicts too (1.65 KB a point at peak; the columns and the frame about 0.4 KB)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from dxt_core.backends.kwollect.requests import Point
from dxt_core.errors import ConfigError

#: The frame's columns, in order.
COLUMNS = ("node", "timestamp", "device_id", "metric_id", "value", "labels")


class Collector(Protocol):
    """Takes one site's batches of points as they arrive."""

    def __init__(self, names: dict[str, str]) -> None: ...

    def add(self, batch: list[Point]) -> None: ...


class PointLists:
    """The points of each node (FQDN) of a site, in the order they came."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # the API's device_id -> the node's FQDN
        self.points: dict[str, list[Point]] = {fqdn: [] for fqdn in names.values()}

    def add(self, batch: list[Point]) -> None:
        for p in batch:
            fqdn = self.names.get(p.get("device_id", ""))
            if fqdn is not None:
                self.points[fqdn].append(p)


class PointColumns:
    """A site's points as the frame's columns, in the order they came. Each batch's
    timestamps and values become arrays at once, and a repeated string (a node, a device, a
    metric) is held once: about 0.35 KB a point, most of it its labels."""

    def __init__(self, names: dict[str, str]) -> None:
        self.pd = pandas()
        self.names = names
        self.nodes: list[str] = []
        self.devices: list[Any] = []
        self.metrics: list[Any] = []
        self.labels: list[Any] = []
        self.stamps: list[Any] = []  # arrays of int64 microseconds since the epoch, UTC
        self.values: list[Any] = []  # arrays of float64
        self._once: dict[Any, Any] = {}

    def add(self, batch: list[Point]) -> None:
        once = self._once.setdefault
        stamps: list[str] = []
        values: list[Any] = []
        for p in batch:
            fqdn = self.names.get(p.get("device_id", ""))
            if fqdn is not None:
                self.nodes.append(fqdn)
                self.devices.append(once(p.get("device_id"), p.get("device_id")))
                self.metrics.append(once(p.get("metric_id"), p.get("metric_id")))
                self.labels.append(p.get("labels"))
                stamps.append(p["timestamp"])
                values.append(p.get("value"))
        utc = self.pd.to_datetime(stamps, utc=True, format="ISO8601")
        self.stamps.append(utc.as_unit("us").asi8)
        try:
            self.values.append(np.array(values, dtype=np.float64))
        except (TypeError, ValueError):  # a value that is not a number: kept as it came
            self.values.append(np.array(values, dtype=object))


def pandas() -> Any:
    """pandas, or a ConfigError saying how to install it."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigError(
            "get_metrics_pandas needs pandas: pip install 'dxt-archive[analysis]'"
        ) from exc
    return pd


def to_frame(parts: Sequence[PointColumns], nodes: Sequence[str]) -> Any:
    """One DataFrame of the sites' columns: the nodes in the order ``nodes`` gives them,
    each node's points in the order they came; timestamps in UTC (microseconds), values
    float64."""
    pd = pandas()
    micros = np.concatenate([a for part in parts for a in part.stamps] or [np.empty(0, "i8")])
    df = pd.DataFrame(
        {
            "node": [x for part in parts for x in part.nodes],
            "timestamp": pd.to_datetime(micros.view("datetime64[us]"), utc=True),
            "device_id": [x for part in parts for x in part.devices],
            "metric_id": [x for part in parts for x in part.metrics],
            "value": np.concatenate([a for part in parts for a in part.values] or [np.empty(0)]),
            "labels": [x for part in parts for x in part.labels],
        },
        columns=list(COLUMNS),
    )
    # a node's points together, in the order of ``nodes`` (a site's answers interleave its
    # nodes, and sites come in the order they finish); stable: each node's order is kept
    rank = {fqdn: i for i, fqdn in enumerate(nodes)}
    order = df["node"].map(rank).to_numpy().argsort(kind="stable")
    df = df.take(order).reset_index(drop=True)
    df["timestamp"] = df["timestamp"].astype("datetime64[us, UTC]")
    if df.empty:  # one dtype whatever the points
        df = df.astype({"node": str, "device_id": str, "metric_id": str, "labels": object})
    return df
