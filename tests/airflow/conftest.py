"""Airflow fixtures: a throwaway AIRFLOW_HOME on SQLite, and the airflow CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

__all__ = ["free_port"]  # imported from here by the Airflow tests

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def base_env(home: Path, archive: Path, sim_url: str, catalog: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DXT_"))}
    host, port = sim_url.split("://", 1)[1].rsplit(":", 1)
    env.update(
        {
            # standalone starts its components as 'airflow ...' found on PATH
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            # SQLite: wait for the writer's lock instead of failing after 5 s
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "dxt_core.airflow.sqlite.CONNECT_ARGS",
            "AIRFLOW_CONN_EXAMON_DEFAULT": json.dumps(
                {
                    "conn_type": "http",
                    "host": host,
                    "port": int(port),
                    "extra": {"time_zone": "Europe/Rome", "jobs_url": sim_url},
                }
            ),
            "DXT_ARCHIVE_ROOT": str(archive),
            "DXT_EXAMON_RETRIES": "0",
            "DXT_EXAMON_SETTLE_SECONDS": "0",
        }
    )
    if catalog is not None:
        env["DXT_EXAMON_CATALOG"] = str(catalog)
    return env


def airflow(
    env: dict[str, str], *args: str, check: bool = True, timeout: float = 600, input: str = ""
):
    # SQLite has one writer. The busy timeout (dxt_core.airflow.sqlite) makes a wait of most
    # collisions, but a transaction that read first and then writes while another connection
    # commits fails at once (its snapshot is stale): `backfill create` right after unpausing
    # met that three times in a row under CI, before dxt_core.airflow.sqlite began
    # savepoint-opened transactions with BEGIN IMMEDIATE. Other read-then-write paths may
    # remain, so this is still retried as the demo retries it (dxt_core.demo._airflow).
    for attempt in range(10):
        if attempt:
            time.sleep(3)
        out = subprocess.run(
            [AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=timeout, input=input
        )
        if "database is locked" not in out.stderr or out.returncode == 0:
            break
    if check and out.returncode != 0:
        raise AssertionError(f"airflow {' '.join(args)} -> {out.returncode}\n{out.stderr[-4000:]}")
    return out


@pytest.fixture(scope="session")
def migrated_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite metadata DB, copied by tests that need their own."""
    home = tmp_path_factory.mktemp("airflow-template")
    env = base_env(home, home / "archive", "http://127.0.0.1:1", None)
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "examon", "4", "test pool")
    # No process keeps the template open: checkpoint the WAL into airflow.db for the copies.
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(home / "airflow.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return home


def fresh_home(template: Path, dest: Path) -> Path:
    """A copy of the migrated home whose ``airflow.cfg`` points at the copy's own database.

    Airflow writes absolute paths into the ``airflow.cfg`` it generates
    (``sql_alchemy_conn = sqlite:////<template>/airflow.db``): a plain copy would keep using
    the template's database, so every test would see the runs of the tests before it.
    """
    import shutil

    shutil.copytree(template, dest, ignore=shutil.ignore_patterns("airflow.db-*", "logs"))
    cfg = dest / "airflow.cfg"
    cfg.write_text(cfg.read_text().replace(str(template), str(dest)))
    return dest


def run_dagbag_script(env: dict[str, str], script: str) -> dict:
    """Run ``script`` (a template with ``{path}``, the dags folder) in a fresh Python with
    ``env``; return the JSON object it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", script.format(path=str(ROOT / "dags"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
