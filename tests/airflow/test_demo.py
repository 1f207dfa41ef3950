"""The README's first command: `dxt demo` end to end (simulator, airflow standalone, backfill)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow.conftest import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.airflow


def test_demo_backfills_and_reports(tmp_path):
    dxt = Path(sys.executable).parent / "dxt"
    out = subprocess.run(
        [
            str(dxt),
            "demo",
            "--exit",
            "--days",
            "2",
            "--dir",
            str(tmp_path / "demo"),
            "--port",
            str(free_port()),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "airflow backfill create --dag-id dxt_examon" in out.stdout
    assert "metric-days: 34 archived" in out.stdout  # 17 metrics x 2 days
    assert out.stdout.count(": success") == 2
    assert "Airflow UI: http://127.0.0.1:" in out.stdout
    files = list((tmp_path / "demo" / "archive" / "examon").rglob("*.csv.gz"))
    assert len(files) == 34
