"""The real Kwollect API function on this machine's PostgreSQL, for the contract tests.

Kwollect's database schema and its API function ``api.get_metrics`` (PL/Python) are defined by
``kwollect/db/kwollect_setup_db.py`` of the ``kwollect`` package on PyPI (1.3.1). Nothing of it
is copied here: the file is read from the installed package or, when it is not installed (its
``psycopg2-binary==2.9.3`` pin does not install beside Airflow's driver), from the package's
wheel, downloaded once by ``pip download --no-deps kwollect==1.3.1`` into a cache directory.

The script is a sequence of SQL batches sent through psycopg2. It is run here with stand-ins
for the modules it imports (psycopg2, jwt, pyonf) that record the batches instead of sending
them; the batches sent to the Kwollect database are then run on a database of our own, with
these changes, each checked to apply exactly once (docs/compatibility.md lists them):

1. ``CREATE EXTENSION ... timescaledb`` and ``timescaledb_toolkit`` are removed (not installed).
2. Before the batches, as superuser: schema ``_timescaledb_internal`` and no-op functions
   ``create_hypertable``, ``set_chunk_time_interval``, ``add_compression_policy``,
   ``add_continuous_aggregate_policy``, and ``time_bucket`` as ``date_bin`` from TimescaleDB's
   default origin (2000-01-03).
3. ``CREATE MATERIALIZED VIEW ... metrics_summary WITH (timescaledb.continuous) AS ... WITH NO
   DATA`` becomes a plain ``CREATE OR REPLACE VIEW``: the same aggregate, computed at query time.
4. PostgreSQL >= 15 no longer lets every role create in schema ``public``: the Kwollect role is
   granted ``CREATE`` there (the script expects the older default).
5. The database, the Kwollect role and its ``_ro`` role get unique names (roles are cluster-wide;
   the script's first connection, which creates ``kwdb`` and alters it by that name, is not run).
6. ``nodetime_by_job`` (empty by default, an OAR view in production) reads a table of test jobs.

PL/Python (``plpython3u``) is needed: Debian's ``postgresql-plpython3-15``. When it is absent the
tests skip naming it, and fail under ``CI=true`` (tests.services.require_service).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import types
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.services import track_database, untrack_database

KWOLLECT_VERSION = "1.3.1"
SETUP_PATH = "kwollect/db/kwollect_setup_db.py"
PG_DSN = os.environ.get("DXT_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres")


class Unavailable(Exception):
    """What the tests need is missing here: ``service`` names it, the message says more."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(f"{service}: {reason}")
        self.service, self.reason = service, reason


def setup_source() -> str:
    """The text of ``kwollect/db/kwollect_setup_db.py`` from the package."""
    spec = importlib.util.find_spec("kwollect")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "db/kwollect_setup_db.py"
        if path.exists():
            return path.read_text()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dxt-archive/wheels"
    wheel = cache / f"kwollect-{KWOLLECT_VERSION}-py3-none-any.whl"
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache),
             f"kwollect=={KWOLLECT_VERSION}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if out.returncode != 0 or not wheel.exists():
            raise Unavailable(
                f"kwollect {KWOLLECT_VERSION}",
                "the package is neither installed nor downloadable "
                f"(pip download --no-deps kwollect=={KWOLLECT_VERSION}): {out.stderr[-300:]}",
            )
    with zipfile.ZipFile(wheel) as z:
        return z.read(SETUP_PATH).decode()


class _Recorder:
    """Stands in for psycopg2: records the SQL of each connection instead of sending it."""

    def __init__(self) -> None:
        self.connections: list[dict[str, Any]] = []

    def module(self) -> types.ModuleType:
        rec = self
        m = types.ModuleType("psycopg2")

        class ProgrammingError(Exception):
            pass

        class Cursor:
            def __init__(self, batches: list[str]) -> None:
                self.batches = batches

            def execute(self, sql: str) -> None:
                self.batches.append(sql)

            def fetchall(self) -> list[Any]:
                return []  # "database kwdb does not exist yet"

        class Connection:
            autocommit = False

            def __init__(self, **kwargs: Any) -> None:
                self.batches: list[str] = []
                rec.connections.append({"kwargs": kwargs, "batches": self.batches})

            def cursor(self) -> Cursor:
                return Cursor(self.batches)

        m.connect = Connection  # type: ignore[attr-defined]
        m.ProgrammingError = ProgrammingError  # type: ignore[attr-defined]
        return m


def render_setup_sql(source: str, user: str) -> list[str]:
    """The SQL batches the script sends to the Kwollect database, for role ``user``."""
    config = {
        "db_host": "/nonexistent",
        "db_port": 5432,
        "db_admin": "postgres",
        "db_admin_password": "unused",
        "kwollect_db_name": "kwdb",
        "kwollect_user": user,
        "kwollect_password": "unused",
        "kwollect_password_ro": "unused",
        "chunk_interval_hour": 6,
        "chunk_compress_hour": 24,
        "request_timeout_min": 5,
        "archive_path": "",
    }
    rec = _Recorder()
    pyonf = types.ModuleType("pyonf")
    pyonf.pyonf = lambda text, mandatory_opts=None: dict(config)  # type: ignore[attr-defined]
    jwt = types.ModuleType("jwt")
    jwt.encode = lambda *a, **k: "unused"  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("psycopg2", "pyonf", "jwt")}
    sys.modules.update({"psycopg2": rec.module(), "pyonf": pyonf, "jwt": jwt})
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, SETUP_PATH, "exec"), {"__name__": "kwollect_setup_db"})
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    kw = [c for c in rec.connections if c["kwargs"].get("dbname") == "kwdb"]
    if len(kw) != 1:
        raise AssertionError(f"the setup script changed: {len(kw)} connections to kwdb")
    return list(kw[0]["batches"])


def _replace_once(text: str, pattern: str, new: str, what: str) -> str:
    found = len(re.findall(pattern, text, flags=re.S))
    if found != 1:
        raise AssertionError(
            f"kwollect {KWOLLECT_VERSION} setup SQL changed: {what} matched {found} times; "
            "review the stand-ins in tests/integration/kwollect/kwollect_pg.py"
        )
    return re.sub(pattern, new, text, flags=re.S)


def plain_postgres(batches: list[str]) -> list[str]:
    """The batches with the TimescaleDB-only statements replaced (changes 1 and 3)."""
    sql = "\n-- next batch --\n".join(batches)
    sql = _replace_once(
        sql, r"CREATE EXTENSION IF NOT EXISTS timescaledb CASCADE;", "-- (timescaledb)", "ext"
    )
    sql = _replace_once(
        sql,
        r"CREATE EXTENSION IF NOT EXISTS timescaledb_toolkit;",
        "-- (timescaledb_toolkit)",
        "toolkit",
    )
    sql = _replace_once(
        sql,
        r"CREATE MATERIALIZED VIEW IF NOT EXISTS metrics_summary\s+WITH \(timescaledb\.continuous\) AS",
        "CREATE OR REPLACE VIEW metrics_summary AS",
        "continuous aggregate",
    )
    sql = _replace_once(sql, r"\s+WITH NO DATA;", ";", "WITH NO DATA")
    return sql.split("\n-- next batch --\n")


STAND_INS = """
CREATE SCHEMA IF NOT EXISTS _timescaledb_internal;
CREATE FUNCTION public.create_hypertable(relation regclass, time_column_name name,
    chunk_time_interval interval DEFAULT NULL, if_not_exists boolean DEFAULT false)
    RETURNS void LANGUAGE sql AS $$ SELECT NULL::void $$;
CREATE FUNCTION public.set_chunk_time_interval(hypertable regclass, chunk_time_interval interval)
    RETURNS void LANGUAGE sql AS $$ SELECT NULL::void $$;
CREATE FUNCTION public.add_compression_policy(hypertable regclass, compress_after interval,
    if_not_exists boolean DEFAULT false) RETURNS integer LANGUAGE sql AS $$ SELECT 0 $$;
CREATE FUNCTION public.add_continuous_aggregate_policy(continuous_aggregate regclass,
    start_offset interval, end_offset interval, schedule_interval interval,
    if_not_exists boolean DEFAULT false) RETURNS integer LANGUAGE sql AS $$ SELECT 0 $$;
CREATE FUNCTION public.time_bucket(bucket_width interval, ts timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT date_bin(bucket_width, ts, TIMESTAMPTZ '2000-01-03 00:00:00+00') $$;
"""


class KwollectDatabase:
    """A database of our own with Kwollect's schema and API, dropped by :meth:`drop`."""

    def __init__(self) -> None:
        try:
            import psycopg2
        except ImportError as exc:  # pragma: no cover - installed with the dev extras
            raise Unavailable("psycopg2", "pip install -e '.[dev]'") from exc
        self.psycopg2 = psycopg2
        try:
            admin = psycopg2.connect(PG_DSN, connect_timeout=5)
        except psycopg2.OperationalError as exc:
            raise Unavailable("PostgreSQL", f"none at {PG_DSN!r} ({str(exc).strip()})") from exc
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u'")
            if not cur.fetchall():
                admin.close()
                raise Unavailable(
                    "PL/Python (plpython3u)",
                    "Kwollect's api.get_metrics is written in it: apt-get install "
                    "postgresql-plpython3-15 (.ci/run does)",
                )
        self.admin = admin
        tag = uuid.uuid4().hex[:10]
        self.name = f"dxt_kwollect_test_{tag}"
        self.user = f"dxt_kwuser_{tag}"
        self.ro = f"{self.user}_ro"
        self._created = False
        # dropped at the end of the run if drop() is never reached (an interrupted run)
        track_database(self.name, roles=(self.ro, self.user))
        self._setup()

    def dsn(self, user: str = "postgres") -> str:
        base = re.sub(r"\bdbname=\S+", "", PG_DSN)
        base = re.sub(r"\buser=\S+", "", base)
        return f"{base} dbname={self.name} user={user}"

    def _setup(self) -> None:
        batches = plain_postgres(render_setup_sql(setup_source(), self.user))
        with self.admin.cursor() as cur:
            cur.execute(f"CREATE ROLE {self.user} LOGIN")
            cur.execute(f"CREATE ROLE {self.ro} LOGIN")
            cur.execute(f"GRANT {self.ro} TO {self.user}")
            cur.execute(f"CREATE DATABASE {self.name}")
            self._created = True
            cur.execute(f"GRANT ALL PRIVILEGES ON DATABASE {self.name} TO {self.user}")
            # Grid'5000's servers answer in Paris time (+01:00/+02:00 in the API's timestamps)
            cur.execute(f"ALTER DATABASE {self.name} SET timezone TO 'Europe/Paris'")
        conn = self.psycopg2.connect(self.dsn())
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(STAND_INS)
                cur.execute(f"GRANT CREATE ON SCHEMA public TO {self.user}")
                for batch in batches:
                    cur.execute(batch)
                cur.execute(
                    f"""
                    SET SESSION AUTHORIZATION {self.user};
                    CREATE TABLE test_jobs (job_id int, start_time timestamptz,
                                            stop_time timestamptz, node text);
                    CREATE OR REPLACE VIEW nodetime_by_job AS
                      SELECT job_id, start_time, stop_time, node FROM test_jobs;
                    RESET SESSION AUTHORIZATION;
                    """
                )
        finally:
            conn.close()

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        conn = self.psycopg2.connect(self.dsn())
        conn.autocommit = True
        try:
            yield conn
        finally:
            conn.close()

    def execute(self, sql: str, params: Any = None) -> list[Any]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def drop(self) -> None:
        with self.admin.cursor() as cur:
            if self._created:
                cur.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (self.name,),
                )
                cur.execute(f"DROP DATABASE IF EXISTS {self.name}")
            cur.execute(f"DROP ROLE IF EXISTS {self.ro}")
            cur.execute(f"DROP ROLE IF EXISTS {self.user}")
        self.admin.close()
        untrack_database(self.name)
