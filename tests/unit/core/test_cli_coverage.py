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


def test_refill_commands_follow_how_the_archive_was_made(capsys, catalog, tmp_path):
    """Each manifest's made_by says who wrote it: an archive of the DAG is refilled with
    Airflow (a day archived by a run of another logical date, its 'day' param, is cleared in
    that run), an archive of dxt extract with dxt extract."""
    by_run = {
        "tool": "airflow",
        "dag_id": "dxt_examon",
        "run_id": "manual__2024-06-01T00:00:00+00:00",
        "logical_date": "2024-06-01T00:00:00+00:00",
    }
    a = Archive(tmp_path / "af")
    a.commit_manifest(
        DayKey("examon", ("ipmi_pub", "ambient"), DAY), {"status": "empty", "made_by": by_run}
    )
    # a corrupt day: its manifest names a file that is not there
    key = DayKey("examon", ("ipmi_pub", "pcie"), DAY)
    a.commit_manifest(
        key,
        {
            "status": "archived",
            "file": "2024-05-01.csv.gz",
            "rows": 1,
            "bytes": 9,
            "made_by": by_run,
        },
    )
    rc, out, _ = coverage(capsys, a.root, catalog)
    assert rc == 3
    assert "dxt extract" not in out
    assert "airflow backfill create --dag-id dxt_examon --from-date 2024-05-01" in out
    assert (
        "airflow tasks clear dxt_examon -t archive_metric_day -s 2024-06-01T00:00:00+00:00 "
        "-e 2024-06-01T00:00:00+00:00 -y   # 2024-05-01 was archived by run "
        "manual__2024-06-01T00:00:00+00:00"
    ) in out
    d = Archive(tmp_path / "cli")
    d.commit_manifest(
        DayKey("examon", ("ipmi_pub", "ambient"), DAY),
        {"status": "empty", "source_url": "http://examon:8083", "made_by": {"tool": "dxt"}},
    )
    rc, out, _ = coverage(capsys, d.root, catalog)
    assert rc == 3 and "airflow" not in out
    assert (
        f"dxt extract examon --url http://examon:8083 --catalog {catalog} --start-day 2024-05-01 "
        f"--end-day 2024-05-02 --archive {d.root}"
    ) in out
