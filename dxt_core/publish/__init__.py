"""From archive to dataset: ``dxt publish`` (no Airflow here).

:func:`publish_examon` turns months of an Examon archive into an M100 ExaData-style dataset:
typed, sorted, pseudonymised Parquet files, checksums, a Frictionless Data Package, a
Croissant description, a datacard and records for a repository. See docs/publish.md.
"""

from dxt_core.publish.examon import PublishOptions, PublishReport, publish_examon
from dxt_core.publish.hostlist import expand_hostlist

__all__ = ["PublishOptions", "PublishReport", "expand_hostlist", "publish_examon"]
