"""Where the Prometheus-compatible server is: its connection spec."""

from __future__ import annotations

from dataclasses import dataclass, field

from dxt_core.connection import ConnectionFields, ConnectionSpec, Extra


@dataclass(frozen=True)
class PromConnection:
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    step_s: int = 60


def _build(f: ConnectionFields) -> PromConnection:
    return PromConnection(f.url, f.login, f.password, f.extras["step"])


SPEC: ConnectionSpec[PromConnection] = ConnectionSpec(
    backend="promrange",
    hook_name="Prometheus range queries (example)",
    build=_build,
    default_port=9090,
    host_example="prometheus.example.org",
    extras=(Extra("step", int, 60, "Step (s)", "seconds between evaluated points"),),
)
