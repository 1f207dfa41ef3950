"""SQLite settings for the single-machine setup (``airflow standalone``, SQLite, LocalExecutor).

SQLite allows one writer at a time. Two things made Airflow's writers fail with "database is
locked" on a busy small machine, and these settings answer both:

* Python's driver gives up after 5 s of waiting for the lock: the busy timeout here is 60 s.
* A transaction that **read first and writes later** fails at once, however long the busy
  timeout, when another connection commits in between: in WAL mode (Airflow sets
  ``journal_mode=WAL``) its snapshot is then stale (``SQLITE_BUSY_SNAPSHOT``), and waiting
  cannot help, so SQLite does not wait. Python's driver opens a transaction only before an
  INSERT, UPDATE or DELETE, so a plain session's reads before its first write are outside
  any transaction, and its writes hold the lock from the first one; but a SQLAlchemy
  ``session.begin_nested()`` sends ``SAVEPOINT`` first, which SQLite takes as a deferred
  ``BEGIN``. Airflow 3.3.2 creates each backfill run that way (``airflow/models/backfill.py``,
  ``_create_backfill_dag_run_non_partitioned``: read the day's latest run, then insert); its
  asset manager queues asset-triggered runs in savepoints too (``airflow/assets/manager.py``).
  With the scheduler committing beside it, ``POST /api/v2/backfills`` then answered 503,
  Airflow's clean-up deleted the runs it had made, and a scheduler that had loaded them died
  (apache/airflow#68699).

  :class:`ImmediateSavepoints` connections begin such a transaction with
  ``BEGIN IMMEDIATE``: the write lock is taken first, waiting as long as the busy timeout
  allows, and the reads that follow see the latest commit. The transaction then ends at the
  session's commit, not at the savepoint's release: a backfill's runs are committed together.

Point Airflow at these arguments::

    AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=dxt_core.airflow.sqlite.CONNECT_ARGS

The demo and the tests set it; a PostgreSQL deployment does not need it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

BUSY_TIMEOUT_S = 60.0


class _Cursor(sqlite3.Cursor):
    """Sends ``BEGIN IMMEDIATE`` before a ``SAVEPOINT`` that would open a transaction."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        if not self.connection.in_transaction and sql.lstrip()[:9].upper() == "SAVEPOINT":
            super().execute("BEGIN IMMEDIATE")
        super().execute(sql, parameters)
        return self


class ImmediateSavepoints(sqlite3.Connection):
    """A connection whose savepoint-opened transactions hold the write lock from the start.

    Its cursors are :class:`_Cursor` objects (SQLAlchemy executes every statement through
    ``cursor()``; the connection's own ``execute`` is routed through one too); a cursor
    factory the caller names is used as it is.
    """

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _Cursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)


#: ``connect_args`` for SQLAlchemy's pysqlite dialect (Airflow adds ``check_same_thread``).
CONNECT_ARGS: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S, "factory": ImmediateSavepoints}

#: Airflow setting that selects these arguments.
SETTING = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", f"{__name__}.CONNECT_ARGS")
