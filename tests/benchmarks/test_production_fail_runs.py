"""The production benchmark marks failed the runs the scheduler makes outside the measured
days (``Airflow.fail_runs_outside``). Airflow's answer to that PATCH is faked by a small HTTP
server (the answers a clean-clone CI run met: a 500 "Database error" while the scheduler held
the run); the runs come from a real PostgreSQL table shaped as Airflow's ``dag_run``."""

from __future__ import annotations

import datetime as dt
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import production
from tests.services import psql

DAY = dt.date(2024, 5, 1)
RUN = "scheduled__2026-12-05T00:00:00+00:00"
DB_ERROR = b'{"detail":{"reason":"Database error","statement":"hidden"}}'


class FakeApi:
    """Answers PATCH /api/v2/dags/D/dagRuns/R with the statuses queued in ``answers``
    (then 200), and records the paths asked."""

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.asked: list[str] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                api.asked.append(self.path)
                status = api.answers.pop(0) if api.answers else 200
                body = b'{"state": "failed"}' if status == 200 else DB_ERROR
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture()
def runs_db(pg_database: str) -> str:
    """A dag_run table with one unfinished run outside the measured day and one inside."""
    made = psql(
        "CREATE TABLE dag_run (dag_id text, run_id text, state text, logical_date timestamptz);"
        f"INSERT INTO dag_run VALUES ('d', '{RUN}', 'running', '2026-12-05T00:00:00+00:00'),"
        f"('d', 'backfill__{DAY}', 'running', '{DAY}T00:00:00+00:00');",
        pg_database,
    )
    assert made.returncode == 0, made.stderr
    return pg_database


def _airflow(tmp_path: Path, api: FakeApi) -> production.Airflow:
    return production.Airflow(tmp_path, {"AIRFLOW__API__PORT": str(api.port)}, meter=None)  # type: ignore[arg-type]


def test_a_passing_database_error_is_asked_again_at_the_next_poll(tmp_path, api, runs_db, capsys):
    af = _airflow(tmp_path, api)
    api.answers = [500, 503]
    assert af.fail_runs_outside(runs_db, "d", DAY, DAY) == []
    assert af.fail_runs_outside(runs_db, "d", DAY, DAY) == []
    assert af.fail_runs_outside(runs_db, "d", DAY, DAY) == [RUN]
    # only the run outside the day was asked for, three times
    assert len(api.asked) == 3 and all("scheduled__2026-12-05" in p for p in api.asked)
    err = capsys.readouterr().err
    assert "500" in err and "try 1 of" in err and "try 2 of" in err


def test_a_run_refused_every_time_ends_the_benchmark(tmp_path, api, runs_db):
    af = _airflow(tmp_path, api)
    api.answers = [500] * production.MAX_FAIL_TRIES
    for _ in range(production.MAX_FAIL_TRIES - 1):
        assert af.fail_runs_outside(runs_db, "d", DAY, DAY) == []
    with pytest.raises(RuntimeError, match=rf"500 .*try {production.MAX_FAIL_TRIES}\)"):
        af.fail_runs_outside(runs_db, "d", DAY, DAY)


def test_a_refusal_that_does_not_pass_ends_it_at_once(tmp_path, api, runs_db):
    af = _airflow(tmp_path, api)
    api.answers = [404]
    with pytest.raises(RuntimeError, match=r"failing run scheduled__2026-12-05.*: 404 .*try 1\)"):
        af.fail_runs_outside(runs_db, "d", DAY, DAY)
