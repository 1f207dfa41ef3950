"""``dxt coverage`` on an archive root that does not exist or holds nothing of the source
(issue 15): an error naming the path (exit 2), not "everything missing" with refill commands."""

from __future__ import annotations

import datetime as dt

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.cli import main

DAY = dt.date(2024, 5, 1)


@pytest.fixture()
def catalog(tmp_path):
    p = tmp_path / "catalog.csv"
    p.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    return p


def coverage(capsys, archive, catalog, *extra):
    rc = main(
        [
            "coverage",
            "--archive",
            str(archive),
            "--catalog",
            str(catalog),
            "--start-day",
            "2024-05-01",
            "--end-day",
            "2024-05-02",
            *extra,
        ]
    )
    out = capsys.readouterr()
    return rc, out.out, out.err


def archive_empty_day(root, parts):
    Archive(root).commit_manifest(DayKey("examon", parts, DAY), {"status": "empty"})


def test_missing_root_is_an_error_naming_it(capsys, catalog, tmp_path):
    missing = tmp_path / "no-such-archive"
    rc, out, err = coverage(capsys, missing, catalog)
    assert rc == 2
    assert f"archive root {missing} does not exist" in err
    assert "backfill" not in out and "missing" not in out
    assert not missing.exists()  # looking does not create it


def test_root_is_a_file(capsys, catalog, tmp_path):
    rc, _, err = coverage(capsys, catalog, catalog)
    assert rc == 2 and f"archive root {catalog} is not a directory" in err


@pytest.mark.parametrize("layout", ["empty-dir", "other-source", "no-manifest"])
def test_root_without_that_source(capsys, catalog, tmp_path, layout):
    root = tmp_path / "archive"
    root.mkdir()
    if layout == "other-source":
        (root / "kwollect").mkdir()
    if layout == "no-manifest":
        (root / "examon" / "ipmi_pub" / "ambient").mkdir(parents=True)
    rc, out, err = coverage(capsys, root, catalog, "--json")
    assert rc == 2
    assert f"archive root {root} holds no examon archive" in err
    assert out == ""


def test_archive_in_another_format(capsys, catalog, tmp_path):
    archive_empty_day(tmp_path / "a", ("ipmi_pub", "ambient"))  # CSV layout
    rc, _, err = coverage(capsys, tmp_path / "a", catalog, "--format", "parquet")
    assert rc == 2
    assert "none of the 2 units asked for has a directory" in err
    assert "plugin=ipmi_pub/metric=ambient" in err and "--format" in err


def test_partial_archive_still_reports_what_is_missing(capsys, catalog, tmp_path):
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"))
    rc, out, _ = coverage(capsys, tmp_path, catalog)
    assert rc == 3
    assert "1 empty, 3 missing" in out
    assert "airflow backfill create --dag-id dxt_examon --from-date 2024-05-01" in out
