"""A Grid'5000 reference API + Kwollect metrics API simulator, for tests, demos and benchmarks.

Serves, for a few sites, clusters and nodes:

* the reference API: ``/sites``, ``/sites/<site>``, ``/sites/<site>/clusters``,
  ``/sites/<site>/clusters/<cluster>`` (with its ``metrics`` catalog: ``period``,
  ``optional_period``, ``source``, ``labels``, ``only_for``, node exporter's bundles
  ``prom_default_metrics`` and ``prom_all_metrics``, collected as ``prom_<name>`` only under
  a ``monitor`` job that promotes them, as on Grid'5000),
  ``/sites/<site>/clusters/<cluster>/nodes`` and ``/sites/<site>/jobs/<id>``;
* Kwollect: ``/sites/<site>/metrics`` with ``nodes``, ``devices``, ``metrics``,
  ``start_time``, ``end_time``, ``job_id``, ``summary`` and ``as_rate``.

A ``/stable`` prefix is accepted and ignored, so ``--api-url http://HOST:PORT/stable`` works as
with ``https://api.grid5000.fr/stable``. Every value is a pure function of the node, the metric
and the timestamp: two runs (and two processes) serve the same bytes. Power is a triangle wave
(period 600 s, breakpoints on whole seconds), so trapezoidal integration of the 1 s wattmetre
series is exact and tests can compare energy with a closed form (:func:`power_watts`).

The metrics answers follow kwollect's ``api.get_metrics`` (``kwollect/db/kwollect_setup_db.py``
in the ``kwollect`` package, 1.3.1), as Grid'5000 serves it through PostgREST, and are checked
against the function itself on PostgreSQL by ``tests/integration/kwollect/test_real_function.py``:
``nodes`` and ``devices`` are one comma list, names cut at the first dot; names without data
give no rows (``[]``), not an error; no name and no ``job_id`` is HTTP 500 ``{"code": "XX000",
"message": "plpy.Error: Missing 'devices', 'nodes' or 'job_id' argument", ...}``; an unknown
job is 500 ``IndexError: list index out of range`` (38000); a numeric time is a Unix epoch,
otherwise a timestamp (ISO 8601, Europe/Paris without an offset, or ``now``, ``today``,
``yesterday``, ``tomorrow``, ``epoch``), an unreadable one 400 (22007); one bound alone means
a 5-minute window; both bounds are inclusive; rows are oldest first; ``summary=true`` gives one
row per 5-minute bucket whose start is in the window (mean of the bucket, maximum for
``*_total``); ``as_rate=true`` gives the change per second since the series' previous row,
``null`` first; values print as PostgreSQL prints ``double precision`` (``104``, not
``104.0``). An answer above ``max_points`` points fails like the real statement timeout, with
HTTP 500 and "Exception: Request timeout, too much data to process." (after
``timeout_delay_s`` seconds). Answers are streamed (HTTP/1.0, no Content-Length) so a one-day
50-node wattmetre request never sits in memory.

As on Grid'5000, a job of type ``monitor=<regex>`` samples the matching metrics of its nodes
at their ``optional_period`` (wattmetre: 20 ms) from its start to its stop. Differences on
purpose: no data after the current time; ``devices`` are node names only (the real API also
has the wattmetre and switch ports under their own ids); PostgreSQL reads more time forms
than we do.

Run it as ``python -m dxt_core.backends.kwollect.simulator --port 0``; the first line on stdout is
``dxt-simulate-kwollect listening on http://HOST:PORT``. ``/_sim/config`` (POST JSON:
``site_delay_s``, ``delay_s``, ``max_points``, ``timeout_delay_s``, ``stray_offset_s``: a point
that far before every answer's window, first; ``slow_requests`` and ``slow_delay_s``: the next
N metrics requests wait that long before answering; ``expired_before_s``: retention, rows
before that epoch second are gone) changes faults at run time,
``/_sim/points`` (POST ``{"site", "node", "metric", "points": [[time, value], ...]}``; DELETE)
adds rows to days already served (late data), and ``/_sim/stats`` counts requests, points and
the peak number of concurrent requests.
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
