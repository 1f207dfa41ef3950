"""``dxt extract prometheus`` and ``dxt coverage prometheus`` as processes, against the real
servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.prometheus.servers import ServerProcess

pytestmark = pytest.mark.integration

DXT = str(Path(sys.executable).parent / "dxt")


def dxt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DXT, *args], capture_output=True, text=True, timeout=300, env=env or dict(os.environ)
    )


def test_extract_lists_the_metrics_and_archives_days(server: ServerProcess, tmp_path: Path) -> None:
    out = dxt(
        "extract", "prometheus", "--url", server.url, "--tz", "Europe/Rome",
        "--start-day", "2024-03-30", "--end-day", "2024-03-31", "--archive", str(tmp_path), "-q",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "archived 6 metric-days (" in out.stdout and "0 failed" in out.stdout
    kind = "VictoriaMetrics" if server.kind == "victoriametrics" else "Prometheus 2.42"
    assert out.stdout.startswith(kind)
    assert f"at {server.url} (answers uncompressed): 3 units" in out.stdout  # loopback: auto
    manifests = sorted(tmp_path.rglob("*.manifest.json"))
    assert [m.parent.name for m in manifests] == [
        *["node_jobs_total"] * 2,
        *["node_temp_celsius"] * 2,
        *["node_temp_max_celsius"] * 2,
    ]
    doc = json.loads(manifests[1].read_text())
    assert doc["rows"] == doc["source_count"]["count"] == 2 * 23 * 240
    # a rerun skips the archived days
    again = dxt(
        "extract", "prometheus", "--url", server.url, "--tz", "Europe/Rome",
        "--start-day", "2024-03-30", "--end-day", "2024-03-31", "--archive", str(tmp_path), "-q",
    )  # fmt: skip
    assert again.returncode == 0 and "6 already archived (skipped" in again.stdout
    cov = dxt(
        "coverage", "prometheus", "--archive", str(tmp_path),
        "--start-day", "2024-03-29", "--end-day", "2024-03-31",
    )  # fmt: skip
    assert cov.returncode == 3, cov.stdout + cov.stderr  # 2024-03-29 was never archived
    assert "3 units x 3 days: 6 archived, 0 empty, 3 missing" in cov.stdout
    # made by dxt: the refill is the dxt command with the manifests' server and zone, and
    # the units by name (the server may no longer list a metric of that day)
    assert (
        f"dxt extract prometheus --url {server.url} --tz Europe/Rome --metrics "
        f"node_jobs_total,node_temp_celsius,node_temp_max_celsius --start-day 2024-03-29 "
        f"--end-day 2024-03-29 --archive {tmp_path}"
    ) in cov.stdout
    assert "airflow" not in cov.stdout


def test_coverage_refills_selector_units_from_their_catalog(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """A NAME = SELECTOR unit is not a metric the server lists: its refill names the
    catalog (the command without it archived nothing of the unit), with the format of the
    archive."""
    catalog = tmp_path / "catalog.txt"
    catalog.write_text('temps = {__name__="node_temp_celsius", node="n1"}\n')
    archive = str(tmp_path / "a")
    out = dxt(
        "extract", "prometheus", "--url", victoriametrics.url, "--tz", "Europe/Rome",
        "--catalog", str(catalog), "--format", "parquet", "--start-day", "2024-03-31",
        "--archive", archive, "-q",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    cov = dxt(
        "coverage", "prometheus", "--archive", archive,
        "--start-day", "2024-03-30", "--end-day", "2024-03-31",
    )  # fmt: skip
    assert cov.returncode == 3, cov.stdout + cov.stderr
    assert (
        f"dxt extract prometheus --url {victoriametrics.url} --tz Europe/Rome --catalog CATALOG "
        f"--format parquet --start-day 2024-03-30 --end-day 2024-03-30 --archive {archive}"
    ) in cov.stdout, cov.stdout
    # the placeholder is said, with the catalog line the manifests record (it was not)
    assert "dxt: CATALOG in the commands below: a catalog file holding the line" in cov.stderr
    assert "'temps = {__name__=" in cov.stderr and 'node="n1"}' in cov.stderr, cov.stderr


def test_coverage_of_a_dag_made_archive_names_the_dag(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    # the day archived in the environment Airflow's task runner gives a task (AIRFLOW_CTX_*,
    # what dxt_core/provenance.py reads): the manifest says the DAG made it
    env = dict(
        os.environ,
        AIRFLOW_CTX_DAG_ID="dxt_prometheus",
        AIRFLOW_CTX_DAG_RUN_ID="scheduled__2024-03-31T00:00:00+00:00",
        AIRFLOW_CTX_LOGICAL_DATE="2024-03-31T00:00:00+00:00",
    )
    out = dxt(
        "extract", "prometheus", "--url", victoriametrics.url, "--tz", "Europe/Rome",
        "--metrics", "node_temp_celsius", "--start-day", "2024-03-31", "--archive",
        str(tmp_path), "-q", env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    cov = dxt(
        "coverage", "prometheus", "--archive", str(tmp_path), "--metrics", "node_temp_celsius",
        "--start-day", "2024-03-30", "--end-day", "2024-03-31",
    )  # fmt: skip
    assert cov.returncode == 3, cov.stdout + cov.stderr
    assert "dxt extract" not in cov.stdout
    assert (
        "airflow backfill create --dag-id dxt_prometheus --from-date 2024-03-30T00:00:00+00:00 "
        "--to-date 2024-03-30T00:00:00+00:00"
    ) in cov.stdout
    assert (
        "airflow tasks clear dxt_prometheus -t archive_metric_day -s 2024-03-30T00:00:00+00:00 "
        "-e 2024-03-30T00:00:00+00:00\n"
    ) in cov.stdout
    # a clear reruns every unit's task of the day: said, against what needs it
    assert "A clear reruns every metric task of each day (1 a day, 1 in all) where 1 need" in (
        cov.stdout
    )


@pytest.mark.slow  # two dxt processes: 5.5 s measured here
def test_reconcile_counts_and_describes_the_day_in_the_archives_zone(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """Reconciled without --tz, a day cut in Australia/Lord_Howe is counted over its own day
    and the count's description gives the time in that zone (it gave Europe/Rome's)."""
    day = ["--start-day", "2024-03-31", "--end-day", "2024-03-31"]
    out = dxt(
        "extract", "prometheus", "--url", victoriametrics.url, "--tz", "Australia/Lord_Howe",
        "--metrics", "node_temp_celsius", "--archive", str(tmp_path), "-q", *day,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rec = dxt(
        "coverage", "prometheus", "--archive", str(tmp_path), "--reconcile", *day,
        "--url", victoriametrics.url,
    )  # fmt: skip
    assert rec.returncode == 0 and "1 equal" in rec.stdout, rec.stdout + rec.stderr
    assert "(2024-03-31T23:59:59.999+11:00), summed over series" in rec.stdout, rec.stdout


def test_extract_a_catalog_as_parquet(server: ServerProcess, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.txt"
    catalog.write_text('# units\nnode_temp_celsius\nnode1 = {instance="n1:9100"}\n')
    out = dxt(
        "extract", "victoriametrics", "--url", server.url, "--tz", "Europe/Rome",
        "--catalog", str(catalog), "--start-day", "2024-10-27", "--archive",
        str(tmp_path / "a"), "--format", "parquet", "-q",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a/prometheus/node1/2024-10-27.parquet").is_file()
    assert (tmp_path / "a/prometheus/node_temp_celsius/2024-10-27.parquet").is_file()


def test_a_typo_fails_the_run_naming_the_closest_names(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = dxt(
        "extract", "prometheus", "--url", server.url, "--metrics", "node_jobs_totl",
        "--start-day", "2024-03-30", "--archive", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 2
    assert "no metric named 'node_jobs_totl' (closest known names: node_jobs_total)" in out.stderr
    assert not list(tmp_path.rglob("*.json"))
    # the name a selector begins with too: it archived "empty" for every day, exit 0
    catalog = tmp_path / "catalog.txt"
    catalog.write_text('jobs = node_jobs_totl{job="slurm"}\n')
    out = dxt(
        "extract", "prometheus", "--url", server.url, "--catalog", str(catalog),
        "--start-day", "2024-03-30", "--archive", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no metric named 'node_jobs_totl' (closest known names: node_jobs_total)" in out.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_password_from_the_environment_is_never_printed(
    prometheus: ServerProcess, tmp_path: Path
) -> None:
    env = dict(os.environ, DXT_PROMETHEUS_PASSWORD="hunter2-secret")
    out = dxt(
        "extract", "prometheus", "--url", prometheus.url + "/nowhere", "--user", "u",
        "--metrics", "up", "--start-day", "2024-03-30", "--archive", str(tmp_path),
        "--retries", "0", env=env,
    )  # fmt: skip
    assert out.returncode == 2 and "HTTP 404" in out.stderr, out.stderr
    assert "hunter2" not in out.stdout + out.stderr
    out = dxt(
        "extract", "prometheus", "--url", prometheus.url, "--auth", "bearer",
        "--metrics", "up", "--start-day", "2024-03-30", "--archive", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 2 and "auth=bearer needs the token" in out.stderr


@pytest.mark.slow  # five dxt processes: 5.9 s measured here
def test_coverage_reconcile_flags_late_samples_and_names_the_refetch(tmp_path: Path) -> None:
    # a VictoriaMetrics of its own: the late samples must not reach the session's server
    from tests.integration.prometheus import servers

    vm = servers.start_victoriametrics(tmp_path / "vm")
    try:
        archive = str(tmp_path / "a")
        day = ["--start-day", "2024-03-31", "--end-day", "2024-03-31"]
        out = dxt(
            "extract", "prometheus", "--url", vm.url, "--tz", "Europe/Rome",
            "--metrics", "node_temp_celsius", "--archive", archive, "-q", *day,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        reconcile = ["coverage", "prometheus", "--archive", archive, "--reconcile", *day]
        same = dxt(*reconcile, "--url", vm.url)
        assert same.returncode == 0, same.stdout + same.stderr
        assert "1 units x 1 days against the source's counts: 1 equal" in same.stdout
        assert "counted with: count_over_time(node_temp_celsius[82800000ms])" in same.stdout
        assert "recorded 1 of 1 comparisons in the archive's check records" in same.stdout
        # two samples arrive late, between the 15 s ones of node n1
        noon = 1711879200000  # 2024-03-31T12:00:00+02:00
        labels = {"__name__": "node_temp_celsius", "instance": "n1:9100", "job": "node"}
        servers.vm_import(
            vm.url, [({**labels, "node": "n1"}, [(noon + 900, 1.5), (noon + 1900, 2.5)])]
        )
        grown = dxt(*reconcile, "--url", vm.url)
        assert grown.returncode == 4, grown.stdout + grown.stderr
        rows = 3 * 23 * 240
        assert (
            f"MORE at the source (late data: refetch): node_temp_celsius 2024-03-31: archive "
            f"{rows:,}, source {rows + 2:,}"
        ) in grown.stdout
        refetch = next(line.strip() for line in grown.stdout.splitlines() if "dxt extract" in line)
        assert refetch == (
            f"dxt extract prometheus --url {vm.url} --tz Europe/Rome --metrics node_temp_celsius "
            f"--archive {archive} --start-day 2024-03-31 --end-day 2024-03-31 --refetch"
        )
        again = dxt(*refetch.split()[1:])
        assert again.returncode == 0, again.stdout + again.stderr
        settled = dxt(*reconcile, "--url", vm.url)
        assert settled.returncode == 0 and "1 equal" in settled.stdout, settled.stdout
        manifest = json.loads(
            (tmp_path / "a/prometheus/node_temp_celsius/2024-03-31.manifest.json").read_text()
        )
        assert manifest["rows"] == manifest["source_count"]["count"] == rows + 2
    finally:
        vm.stop()


def test_listed_names_that_cannot_name_a_folder_are_left_out_and_others_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a catalog every listed name is a unit: a name that is no folder name (``/``,
    ``=``) stopped the whole run before any unit ("would escape the archive directory"), and
    one that is no classic metric name failed every day (``{"name"}`` is Prometheus 3's
    form: VictoriaMetrics 1.79 answers 422; ``{__name__="name"}`` is every server's)."""
    import httpx

    from tests.integration.prometheus import servers

    vm = servers.start_victoriametrics(tmp_path / "vm", load=False)
    try:
        noon = 1711886400000  # 2024-03-31T12:00:00Z
        names = ["with space", "dot.name", "x=y", "a/b", "node_ok"]
        lines = [
            json.dumps(
                {
                    "metric": {"__name__": n, "node": "n1"},
                    "values": [1.5, 2.5],
                    "timestamps": [noon, noon + 15_000],
                }
            )
            for n in names
        ]
        with httpx.Client(base_url=vm.url, timeout=60) as c:
            c.post("/api/v1/import", content="\n".join(lines) + "\n").raise_for_status()
            c.get("/internal/force_flush").raise_for_status()
        archive = tmp_path / "a"
        out = dxt(
            "extract", "prometheus", "--url", vm.url, "--tz", "UTC",
            "--start-day", "2024-03-31", "--archive", str(archive), "-q",
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "2 metric name(s) listed by" in out.stderr, out.stderr
        assert "'a/b' contains '/'" in out.stderr and "'x=y' contains '='" in out.stderr
        assert 'NAME = {__name__="<the name>"}' in out.stderr
        assert ": 3 units" in out.stdout and "archived 3 metric-days (" in out.stdout, out.stdout
        for n in ("with space", "dot.name", "node_ok"):
            doc = json.loads((archive / f"prometheus/{n}/2024-03-31.manifest.json").read_text())
            assert doc["rows"] == doc["source_count"]["count"] == 2, (n, doc)
        assert sorted(p.name for p in (archive / "prometheus").iterdir()) == [
            "dot.name",
            "node_ok",
            "with space",
        ]
        # the DAG's units task, from the same listing: the same units, the same warning
        from dxt_core.backends.prometheus.connection import PrometheusConnection
        from dxt_core.backends.prometheus.tasks import PrometheusTasks

        for var in ("DXT_PROMETHEUS_METRICS", "DXT_PROMETHEUS_CATALOG"):
            monkeypatch.delenv(var, raising=False)
        with caplog.at_level("WARNING"):
            units = PrometheusTasks().units(lambda: PrometheusConnection(url=vm.url), None)
        assert sorted(u["metric"] for u in units) == ["dot.name", "node_ok", "with space"]
        assert {"metric": "with space", "selector": '{__name__="with space"}'} in units
        assert "2 metric name(s) listed by" in caplog.text and "'x=y'" in caplog.text
    finally:
        vm.stop()


def test_a_unit_archived_from_another_selector_is_not_skipped_as_complete(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """node_temp_celsius archived from a catalog line narrowing it to one instance; a run of
    --metrics node_temp_celsius (every series) said "1 already archived (skipped)", and
    coverage and reconcile called the day complete: the other series were never archived."""
    catalog = tmp_path / "catalog.txt"
    catalog.write_text('node_temp_celsius = node_temp_celsius{instance="n1:9100"}\n')
    common = ["--url", victoriametrics.url, "--tz", "Europe/Rome", "--start-day", "2024-03-30",
              "--archive", str(tmp_path / "a"), "-q"]  # fmt: skip
    made = dxt("extract", "prometheus", *common, "--catalog", str(catalog))
    assert made.returncode == 0, made.stdout + made.stderr
    whole = dxt("extract", "prometheus", *common, "--metrics", "node_temp_celsius")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    assert "already archived" not in whole.stdout
    said = whole.stdout + whole.stderr
    assert 'archived from the selector node_temp_celsius{instance="n1:9100"}' in said, said
    assert "--refetch to archive it in the old one's place" in said
    # the same selector again is skipped as before
    again = dxt("extract", "prometheus", *common, "--catalog", str(catalog))
    assert again.returncode == 0 and "1 already archived (skipped" in again.stdout, again.stdout


def test_a_refetch_in_another_format_keeps_the_old_file_in_versions(
    victoriametrics: ServerProcess, tmp_path: Path
) -> None:
    """``--refetch --format parquet`` over CSV days wrote ``<day>.parquet`` and left
    ``<day>.csv.gz`` beside it, outside .versions/ and named by no manifest: a reader of
    the folder got both."""
    common = ["--url", victoriametrics.url, "--tz", "Europe/Rome", "--start-day", "2024-03-30",
              "--archive", str(tmp_path / "a"), "--metrics", "node_temp_celsius"]  # fmt: skip
    made = dxt("extract", "prometheus", *common, "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    unit = tmp_path / "a/prometheus/node_temp_celsius"
    old = (unit / "2024-03-30.csv.gz").read_bytes()
    again = dxt("extract", "prometheus", *common, "--refetch", "--format", "parquet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(p.name for p in unit.iterdir()) == [
        ".versions",
        "2024-03-30.manifest.json",
        "2024-03-30.parquet",
    ]
    (kept,) = (unit / ".versions").glob("2024-03-30.csv.gz.prev-*")
    assert kept.read_bytes() == old
    said = again.stdout + again.stderr
    assert "replaced the archived 2024-03-30.csv.gz" in said, said
    cov = dxt("coverage", "prometheus", "--archive", str(tmp_path / "a"), "--verify",
              "--metrics", "node_temp_celsius", "--start-day", "2024-03-30",
              "--end-day", "2024-03-30")  # fmt: skip
    assert cov.returncode == 0, cov.stdout + cov.stderr
