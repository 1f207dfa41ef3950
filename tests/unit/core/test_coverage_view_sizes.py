"""The coverage view's archive side (dxt_core/airflow/ui), called as functions: no Airflow is
started (its metadata database is not read: the Airflow part of the grid is a row of "no run"
per unit). A data file cut short shows corrupt in the grid, as in ``dxt coverage``, and "Select
all missing and failed" plans its refill."""

from __future__ import annotations

import datetime as dt

import pytest

from dxt_core.airflow.ui import grid, refill
from dxt_core.archive import Archive
from tests.unit.core.test_index import D1, D2, DAYS, commit

AMBIENT, PCIE = ("ipmi_pub", "ambient"), ("ipmi_pub", "pcie")


@pytest.fixture
def archive(tmp_path, monkeypatch) -> Archive:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    monkeypatch.setenv("DXT_EXAMON_CATALOG", str(catalog))
    a = Archive(tmp_path / "archive")
    commit(a, AMBIENT, D1, b"a,b\n1,2\n")
    commit(a, AMBIENT, D2, b"a,b\n3,4\n")
    commit(a, PCIE, D1, None)
    (a.root / f"examon/ipmi_pub/ambient/{D2}.csv.gz").write_bytes(b"a,b\n")  # cut short
    return a


def no_runs(units: grid.Units, days: list[dt.date]) -> grid.AirflowStates:
    return grid.AirflowStates([grid.NO_RUN * len(days) for _ in units.names], {}, {})


def test_the_grid_shows_a_data_file_cut_short_as_corrupt(archive, monkeypatch):
    monkeypatch.setattr(
        grid, "airflow_states", lambda s, spec, units, days, **k: no_runs(units, days)
    )
    doc = grid.build_grid(None, grid.sources()["examon"], DAYS, archive)
    assert doc["units"] == ["ipmi_pub/ambient", "ipmi_pub/pcie"]
    assert doc["archive"] == ["ACM", "EMM"]
    assert doc["counts"] == {"archived": 1, "empty": 1, "missing": 3, "corrupt": 1, "kept": 0}
    assert "has 4 bytes, manifest says 8" in doc["details"]["0:1"]


def test_select_all_missing_and_failed_takes_a_file_cut_short(archive):
    spec = grid.sources()["examon"]
    units = grid.source_units(spec, archive)
    now = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
    wanted = refill.every_bad_cell(archive, spec, units, DAYS, no_runs(units, DAYS), None, now)
    assert sorted(wanted) == [(0, 1), (0, 2), (1, 1), (1, 2)]  # (0, 1): the file cut short
