"""Settings of the Kwollect daily archive: connection fields and what to archive.

Nothing here imports Airflow: the hook passes a connection's fields in, the DAG's tasks pass
the environment.

What to archive comes from a JSON or TOML file (``DXT_KWOLLECT_CONFIG``)::

    time_zone = "Europe/Paris"
    metrics = ["wattmetre_power_watt", "bmc_node_power_watt"]
    nodes = ["nova-1.lyon.grid5000.fr"]
    clusters = ["nancy/gros"]

(``metrics``, ``nodes`` and ``clusters`` are lists of names, or one comma-separated string
of them; the file is TOML when its name ends in ``.toml``, in any case, else JSON)
and/or environment variables, which win: ``DXT_KWOLLECT_NODES`` (comma-separated node names),
``DXT_KWOLLECT_CLUSTERS`` (``site/cluster`` pairs), ``DXT_KWOLLECT_METRICS``,
``DXT_KWOLLECT_TIME_ZONE``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dxt_core.backends.kwollect.source import (
    DEFAULT_API_URL,
    POWER_METRICS,
    G5kNode,
    KwollectClient,
    by_site,
    check_component,
    parse_nodes,
)
from dxt_core.config import read
from dxt_core.connection import (
    ConnectionFields,
    ConnectionSpec,
    Extra,
    timeout_extra,
    verify_tls_extra,
)
from dxt_core.errors import ConfigError
from dxt_core.urls import redacted_repr
from dxt_core.windows import zone

ENV_CONFIG = "DXT_KWOLLECT_CONFIG"
ENV_NODES = "DXT_KWOLLECT_NODES"
ENV_CLUSTERS = "DXT_KWOLLECT_CLUSTERS"
ENV_METRICS = "DXT_KWOLLECT_METRICS"
ENV_TIME_ZONE = "DXT_KWOLLECT_TIME_ZONE"
DEFAULT_TIME_ZONE = "Europe/Paris"
_FILE_KEYS = {"time_zone", "metrics", "nodes", "clusters"}


@dataclass(frozen=True)
class KwollectArchiveConfig:
    """Sites, nodes (or whole clusters) and metrics archived every day."""

    metrics: tuple[str, ...] = POWER_METRICS
    nodes: tuple[G5kNode, ...] = ()
    clusters: tuple[tuple[str, str], ...] = ()
    time_zone: str = DEFAULT_TIME_ZONE
    source: str = "defaults"

    def __post_init__(self) -> None:
        zone(self.time_zone)
        for metric in self.metrics:
            check_component(metric, f"{self.source}: metric")
        for site, cluster in self.clusters:
            check_component(site, f"{self.source}: site")
            check_component(cluster, f"{self.source}: cluster")
        if not self.metrics:
            raise ConfigError(f"{self.source}: no metrics to archive; set {ENV_METRICS}")
        if not self.nodes and not self.clusters:
            raise ConfigError(
                f"{self.source}: no nodes or clusters to archive; set {ENV_NODES} "
                f"(e.g. nova-1.lyon.grid5000.fr) or {ENV_CLUSTERS} (e.g. lyon/nova), or "
                f"{ENV_CONFIG}=<file.toml|json>"
            )

    def units(self, client: KwollectClient) -> list[dict[str, Any]]:
        """One unit per (site, metric), with the site's nodes (clusters resolved)."""
        nodes: dict[G5kNode, None] = dict.fromkeys(self.nodes)
        for site, cluster in self.clusters:
            members = client.site_nodes(site)
            if cluster not in members:
                raise ConfigError(
                    f"{self.source}: cluster {cluster!r} is not on site {site!r} "
                    f"(known: {', '.join(sorted(members))})"
                )
            for name in members[cluster]:
                nodes[G5kNode(site, name)] = None
        return [
            {"site": site, "metric": metric, "nodes": [n.name for n in sorted(site_nodes)]}
            for site, site_nodes in sorted(by_site(nodes).items())
            for metric in self.metrics
        ]


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are given once (TOML refuses a key twice; JSON took the
    last in silence)."""
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"key {key!r} given twice")
        doc[key] = value
    return doc


def _read_file(path: str) -> dict[str, Any]:
    """The table of the JSON or TOML file ``path`` (TOML by its ``.toml`` suffix, in any
    case); errors name the file."""
    try:
        raw = Path(path).read_bytes()
        toml = path.lower().endswith(".toml")
        doc = tomllib.loads(raw.decode()) if toml else json.loads(raw, object_pairs_hook=_once)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{ENV_CONFIG}={path}: cannot read it ({exc})") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a table/object with keys {sorted(_FILE_KEYS)}")
    unknown = set(doc) - _FILE_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; known {sorted(_FILE_KEYS)}")
    return doc


def _file_names(doc: Mapping[str, Any], key: str, path: str) -> list[str] | None:
    """The file's ``key``: a list of names, or one comma-separated string of them (as in the
    ``DXT_KWOLLECT_*`` variables); ``None`` when absent. Anything else is an error naming the
    file and the key."""
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return _split(value)
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return [v.strip() for v in value]
    raise ConfigError(
        f'{path}: key {key!r} must be a list of names such as ["a", "b"] (or one '
        f"comma-separated string), not {value!r}"
    )


def load_archive_config(env: Mapping[str, str] | None = None) -> KwollectArchiveConfig:
    """The archive settings from ``DXT_KWOLLECT_CONFIG`` and ``DXT_KWOLLECT_*`` variables."""
    from dxt_core.backends.kwollect import BACKEND

    def setting(key: str) -> str:
        return str(read(BACKEND.setting(key), env)).strip()

    def names(key: str) -> tuple[list[str], str]:
        """The names the variable ``DXT_KWOLLECT_<KEY>`` (wins) or the file's key give, and
        where they came from."""
        text = setting(key)
        if text:
            return _split(text), BACKEND.setting(key).env
        return _file_names(doc, key, path) or [], f"{path}: key {key!r}"

    doc: dict[str, Any] = {}
    path = setting("config")
    if path:
        doc = _read_file(path)
    node_names, nodes_from = names("nodes")
    cluster_names, clusters_from = names("clusters")
    metrics, _ = names("metrics")
    clusters: list[tuple[str, str]] = []
    for c in cluster_names:
        site, sep, cluster = c.partition("/")
        if not sep or not site or not cluster:
            raise ConfigError(
                f"{clusters_from}: cluster {c!r} must be written site/cluster, e.g. lyon/nova"
            )
        clusters.append((site, cluster))
    try:
        nodes = tuple(parse_nodes(node_names))
    except ConfigError as exc:
        raise ConfigError(f"{nodes_from}: {exc}") from None
    time_zone = setting("time_zone")
    zone_from = ENV_TIME_ZONE
    if not time_zone:
        time_zone = str(doc.get("time_zone") or DEFAULT_TIME_ZONE)
        zone_from = f"{path}: key 'time_zone'"
    zone(time_zone, zone_from)
    return KwollectArchiveConfig(
        metrics=tuple(metrics) if metrics else POWER_METRICS,
        nodes=nodes,
        clusters=tuple(clusters),
        time_zone=time_zone,
        source=path or "environment",
    )


@dataclass(frozen=True)
class KwollectConnection:
    """Where the API is and how to log in (from an Airflow connection or the CLI)."""

    api_url: str = DEFAULT_API_URL
    auth: tuple[str, str] | None = field(default=None, repr=False)
    options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # its URLs without credentials
        return redacted_repr(self)

    def client(self) -> KwollectClient:
        return KwollectClient(self.api_url, self.auth, **self.options)


def _build(f: ConnectionFields) -> KwollectConnection:
    options: dict[str, Any] = {}
    x = f.extras
    if x["timeout"] is not None:
        options["timeout_s"] = x["timeout"]
    if x["min_window"] is not None:
        options["min_window_s"] = x["min_window"]
    for key in ("max_points", "max_nodes"):
        if x[key] is not None:
            options[key] = x[key]
    if x["verify_tls"] is not None:
        options["verify_tls"] = x["verify_tls"]
    auth = (f.login, f.password or "") if f.login else None
    return KwollectConnection(f.url, auth, options)


def probe(conn: KwollectConnection) -> str:
    """The sites the API lists."""
    with conn.client() as client:
        sites = client.sites()
    return f"{len(sites)} sites at {client.safe_url}: {', '.join(sites[:8])}"


#: The Grid'5000 API (reference API + Kwollect metrics).
SPEC: ConnectionSpec[KwollectConnection] = ConnectionSpec(
    backend="kwollect",
    hook_name="Kwollect (Grid'5000)",
    build=_build,
    probe=probe,
    default_scheme="https",
    other_schema="path",
    url_extra="api_url",
    host_example="https://api.grid5000.fr/stable",
    labels={"host": "API URL or host", "login": "Grid'5000 login"},
    extras=(
        Extra("api_url", str, None, "API URL", "the API's base URL (wins over host)", flag=""),
        timeout_extra(None, flag=""),
        verify_tls_extra(None, flag=""),
        Extra(
            "max_points",
            int,
            None,
            "Points per request",
            "points per request",
            flag="",
            positive=True,
        ),
        Extra(
            "max_nodes", int, None, "Nodes per request", "nodes per request", flag="", positive=True
        ),
        Extra(
            "min_window",
            float,
            None,
            "Shortest window (s)",
            "shortest time window a refused request is split down to, seconds (0.001 or more)",
            flag="",
            positive=True,
        ),
    ),
)


#: The name before connection specs: ``kwollect_connection_from_fields(conn_id=..., ...)``.
kwollect_connection_from_fields = SPEC.from_fields
