"""A multi-member gzip CSV day (libdeflate writes 4 MiB members) reads the same everywhere:
the gzip program, Python's gzip and csv modules, pandas and DuckDB."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import shutil
import subprocess

import pytest

from dxt_core import Archive
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.writers.compress import MEMBER_BYTES
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.integration

NODES = 24
ROWS = NODES * 86_400 // 20


@pytest.fixture(scope="module")
def day_file(tmp_path_factory):
    sim = SimulatorProcess(["--nodes", str(NODES), "--interval", "20"])
    try:
        out = tmp_path_factory.mktemp("readers")
        with KairosDBSource(ExamonConnection(url=sim.url)) as src:
            rep = archive_examon_day(
                src, CatalogEntry("ambient", "ipmi_pub"), dt.date(2020, 3, 9), Archive(out)
            )
    finally:
        sim.stop()
    assert rep.rows == ROWS and rep.path is not None
    return rep.path


def test_the_file_has_several_gzip_members(day_file):
    raw = gzip.decompress(day_file.read_bytes())
    assert len(raw) > 2 * MEMBER_BYTES  # so the readers below cross member boundaries
    assert day_file.read_bytes().count(b"\x1f\x8b\x08\x00\x00\x00\x00\x00") >= 3


@pytest.mark.skipif(shutil.which("gzip") is None, reason="no gzip program")
def test_gzip_program(day_file):
    assert subprocess.run(["gzip", "-t", str(day_file)]).returncode == 0
    out = subprocess.run(["gzip", "-dc", str(day_file)], capture_output=True, check=True).stdout
    assert out == gzip.decompress(day_file.read_bytes())
    assert out.count(b"\n") == ROWS + 1


def test_python_csv_streaming(day_file):
    with gzip.open(day_file, "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:3] == ["timestamp", "value", "name"] and len(rows) == ROWS + 1
    assert all(len(r) == len(rows[0]) for r in rows)
    assert {dt.datetime.fromisoformat(r[0]).date() for r in rows[1:]} == {dt.date(2020, 3, 9)}


def test_pandas_and_duckdb(day_file):
    pd = pytest.importorskip("pandas")
    duckdb = pytest.importorskip("duckdb")
    df = pd.read_csv(day_file)
    assert len(df) == ROWS and df["node"].nunique() == NODES
    n, total = duckdb.sql(f"SELECT count(*), sum(value) FROM read_csv('{day_file}')").fetchall()[0]
    assert n == ROWS and total == pytest.approx(df["value"].sum())
    text = gzip.decompress(day_file.read_bytes()).decode()
    assert df["value"].sum() == pytest.approx(
        sum(float(r[1]) for r in csv.reader(io.StringIO(text[text.index("\n") + 1 :])))
    )
