"""A KairosDB 1.2 + Examon jobs HTTP simulator, for tests and benchmarks without a real server.

The simulator answers the parts of the KairosDB REST API that Examon clients use
(``/api/v1/datapoints/query``, ``.../query/tags``, ``metricnames``, ``version``,
``health/check``), the Examon server's job accounting endpoints (``/api/v1`` and ``/api/v2``
``/examon/jobs/query``, also alone on a second port, 5000 by default) and Grafana's
data-source proxy path (``/api/datasources/proxy/<id>/api/v1/...``), each as the upstream
source shows it (docs/compatibility.md). Every value is a pure function of the metric name,
the series and the timestamp, so two runs (and two processes) always serve the same data:
realistic by default (millisecond jitter, float noise, numbers printed as KairosDB's org.json
prints them), tidy on request. Faults (outages, delays, refusals, rate limits, slow answers,
bad values) can be switched on at runtime through the unauthenticated ``/_sim/*`` admin
endpoints.

Modules: ``model`` (series, values, jobs), ``query`` (KairosDB query semantics), ``jobs``
(the Examon server's handlers), ``faults``, ``server`` (HTTP), ``__main__`` (command line).

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
