"""A Grid'5000 reference API + Kwollect metrics API simulator, for tests, demos and benchmarks.

Serves, for a few sites, clusters and nodes:

* the reference API: ``/sites``, ``/sites/<site>``, ``/sites/<site>/clusters``,
  ``/sites/<site>/clusters/<cluster>`` (with its ``metrics`` catalog: ``period``,
  ``optional_period``, ``source``, ``labels``, ``only_for``, Prometheus ``prom_`` names),
  ``/sites/<site>/clusters/<cluster>/nodes`` and ``/sites/<site>/jobs/<id>``;
* Kwollect: ``/sites/<site>/metrics`` with ``nodes``, ``devices``, ``metrics``,
  ``start_time``, ``end_time``, ``job_id``, ``summary`` and ``as_rate``.

A ``/stable`` prefix is accepted and ignored, so ``--api-url http://HOST:PORT/stable`` works as
with ``https://api.grid5000.fr/stable``. Every value is a pure function of the node, the metric
and the timestamp: two runs (and two processes) serve the same bytes. Power is a triangle wave
(period 600 s, breakpoints on whole seconds), so trapezoidal integration of the 1 s wattmetre
series is exact and tests can compare energy with a closed form (:func:`power_watts`).

Behaviour copied from the real service: node names may be FQDNs (cut at the first dot); a
numeric time is a Unix epoch, otherwise ISO 8601, read in Europe/Paris when it has no offset;
only a start means a 5-minute window; both bounds are inclusive; results are oldest first;
unknown nodes, devices or jobs are an error; no paging; an answer above ``max_points`` points
fails like the real query timeout, with HTTP 500 and the message "Request timeout, too much data
to process" (after ``timeout_delay_s`` seconds). Answers are streamed (HTTP/1.0, no
Content-Length) so a one-day 50-node wattmetre request never sits in memory.

As on Grid'5000, a job of type ``monitor=<regex>`` samples the matching metrics of its nodes
at their ``optional_period`` (wattmetre: 20 ms) from its start to its stop. Differences on
purpose: no data after the current time; ``summary=true`` answers one point per series whose
value is the mean and whose ``labels._summary`` holds ``min``, ``max``, ``mean``, ``count``,
``first`` and ``last``.

Run it as ``python -m dxt_core.backends.kwollect.simulator --port 0``; the first line on stdout is
``dxt-simulate-kwollect listening on http://HOST:PORT``. ``/_sim/config`` (POST JSON:
``site_delay_s``, ``delay_s``, ``max_points``, ``timeout_delay_s``) changes faults at run time
and ``/_sim/stats`` counts requests, points and the peak number of concurrent requests.
"""

from __future__ import annotations

from dxt_core.backends.kwollect.simulator.model import SimJob, SimSettings, power_watts
from dxt_core.backends.kwollect.simulator.server import KwollectSimulator

__all__ = ["KwollectSimulator", "SimJob", "SimSettings", "main", "power_watts"]


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT (see ``__main__``)."""
    # Imported here: ``python -m`` runs ``__main__`` itself, which must not be imported twice.
    from dxt_core.backends.kwollect.simulator.__main__ import main as run

    return run(argv)
