"""Celery configuration for Airflow's CeleryExecutor that preloads dxt's task modules.

A Celery worker runs each task instance in a process forked (through Airflow's task
supervisor) from one of its pool processes, which are themselves forked from the worker's main
process once it has started. Whatever the main process has imported, every task process has
for free; whatever it has not, every task imports again. Airflow preloads its own operators
this way (``on_celery_import_modules`` in the Celery provider); this configuration adds
:mod:`dxt_core.airflow.preload` to Celery's ``imports``, so a metric-day task does not spend
tens of milliseconds importing dxt_core, its sources and writers before its first request.

Use it on the workers (and, harmlessly, everywhere)::

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=dxt_core.airflow.celery.CELERY_CONFIG

It is Airflow's default Celery configuration otherwise unchanged.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

PRELOAD = ("dxt_core.airflow.preload",)

CELERY_CONFIG: dict[str, Any] = {
    **DEFAULT_CELERY_CONFIG,
    "imports": (*tuple(DEFAULT_CELERY_CONFIG.get("imports") or ()), *PRELOAD),
}
