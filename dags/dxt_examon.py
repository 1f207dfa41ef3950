"""dxt_examon: archive Examon (KairosDB) telemetry, one task per (metric, day).

The run of logical date D archives day D (midnight to midnight in the connection's
``time_zone``, Europe/Rome by default) of every catalog metric into
``$DXT_ARCHIVE_ROOT/examon/<plugin>/<metric>/<D>.csv.gz`` with a manifest beside it.

* Backfill: ``airflow backfill create --dag-id dxt_examon --from-date D1 --to-date D2``
  (add ``--reprocess-behavior failed`` to redo failed days).
* Retry one failed metric-day: clear its task instance (UI, or ``airflow tasks clear``), or
  refill it from the "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` holds a run until its local day is over (plus a settle delay),
  deferred to the triggerer.
* Each metric-day adds an event to the asset ``dxt-archive/examon/<plugin>``.
* ``reconcile_recent_days`` asks KairosDB for the counts of the previous
  ``DXT_EXAMON_RECONCILE_DAYS`` days (default 3; 0: off) and refetches the days that grew
  (late data); the old file is kept in ``.versions/``; the run's note says what it found.

Parse-time work is a few imports: the catalog is read by the ``catalog`` task.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("examon", doc_md=__doc__)
