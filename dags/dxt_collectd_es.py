"""dxt_collectd_es: archive collectd-in-Elasticsearch telemetry, one task per (family, day).

The run of logical date D archives the UTC day D of each family (disk, cpu, memory) into
``$DXT_ARCHIVE_ROOT/collectd_es/<family>/<D>.jsonl.gz`` (raw hits) and ``<D>.hdf5``
(TOKIO Time Series, pytokio's layout) with a manifest beside them. Connection
``elasticsearch_default``; see docs/collectd_es.md.

* Backfill: ``airflow backfill create --dag-id dxt_collectd_es --from-date D1 --to-date D2``.
* Reruns rewrite the day from scratch (same result over unchanged data).
* Archive one chosen day: Trigger with the ``day`` param (the run's note names the day).
* ``wait_for_day_end`` waits in the triggerer for the day's end plus a settle delay.
* Each (family, day) adds an event to the asset ``dxt-archive/collectd_es/<family>``.
* ``reconcile_recent_days`` asks ``_count`` for the previous ``DXT_COLLECTD_ES_RECONCILE_DAYS``
  days (default 3; 0: off) and exports again the days that grew; the old files are kept in
  ``.versions/``; the run's note says what it found.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("collectd_es", doc_md=__doc__)
