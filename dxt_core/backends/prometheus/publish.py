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

from typing import TYPE_CHECKING, ClassVar

from dxt_core.publish.role import PartitionedPublish

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole

NAME = "prometheus"


class PrometheusPublish(PartitionedPublish):
    """The publish role of Prometheus-compatible servers."""

    backend: ClassVar[str] = NAME
    keys: ClassVar[tuple[str, ...]] = ("metric",)
    series_order: ClassVar[tuple[str, ...]] = ("instance",)
    dataset_name: ClassVar[str] = "prometheus-dataset"
    title: ClassVar[str] = "Prometheus telemetry"
    description: ClassVar[str] = "Prometheus metrics"
    layout_summary: ClassVar[str] = "one Parquet file per metric and month"
    source: ClassVar[str] = "a Prometheus-compatible server (Prometheus, VictoriaMetrics)"
    layout: ClassVar[tuple[str, ...]] = ("year_month=YY-MM/metric=<name>/a_0.parquet",)
    example_glob: ClassVar[str] = "year_month=*/metric=*/a_0.parquet"
    columns_note: ClassVar[str] = (
        "Metric files: `timestamp`, `value` (typed per metric, see below), `name` (the "
        "metric name), then one dictionary-encoded string column per label (empty where a "
        "series does not have it, as the archive holds it: Prometheus takes an empty label "
        "for an absent one)."
    )


PUBLISH: PublishRole = PrometheusPublish()
