"""``dxt publish prometheus``: the Prometheus (or VictoriaMetrics) archive as a dataset, one
Parquet file per metric and month::

    year_month=YY-MM/metric=<name>/a_0.parquet

The archive's day files (``prometheus/<name>/<day>.csv.gz`` or ``.parquet``, days of the
connection's zone; dxt_core/backends/prometheus/archive_day.py) are the series files Examon's
are (``timestamp,value,name,<labels>``), so they are read the same way; each label is a
column, and a metric's columns are the union of its series' labels (empty text where a
series lacks one, as in the archive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dxt_core.publish.role import PartitionedPublish

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

NAME = "prometheus"


class PrometheusPublish(PartitionedPublish):
    """The publish role of Prometheus-compatible servers."""

    backend = NAME
    keys = ("metric",)
    series_order = ("instance",)
    title = "Prometheus telemetry"
    description = "Prometheus metrics"
    source = "a Prometheus-compatible server (Prometheus, VictoriaMetrics)"
    layout = ("year_month=YY-MM/metric=<name>/a_0.parquet",)
    columns_note = (
        "Metric files: `timestamp`, `value` (typed per metric, see below), `name` (the "
        "metric name), then one dictionary-encoded string column per label (empty where a "
        "series does not have it, as the archive holds it: Prometheus takes an empty label "
        "for an absent one)."
    )


PUBLISH: PublishRole = PrometheusPublish()
