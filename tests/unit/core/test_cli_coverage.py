"""``dxt coverage`` on an archive root that does not exist or holds nothing of the source
(issue 15): an error naming the path (exit 2), not "everything missing" with refill commands.
Without a backend named, coverage reports on the one backend the archive holds (issue 18)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.cli import main

DAY = dt.date(2024, 5, 1)


@pytest.fixture()
def catalog(tmp_path):
    p = tmp_path / "catalog.csv"
    p.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    return p


def coverage(capsys, archive, catalog, *extra, backend=None):
    rc = main(
        [
            "coverage",
            *([backend] if backend else []),
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


def archive_empty_day(root, parts, doc=None, source="examon"):
    """An empty day committed through the day's transaction, as every backend commits."""
    with Archive(root).begin(DayKey(source, parts, DAY)) as day:
        day.commit({"status": "empty", **(doc or {})})


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
        archive_empty_day(root, ("site", "metric"), source="kwollect")
    if layout == "no-manifest":
        (root / "examon" / "ipmi_pub" / "ambient").mkdir(parents=True)
    rc, out, err = coverage(capsys, root, catalog, "--json", backend="examon")
    assert rc == 2
    assert f"archive root {root} holds no examon archive" in err
    # no rows, no counts (nothing was checked): the error, for a reader of stdout too
    assert json.loads(out) == {"rows": [], "error": err.strip().removeprefix("dxt: error: ")}


@pytest.mark.parametrize("layout", ["empty-dir", "no-manifest"])
def test_no_backend_named_and_none_archived_names_every_backend(capsys, catalog, tmp_path, layout):
    root = tmp_path / "archive"
    root.mkdir()
    if layout == "no-manifest":
        (root / "examon" / "ipmi_pub" / "ambient").mkdir(parents=True)
    rc, out, err = coverage(capsys, root, catalog)
    assert rc == 2 and out == ""
    assert f"archive root {root} holds no archive of any backend (" in err
    for name in ("examon", "kwollect", "collectd-es", "prometheus"):
        assert name in err


def test_no_backend_named_takes_the_one_the_archive_holds(capsys, tmp_path):
    """The README's ``dxt coverage --archive ./archive --start-day ... --end-day ...`` on a
    Kwollect-only archive reports Kwollect (before, the default was one backend by name)."""
    archive_empty_day(tmp_path, ("lyon", "bmc_node_power_watt"), source="kwollect")
    rc = main(["coverage", "--archive", str(tmp_path), "--metrics", "bmc_node_power_watt",
               "--start-day", "2024-05-01", "--end-day", "2024-05-02"])  # fmt: skip
    out, err = capsys.readouterr()
    assert (rc, err) == (3, "")  # one day of two archived
    assert "1 empty, 1 missing" in out
    assert "--dag-id dxt_kwollect" in out


def test_no_backend_named_and_several_archived_asks_for_one(capsys, catalog, tmp_path):
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"))
    archive_empty_day(tmp_path, ("site", "metric"), source="kwollect")
    rc, out, err = coverage(capsys, tmp_path, catalog)
    assert rc == 2 and out == ""
    assert f"archive root {tmp_path} holds archives of 2 backends (examon, kwollect)" in err
    assert "dxt coverage examon --archive" in err
    rc, out, _ = coverage(capsys, tmp_path, catalog, backend="examon")
    assert rc == 3 and "1 empty, 3 missing" in out


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
    archive_empty_day(a.root, ("ipmi_pub", "ambient"), {"made_by": by_run})
    # a corrupt day: its manifest (written without a transaction) names a file not there
    key = DayKey("examon", ("ipmi_pub", "pcie"), DAY)
    a.write_manifest(
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
        "-e 2024-06-01T00:00:00+00:00   # 2024-05-01 was archived by run "
        "manual__2024-06-01T00:00:00+00:00"
    ) in out
    d = Archive(tmp_path / "cli")
    archive_empty_day(
        d.root,
        ("ipmi_pub", "ambient"),
        {"source_url": "http://examon:8083", "made_by": {"tool": "dxt"}},
    )
    rc, out, _ = coverage(capsys, d.root, catalog)
    assert rc == 3 and "airflow" not in out
    assert (
        f"dxt extract examon --url http://examon:8083 --catalog {catalog} --start-day 2024-05-01 "
        f"--end-day 2024-05-02 --archive {d.root}"
    ) in out


def test_without_catalog_the_shipped_one_is_checked_and_that_is_said(capsys, catalog, tmp_path):
    # Archived with a catalog of one metric, checked without --catalog: the 811 metrics of the
    # shipped catalog are reported, and the refill would fetch them all; now it is said.
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"))
    rc = main(["coverage", "examon", "--archive", str(tmp_path), "--start-day", "2024-05-01",
               "--end-day", "2024-05-01"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 3
    assert "no --catalog: checking the shipped M100 catalog (811 metrics)" in err
    assert "of which the archive holds 1" in err
    rc, _, err = coverage(capsys, tmp_path, catalog, backend="examon")
    assert "no --catalog" not in err


def test_refill_and_refetch_commands_keep_the_zone_the_days_were_cut_in(capsys, catalog, tmp_path):
    """An archive made with --tz UTC: the commands printed to refill it cut the days in UTC
    too (without --tz, Europe/Rome: other days, beside the archived ones)."""
    made = {"source_url": "http://examon:8083", "made_by": {"tool": "dxt"}, "time_zone": "UTC"}
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"), made)
    a = Archive(tmp_path)
    corrupt = {**made, "status": "archived", "file": "2024-05-01.csv.gz", "rows": 1, "bytes": 9}
    a.write_manifest(DayKey("examon", ("ipmi_pub", "pcie"), DAY), corrupt)
    rc, out, _ = coverage(capsys, tmp_path, catalog)
    assert rc == 3
    assert f"dxt extract examon --url http://examon:8083 --tz UTC --catalog {catalog} " in out
    assert (
        f"dxt extract examon --url http://examon:8083 --tz UTC --archive {tmp_path} "
        "--metric pcie --plugin ipmi_pub --format csv --start-day 2024-05-01"
    ) in out
    # the default zone is not repeated
    b = tmp_path / "rome"
    archive_empty_day(b, ("ipmi_pub", "ambient"), {**made, "time_zone": "Europe/Rome"})
    rc, out, _ = coverage(capsys, b, catalog)
    assert rc == 3 and "--tz" not in out and f"--url http://examon:8083 --catalog {catalog}" in out


def test_a_tz_other_than_the_archive_zone_is_refused(capsys, catalog, tmp_path):
    """``dxt coverage examon --tz UTC`` on a Rome archive was accepted and ignored (each day
    is taken in the zone it was archived in)."""
    from dxt_core.archive import DayKey as Key

    a = Archive(tmp_path)
    a.check_day_zone(Key("examon", ("ipmi_pub", "ambient"), DAY), "Europe/Rome")  # recorded
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"), {"time_zone": "Europe/Rome"})
    argv = ["coverage", "examon", "--archive", str(tmp_path), "--catalog", str(catalog),
            "--start-day", "2024-05-01", "--end-day", "2024-05-01"]  # fmt: skip
    assert main([*argv, "--tz", "UTC"]) == 2
    err = capsys.readouterr().err
    assert "--tz UTC: the examon days of" in err and "are cut in Europe/Rome" in err
    assert "drop --tz" in err
    assert main([*argv, "--tz", "Europe/Rome"]) == 3  # the archive's own zone: as without
    assert main(argv) == 3


def test_an_option_of_another_backend_is_refused(capsys, catalog, tmp_path):
    """``dxt coverage examon --sites lyon`` was accepted, and --sites ignored."""
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"))
    rc, _, err = coverage(capsys, tmp_path, catalog, "--sites", "lyon", backend="examon")
    assert rc == 2
    assert "--sites is an option of 'dxt coverage kwollect', not of 'dxt coverage examon'" in err
    rc, _, err = coverage(capsys, tmp_path, catalog, "--families=cpu", backend="examon")
    assert rc == 2 and "--families is an option of 'dxt coverage collectd-es'" in err
    # abbreviated, as argparse takes them
    rc, _, err = coverage(capsys, tmp_path, catalog, "--sit=lyon", backend="examon")
    assert rc == 2 and "--sites is an option of 'dxt coverage kwollect'" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--start-day", "2024-05-02", "--end-day", "2024-05-01"], "before"),
        (["--archive", "/nonexistent/dxt-archive", "--start-day", "2024-05-01"], "does not exist"),
    ],
    ids=["day order", "no archive"],
)
def test_json_failing_before_its_rows_still_gives_a_document(capsys, catalog, tmp_path, argv, said):
    """``--json`` that failed before its first row left stdout empty: a script parsing it
    got nothing to parse."""
    archive_empty_day(tmp_path, ("ipmi_pub", "ambient"))
    base = {"--archive": str(tmp_path), "--start-day": "2024-05-01", "--end-day": "2024-05-01"}
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    words = [w for k, v in {**base, **given}.items() for w in (k, v)]
    rc = main(["coverage", "examon", "--catalog", str(catalog), "--json", *words])
    out, err = capsys.readouterr()
    assert rc == 2, err
    doc = json.loads(out)
    assert doc["rows"] == [] and said in doc["error"] and doc["error"] in err
    assert "counts" not in doc


def test_units_not_found_names_the_options_of_that_backend(capsys, tmp_path):
    """A Kwollect archive of other metrics than those asked: the hint named --catalog,
    --format and --families, which ``dxt coverage kwollect`` refuses."""
    archive_empty_day(tmp_path, ("lyon", "prom_node_load1"), source="kwollect")
    days = ["--start-day", "2024-05-01", "--end-day", "2024-05-01"]
    rc = main(["coverage", "kwollect", "--archive", str(tmp_path), *days,
               "--metrics", "bmc_node_power_watt"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "check the options that choose them (--sites, --metrics)" in err, err
    # without --metrics, the metrics the archive holds: it called the default power metrics
    # (never archived) missing, and its refill command archived them
    rc = main(["coverage", "kwollect", "--archive", str(tmp_path), *days])
    out = capsys.readouterr().out
    assert rc == 0 and "1 units x 1 days: 0 archived, 1 empty, 0 missing" in out, out


def test_the_refill_command_keeps_the_connection_options_given_and_quotes_paths(capsys, tmp_path):
    """The refill command took only the manifests' URL: coverage's --user, --grafana-proxy
    and --no-verify-tls were dropped (the command then failed, 401 or TLS), --url given to
    coverage was ignored, and a catalog path with a space was split into two words."""
    catalog = tmp_path / "my catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    made = {"source_url": "http://examon:8083", "made_by": {"tool": "dxt"}}
    archive_empty_day(tmp_path / "a", ("ipmi_pub", "ambient"), made)
    rc, out, _ = coverage(capsys, tmp_path / "a", catalog)
    assert rc == 3
    assert f"--url http://examon:8083 --catalog '{catalog}' --start-day" in out, out
    given = ["--user", "alice", "--grafana-proxy", "--no-verify-tls"]
    rc, out, _ = coverage(capsys, tmp_path / "a", catalog, *given, "--url", "https://g:3000")
    assert rc == 3
    line = next(x for x in out.splitlines() if x.startswith("  dxt extract examon"))
    assert line.startswith(
        "  dxt extract examon --url https://g:3000 --user alice --grafana-proxy --no-verify-tls"
    ), line


def test_a_reconcile_counted_in_several_ways_says_so(capsys):
    """A job table is counted from its records, the metrics with KairosDB's count
    aggregator (over a day of 23 h on the spring DST day): "counted with:" named the first
    day's way alone."""
    import argparse

    from dxt_core.cli import _print_reconciled
    from dxt_core.reconcile import ReconcileRow

    day, dst = dt.date(2024, 3, 30), dt.date(2024, 3, 31)
    rows = [
        ReconcileRow(("ipmi_pub", "ambient"), day, "equal", 5, 5, "count aggregator, 24 h"),
        ReconcileRow(("ipmi_pub", "ambient"), dst, "equal", 5, 5, "count aggregator, 23 h"),
        ReconcileRow(("jobs", "job_info"), day, "equal", 2, 2, "records of the jobs API"),
    ]
    args = argparse.Namespace(json=False)
    _print_reconciled(args, None, rows, {"equal": 3}, "2 units x 2 days")
    out = capsys.readouterr().out
    assert "counted with: count aggregator, 24 h (and 2 other ways: --json gives each day's)" in out
    _print_reconciled(args, None, rows[:1], {"equal": 1}, "1 units x 1 days")
    assert "counted with: count aggregator, 24 h\n" in capsys.readouterr().out
