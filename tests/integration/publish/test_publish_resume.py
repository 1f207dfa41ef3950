"""``dxt publish`` over an interrupted publication, a damaged one and a changed ``--no-records``,
into a real directory and into a real S3 server (moto_server, a separate process).

An interruption is played in-process: the second data file written (the monthfile writer) or
the second object uploaded (the store client's ``upload_file``) raises KeyboardInterrupt, as
Ctrl-C would there; the directory and the server are real. The archives are small hand-made
Examon archives: archive B holds other values than archive A on the same days (as a day
refetched, or another copy of the archive, would), so a file of B is not the file of A."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dxt_core.backends import get_publisher
from dxt_core.errors import ConfigError
from dxt_core.publish import PublishOptions, PublishReport, publish
from tests.integration.publish.checks import digests
from tests.integration.s3.conftest import (  # noqa: F401
    _as_the_cli_runs,
    bucket,
    s3_env,
    s3_server,
)

pytestmark = [pytest.mark.integration]
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("boto3")

METRICS = ("m1", "m2", "m3")
DAYS = ("2020-03-01", "2020-03-02")


def make_archive(root: Path, offset: float) -> Path:
    """Three metrics of one plugin, two days of two nodes each, values shifted by
    ``offset``: the Parquet archive's layout and manifests."""
    for metric in METRICS:
        d = root / "examon" / "plugin=p" / f"metric={metric}"
        d.mkdir(parents=True, exist_ok=True)
        for day in DAYS:
            t0 = int(dt.datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp() * 1000)
            ts = [t0 + 20_000 * i for i in range(50)] * 2
            table = pa.table(
                {
                    "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                    "value": pa.array([offset + i * 0.5 for i in range(100)]),
                    "name": pa.array([metric] * 100),
                    "node": pa.array(["n1"] * 50 + ["n2"] * 50),
                }
            )
            f = d / f"{day}.parquet"
            pq.write_table(table, f)
            data = f.read_bytes()
            doc = {
                "status": "archived",
                "file": f.name,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "rows": 100,
                "time_zone": "UTC",
            }
            (d / f"_{day}.manifest.json").write_text(json.dumps(doc))
    return root


@pytest.fixture
def archives(tmp_path: Path) -> tuple[Path, Path]:
    return make_archive(tmp_path / "a", 0.0), make_archive(tmp_path / "b", 1000.0)


def run(archive: Path, out: str | Path, **opts: Any) -> PublishReport:
    return publish(
        get_publisher("examon").publish_role(),
        PublishOptions(archive=archive, out=out, from_month="2020-03", to_month="2020-03", **opts),
    )


def interrupt_second_write(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The second data file the publication writes raises KeyboardInterrupt (the first is
    written); returns the files written."""
    from dxt_core.publish import dataset

    real = dataset.write_month
    done: list[str] = []

    def once(spool: Any, buckets: Any, kind: Any, out: Path, *columns: Any) -> Any:
        if done:
            raise KeyboardInterrupt
        res = real(spool, buckets, kind, out, *columns)
        done.append(str(out))
        return res

    monkeypatch.setattr(dataset, "write_month", once)
    return done


def interrupt_second_upload(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The second object uploaded raises KeyboardInterrupt (the first goes up); returns the
    keys uploaded."""
    from dxt_core.store.client import S3Client

    real = S3Client.upload_file
    done: list[str] = []

    def once(self: S3Client, path: Path, key: str, sha256: str | None) -> tuple[int, str]:
        if done:
            raise KeyboardInterrupt
        res = real(self, path, key, sha256)
        done.append(key)
        return res

    monkeypatch.setattr(S3Client, "upload_file", once)
    return done


def sums_hold(root: Path) -> bool:
    """``sha256sum -c SHA256SUMS`` passes (the user's check)."""
    r = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=root, capture_output=True)
    return r.returncode == 0


def objects(s3: Any, bucket_name: str, prefix: str) -> dict[str, bytes]:
    c = s3.client()
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket_name, Prefix=prefix):
        for o in page.get("Contents", []):
            body = c.get_object(Bucket=bucket_name, Key=o["Key"])["Body"].read()
            out[o["Key"][len(prefix) :]] = body
    return out


def wrong_in_sums(objs: dict[str, bytes]) -> list[str]:
    """The objects ``SHA256SUMS`` names that are absent or hold other bytes."""
    if "SHA256SUMS" not in objs:
        return []
    bad = []
    for line in objs["SHA256SUMS"].decode().splitlines():
        sha, rel = line.split("  ", 1)
        if rel not in objs or hashlib.sha256(objs[rel]).hexdigest() != sha:
            bad.append(rel)
    return bad


# -- a directory ------------------------------------------------------------------------------


def test_a_rerun_after_an_interrupted_republication_is_not_unchanged(
    archives, tmp_path, monkeypatch
):
    """Defect 1: B's first file replaced A's, then the run stopped; publishing A again must
    not say "unchanged" over it."""
    a, b = archives
    out = tmp_path / "out"
    run(a, out)
    clean = digests(out)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        written = interrupt_second_write(m)
        run(b, out)
    assert len(written) == 1
    again = run(a, out)
    assert not again.unchanged, again.summary()
    assert again.interrupted and "completed the interrupted publication" in again.summary()
    assert sums_hold(out)
    assert digests(out) == clean  # the clean publication of A, byte for byte


def test_a_truncated_file_is_not_taken_for_unchanged(archives, tmp_path):
    a, _ = archives
    out = tmp_path / "out"
    run(a, out)
    clean = digests(out)
    data = out / "year_month=20-03/plugin=p/metric=m2/a_0.parquet"
    data.write_bytes(data.read_bytes()[:-100])
    again = run(a, out)
    assert not again.unchanged, again.summary()
    assert "published 3 files" in again.summary()
    assert digests(out) == clean
    assert run(a, out).unchanged  # and now it is


def test_an_interrupted_first_publication_is_completed_by_the_rerun(
    archives, tmp_path, monkeypatch
):
    """Defect 2: the rerun publishes into what the interrupted first run left."""
    a, _ = archives
    out = tmp_path / "out"
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt) as stopped:
        interrupt_second_write(m)
        run(a, out)
    # what it says (the command prints it: it said only "interrupted")
    assert (
        f"1 unit of 1 month(s) published before it stopped; {out} is marked in progress: run "
        "the same command again to complete this publication"
    ) in getattr(stopped.value, "__notes__", []), getattr(stopped.value, "__notes__", None)
    # what a killed run (SIGKILL: no clean-up) would leave besides: an atomic write's
    # temporary file and the scratch directory
    (out / ".datapackage.json.k3j2l1.tmp").write_bytes(b"half")
    (out / ".dxt-publish-x1y2z3").mkdir()
    (out / ".dxt-publish-x1y2z3" / "spool").write_bytes(b"half")
    again = run(a, out)  # before the fix: refused, "neither empty nor a dataset"
    assert again.interrupted and "published 3 files" in again.summary()
    assert again.debris == 2 and "2 half-made files or unfinished uploads cleared" in (
        again.summary()
    )
    assert not list(out.rglob(".*.tmp")) and not list(out.glob(".dxt-publish-*"))
    reference = tmp_path / "reference"
    run(a, reference)
    assert digests(out) == digests(reference)


def test_an_interrupted_republication_leaves_no_sha256sums_naming_other_bytes(
    archives, tmp_path, monkeypatch
):
    """Defect 3: while B's files replace A's, no SHA256SUMS says they are A's; a rerun of B
    removes a file only the interrupted run left, and says so."""
    a, b = archives
    out = tmp_path / "out"
    run(a, out)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        interrupt_second_write(m)
        run(b, out)
    assert not (out / "SHA256SUMS").exists() or sums_hold(out)
    state = json.loads((out / ".dxt-publish.json").read_text())
    assert state["in_progress"] is True and "fingerprint" not in state
    stray = out / "year_month=20-02/plugin=p/metric=m1/a_0.parquet"  # as if the run wrote it
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"left behind")
    again = run(b, out)
    assert again.leftovers == ["year_month=20-02/plugin=p/metric=m1/a_0.parquet"]
    assert "1 files it left that this one does not hold removed" in again.summary()
    assert not stray.exists() and not (out / "year_month=20-02").exists() and sums_hold(out)
    assert "interrupted" not in (out / "README.md").read_text()
    reference = tmp_path / "reference"
    run(b, reference)
    assert digests(out) == digests(reference)


def test_no_records_removes_the_previous_records_and_says_so(archives, tmp_path):
    """Defect 4: --no-records after a publication with records: its tar goes, with a
    warning, and everything left is listed in SHA256SUMS."""
    a, _ = archives
    out = tmp_path / "out"
    run(a, out)
    (tar,) = (out / "records").glob("*.tar")
    rep = run(a, out, records=False)
    assert not tar.exists() and not (out / "records").exists()
    assert f"removed records/{tar.name}, published before but not this time" in rep.warnings
    listed = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    there = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert there - listed == {".dxt-publish.json", "SHA256SUMS"}


def test_an_output_that_is_not_ours_is_still_refused(archives, tmp_path):
    a, _ = archives
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="neither empty nor a dataset published by dxt"):
        run(a, out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# -- an S3 prefix (moto_server) ---------------------------------------------------------------


def interrupted_republication(s3: Any, bucket_name: str, archives: tuple[Path, Path], m: Any):
    """A's publication under ``ds/``, then B's, stopped after its first upload; returns A's
    objects and B's key uploaded."""
    a, b = archives
    first = run(a, f"s3://{bucket_name}/ds")
    assert first.upload is not None and first.upload.uploaded == 9
    clean = objects(s3, bucket_name, "ds/")
    with m.context() as mm, pytest.raises(KeyboardInterrupt):
        uploaded = interrupt_second_upload(mm)
        run(b, f"s3://{bucket_name}/ds")
    assert len(uploaded) == 1 and uploaded[0].startswith("ds/year_month=")
    return clean, uploaded[0][len("ds/") :]


def test_s3_a_rerun_after_an_interrupted_republication_is_not_unchanged(
    archives,
    bucket,  # noqa: F811
    s3_server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Defect 1 on S3: B's first object replaced A's, then the upload stopped; publishing A
    again publishes (no "unchanged"); then an object cut short by hand is found by its size
    and uploaded again, alone (with SHA256SUMS and the state record, written again)."""
    monkeypatch.setenv("DXT_PUBLISH_STAGING", str(tmp_path / "staging"))
    a, _ = archives
    url = f"s3://{bucket}/ds"
    clean, rel = interrupted_republication(s3_server, bucket, archives, monkeypatch)
    assert objects(s3_server, bucket, "ds/")[rel] != clean[rel]
    again = run(a, url)
    assert not again.unchanged and again.interrupted, again.summary()
    assert objects(s3_server, bucket, "ds/") == clean
    key = "ds/year_month=20-03/plugin=p/metric=m3/a_0.parquet"
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=clean[key[3:]][:-50])
    cut = run(a, url)
    assert not cut.unchanged and cut.upload is not None, cut.summary()
    assert cut.upload.objects == [key[3:], "SHA256SUMS", ".dxt-publish.json"]
    assert objects(s3_server, bucket, "ds/") == clean
    assert run(a, url).unchanged


def test_s3_an_interrupted_republication_leaves_no_sha256sums_naming_other_bytes(
    archives,
    bucket,  # noqa: F811
    s3_server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Defect 3 on S3: once B's first object is up, no SHA256SUMS says it is A's."""
    monkeypatch.setenv("DXT_PUBLISH_STAGING", str(tmp_path / "staging"))
    _, b = archives
    interrupted_republication(s3_server, bucket, archives, monkeypatch)
    left = objects(s3_server, bucket, "ds/")
    assert wrong_in_sums(left) == []
    state = json.loads(left[".dxt-publish.json"])
    assert state["in_progress"] is True and "fingerprint" not in state
    again = run(b, f"s3://{bucket}/ds")
    assert again.interrupted and again.upload is not None, again.summary()
    assert again.upload.uploaded == 9 and again.upload.deleted == 0
    assert wrong_in_sums(objects(s3_server, bucket, "ds/")) == []


def test_s3_an_interrupted_first_publication_is_completed_by_the_rerun(
    archives,
    bucket,  # noqa: F811
    s3_server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    monkeypatch.setenv("DXT_PUBLISH_STAGING", str(tmp_path / "staging"))
    a, _ = archives
    url = f"s3://{bucket}/ds"
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        interrupt_second_upload(m)
        run(a, url)
    assert "SHA256SUMS" not in objects(s3_server, bucket, "ds/")
    # a killed multipart upload leaves its parts (invisible, but stored and paid for)
    c = s3_server.client()
    up = c.create_multipart_upload(Bucket=bucket, Key="ds/m2/a_0.parquet")
    c.upload_part(
        Bucket=bucket, Key="ds/m2/a_0.parquet", UploadId=up["UploadId"], PartNumber=1, Body=b"x"
    )
    again = run(a, url)  # before the fix: refused, "neither empty nor a dataset"
    assert again.interrupted and again.upload is not None, again.summary()
    assert again.debris == 1
    assert c.list_multipart_uploads(Bucket=bucket, Prefix="ds/").get("Uploads", []) == []
    assert again.upload.uploaded == 9 and again.upload.deleted == 0
    got = objects(s3_server, bucket, "ds/")
    assert wrong_in_sums(got) == [] and len(got) == 9
    reference = tmp_path / "reference"
    run(a, reference)
    assert {k: hashlib.sha256(v).hexdigest() for k, v in got.items()} == digests(reference)
