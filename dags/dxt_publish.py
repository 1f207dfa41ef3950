"""dxt_publish: publish each month of the archive as a dataset once it is complete.

Each monthly run publishes the month it covers (``dxt publish <backend>`` in a task, for
every backend that publishes, or the ``backend`` Param's) into
``$DXT_PUBLISH_DIR/<backend>/<from>_<to>/``: typed Parquet in the backend's layout (M100
ExaData's for Examon), checksums, datapackage.json, croissant.json, a datacard and tar
records (docs/publish.md). The task fails and retries (hourly, for a day) while the month
has days neither archived nor empty. People in job tables are pseudonymised with the key in
``DXT_PUBLISH_KEY_FILE``; without it the task refuses unless the ``keep_identities`` Param
is set. Trigger with ``from_month`` / ``to_month`` to publish other months.
"""

from __future__ import annotations

from dxt_core.airflow.publish import publish_dag

publish_dag(doc_md=__doc__)
