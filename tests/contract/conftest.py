"""The contract suite's backends: every registered one, the toy backends under
tests/toy_backend/ included (registered here through ``DXT_EXTRA_BACKENDS``), each with its
simulator started once for the package; and the archive root kinds each runs on: a local
directory and an ``s3://`` root on moto_server (one process for the session,
tests/s3_fixtures.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dxt_core.backends import ENV_EXTRA, backends
from tests.airflow.conftest import migrated_home  # noqa: F401  (session: one migrated DB)
from tests.contract.adapters import ROOT, Adapter, adapter_classes, adapter_for
from tests.s3_fixtures import CREDENTIALS, FOREIGN, S3Server, s3_server  # noqa: F401

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


def variants() -> list[Any]:
    """One test id per adapter: ``<backend>``, or ``<backend>-<variant>`` for a backend's
    further adapters (one per server kind)."""
    from dxt_core import backends as registry

    old = os.environ.get(ENV_EXTRA)
    os.environ[ENV_EXTRA] = EXTRA
    try:
        return [
            pytest.param(
                (name, c.variant),
                id=f"{name}-{c.variant}" if c.variant else name,
                marks=[pytest.mark.slow] if c.slow else [],
            )
            for name in NAMES
            for c in adapter_classes(registry.get(name))
        ]
    finally:
        if old is None:
            del os.environ[ENV_EXTRA]
        else:
            os.environ[ENV_EXTRA] = old


@pytest.fixture(scope="package", autouse=True)
def contract_env() -> Iterator[str]:
    """The toy backends registered for this package's tests only (torn down after them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_EXTRA, EXTRA)
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        yield EXTRA


@pytest.fixture(scope="package", params=variants())
def running(
    request: pytest.FixtureRequest, contract_env: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Adapter]:
    from dxt_core import backends as registry

    name, variant = request.param
    a = adapter_for(registry.get(name), variant)
    a.start(request, tmp_path_factory.mktemp(f"contract-{name}{variant}"))
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


#: The archive root kinds every contract case runs on.
ROOT_KINDS = ("local", "s3")
#: Cases whose s3 variant took over 3 s (setup + call + teardown, shared 2-core machine at
#: load average about 5, measured twice): the reconcile case archives, counts three times and
#: refetches (4.7-5.9 s on s3); `dxt coverage` as a process imports boto3 (3.0-6.4 s on s3,
#: 1.7-2.6 s on a directory). Marked slow (the full tier) on s3 only. The other s3 cases
#: took 45 s for 35 cases in that fast tier run, the local ones 47 s for 40.
SLOW_ON_S3 = (
    "test_reconcile_flags_late_data_and_the_refetch_settles_it",
    "test_dxt_coverage_lists_the_unit",
)
#: Cases over 3 s for one backend on any root: Kwollect has no count query (its reconcile
#: downloads the points: docs/kwollect.md), 4.8 s for the reconcile case on a directory.
#: Over the fast tier's limit in CI's four workers on 2 cores (3 s scaled to 6 s; clean
#: clone, quiet machine, 2026-12-03): Examon's byte-identical rerun 7.3 s (its day is the
#: largest), VictoriaMetrics' unknown unit 7.1 s and refused window 6.4 s; Kwollect's
#: refused window 5.0 s (the next over the line); a later clean-clone run: VictoriaMetrics'
#: coverage-view plan on s3 9.0 s (2.6 s of it its server's start); 2026-12-04:
#: VictoriaMetrics' late data and refetch 6.0 s.
SLOW_FOR = {
    "test_the_coverage_view_plans_the_unit": ("prometheus-victoriametrics",),
    "test_reconcile_flags_late_data_and_the_refetch_settles_it": (
        "kwollect",
        "prometheus-victoriametrics",
    ),
    "test_archive_a_day_then_a_rerun_is_byte_identical": ("examon",),
    "test_an_unknown_unit_is_a_clear_error": ("prometheus-victoriametrics",),
    "test_a_window_the_server_refuses_as_too_large_is_split": (
        "prometheus-victoriametrics",
        "kwollect",
    ),
}


def _is_for(item_name: str, backend: str) -> bool:
    """The case's id names ``backend`` exactly (``[examon-local]``, ``[kwollect]``), not a
    backend whose name it starts (``prometheus`` is not ``prometheus-victoriametrics``)."""
    return any(item_name.endswith(f"[{backend}{tail}]") for tail in ("", "-local", "-s3"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        spec = getattr(item, "callspec", None)
        on_s3 = spec is not None and spec.params.get("root") == "s3"
        name = getattr(item, "originalname", item.name)
        slow_for = SLOW_FOR.get(name, ())
        if (on_s3 and name in SLOW_ON_S3) or any(_is_for(item.name, b) for b in slow_for):
            item.add_marker(pytest.mark.slow)


class ArchiveRoot:
    """An archive root as a reader of the archive sees it: a directory or an S3 prefix.

    Paths are ``/``-separated and relative to the root; a report's paths (under the
    archive's local root: its staging folder on S3) are turned into them by :meth:`rel`.
    """

    kind: str
    url: str

    def archive(self, **kw: Any) -> Any:
        from dxt_core.archive import Archive

        return Archive(self.url, **kw)

    def sub(self, name: str) -> ArchiveRoot:
        """Another, empty root beside this one."""
        raise NotImplementedError

    def rel(self, path: Path) -> str:
        return path.relative_to(self.archive().root).as_posix()

    def read(self, rel: str) -> bytes:
        raise NotImplementedError

    def files(self, rel_dir: str) -> dict[str, bytes]:
        """Name -> bytes of every file (object) directly under ``rel_dir``."""
        raise NotImplementedError

    def find(self, suffix: str) -> list[str]:
        """Every file under the root whose name ends with ``suffix``."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.url


class LocalRoot(ArchiveRoot):
    kind = "local"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = str(path)

    def sub(self, name: str) -> ArchiveRoot:
        return LocalRoot(self.path / name)

    def read(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def files(self, rel_dir: str) -> dict[str, bytes]:
        d = self.path / rel_dir
        return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}

    def find(self, suffix: str) -> list[str]:
        return sorted(
            p.relative_to(self.path).as_posix()
            for p in self.path.rglob(f"*{suffix}")
            if p.is_file()
        )


class S3Root(ArchiveRoot):
    """``s3://<bucket>/<prefix>``, looked at from outside with a plain boto3 client."""

    kind = "s3"

    def __init__(self, server: S3Server, bucket: str, prefix: str) -> None:
        self.server, self.bucket, self.prefix = server, bucket, prefix
        self.url = f"s3://{bucket}/{prefix}"
        self.client = server.client()

    def sub(self, name: str) -> ArchiveRoot:
        return S3Root(self.server, self.bucket, f"{self.prefix}/{name}")

    def rel(self, path: Path) -> str:  # the staging folder, without making a client
        from dxt_core.store import S3Location
        from dxt_core.store.s3 import _staging_root

        return path.relative_to(_staging_root(S3Location(self.bucket, self.prefix))).as_posix()

    def read(self, rel: str) -> bytes:
        r = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")
        return bytes(r["Body"].read())

    def _keys(self, prefix: str, delimiter: bool) -> list[str]:
        kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kw["Delimiter"] = "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(**kw)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def files(self, rel_dir: str) -> dict[str, bytes]:
        keys = self._keys(f"{self.prefix}/{rel_dir}/", delimiter=True)
        return {k.rsplit("/", 1)[-1]: self.read(k[len(self.prefix) + 1 :]) for k in sorted(keys)}

    def find(self, suffix: str) -> list[str]:
        keys = self._keys(f"{self.prefix}/", delimiter=False)
        return sorted(k[len(self.prefix) + 1 :] for k in keys if k.endswith(suffix))


@pytest.fixture(scope="session")
def contract_bucket(request: pytest.FixtureRequest) -> Iterator[tuple[S3Server, str]]:
    """One bucket for the session's s3:// contract cases (a prefix of its own per test)."""
    server: S3Server = request.getfixturevalue("s3_server")
    name = server.new_bucket()
    yield server, name
    server.drop_bucket(name)


@pytest.fixture(params=ROOT_KINDS)
def root(
    request: pytest.FixtureRequest,
    adapter: Adapter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ArchiveRoot:
    """The test's archive root, of each kind; for s3, the AWS environment of the test server
    in this process and its children (the CLI), and a staging folder of the test's own."""
    return make_root(request.param, request, tmp_path, monkeypatch)


@pytest.fixture()
def both_roots(
    request: pytest.FixtureRequest,
    adapter: Adapter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[ArchiveRoot, ArchiveRoot]:
    """A local root and an s3:// root in one test: for a case whose server set-up can be made
    once per adapter only (the too-large window's second server)."""
    return tuple(make_root(k, request, tmp_path, monkeypatch) for k in ROOT_KINDS)  # type: ignore[return-value]


def make_root(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ArchiveRoot:
    if kind == "local":
        return LocalRoot(tmp_path / "archive")
    server, bucket = request.getfixturevalue("contract_bucket")
    for k, v in {**server.env, "DXT_S3_STAGING": str(tmp_path / "staging")}.items():
        monkeypatch.setenv(k, v)
    for k in FOREIGN:
        monkeypatch.delenv(k, raising=False)
    return S3Root(server, bucket, uuid.uuid4().hex[:12])


def aws_env(root: ArchiveRoot) -> dict[str, str]:
    """What a process (an Airflow task) needs to reach ``root``: nothing for a directory."""
    if not isinstance(root, S3Root):
        return {}
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": root.server.url}


@pytest.fixture(scope="package")
def airflow_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Airflow home (SQLite) for every backend's ``dags test``."""
    from tests.airflow.conftest import fresh_home

    template = request.getfixturevalue("migrated_home")
    return fresh_home(template, tmp_path_factory.mktemp("contract-airflow") / "home")
