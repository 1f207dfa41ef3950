"""The Airflow adapters: the only code of dxt-archive that imports Airflow.

Importing this package points dxt_core's settings at Airflow's configuration: a setting whose
``DXT_<KEY>`` variable is unset is read from the ``[dxt]`` section (``AIRFLOW__DXT__<KEY>`` or
airflow.cfg), which the provider info declares.
"""

from __future__ import annotations

from typing import Any

from dxt_core import config, store


def _from_airflow(key: str) -> str | None:
    from airflow.configuration import conf

    value = conf.get("dxt", key, fallback=None)
    return None if value is None else str(value)


config.set_fallback(_from_airflow)


def _s3_client(location: Any) -> Any:
    from dxt_core.airflow.s3 import client_from_connection

    return client_from_connection(location)


# An s3:// archive root made in a task reads its credentials from an Airflow connection.
store.set_client_factory(_s3_client)


def dag_settings(backend: str) -> dict[str, Any]:
    """A backend's settings for its DAG file, by short key (``retries``, ``pool``...)."""
    from dxt_core.backends import dag_settings as read

    return read(backend)
