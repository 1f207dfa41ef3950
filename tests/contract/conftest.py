"""The contract suite's backends: every registered one, the toy backends under
tests/toy_backend/ included (registered here through ``DXT_EXTRA_BACKENDS``), each with its
simulator started once for the package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core.backends import ENV_EXTRA, backends
from tests.airflow.conftest import migrated_home  # noqa: F401  (session: one migrated DB)
from tests.contract.adapters import ROOT, Adapter, adapter_for

TOYS = ROOT / "tests" / "toy_backend"


def extra_backends() -> str:
    """``DXT_EXTRA_BACKENDS`` with every package under tests/toy_backend/ added."""
    found = [r for r in os.environ.get(ENV_EXTRA, "").split(",") if r.strip()]
    found += [
        f"tests.toy_backend.{p.name}"
        for p in sorted(TOYS.iterdir())
        if (p / "__init__.py").is_file() and not p.name.startswith("_")
    ]
    return ",".join(found)


EXTRA = extra_backends()


def registered() -> list[str]:
    old = os.environ.get(ENV_EXTRA)
    os.environ[ENV_EXTRA] = EXTRA
    try:
        return [b.name for b in backends()]
    finally:
        if old is None:
            del os.environ[ENV_EXTRA]
        else:
            os.environ[ENV_EXTRA] = old


NAMES = registered()


@pytest.fixture(scope="package", autouse=True)
def contract_env() -> Iterator[str]:
    """The toy backends registered for this package's tests only (torn down after them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_EXTRA, EXTRA)
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        yield EXTRA


@pytest.fixture(scope="package", params=NAMES)
def running(
    request: pytest.FixtureRequest, contract_env: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Adapter]:
    from dxt_core import backends as registry

    a = adapter_for(registry.get(request.param))
    a.start(request, tmp_path_factory.mktemp(f"contract-{request.param}"))
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture()
def adapter(running: Adapter, monkeypatch: pytest.MonkeyPatch) -> Adapter:
    """A backend with its simulator running, its settings (``DXT_*``) naming exactly the
    adapter's unit, as its DAG runs."""
    for k in [k for k in os.environ if k.startswith("DXT_") and k != ENV_EXTRA]:
        monkeypatch.delenv(k)
    for k, v in running.settings_env().items():
        monkeypatch.setenv(k, v)
    return running


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.fixture(scope="package")
def airflow_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Airflow home (SQLite) for every backend's ``dags test``."""
    from tests.airflow.conftest import fresh_home

    template = request.getfixturevalue("migrated_home")
    return fresh_home(template, tmp_path_factory.mktemp("contract-airflow") / "home")
