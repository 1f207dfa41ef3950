"""The backend contract suite's adapter (tests/contract/): how to run this backend's
simulator, a unit with data, an empty day, a unit the server does not have."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dxt_core.simulate import spawn_simulator as spawn
from tests.contract.adapters import Adapter

HERE = Path(__file__).resolve().parent


class PromRangeAdapter(Adapter):
    backend = "promrange"
    day = dt.date(2024, 1, 2)
    empty_day = dt.date(2024, 1, 1)  # before the simulator's --data-start
    unit = "up"
    missing_unit = "no_such_metric"
    process_env = {"DXT_EXTRA_BACKENDS": "tests.toy_backend.promrange"}

    def _spawn(self, *args: str) -> tuple[subprocess.Popen[str], str]:
        proc, url = spawn(self.backend, list(args))
        self._procs.append(proc)
        return proc, url

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        self._procs: list[subprocess.Popen[str]] = []
        _, self.url = self._spawn("--data-start", "2024-01-02")

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
            if proc.stdout:
                proc.stdout.close()

    def settings_env(self) -> dict[str, str]:
        return {"DXT_PROMRANGE_METRICS": "up"}

    def coverage_args(self) -> list[str]:
        return ["--metrics", "up"]

    @contextlib.contextmanager
    def too_large(self) -> Iterator[Any]:
        _, url = self._spawn("--data-start", "2024-01-02", "--max-points", "500")
        yield self.connection(url)

    @contextlib.contextmanager
    def fewer_rows(self) -> Iterator[tuple[Any, Any]]:
        _, url = self._spawn("--data-start", "2024-01-03")  # the day aged out
        yield self.connection(url), self.unit

    def dag_file(self) -> Path:
        return HERE / "dxt_promrange.py"


ADAPTER = PromRangeAdapter
