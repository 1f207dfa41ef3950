"""The coverage view on an S3 archive, in Debian's chromium: an Airflow API server alone (no
scheduler: nothing runs here, the cells' archive states are what is shown) whose
``DXT_ARCHIVE_ROOT`` is an ``s3://`` prefix on moto_server, the bucket filled through the
archive's own S3 transactions. Kept small for CI's time budget: one API server, one page.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib

import pytest

from dxt_core.archive import Archive, DayKey
from tests.airflow.conftest import free_port, fresh_home
from tests.browser.stack import Stack, stack_env
from tests.browser.test_coverage_view import click_cell, coverage_frame, show_range, sign_in
from tests.s3_fixtures import FOREIGN, s3_server  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.airflow, pytest.mark.alone]

D1, D2, D3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)


def _archive_day(archive: Archive, key: DayKey, rows: int) -> None:
    body = gzip.compress(
        ("timestamp,value\n" + "".join(f"{i},1\n" for i in range(rows))).encode(), mtime=0
    )
    day = archive.begin(key)
    with day.open("csv.gz") as fh:
        fh.write(body)
    day.commit(
        {
            "status": "archived",
            "file": f"{key.day}.csv.gz",
            "rows": rows,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
    )


def test_the_coverage_view_reads_an_s3_archive(
    migrated_home,
    browser,
    s3_server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    bucket = s3_server.new_bucket()
    root = f"s3://{bucket}/view"
    env = {**s3_server.env, "DXT_S3_STAGING": str(tmp_path / "staging")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in FOREIGN:
        monkeypatch.delenv(k, raising=False)
    # ambient: D1 archived, D2 archived then its object deleted (corrupt), D3 missing;
    # state (nagios_pub) archived on D1 and no longer in the catalog: still a row
    archive = Archive(root)
    for key, rows in (
        (DayKey("examon", ("ipmi_pub", "ambient"), D1), 12),
        (DayKey("examon", ("ipmi_pub", "ambient"), D2), 12),
        (DayKey("examon", ("nagios_pub", "state"), D1), 5),
    ):
        _archive_day(archive, key, rows)
    s3_server.client().delete_object(Bucket=bucket, Key=f"view/examon/ipmi_pub/ambient/{D2}.csv.gz")
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")

    home = fresh_home(migrated_home, tmp_path / "home")
    env = stack_env(home, tmp_path / "unused", "http://127.0.0.1:1", catalog, free_port())
    # the server's own staging folder (it has none of the writer's files): the view must
    # read the bucket
    env.update({**s3_server.env, "DXT_ARCHIVE_ROOT": root})
    env["DXT_S3_STAGING"] = str(tmp_path / "server-staging")
    stack = Stack(env, tmp_path / "api-server.log", command="api-server")
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    try:
        stack.wait_up()
        sign_in(page, stack)
        page.goto(f"{stack.base}/dxt-archive/coverage?source=examon")
        frame = coverage_frame(page, stack)
        show_range(frame, D1.isoformat(), D3.isoformat())
        states = frame.evaluate(
            "(cells) => cells.map(([u, d]) => window.dxtCoverage.state(u, d).archive)",
            [
                ["ipmi_pub/ambient", D1.isoformat()],
                ["ipmi_pub/ambient", D2.isoformat()],
                ["ipmi_pub/ambient", D3.isoformat()],
                ["ipmi_pub/pcie", D1.isoformat()],
                ["nagios_pub/state", D1.isoformat()],
            ],
        )
        assert states == ["archived", "corrupt", "missing", "missing", "archived"]
        text = click_cell(frame, "ipmi_pub/ambient", D2.isoformat())
        assert f"s3://{bucket}/view/examon/ipmi_pub/ambient/{D2}.csv.gz is missing" in text
        text = click_cell(frame, "nagios_pub/state", D1.isoformat())
        assert "examon/nagios_pub/state/2024-05-01.manifest.json" in text
    finally:
        context.close()
        stack.stop()
        s3_server.drop_bucket(bucket)
