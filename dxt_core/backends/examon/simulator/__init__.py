"""A KairosDB 1.2 + Examon jobs HTTP simulator, for tests and benchmarks without a real server.

The simulator answers the parts of the KairosDB REST API that Examon clients use
(``/api/v1/datapoints/query``, ``.../query/tags``, ``metricnames``, ``version``,
``health/check``), the Examon job accounting endpoint (``/api/v1/examon/jobs/query``) and the
Grafana proxy path (``/api/datasources/proxy/<id>/api/v1/...``). Every value is a pure
function of the metric name, the series and the timestamp, so two runs (and two processes)
always serve the same data. Faults (outages, delays, query limits, slow answers) can be
switched on at runtime through the unauthenticated ``/_sim/*`` admin endpoints.

Run it as ``python -m dxt_core.backends.examon.simulator --port 0``; the first line on stdout is
``dxt-simulate-examon listening on http://HOST:PORT``.

Differences from a real KairosDB, on purpose: aggregators and non-tag groupers are refused
with HTTP 400 (an archiver must never receive silently unaggregated data it asked to be
aggregated); relative times count a month as 30 days and a year as 365 days; there is no
data after the current time.
"""

from __future__ import annotations

from dxt_core.backends.examon.simulator.faults import Faults
from dxt_core.backends.examon.simulator.model import SimConfig, load_catalog, node_names
from dxt_core.backends.examon.simulator.server import ExamonSimulator

__all__ = ["ExamonSimulator", "Faults", "SimConfig", "load_catalog", "main", "node_names"]


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT (see ``__main__``)."""
    # Imported here: ``python -m`` runs ``__main__`` itself, which must not be imported twice.
    from dxt_core.backends.examon.simulator.__main__ import main as run

    return run(argv)
