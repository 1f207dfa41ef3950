"""dxt_kwollect: archive Grid'5000 Kwollect metrics, one task per (site, metric) and day.

The run of logical date D archives day D (midnight to midnight in ``DXT_KWOLLECT_TIME_ZONE``,
Europe/Paris by default) of the configured nodes or clusters into
``$DXT_ARCHIVE_ROOT/kwollect/<site>/<metric>/<D>.jsonl.gz`` with a manifest beside it.
Configure with ``DXT_KWOLLECT_NODES`` / ``DXT_KWOLLECT_CLUSTERS`` / ``DXT_KWOLLECT_METRICS`` or
a file in ``DXT_KWOLLECT_CONFIG``; the API comes from the connection ``kwollect_default``.

* Backfill: ``airflow backfill create --dag-id dxt_kwollect --from-date D1 --to-date D2``.
* Retry one failed (site, metric, day): clear its task instance, or refill it from the
  "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (site, metric, day) adds an event to the asset ``dxt-archive/kwollect/<site>``.
* ``reconcile_recent_days`` recounts the previous ``DXT_KWOLLECT_RECONCILE_DAYS`` days (default
  3; 0: off; Kwollect has no count API: the points are asked for and counted, not kept) and
  refetches the days that grew; the old file is kept in ``.versions/``; the run's note says
  what it found.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("kwollect", doc_md=__doc__)
