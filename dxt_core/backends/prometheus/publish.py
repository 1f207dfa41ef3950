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

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dxt_core.publish.role import PartitionedPublish

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole
    from dxt_core.publish.archive_scan import DayFile

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
        "Metric files: `timestamp`, `value` (a double: Prometheus' samples are float64), "
        "`name` (the "
        "metric name), then one dictionary-encoded string column per label (empty where a "
        "series does not have it, as the archive holds it: Prometheus takes an empty label "
        "for an absent one)."
    )

    def read_day(self, day: DayFile, path: Path) -> Iterator[Any]:
        """The day's rows, ``value`` a double whatever its digits: every Prometheus and
        VictoriaMetrics sample is a float64, so a metric of whole numbers is ``double``
        from a CSV archive as from a Parquet one (the CSV's ``24`` read as ``int64``)."""
        import pyarrow as pa

        for table in super().read_day(day, path):
            i = table.schema.get_field_index("value")
            typ = table.schema.field(i).type if i >= 0 else None
            if typ is not None and (pa.types.is_integer(typ) or pa.types.is_string(typ)):
                # a CSV's text: the server's digits, NaN and +Inf / -Inf; not all numbers:
                # left as text, typed as text is (and said so by the datacard)
                with contextlib.suppress(pa.ArrowInvalid):
                    # safe=False: a whole number past 2**53 is a float64's digits anyway
                    value = table.column(i).cast(pa.float64(), safe=False)
                    table = table.set_column(i, "value", value)
            yield table


PUBLISH: PublishRole = PrometheusPublish()
