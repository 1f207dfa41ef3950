"""``dxt publish`` with an ``s3://`` archive and an ``s3://`` output, on a real S3 server
(moto_server, a separate process): ``dxt extract examon`` archives simulator days into a
bucket, and the dataset read from it is the one published from a local copy, byte for byte;
the objects uploaded are checked from outside with a plain boto3 client."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import SimulatorProcess
from tests.integration.publish.checks import check_dataset, digests, dxt
from tests.integration.s3.conftest import bucket, s3_env, s3_server  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("boto3")
pq = pytest.importorskip("pyarrow.parquet")

CATALOG = "metric,plugin\nambient,ipmi_pub\nps0_input_power,ipmi_pub\n"


def objects(client, bucket_name: str, prefix: str) -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket_name, Prefix=prefix):
        for o in page.get("Contents", []):
            body = client.get_object(Bucket=bucket_name, Key=o["Key"])["Body"].read()
            out[o["Key"][len(prefix) :]] = body
    return out


def download(client, bucket_name: str, prefix: str, to: Path) -> None:
    for rel, body in objects(client, bucket_name, prefix).items():
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        (to / rel).write_bytes(body)


def _dead_pid() -> int:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def publish(archive: str, out: str, *extra: str, check: bool = True):
    return dxt(
        *("publish", "examon", "--archive", archive, "--out", out),
        *("--from-month", "2020-03", "--to-month", "2020-04", *extra),
        check=check,
        env={**os.environ},
    )


def test_from_an_s3_archive_to_s3_and_to_disk(
    bucket,  # noqa: F811
    s3_env,  # noqa: F811
    s3_server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "3"])
    try:
        for root in (f"s3://{bucket}/archive", str(tmp_path / "local")):
            dxt(
                *("extract", "examon", "--url", sim.url, "--catalog", str(catalog)),
                *("--start-day", "2020-03-31", "--end-day", "2020-04-01"),
                *("--archive", root, "-q"),
                env={**os.environ},
            )
    finally:
        sim.stop()
    c = s3_server.client()
    # the local copy a publication killed before its upload left (up to a whole dataset): it
    # stayed there, and no run said so
    from dxt_core.procs import HOST_TAG

    staging = tmp_path / "staging"
    monkeypatch.setenv("DXT_PUBLISH_STAGING", str(staging))
    killed = staging / f"dxt-publish-out-{HOST_TAG}.{_dead_pid()}.k1ll3d"
    killed.mkdir(parents=True)
    (killed / "half.parquet").write_bytes(b"half")
    res = publish(f"s3://{bucket}/archive", f"s3://{bucket}/ds")
    assert "published 4 files" in res.stdout and "uploaded 10 objects" in res.stdout, res.stdout
    assert "removed 1 half-made copies that killed publications left" in res.stdout
    assert not killed.exists() and not list(staging.glob("dxt-publish-out-*"))
    assert not Path("s3:").exists() and not (tmp_path / "s3:").exists()  # issue 22's bug
    got = objects(c, bucket, "ds/")
    sums = dict(reversed(line.split("  ", 1)) for line in got["SHA256SUMS"].decode().splitlines())
    assert set(sums) | {"SHA256SUMS", ".dxt-publish.json"} == set(got)
    for rel, sha in sums.items():
        assert hashlib.sha256(got[rel]).hexdigest() == sha
    # the same dataset from the S3 archive to a directory, and from the local archive
    publish(f"s3://{bucket}/archive", str(tmp_path / "to-disk"))
    publish(str(tmp_path / "local"), str(tmp_path / "from-disk"))
    download(c, bucket, "ds/", tmp_path / "downloaded")
    assert digests(tmp_path / "downloaded") == digests(tmp_path / "to-disk")
    data = {k: v for k, v in digests(tmp_path / "to-disk").items() if k.endswith(".parquet")}
    assert data == {
        k: v for k, v in digests(tmp_path / "from-disk").items() if k.endswith(".parquet")
    }
    check_dataset(tmp_path / "downloaded")
    # again: nothing to do, and said so; forced: every object already there, none uploaded
    again = publish(f"s3://{bucket}/archive", f"s3://{bucket}/ds")
    assert "unchanged: s3://" in again.stdout and "nothing written" in again.stdout
    forced = publish(f"s3://{bucket}/archive", f"s3://{bucket}/ds", "--force")
    assert "uploaded 0 objects (0 bytes), 10 already there unchanged, 0 deleted" in forced.stdout
    # a reconcile records its comparisons in the bucket, and the next publish reports them
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "3"])
    try:
        rec = dxt(
            *("coverage", "examon", "--reconcile", "--url", sim.url, "--catalog", str(catalog)),
            *("--start-day", "2020-03-31", "--end-day", "2020-04-01"),
            *("--archive", f"s3://{bucket}/archive"),
            env={**os.environ},
        )
    finally:
        sim.stop()
    assert "4 equal" in rec.stdout and "recorded 4 of 4 comparisons" in rec.stdout, rec.stdout
    assert set(objects(c, bucket, "archive/.dxt/checks/")) == {
        "examon/2020-03.json",
        "examon/2020-04.json",
    }
    checked = publish(f"s3://{bucket}/archive", f"s3://{bucket}/ds")
    assert "unchanged: s3://" not in checked.stdout and "uploaded 3 objects" in checked.stdout
    readme = objects(c, bucket, "ds/")["README.md"].decode()
    today = dt.datetime.now(dt.UTC).date()
    assert f"| 1 checked (1 equal; last {today}) |" in readme, readme
    # March alone into the same prefix: April's file is deleted after the new SHA256SUMS
    march = dxt(
        *("publish", "examon", "--archive", f"s3://{bucket}/archive"),
        *("--out", f"s3://{bucket}/ds", "--from-month", "2020-03", "--to-month", "2020-03"),
        env={**os.environ},
    )
    assert "deleted" in march.stdout and "removed year_month=20-04/" in march.stdout
    left = objects(c, bucket, "ds/")
    assert not [k for k in left if k.startswith("year_month=20-04")]
    assert json.loads(left[".dxt-publish.json"])["months"] == ["2020-03"]


def test_an_s3_object_that_does_not_match_its_manifest_is_skipped(
    bucket,  # noqa: F811
    s3_env,  # noqa: F811
    s3_server,  # noqa: F811
    tmp_path,
):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "2"])
    try:
        dxt(
            *("extract", "examon", "--url", sim.url, "--catalog", str(catalog)),
            *("--start-day", "2020-03-30", "--end-day", "2020-03-31"),
            *("--archive", f"s3://{bucket}/a", "-q"),
            env={**os.environ},
        )
    finally:
        sim.stop()
    c = s3_server.client()
    key = "a/examon/ipmi_pub/ambient/2020-03-31.csv.gz"
    body = bytearray(c.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[-12] ^= 0xFF  # same size, other bytes: only the sha256 tells
    c.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    res = dxt(
        *("publish", "examon", "--archive", f"s3://{bucket}/a", "--out", str(tmp_path / "o")),
        *("--from-month", "2020-03", "--to-month", "2020-03"),
        env={**os.environ},
    )
    assert "skipped ipmi_pub/ambient 2020-03-31: s3://" in res.stdout
    assert "sha256 differs from the manifest's" in res.stdout
    t = pq.read_table(tmp_path / "o/year_month=20-03/plugin=ipmi_pub/metric=ambient/a_0.parquet")
    assert t.num_rows == 2 * 4320  # the good day only
    readme = (tmp_path / "o/README.md").read_text()
    assert "| ipmi_pub/ambient | 2020-03 | 1 | 0 | 29 | 1 | 8,640 |" in readme
