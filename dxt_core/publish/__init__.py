"""From archive to dataset: ``dxt publish <backend>`` (no Airflow here).

:func:`publish` turns months of a backend's archive into a dataset, the backend saying what
its units are and where their files go (its :class:`~dxt_core.backends.roles.PublishRole`):
typed, sorted, pseudonymised Parquet files, checksums, a Frictionless Data Package, a
Croissant description, a datacard and records for a repository. See docs/publish.md.
"""

from dxt_core.publish.dataset import PublishOptions, PublishReport, incomplete_days, publish
from dxt_core.publish.hostlist import expand_hostlist

__all__ = ["PublishOptions", "PublishReport", "expand_hostlist", "incomplete_days", "publish"]
