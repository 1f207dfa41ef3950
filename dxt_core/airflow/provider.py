"""Provider metadata: registers dxt-archive's connection types with Airflow.

Loaded through the ``apache_airflow_provider`` entry point of the ``dxt-archive``
distribution; keep it import-light (no Airflow import).
"""

from __future__ import annotations

from typing import Any

from dxt_core._version import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "dxt-archive",
        "name": "dxt-archive",
        "description": "Archive HPC monitoring telemetry (Examon/KairosDB) to files.",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": "dxt_core.airflow.hooks.ExamonHook",
                "connection-type": "examon",
            },
            {
                "hook-class-name": "dxt_core.airflow.collectd_es.CollectdEsHook",
                "connection-type": "collectd_es",
            },
            {
                "hook-class-name": "dxt_core.airflow.kwollect.KwollectHook",
                "connection-type": "kwollect",
            },
        ],
    }
