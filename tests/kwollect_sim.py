"""The Kwollect simulator as a separate process, for the Kwollect tests."""

from __future__ import annotations

import subprocess
from typing import Any

import httpx

from dxt_core import procs
from dxt_core.simulate import spawn_simulator


class KwollectSimProcess:
    def __init__(self, args: list[str] | None = None) -> None:
        self.proc, self.url = spawn_simulator("kwollect", args or [], stderr=subprocess.PIPE)

    def configure(self, **changes: Any) -> dict[str, Any]:
        r = httpx.post(f"{self.url}/_sim/config", json=changes, timeout=10)
        r.raise_for_status()
        return r.json()

    def reset(self) -> None:
        self.configure(
            delay_s=0.0,
            site_delay_s={},
            max_points=None,
            timeout_delay_s=0.0,
            stray_offset_s=None,
            expired_before_s=None,
        )
        httpx.post(f"{self.url}/_sim/stats/reset", timeout=10).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/_sim/stats", timeout=10).json()

    def stop(self) -> None:
        procs.stop(self.proc)
