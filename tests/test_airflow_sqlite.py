"""dxt_core.airflow.sqlite: Airflow's SQLite connections, on a real SQLite file in WAL mode.

The scene is the one that made ``POST /api/v2/backfills`` answer 503 beside a running
scheduler: one connection holds the write lock and commits a moment later (the scheduler),
while another opens a transaction with ``SAVEPOINT``, reads and then writes (Airflow's
backfill creation, ``session.begin_nested()``).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from dxt_core.airflow import sqlite as dxt_sqlite
from dxt_core.airflow.sqlite import CONNECT_ARGS, ImmediateSavepoints

HOLD_S = 0.5


def _database(tmp_path: Path) -> Path:
    db = tmp_path / "airflow.db"
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA journal_mode=WAL")  # as Airflow sets it (utils/orm_event_handlers.py)
        c.execute("CREATE TABLE dag_run (day TEXT)")
    return db


class _Scheduler(threading.Thread):
    """Takes the write lock, says so, and commits ``HOLD_S`` later."""

    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db
        self.locked = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        c = sqlite3.connect(self.db, timeout=10, check_same_thread=False)
        try:
            c.execute("INSERT INTO dag_run VALUES ('scheduled')")  # BEGIN + the write lock
            self.locked.set()
            time.sleep(HOLD_S)
            c.commit()
        except sqlite3.OperationalError as exc:
            self.error = exc
        finally:
            self.locked.set()
            c.close()


def _savepoint_read_then_write(conn: sqlite3.Connection) -> None:
    cur = conn.cursor()
    cur.execute("SAVEPOINT sa_savepoint_1")
    cur.execute("SELECT count(*) FROM dag_run").fetchall()
    cur.execute("INSERT INTO dag_run VALUES ('backfill')")
    cur.execute("RELEASE SAVEPOINT sa_savepoint_1")
    conn.commit()


def _days(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return sorted(r[0] for r in c.execute("SELECT day FROM dag_run"))


def test_sqlite_refuses_a_savepoint_that_read_before_another_writer_committed(tmp_path):
    """What the factory is for: with Python's default connection, the busy timeout does not
    help (10 s here, and the refusal comes when the other writer commits, after 0.5 s)."""
    db = _database(tmp_path)
    sched = _Scheduler(db)
    sched.start()
    sched.locked.wait(10)
    conn = sqlite3.connect(db, timeout=10)
    t0 = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        _savepoint_read_then_write(conn)
    waited = time.monotonic() - t0
    conn.close()
    sched.join(10)
    assert sched.error is None
    assert waited < 5, waited  # refused, not timed out
    assert _days(db) == ["scheduled"]


def test_immediate_savepoints_wait_for_the_writer_then_read_and_write(tmp_path):
    db = _database(tmp_path)
    sched = _Scheduler(db)
    sched.start()
    sched.locked.wait(10)
    conn = sqlite3.connect(db, **CONNECT_ARGS)
    assert isinstance(conn, ImmediateSavepoints)
    t0 = time.monotonic()
    _savepoint_read_then_write(conn)
    waited = time.monotonic() - t0
    conn.close()
    sched.join(10)
    assert sched.error is None
    assert waited >= HOLD_S * 0.5, waited  # it waited for the scheduler's commit
    assert _days(db) == ["backfill", "scheduled"]


def test_a_released_savepoint_commits_with_the_session_not_before(tmp_path):
    db = _database(tmp_path)
    conn = sqlite3.connect(db, **CONNECT_ARGS)
    other = sqlite3.connect(db)
    cur = conn.cursor()
    for day in ("d1", "d2"):
        cur.execute("SAVEPOINT s")
        cur.execute("INSERT INTO dag_run VALUES (?)", (day,))
        cur.execute("RELEASE SAVEPOINT s")
    assert conn.in_transaction
    assert other.execute("SELECT count(*) FROM dag_run").fetchone() == (0,)
    conn.commit()
    assert other.execute("SELECT count(*) FROM dag_run").fetchone() == (2,)
    # a rolled-back savepoint transaction leaves nothing
    cur.execute("SAVEPOINT s")
    cur.execute("INSERT INTO dag_run VALUES ('d3')")
    conn.rollback()
    assert _days(db) == ["d1", "d2"]
    conn.close()
    other.close()


def test_reads_and_plain_writes_are_left_as_the_driver_does_them(tmp_path):
    """No transaction for a read (readers never wait in WAL mode); a write opens one, ended by
    commit; the connection's own ``execute`` goes through the same cursor."""
    db = _database(tmp_path)
    conn = sqlite3.connect(db, **CONNECT_ARGS)
    conn.execute("SELECT count(*) FROM dag_run").fetchall()
    assert not conn.in_transaction
    conn.execute("INSERT INTO dag_run VALUES ('d')")
    assert conn.in_transaction
    conn.commit()
    conn.execute("savepoint s")  # any case, as SQL allows
    assert conn.in_transaction
    conn.rollback()
    assert not conn.in_transaction
    conn.close()


@pytest.mark.parametrize("ours", [True, False], ids=["these-arguments", "driver-default"])
def test_sqlalchemy_begin_nested_as_airflow_creates_a_backfill_run(tmp_path, ours):
    """Through SQLAlchemy, configured as Airflow configures it (``settings.py``: the connect
    arguments, ``check_same_thread``; ``utils/orm_event_handlers.py``: WAL on connect)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import event, text
    from sqlalchemy.orm import Session

    db = _database(tmp_path)
    args = dict(CONNECT_ARGS) if ours else {"timeout": 10.0}
    engine = sqlalchemy.create_engine(
        f"sqlite:///{db}", connect_args={**args, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    sched = _Scheduler(db)
    sched.start()
    sched.locked.wait(10)
    try:
        with Session(engine) as session:
            with session.begin_nested():
                session.execute(text("SELECT count(*) FROM dag_run")).all()
                session.execute(text("INSERT INTO dag_run VALUES ('backfill')"))
            session.commit()
        failed = None
    except sqlalchemy.exc.OperationalError as exc:
        failed = exc
    finally:
        sched.join(10)
        engine.dispose()
    assert sched.error is None
    if ours:
        assert failed is None, failed
        assert _days(db) == ["backfill", "scheduled"]
    else:
        assert failed is not None and "database is locked" in str(failed)
        assert _days(db) == ["scheduled"]


def test_a_write_on_an_event_loop_waits_the_short_timeout_so_the_holder_can_commit(
    tmp_path, monkeypatch
):
    """The API server's deadlock, as FastAPI makes it: a route in a worker thread writes (its
    session holds the lock) and returns; its commit is the session dependency's exit, which
    the loop hands to a worker thread; but the loop first runs another request's action log,
    whose write waits for that lock on the loop's own thread. The loop's write gives up
    after the loop's timeout, not the connections' 60 s, and the route's commit then runs."""
    monkeypatch.setattr(dxt_sqlite, "LOOP_BUSY_TIMEOUT_S", 0.5)
    db = _database(tmp_path)
    route = sqlite3.connect(db, check_same_thread=False, **CONNECT_ARGS)
    action_log = sqlite3.connect(db, check_same_thread=False, **CONNECT_ARGS)

    async def server() -> float:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, route.execute, "INSERT INTO dag_run VALUES ('route')")
        t0 = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            action_log.execute("INSERT INTO dag_run VALUES ('action log')")
        waited = time.monotonic() - t0
        await loop.run_in_executor(None, route.commit)  # the dependency exit
        return waited

    waited = asyncio.run(server())
    assert 0.4 < waited < 3, waited  # without the rule: the connections' 60 s
    assert [r[0] for r in route.execute("SELECT day FROM dag_run")] == ["route"]

    # off the loop, the same connection waits its own timeout again
    scheduler = _Scheduler(db)
    scheduler.start()
    scheduler.locked.wait(5)
    action_log.execute("INSERT INTO dag_run VALUES ('off the loop')")
    action_log.commit()
    scheduler.join()
    assert scheduler.error is None
    assert action_log.execute("PRAGMA busy_timeout").fetchone()[0] == 60_000
    route.close()
    action_log.close()


def test_the_loop_timeout_is_never_longer_than_the_connections_own(tmp_path):
    db = _database(tmp_path)
    conn = sqlite3.connect(db, factory=ImmediateSavepoints, timeout=2)

    async def on_loop() -> int:
        return int(conn.execute("PRAGMA busy_timeout").fetchone()[0])

    assert asyncio.run(on_loop()) == 2000  # min(own 2 s, the loop's 5 s)
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2000
    conn.close()
