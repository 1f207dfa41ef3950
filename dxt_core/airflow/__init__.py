"""Airflow adapters over dxt_core: a hook per backend and the task bodies the DAGs call.

Only this subpackage imports Airflow, and only dags/ and plugins/ import it.
"""
