"""SQLite settings for the single-machine setup (``airflow standalone``, SQLite, LocalExecutor).

SQLite allows one writer at a time and Python's driver gives up after 5 s of waiting
("database is locked"). With the scheduler, the API server and CLI calls such as
``airflow backfill create`` writing at once, 5 s is too short on a busy small machine.
Point Airflow at a longer busy timeout::

    AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=dxt_core.airflow.sqlite.CONNECT_ARGS

The demo and the tests set it; a PostgreSQL deployment does not need it.
"""

from __future__ import annotations

from typing import Any

BUSY_TIMEOUT_S = 60.0

#: ``connect_args`` for SQLAlchemy's pysqlite dialect (Airflow adds ``check_same_thread``).
CONNECT_ARGS: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S}

#: Airflow setting that selects these arguments.
SETTING = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", f"{__name__}.CONNECT_ARGS")
