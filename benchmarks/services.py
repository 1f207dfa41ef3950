"""The production path's services, each of our own: a redis-server on a free loopback port
(in memory, no RDB, no AOF) and a PostgreSQL database with a unique name on the local
server (dropped afterwards). Nothing that already runs on the machine is flushed or dropped.

The same approach as the production-path test's fixtures (tests/conftest.py ``redis_url``,
``pg_database``), as context managers for the benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from dxt_core import procs

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"


class ServiceMissing(RuntimeError):
    """A service the workload needs is not installed or not reachable."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[str, int]]:
    """A redis-server of our own; yields its URL and process id."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise ServiceMissing("redis-server is not installed (apt-get install redis-server)")
    with tempfile.TemporaryDirectory(prefix="dxt-redis-") as workdir:
        log_path = Path(workdir) / "redis.log"
        for _ in range(3):  # the free port may be taken between probing and binding
            port = free_port()
            with log_path.open("w") as log:
                proc = procs.start(
                    [
                        exe,
                        *("--port", str(port), "--bind", "127.0.0.1"),
                        *("--save", "", "--appendonly", "no"),
                        *("--dir", workdir, "--daemonize", "no"),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline and not _redis_ping(port):
                time.sleep(0.1)
            if proc.poll() is None and _redis_ping(port):
                break
            procs.stop(proc, 0)
        else:
            raise ServiceMissing(f"redis-server did not start:\n{log_path.read_text()[-2000:]}")
        try:
            yield f"redis://127.0.0.1:{port}/0", proc.pid
        finally:
            procs.stop(proc)


def psql(sql: str, db: str = "postgres") -> subprocess.CompletedProcess[str]:
    """Run ``sql`` with psql (unaligned, tuples only, tab-separated)."""
    return subprocess.run(
        [
            *("psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", db),
            *("-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-F", "\t", "-c", sql),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
    )


def query(db: str, sql: str) -> list[list[str]]:
    """Rows of ``sql`` in database ``db`` (strings)."""
    out = psql(sql, db)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr.strip()[-500:]}\n{sql}")
    return [line.split("\t") for line in out.stdout.splitlines() if line]


@contextlib.contextmanager
def pg_database(prefix: str = "dxt_bench") -> Iterator[str]:
    """A database of our own (unique name) on the local PostgreSQL, dropped afterwards."""
    if shutil.which("psql") is None:
        raise ServiceMissing("psql is not installed: the production path needs PostgreSQL")
    probe = psql("select 1")
    if probe.returncode != 0:
        raise ServiceMissing(
            f"PostgreSQL is not reachable as {PG_USER}@{PG_HOST}:{PG_PORT}: "
            f"{probe.stderr.strip()[-300:]}"
        )
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    created = psql(f"CREATE DATABASE {name}")
    if created.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE {name} failed: {created.stderr}")
    try:
        yield name
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def sqlalchemy_url(db: str) -> str:
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def celery_result_backend(db: str) -> str:
    return f"db+postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"
