"""dxt_prometheus: archive the raw stored samples of Prometheus or VictoriaMetrics, one task
per (metric, day).

The run of logical date D archives day D (midnight to midnight in the connection's
``time_zone``, Europe/Rome by default) into
``$DXT_ARCHIVE_ROOT/prometheus/<metric>/<D>.csv.gz`` (or ``.parquet``) with a manifest beside
it, checked against the server's own ``count_over_time``. The units are
``DXT_PROMETHEUS_METRICS`` or the catalog file ``DXT_PROMETHEUS_CATALOG`` (one metric name or
``NAME = SELECTOR`` a line), else every metric name the server lists; the server comes from
the connection ``prometheus_default`` (flavor detected, or named by its ``flavor`` extra).

* Backfill: ``airflow backfill create --dag-id dxt_prometheus --from-date D1 --to-date D2``.
* Retry one failed (metric, day): clear its task instance, or refill it from the
  "Archive coverage" view.
* Archive one chosen day: Trigger with the ``day`` param; ``format`` chooses CSV or Parquet.
* Each (metric, day) adds an event to the asset ``dxt-archive/prometheus/<metric>``.
"""

from __future__ import annotations

from dxt_core.airflow.dags import backend_dag

backend_dag("prometheus", doc_md=__doc__)
