"""dxt_publish: publish each month of the archive as a dataset once it is complete.

Scheduled on the archive's assets: after the archive tasks' events, a run publishes each month
they name that is complete (``dxt publish <backend>`` in a task, for every backend that
publishes) into ``$DXT_PUBLISH_DIR/<backend>/<YYYY-MM>_<YYYY-MM>/``: typed Parquet in the
backend's layout (M100 ExaData's for Examon), checksums, datapackage.json, croissant.json, a
datacard and tar records (docs/publish.md). A month not complete yet is left for a later
event, and one already published from the same archive days is not written again; both are
said so in the log and the XCom. People in job tables are pseudonymised with the key in
``DXT_PUBLISH_KEY_FILE``; without it the task refuses unless the ``keep_identities`` Param is
set. Trigger with ``from_month`` / ``to_month`` to publish other months.
"""

from __future__ import annotations

from dxt_core.airflow.publish import publish_dag

publish_dag(doc_md=__doc__)
