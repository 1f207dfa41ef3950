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

* The API server runs some of Airflow's writes on its event loop: the action log of every
  changing request (``airflow/api_fastapi/logging/decorators.py``, ``log_action``, an
  ``async`` dependency that commits). Waiting there for the lock stops every request of the
  server, and the lock's holder may be a request of the same server that cannot commit
  until that loop runs again: its session is committed by a dependency exit that FastAPI
  hands to a worker thread from the loop (``fastapi/concurrency.py``,
  ``contextmanager_in_threadpool``; ``airflow/api_fastapi/common/db/common.py``,
  ``_get_session``). The wait then lasts the whole busy timeout: with 60 s, the API server
  stood still for a minute, task heartbeats failed and a scheduler that had been waiting
  as long gave up and exited. On a thread that runs an event loop these connections wait
  :data:`LOOP_BUSY_TIMEOUT_S` (5 s, the driver's default, as without these arguments): the
  loop's request then fails (500) after 5 s, and the rest go on.

Point Airflow at these arguments::

    AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=dxt_core.airflow.sqlite.CONNECT_ARGS

The demo and the tests set it; a PostgreSQL deployment does not need it.
"""

from __future__ import annotations

import sqlite3
from asyncio import _get_running_loop
from typing import Any

BUSY_TIMEOUT_S = 60.0

#: The busy timeout of a statement run on a thread that runs an event loop (the module
#: docstring says why): Python's driver default.
LOOP_BUSY_TIMEOUT_S = 5.0


class _Cursor(sqlite3.Cursor):
    """Sends ``BEGIN IMMEDIATE`` before a ``SAVEPOINT`` that would open a transaction, and
    sets the busy timeout for the thread it runs on (:meth:`ImmediateSavepoints.busy_for`)."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        conn = self.connection
        if isinstance(conn, ImmediateSavepoints):
            conn.busy_for(self, on_loop=_get_running_loop() is not None)
        if not conn.in_transaction and sql.lstrip()[:9].upper() == "SAVEPOINT":
            super().execute("BEGIN IMMEDIATE")
        super().execute(sql, parameters)
        return self


class ImmediateSavepoints(sqlite3.Connection):
    """A connection whose savepoint-opened transactions hold the write lock from the start.

    Its cursors are :class:`_Cursor` objects (SQLAlchemy executes every statement through
    ``cursor()``; the connection's own ``execute`` is routed through one too); a cursor
    factory the caller names is used as it is.
    """

    _base_ms: int | None = None  # the connection's own busy timeout, read when first needed
    _on_loop = False

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _Cursor)

    def busy_for(self, cursor: sqlite3.Cursor, on_loop: bool) -> None:
        """Make the busy timeout :data:`LOOP_BUSY_TIMEOUT_S` for a statement run on an event
        loop's thread, and the connection's own (``timeout``) otherwise; a ``PRAGMA`` only
        when that changes (a pooled connection moves between threads)."""
        if on_loop == self._on_loop:
            return
        if self._base_ms is None:
            row = sqlite3.Cursor.execute(cursor, "PRAGMA busy_timeout").fetchone()
            self._base_ms = int(row[0])
        ms = min(self._base_ms, round(LOOP_BUSY_TIMEOUT_S * 1000)) if on_loop else self._base_ms
        sqlite3.Cursor.execute(cursor, f"PRAGMA busy_timeout = {ms}")
        self._on_loop = on_loop

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)


#: ``connect_args`` for SQLAlchemy's pysqlite dialect (Airflow adds ``check_same_thread``).
CONNECT_ARGS: dict[str, Any] = {"timeout": BUSY_TIMEOUT_S, "factory": ImmediateSavepoints}

#: Airflow setting that selects these arguments.
SETTING = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", f"{__name__}.CONNECT_ARGS")
