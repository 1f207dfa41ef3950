"""How the contract suite runs each backend: its simulator, a unit with data, an empty day, a
unit that does not exist, and the fault knobs that make its server refuse a large window or
hold fewer rows.

A built-in backend adds its adapter to :data:`ADAPTERS`; an out-of-tree backend ships one as
``ADAPTER`` in its package's ``contract`` module (``<package>.contract``). The suite fails for a
registered backend that has neither.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from dxt_core.backends import Backend

ROOT = Path(__file__).resolve().parents[2]


class Adapter(ABC):
    """One backend's part in the contract suite."""

    backend: ClassVar[str]
    #: a day the simulator has data for, and one it has none for
    day: ClassVar[dt.date]
    empty_day: ClassVar[dt.date]
    #: a unit with data (what the backend's units task returns), and one the server lacks
    unit: ClassVar[Any]
    missing_unit: ClassVar[Any]
    #: the run's Params for the archive call (e.g. formats whose bytes are reproducible)
    params: ClassVar[dict[str, Any]] = {}
    #: extra environment of a process that must see the backend (an out-of-tree one)
    process_env: ClassVar[dict[str, str]] = {}
    #: which of the backend's adapters this is, when it has several (one per server kind):
    #: the tests' ids are ``<backend>`` for the first, ``<backend>-<variant>`` for the others
    variant: ClassVar[str] = ""
    #: the server takes over 3 s to start: the adapter's tests carry ``slow`` (full tier)
    slow: ClassVar[bool] = False

    url: str = ""

    @abstractmethod
    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        """Start the simulator (a separate process); set :attr:`url`."""

    @abstractmethod
    def stop(self) -> None: ...

    def extra(self) -> dict[str, Any]:
        """The connection's extras."""
        return {}

    def connection(self, url: str | None = None, extra: dict[str, Any] | None = None) -> Any:
        """The backend's connection object to the simulator, built by its spec."""
        from dxt_core import backends

        u = urlsplit(url or self.url)
        return backends.get(self.backend).spec.from_fields(
            conn_id="contract",
            host=u.hostname,
            port=u.port,
            schema=u.scheme,
            login=None,
            password=None,
            extra=self.extra() if extra is None else extra,
        )

    def airflow_connection(self) -> dict[str, Any]:
        """``AIRFLOW_CONN_<ID>``'s JSON: the same connection for an Airflow task."""
        from dxt_core import backends

        u = urlsplit(self.url)
        conn_type = backends.get(self.backend).spec.conn_type
        return {
            "conn_type": conn_type,
            "host": u.hostname,
            "port": u.port,
            "schema": u.scheme,
            "extra": self.extra(),
        }

    @abstractmethod
    def settings_env(self) -> dict[str, str]:
        """``DXT_*`` settings under which the backend's DAG has exactly :attr:`unit`."""

    @abstractmethod
    def coverage_args(self) -> list[str]:
        """``dxt coverage <backend>`` options that select :attr:`unit`."""

    def too_large(self) -> contextlib.AbstractContextManager[Any] | None:
        """A server that refuses the day's window as too large: yields a connection (None: the
        backend's queries have no window to split, e.g. they page)."""
        return None

    @abstractmethod
    def fewer_rows(self) -> contextlib.AbstractContextManager[tuple[Any, Any]]:
        """A server with fewer rows of :attr:`unit`'s day: yields (connection, unit)."""

    def late_points(self) -> contextlib.AbstractContextManager[tuple[Any, Any]] | None:
        """A server where :attr:`unit`'s day gains points after it is archived: yields
        ``(connection, add)``, ``add()`` writing the late points (None: the simulator cannot
        add points; the reconcile check is skipped)."""
        return None

    def dag_file(self) -> Path:
        return ROOT / "dags" / f"dxt_{self.backend}.py"


# -- Examon -----------------------------------------------------------------------------------


class ExamonAdapter(Adapter):
    backend = "examon"
    day = dt.date(2020, 3, 10)
    empty_day = dt.date(2020, 3, 7)
    unit = {"metric": "ambient", "plugin": "ipmi_pub"}
    missing_unit = {"metric": "no_such_metric", "plugin": "ipmi_pub"}
    ARGS = ("--nodes", "2", "--tidy", "--jobs-port", "off")

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        from tests.conftest import SimulatorProcess

        self.catalog = tmp / "catalog.csv"
        self.catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
        self._args = ["--catalog", str(self.catalog), *self.ARGS]
        self.sim = SimulatorProcess([*self._args, "--data-start", "2020-03-09"])
        self.url = self.sim.url

    def stop(self) -> None:
        self.sim.stop()

    def extra(self) -> dict[str, Any]:
        return {"time_zone": "Europe/Rome"}

    def settings_env(self) -> dict[str, str]:
        return {"DXT_EXAMON_CATALOG": str(self.catalog), "DXT_EXAMON_FORMAT": "csv"}

    def coverage_args(self) -> list[str]:
        return ["--catalog", str(self.catalog)]

    @contextlib.contextmanager
    def too_large(self) -> Iterator[Any]:
        self.sim.faults(max_points=2000)  # a day of 2 nodes is 8,640 points
        try:
            yield self.connection()
        finally:
            self.sim.reset_faults()

    @contextlib.contextmanager
    def fewer_rows(self) -> Iterator[tuple[Any, Any]]:
        from tests.conftest import SimulatorProcess

        late = SimulatorProcess([*self._args, "--data-start", "2020-03-10"])  # first hour gone
        try:
            yield self.connection(late.url), self.unit
        finally:
            late.stop()

    @contextlib.contextmanager
    def late_points(self) -> Iterator[tuple[Any, Any]]:
        import httpx

        from dxt_core.windows import day_window, zone

        noon = day_window(self.day, zone("Europe/Rome")).start_ms + 12 * 3_600_000

        def add() -> None:  # two points between the simulator's own (every 20 s)
            httpx.post(
                f"{self.url}/_sim/points",
                json={
                    "metric": "ambient",
                    "tags": {"node": "r201n01"},
                    "points": [[noon + 900, 21.5], [noon + 60_900, 21.75]],
                },
                timeout=10,
            ).raise_for_status()

        try:
            yield self.connection(), add
        finally:
            httpx.delete(f"{self.url}/_sim/points", timeout=10).raise_for_status()


# -- Kwollect ---------------------------------------------------------------------------------


class KwollectAdapter(Adapter):
    backend = "kwollect"
    day = dt.date(2024, 11, 26)
    #: the simulator has no data after now
    empty_day = dt.date.today() + dt.timedelta(days=2)
    unit = {"site": "lyon", "metric": "bmc_node_power_watt", "nodes": ["nova-1", "nova-2"]}
    missing_unit = {"site": "atlantis", "metric": "bmc_node_power_watt", "nodes": ["nova-1"]}

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        from tests.kwollect_sim import KwollectSimProcess

        self.sim = KwollectSimProcess()
        self.url = self.sim.url

    def stop(self) -> None:
        self.sim.stop()

    def extra(self) -> dict[str, Any]:
        return {"max_points": 100_000}

    def settings_env(self) -> dict[str, str]:
        return {
            "DXT_KWOLLECT_NODES": "nova-1.lyon.grid5000.fr,nova-2.lyon.grid5000.fr",
            "DXT_KWOLLECT_METRICS": "bmc_node_power_watt",
        }

    def coverage_args(self) -> list[str]:
        return ["--sites", "lyon", "--metrics", "bmc_node_power_watt"]

    @contextlib.contextmanager
    def too_large(self) -> Iterator[Any]:
        self.sim.configure(
            max_points=10_000
        )  # "too much data" above 10,000 points (a node-day: 17,280)
        try:
            yield self.connection()
        finally:
            self.sim.reset()

    @contextlib.contextmanager
    def fewer_rows(self) -> Iterator[tuple[Any, Any]]:
        # retention: the rows of the day's first hours are gone at the source
        cut = dt.datetime.combine(self.day, dt.time(6), dt.UTC).timestamp()
        self.sim.configure(expired_before_s=cut)
        try:
            yield self.connection(), self.unit
        finally:
            self.sim.reset()

    @contextlib.contextmanager
    def late_points(self) -> Iterator[tuple[Any, Any]]:
        import httpx

        def add() -> None:  # two rows between the BMC's own (every 5 s, at .250 s)
            httpx.post(
                f"{self.url}/_sim/points",
                json={
                    "site": "lyon",
                    "node": "nova-1",
                    "metric": "bmc_node_power_watt",
                    "points": [
                        ["2024-11-26T12:00:01+01:00", 150.5],
                        ["2024-11-26T12:00:02+01:00", 151.25],
                    ],
                },
                timeout=10,
            ).raise_for_status()

        try:
            yield self.connection(), add
        finally:
            httpx.delete(f"{self.url}/_sim/points", timeout=10).raise_for_status()


# -- collectd in Elasticsearch (noida-db) -----------------------------------------------------


class CollectdEsAdapter(Adapter):
    backend = "collectd_es"
    day = dt.date(2017, 12, 13)
    empty_day = dt.date(2017, 12, 11)
    unit = "disk"
    missing_unit = "no_such_family"
    params = {"formats": ["jsonl"]}  # the HDF5 file holds the same values, not the same bytes
    SHRUNK_INDEX = "contract-shrunk-2017.12.13"

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        self.url = request.getfixturevalue("noida_es").url
        self._shrunk = False

    def stop(self) -> None:
        pass  # noida-db is the session's (tests/noida_fixtures.py)

    def extra(self) -> dict[str, Any]:
        return {"index": "cori-collectd-*", "host_prefix": "bb"}

    def settings_env(self) -> dict[str, str]:
        return {"DXT_COLLECTD_ES_FAMILIES": "disk", "DXT_COLLECTD_ES_FORMATS": "jsonl"}

    def coverage_args(self) -> list[str]:
        return ["--families", "disk"]

    @contextlib.contextmanager
    def fewer_rows(self) -> Iterator[tuple[Any, Any]]:
        # the sample hour without its first half, in an index of its own
        from dxt_core.backends.collectd_es.simulator import bulk_load
        from tests.noida_fixtures import sample_hits

        if not self._shrunk:
            hits = sample_hits()
            late = sorted(h["_source"]["@timestamp"] for h in hits)[len(hits) // 2]
            kept = [
                {**h, "_index": self.SHRUNK_INDEX}
                for h in hits
                if h["_source"]["@timestamp"] >= late
            ]
            bulk_load(self.url, kept)
            self._shrunk = True
        yield self.connection(extra={**self.extra(), "index": "contract-shrunk-*"}), self.unit

    @contextlib.contextmanager
    def late_points(self) -> Iterator[tuple[Any, Any]]:
        # the sample hour's first half in an index of its own; the second half arrives late
        # in a second index of the same pattern
        from dxt_core.backends.collectd_es.simulator import bulk_load
        from tests.noida_fixtures import sample_hits

        # an index pattern of this call's own: the noida-db of a test session is shared by
        # every adapter instance in it (the local and the S3 variant of a test each make one)
        prefix = f"contract-late-{uuid.uuid4().hex[:8]}"
        hits = sorted(sample_hits(), key=lambda h: h["_source"]["@timestamp"])
        half = len(hits) // 2
        bulk_load(self.url, [{**h, "_index": f"{prefix}-a-2017.12.13"} for h in hits[:half]])

        def add() -> None:
            bulk_load(self.url, [{**h, "_index": f"{prefix}-b-2017.12.13"} for h in hits[half:]])

        yield self.connection(extra={**self.extra(), "index": f"{prefix}-*"}), add


# -- Prometheus and VictoriaMetrics (the real servers) ----------------------------------------


class PrometheusAdapter(Adapter):
    """The real Prometheus over a TSDB backfilled by promtool (tests/integration/prometheus)."""

    backend = "prometheus"
    day = dt.date(2024, 3, 31)  # Europe/Rome: 23 hours
    empty_day = dt.date(2024, 6, 1)
    unit = {"metric": "node_temp_celsius", "selector": "node_temp_celsius"}
    missing_unit = {"metric": "node_temp_celsiu", "selector": "node_temp_celsiu"}
    params = {"format": "csv"}
    slow = True  # promtool's backfill and the TSDB's opening: about 8 s

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        from tests.integration.prometheus import servers

        self.tmp = tmp
        (tmp / "promtool").mkdir()
        self.blocks = servers.build_blocks(tmp / "promtool")
        self.server = self.serve(tmp / "server", [])
        self.url = self.server.url

    def serve(self, workdir: Path, flags: list[str]) -> Any:
        from tests.integration.prometheus import servers

        return servers.start_prometheus(workdir, self.blocks, flags)

    #: a server flag that refuses the day's query as too large (the day of a metric: 16,560)
    LIMIT = "--query.max-samples=5000"

    def stop(self) -> None:
        self.server.stop()

    def extra(self) -> dict[str, Any]:
        return {"time_zone": "Europe/Rome"}  # flavor "auto": detected from the server

    def settings_env(self) -> dict[str, str]:
        return {"DXT_PROMETHEUS_METRICS": "node_temp_celsius", "DXT_PROMETHEUS_FORMAT": "csv"}

    def coverage_args(self) -> list[str]:
        return ["--metrics", "node_temp_celsius"]

    @contextlib.contextmanager
    def too_large(self) -> Iterator[Any]:
        small = self.serve(self.tmp / "limited", [self.LIMIT])
        try:
            yield self.connection(small.url)
        finally:
            small.stop()

    #: flags of a server whose samples can be deleted (Prometheus's admin API)
    DELETABLE = ["--web.enable-admin-api"]

    def delete_some(self, url: str) -> None:
        """Delete the first hour of one node's series of :attr:`day`, as retention would:
        ``POST /api/v1/admin/tsdb/delete_series`` (``match[]``, ``start``, ``end``; 204),
        whose samples queries no longer see (tombstones)."""
        import httpx

        from dxt_core.windows import day_window, zone

        start = day_window(self.day, zone("Europe/Rome")).start_ms / 1000
        httpx.post(
            f"{url}/api/v1/admin/tsdb/delete_series",
            params={"match[]": 'node_temp_celsius{node="n3"}', "start": start, "end": start + 3599},
            timeout=30,
        ).raise_for_status()

    @contextlib.contextmanager
    def fewer_rows(self) -> Iterator[tuple[Any, Any]]:
        # a server of its own holding the same unit with samples deleted at the source; the
        # session's keeps the data the other tests expect
        self._fewer = getattr(self, "_fewer", 0) + 1
        server = self.serve(self.tmp / f"fewer{self._fewer}", self.DELETABLE)
        try:
            self.delete_some(server.url)
            yield self.connection(server.url), self.unit
        finally:
            server.stop()

    #: two samples between the 15 s ones of one series, at local noon of :attr:`day`
    LATE_SERIES = {
        "__name__": "node_temp_celsius",
        "instance": "n1:9100",
        "job": "node",
        "node": "n1",
    }

    def late_samples(self) -> list[tuple[int, float]]:
        from dxt_core.windows import day_window, zone

        noon = day_window(self.day, zone("Europe/Rome")).start_ms + 12 * 3_600_000
        return [(noon + 900, 21.5), (noon + 60_900, 21.75)]

    def writable(self, workdir: Path) -> Any:
        """A server of this kind with the test data that takes samples in the past."""
        from tests.integration.prometheus import servers

        return servers.start_prometheus(
            workdir, self.blocks, servers.WRITABLE_FLAGS, config_extra=servers.WRITABLE_CONFIG
        )

    def write_late(self, url: str) -> None:
        from tests.integration.prometheus import servers

        servers.remote_write(url, [(self.LATE_SERIES, self.late_samples())])

    @contextlib.contextmanager
    def late_points(self) -> Iterator[tuple[Any, Any]]:
        # a server of its own: the session's keeps the data the other tests expect
        self._late = getattr(self, "_late", 0) + 1
        server = self.writable(self.tmp / f"late{self._late}")
        try:
            yield self.connection(server.url), lambda: self.write_late(server.url)
        finally:
            server.stop()


class VictoriaMetricsAdapter(PrometheusAdapter):
    """The real VictoriaMetrics loaded through /api/v1/import/prometheus."""

    variant = "victoriametrics"
    slow = False  # started and loaded in about 1 s
    #: VictoriaMetrics counts the samples of the blocks it reads (up to 8,192 a block): 20,000
    #: refuses the day of 3 series (16,560 samples), and one series of it is let through
    LIMIT = "-search.maxSamplesPerQuery=20000"

    def start(self, request: pytest.FixtureRequest, tmp: Path) -> None:
        self.tmp = tmp
        self.server = self.serve(tmp / "server", [])
        self.url = self.server.url

    def serve(self, workdir: Path, flags: list[str]) -> Any:
        from tests.integration.prometheus import servers

        return servers.start_victoriametrics(workdir, flags)

    def writable(self, workdir: Path) -> Any:
        return self.serve(workdir, [])  # VictoriaMetrics takes samples of any time

    DELETABLE: list[str] = []  # its delete API needs no flag

    def delete_some(self, url: str) -> None:
        """Delete one node's series (VictoriaMetrics deletes whole series, of all time):
        ``POST /api/v1/admin/tsdb/delete_series`` with ``match[]`` (204)."""
        import httpx

        httpx.post(
            f"{url}/api/v1/admin/tsdb/delete_series",
            data={"match[]": 'node_temp_celsius{node="n3"}'},
            timeout=30,
        ).raise_for_status()

    def write_late(self, url: str) -> None:
        from tests.integration.prometheus import servers

        servers.vm_import(url, [(self.LATE_SERIES, self.late_samples())])


#: A backend's adapter, or a tuple of them when the suite runs once per server kind.
ADAPTERS: dict[str, type[Adapter] | tuple[type[Adapter], ...]] = {
    "examon": ExamonAdapter,
    "kwollect": KwollectAdapter,
    "collectd_es": CollectdEsAdapter,
    "prometheus": (PrometheusAdapter, VictoriaMetricsAdapter),
}


def adapter_classes(backend: Backend) -> tuple[type[Adapter], ...]:
    """The backend's adapters (several when it runs against more than one server); a clear
    failure for a backend registered without one."""
    found = ADAPTERS.get(backend.name)
    if found is None:
        try:
            found = importlib.import_module(f"{backend.package}.contract").ADAPTER
        except (ImportError, AttributeError):
            pytest.fail(
                f"backend {backend.name!r} is registered but has no contract adapter: add one "
                f"to tests/contract/adapters.py:ADAPTERS, or ADAPTER in {backend.package}.contract"
                " (docs/adding-a-backend.md)"
            )
    classes = found if isinstance(found, tuple) else (found,)
    for cls in classes:
        assert cls.backend == backend.name, (cls, backend.name)
    return classes


def adapter_for(backend: Backend, variant: str | None = None) -> Adapter:
    """The backend's adapter named ``variant`` (default: its first)."""
    classes = adapter_classes(backend)
    if variant is None:
        return classes[0]()
    return next(c for c in classes if c.variant == variant)()
