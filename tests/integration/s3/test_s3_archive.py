"""The archive on a real S3 server (moto_server): the CLI, the transaction rules, coverage.

Every check looks at the bucket from outside with a plain boto3 client: what a reader of
the archive would see.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dxt_core import Archive, RetryPolicy
from dxt_core.archive import DayKey
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.coverage import coverage as coverage_rows
from dxt_core.errors import ArchiveError, ArchiveLocked, ContentChanged, SourceShrank
from dxt_core.manifests import DAMAGED_MANIFEST_ADVICE
from dxt_core.scan import scan_states
from tests.conftest import ROOT, SimulatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY = dt.date(2020, 3, 9)
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
FULL = 4 * 4320  # 4 nodes, one sample every 20 s


def objects(client, bucket: str) -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def check_manifests(
    objs: dict[str, bytes], prefix: str, *, uncommitted: list[str] | None = None
) -> int:
    """Every manifest names objects that are there with its sha256 and size; no object
    outside the archive's own names. A day whose manifest is only the "writing" marker (a
    commit interrupted, or under way) may hold data objects under their final keys: those
    the marker's previous manifest does not name with their sha256 are uncommitted bytes a
    dataset reader would see; they fail the check, or are appended to ``uncommitted`` when
    given. Returns the number of archived manifests."""
    archived = 0
    for key, body in objs.items():
        assert key.startswith(prefix + "/"), key
        rel = key[len(prefix) + 1 :]
        if rel.startswith((".dxt/", ".dxt-days-")) or "/.versions/" in rel:
            continue
        name = rel.rsplit("/", 1)[-1]
        assert not name.startswith(".") and not name.endswith(".tmp"), key
        if not name.endswith(".manifest.json"):
            continue
        doc = json.loads(body)
        if doc["status"] == "writing":  # a claimed day: reads missing, or corrupt
            flagged = _uncommitted(objs, key, doc)
            assert uncommitted is not None or not flagged, f"uncommitted objects: {flagged}"
            (uncommitted if uncommitted is not None else []).extend(flagged)
            continue
        if doc["status"] == "empty":
            continue
        archived += 1
        files = doc.get("files") or [doc]
        for f in files:
            data = objs[key.rsplit("/", 1)[0] + "/" + f["file"]]
            assert len(data) == f["bytes"], key
            assert hashlib.sha256(data).hexdigest() == f["sha256"], key
    return archived


def _uncommitted(objs: dict[str, bytes], manifest_key: str, marker: dict) -> list[str]:
    folder, name = manifest_key.rsplit("/", 1)
    day = name.lstrip("_").removesuffix(".manifest.json") + "."
    prev = marker.get("previous") or {}
    named = {}
    if prev.get("status") == "archived":
        named = {f["file"]: f["sha256"] for f in prev.get("files") or [prev]}
    out = []
    for key, body in objs.items():
        d, n = key.rsplit("/", 1)
        if d != folder or not n.startswith(day) or n.endswith((".manifest.json", ".kept.json")):
            continue
        if named.get(n) != hashlib.sha256(body).hexdigest():
            out.append(key)
    return sorted(out)


def dxt(env: dict[str, str], cwd: Path, *args: str, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )


def coverage_json(env, cwd, *args):
    out = dxt(env, cwd, *args, "--json")
    assert out.stdout, out.stderr
    return json.loads(out.stdout)


def extract(sim_url, catalog, root, env, cwd, *extra):
    return dxt(
        env,
        cwd,
        *("extract", "examon", "--url", sim_url, "--jobs-url", sim_url),
        *("--catalog", str(catalog), "--start-day", DAY.isoformat()),
        *("--archive", root, "-q", *extra),
    )


def test_extract_examon_to_s3_then_rerun_byte_identical_and_verify(
    examon_sim, small_catalog, bucket, s3_server, s3_env, tmp_path
):
    root = f"s3://{bucket}/m100"
    out = extract(examon_sim.url, small_catalog, root, s3_env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "s3:").exists()  # the bug of issue 22: a local folder named s3:
    assert f"into {root}" in out.stdout + out.stderr
    c = s3_server.client()
    first = objects(c, bucket)
    assert check_manifests(first, "m100") >= 5
    ambient = first["m100/examon/ipmi_pub/ambient/2020-03-09.csv.gz"]
    assert gzip.decompress(ambient).count(b"\n") == FULL + 1
    assert not [k for k in first if k.startswith("m100/.dxt/locks/")]  # every lock released
    assert not c.list_multipart_uploads(Bucket=bucket).get("Uploads")

    again = extract(examon_sim.url, small_catalog, root, s3_env, tmp_path)
    assert again.returncode == 0, again.stderr
    second = objects(c, bucket)
    data = [k for k in first if not k.endswith(".json") and "/.dxt/" not in k]
    assert data and all(second[k] == first[k] for k in data)

    cov = dxt(
        s3_env,
        tmp_path,
        *("coverage", "examon", "--archive", root, "--catalog", str(small_catalog)),
        *("--start-day", "2020-03-09", "--end-day", "2020-03-10", "--verify", "--json"),
    )
    assert cov.returncode == 3, cov.stderr  # 03-10 was never fetched
    assert cov.stdout, cov.stderr
    counts = json.loads(cov.stdout)["counts"]
    assert counts["corrupt"] == 0 and counts["archived"] >= 5 and counts["missing"] >= 5

    # A data object changed behind the archive's back, same size: only --verify sees it.
    key = "m100/examon/ipmi_pub/ambient/2020-03-09.csv.gz"
    c.put_object(Bucket=bucket, Key=key, Body=bytes(len(ambient)))
    args = ("coverage", "examon", "--archive", root, "--catalog", str(small_catalog))
    args += ("--start-day", "2020-03-09", "--end-day", "2020-03-09")
    plain = coverage_json(s3_env, tmp_path, *args)
    assert plain["counts"]["corrupt"] == 0
    verified = coverage_json(s3_env, tmp_path, *args, "--verify")
    assert verified["counts"]["corrupt"] == 1
    bad = next(r for r in verified["rows"] if r["status"] == "corrupt")
    assert "sha256" in bad["detail"] and f"s3://{bucket}/{key}" in bad["detail"]
    # a missing object is seen from the listing alone
    c.delete_object(Bucket=bucket, Key=key)
    plain = coverage_json(s3_env, tmp_path, *args)
    assert plain["counts"]["corrupt"] == 1


def test_a_missing_bucket_stops_the_run_at_the_first_unit(
    examon_sim, small_catalog, s3_server, s3_env, tmp_path
):
    # Before: one FAILED line per metric-day (811 a day with the shipped catalog), exit 1.
    out = extract(examon_sim.url, small_catalog, "s3://no-such-bucket/m100", s3_env, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    said = out.stdout + out.stderr
    assert "NoSuchBucket" in said and "create the bucket, or fix the archive root" in said
    # now found before any metric-day, when the archive's day zone is read
    assert said.count("FAILED") == 0 and said.count("NoSuchBucket") == 1, said


def test_coverage_reads_one_listing_and_one_index_object_per_unit(
    examon_sim, bucket, s3_server, s3_env, tmp_path, request
):
    archive = Archive(f"s3://{bucket}/a")
    for day in (DAY, DAY + dt.timedelta(days=1)):
        with KairosDBSource(ExamonConnection(url=examon_sim.url)) as src:
            archive_examon_day(src, AMBIENT, day, archive)
    calls: list[str] = []

    def count(model, **kw):
        calls.append(model.name)

    events = archive.store._client.meta.events  # the process's shared client: unregistered below
    events.register("before-call.s3", count)
    request.addfinalizer(lambda: events.unregister("before-call.s3", count))
    rows = coverage_rows(
        archive, "examon", [("ipmi_pub", "ambient")], [DAY + dt.timedelta(days=i) for i in range(3)]
    )
    assert [r.status for r in rows] == ["archived", "archived", "missing"]
    assert sorted(calls) == ["GetObject", "ListObjectsV2"]  # not one request per manifest
    # the coverage view's grid reads the same way
    grid = scan_states(
        archive, "examon", [("ipmi_pub", "ambient")], [DAY + dt.timedelta(days=i) for i in range(3)]
    )
    assert [grid.state(0, d) for d in range(3)] == ["archived", "archived", "missing"]
    # Without the index object every manifest is read; `dxt index rebuild` writes it again.
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key="a/.dxt/index/examon/ipmi_pub/ambient.json")
    calls.clear()
    again = coverage_rows(archive, "examon", [("ipmi_pub", "ambient")], [DAY, DAY])
    assert [r.status for r in again] == ["archived", "archived"]
    assert calls.count("GetObject") == 3  # the missing index object, then two manifests
    out = dxt(s3_env, tmp_path, "index", "rebuild", "--archive", f"s3://{bucket}/a")
    assert out.returncode == 0 and "2 manifests, 0 unreadable" in out.stdout, out.stderr
    calls.clear()
    coverage_rows(archive, "examon", [("ipmi_pub", "ambient")], [DAY])
    assert sorted(calls) == ["GetObject", "ListObjectsV2"]
    # a prefix that holds nothing is an error naming it, not "everything missing"
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\n")
    out = dxt(
        s3_env,
        tmp_path,
        *("coverage", "examon", "--archive", f"s3://{bucket}/typo", "--catalog", str(catalog)),
        *("--start-day", "2020-03-09", "--end-day", "2020-03-09"),
    )
    assert out.returncode != 0 and f"s3://{bucket}/typo holds no examon archive" in out.stderr
    # and an index rebuild of it refuses, as of a directory that is no archive (it said "0
    # manifests", exit 0), writing nothing there
    out = dxt(s3_env, tmp_path, "index", "rebuild", "--archive", f"s3://{bucket}/typo")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"no manifests found under s3://{bucket}/typo/" in out.stderr, out.stderr
    assert "check --archive" in out.stderr and out.stdout == ""
    assert "Contents" not in c.list_objects_v2(Bucket=bucket, Prefix="typo")


def test_the_loser_of_a_race_for_a_released_lock_names_the_winner(bucket, s3_env, monkeypatch):
    """A lock its writer could not delete is left as a "released" record, which the next
    writer takes over. Two writers reading it at once: the one whose takeover lost named the
    host that had released it as the one "archiving" the day, not the writer that holds it."""
    import socket

    from dxt_core.store import parse_root
    from dxt_core.store.client import S3Client
    from dxt_core.store.s3_write import RELEASED, S3DayLock

    key = f"p/.dxt/locks/toy/m/{DAY}.lock"
    released = {RELEASED: "2020-03-10T00:00:00+00:00", "pid": 1, "host": "host-that-released"}
    S3Client(parse_root(f"s3://{bucket}/p")).put(key, json.dumps(released).encode())
    winner = S3DayLock(S3Client(parse_root(f"s3://{bucket}/p")), key, "toy/m 2020-03-09")

    class Racing(S3Client):
        """The loser's client: right after its read of the lock, the winner takes it over.
        (Its refused create reads the object first, to tell a lost answer: the second read
        of the released record is the lock's own.)"""

        raced = False
        reads = 0

        def get(self, k, *args, **kwargs):
            got = super().get(k, *args, **kwargs)
            if got is not None and RELEASED.encode() in got[0]:
                Racing.reads += 1
            if Racing.reads == 2 and not Racing.raced:
                Racing.raced = True
                with monkeypatch.context() as m:
                    m.setattr(socket, "gethostname", lambda: "host-of-the-winner")
                    winner.acquire()
            return got

    loser = S3DayLock(Racing(parse_root(f"s3://{bucket}/p")), key, "toy/m 2020-03-09")
    with pytest.raises(ArchiveLocked) as ei:
        loser.acquire()
    assert Racing.raced and winner.held and not loser.held
    assert "on host host-of-the-winner" in str(ei.value), ei.value
    assert "host-that-released" not in str(ei.value)
    winner.release()


def test_two_writers_on_one_day_only_one_commits(bucket, s3_server, s3_env, monkeypatch):
    root = f"s3://{bucket}/w"
    key = DayKey("toy", ("m",), DAY)

    def write(archive: Archive, body: bytes):
        day = archive.begin(key)
        with day.open("csv.gz") as fh:
            fh.write(body)
        return day, {
            "status": "archived",
            "file": f"{DAY}.csv.gz",
            "rows": 10,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }

    a, b = Archive(root), Archive(root)
    day_a, doc_a = write(a, b"a" * 100)
    day_b, doc_b = write(b, b"b" * 100)  # begin makes no request: both stage the day
    # A's commit takes the lock, reads the day, and stops there (the test hook)
    monkeypatch.setenv("DXT_S3_TEST_STALL_AT", "read")
    failed: list[BaseException] = []

    def commit_a() -> None:
        try:
            day_a.commit(doc_a)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=commit_a)
    thread.start()
    flag = a.root / ".stalled-read"
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert thread.is_alive() and time.monotonic() < deadline, failed
        time.sleep(0.01)
    monkeypatch.delenv("DXT_S3_TEST_STALL_AT")
    with pytest.raises(ArchiveLocked, match="is being archived by pid") as ei:
        day_b.commit(doc_b)
    # a holder on a host that died: the message says until when, and how to clear it
    assert re.search(r"its lease runs until \d{4}-\d\d-\d\dT", str(ei.value)), ei.value
    assert "delete the lock object" in str(ei.value)
    # A's lock taken over (a lease that ran out while A still runs): B commits. A read the
    # day before B committed, so A's commit must not replace what B wrote.
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"w/.dxt/locks/toy/m/{DAY}.lock")
    day_b, doc_b = write(b, b"b" * 100)
    day_b.commit(doc_b)
    flag.unlink()  # A goes on
    thread.join(60)
    assert len(failed) == 1 and isinstance(failed[0], ArchiveLocked), failed
    assert "another writer committed this day since this run read it" in str(failed[0])
    objs = objects(c, bucket)
    assert objs[f"w/toy/m/{DAY}.csv.gz"] == b"b" * 100
    assert check_manifests(objs, "w") == 1
    assert Archive(root).status(key, verify=True) == ("archived", "")


@pytest.fixture(scope="module")
def late_sim(small_catalog):
    """The server after retention: the day's first hour gone."""
    sim = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "4", "--data-start", "2020-03-09"]
    )
    yield sim
    sim.stop()


def test_rerun_after_retention_keeps_the_archive_then_replace_keeps_a_version(
    examon_sim, late_sim, bucket, s3_server, s3_env
):
    archive = Archive(f"s3://{bucket}/r")

    def run(url: str, replace: bool = False):
        with KairosDBSource(
            ExamonConnection(url=url), retry=RetryPolicy(attempts=2, backoff_s=0.01)
        ) as src:
            return archive_examon_day(src, AMBIENT, DAY, Archive(archive.url, replace=replace))

    assert run(examon_sim.url).rows == FULL
    c = s3_server.client()
    before = objects(c, bucket)
    with pytest.raises(SourceShrank, match=r"17,280 -> 16,560"):
        run(late_sim.url)
    after = objects(c, bucket)
    kept = "r/examon/ipmi_pub/ambient/2020-03-09.kept.json"
    assert json.loads(after.pop(kept))["source_rows"] == FULL - 4 * 180
    assert {k: v for k, v in after.items() if "/.dxt/" not in k} == {
        k: v for k, v in before.items() if "/.dxt/" not in k
    }
    rows = coverage_rows(archive, "examon", [("ipmi_pub", "ambient")], [DAY])
    assert rows[0].status == "archived" and rows[0].kept

    report = run(late_sim.url, replace=True)
    assert report.rows == FULL - 4 * 180
    objs = objects(c, bucket)
    old = before["r/examon/ipmi_pub/ambient/2020-03-09.csv.gz"]
    sha = hashlib.sha256(old).hexdigest()
    assert objs[f"r/examon/ipmi_pub/ambient/.versions/2020-03-09.csv.gz.prev-{sha[:8]}"] == old
    assert kept not in objs
    doc = json.loads(objs["r/examon/ipmi_pub/ambient/2020-03-09.manifest.json"])
    assert doc["replaced"][0]["sha256"] == sha and doc["rows"] == FULL - 4 * 180
    assert check_manifests(objs, "r") == 1
    # the day's report (the task's XCom) names what was replaced, as a local archive's does
    assert report.extra["replaced"] == doc["replaced"]


def test_reconcile_after_retention_records_the_kept_day_in_the_bucket(
    examon_sim, late_sim, bucket, s3_server, s3_env
):
    """The daily reconcile (counts only) finds the source holding fewer points than an
    archived day: the ``kept`` record goes to the bucket beside the day's manifest, where
    coverage reads it, the month's check record says "fewer", and nothing else in the bucket
    changes."""
    from dxt_core.backends.examon.archive_day import examon_recount

    archive = Archive(f"s3://{bucket}/k")
    with KairosDBSource(ExamonConnection(url=examon_sim.url)) as src:
        assert archive_examon_day(src, AMBIENT, DAY, archive).rows == FULL
    c = s3_server.client()
    before = objects(c, bucket)
    with KairosDBSource(ExamonConnection(url=late_sim.url)) as src:
        recount = examon_recount(src, [AMBIENT], Archive(archive.url))
        report = recount.run(DAY + dt.timedelta(days=1), 1, refetch=False)
    assert report.counts() == {"fewer": 1}
    after = objects(c, bucket)
    kept = json.loads(after.pop("k/examon/ipmi_pub/ambient/2020-03-09.kept.json"))
    assert kept["source_rows"] == FULL - 4 * 180 and kept["archive_rows"] == FULL
    # the comparison is recorded in the bucket's check record of the month
    checks = json.loads(after.pop("k/.dxt/checks/examon/2020-03.json"))
    day = checks["units"]["ipmi_pub/ambient"]["2020-03-09"]
    assert (day["state"], day["source_count"], day["archive_count"]) == (
        "fewer",
        FULL - 4 * 180,
        FULL,
    )
    assert kept["by"].startswith("reconcile")
    assert after == before
    rows = coverage_rows(Archive(archive.url), "examon", [("ipmi_pub", "ambient")], [DAY])
    assert rows[0].status == "archived" and rows[0].kept
    # nothing of the archive is left in the local staging directory
    assert not list(Path(archive.root).rglob("*.kept.json"))


def test_tag_keys_are_kept_in_the_bucket_for_every_worker(
    small_catalog, bucket, s3_server, s3_env, tmp_path, monkeypatch
):
    """Examon's tag keys over all time are asked once per archive, not once per worker: the
    record lies in the bucket under ``.dxt/`` (a dataset reader lists only the days), and a
    worker with a staging directory of its own asks only its day's window. A simulator of
    its own: the module's answers identical queries from its answer cache, which its
    ``last_tags_query`` does not see."""
    from dxt_core.windows import day_window, zone

    sim = SimulatorProcess(["--catalog", str(small_catalog), "--nodes", "4"])
    try:
        root = f"s3://{bucket}/t"
        with KairosDBSource(ExamonConnection(url=sim.url)) as src:
            first = archive_examon_day(src, AMBIENT, DAY, Archive(root))
        assert sim.stats()["last_tags_query"]["start_absolute"] == 0
        c = s3_server.client()
        cached = json.loads(objects(c, bucket)["t/.dxt/tag-keys/examon/ipmi_pub/ambient.json"])
        assert cached["complete"] and "node" in cached["keys"]
        assert not list(Path(Archive(root).root).rglob("*tag-keys*"))  # nothing kept locally
        monkeypatch.setenv("DXT_S3_STAGING", str(tmp_path / "another-worker"))
        nxt = DAY + dt.timedelta(days=1)
        with KairosDBSource(ExamonConnection(url=sim.url)) as src:
            second = archive_examon_day(src, AMBIENT, nxt, Archive(root))
        stats = sim.stats()
    finally:
        sim.stop()
    assert stats["requests"]["/api/v1/datapoints/query/tags"] == 2 and not stats["cache_hits"]
    assert (
        stats["last_tags_query"]["start_absolute"] == day_window(nxt, zone("Europe/Rome")).start_ms
    )
    objs = objects(c, bucket)
    two = json.loads(objs["t/examon/ipmi_pub/ambient/2020-03-10.manifest.json"])
    assert two["tag_keys"] == {
        "from": "archive cache + this day's query/tags",
        "cache": "ambient.json",
    }
    one = json.loads(objs["t/examon/ipmi_pub/ambient/2020-03-09.manifest.json"])
    assert one["columns"] == two["columns"] and first.rows == second.rows > 0
    assert check_manifests(objs, "t") == 2


def test_an_internal_record_written_by_another_worker_meanwhile_is_merged(
    bucket, s3_server, s3_env
):
    """``update_internal`` writes only over what it read (If-Match / If-None-Match): another
    worker's write between its read and its write makes it read again and merge."""
    archive = Archive(f"s3://{bucket}/i")
    c = s3_server.client()
    key = "i/.dxt/tag-keys/examon/p/m.json"
    seen: list[object] = []

    def add(mine: str, other: str | None):
        def update(raw: bytes | None) -> dict:
            old = json.loads(raw) if raw else {"keys": []}
            seen.append(sorted(old["keys"]))
            if other is not None and len(seen) == 1:  # another worker writes meanwhile
                body = json.dumps({"keys": sorted({*old["keys"], other})}).encode()
                c.put_object(Bucket=bucket, Key=key, Body=body)
            return {"keys": sorted({*old["keys"], mine})}

        return update

    archive.update_internal("tag-keys", ("examon", "p", "m.json"), add("a", "b"))  # new record
    assert json.loads(objects(c, bucket)[key]) == {"keys": ["a", "b"]}
    assert seen == [[], ["b"]]  # read again after the other write
    seen.clear()
    archive.update_internal("tag-keys", ("examon", "p", "m.json"), add("c", "d"))  # existing
    assert json.loads(objects(c, bucket)[key]) == {"keys": ["a", "b", "c", "d"]}
    assert seen == [["a", "b"], ["a", "b", "d"]]
    assert json.loads(archive.read_internal("tag-keys", "examon", "p", "m.json")) == {
        "keys": ["a", "b", "c", "d"]
    }


def test_kill_9_during_an_upload_leaves_no_wrong_object(
    examon_sim, small_catalog, bucket, s3_server, s3_env, tmp_path
):
    root = f"s3://{bucket}/k"
    # 1 KiB parts: a day goes up in ~100 parts, long enough to be caught mid-upload.
    env = {**s3_env, "DXT_S3_PART_SIZE": "1024", "DXT_S3_MULTIPART_THRESHOLD": "1024"}
    c = s3_server.client()
    catalog = tmp_path / "ipmi.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    cmd = [
        *(sys.executable, "-m", "dxt_core.cli", "extract", "examon"),
        *("--url", examon_sim.url, "--catalog", str(catalog)),
        *("--start-day", "2020-03-09", "--end-day", "2020-03-12", "--workers", "1"),
        *("--archive", root, "-q"),
    ]
    interrupted = 0
    for _attempt in range(3):
        proc = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if c.list_multipart_uploads(Bucket=bucket).get("Uploads"):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
        proc.wait(30)
        if c.list_multipart_uploads(Bucket=bucket).get("Uploads"):
            interrupted += 1
        # whatever the moment: no manifest names an object wrongly, no stray final key (a
        # kill between an upload's completion and the manifest leaves uncommitted bytes
        # under a marker: the phase test below makes that moment on purpose)
        check_manifests(objects(c, bucket), "k", uncommitted=[])
    assert interrupted >= 1, "no run was killed while an upload was open"
    done = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, **env}, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert not c.list_multipart_uploads(Bucket=bucket).get("Uploads")  # aborted by the rerun
    objs = objects(c, bucket)
    assert check_manifests(objs, "k") == 8  # 2 metrics x 4 days
    assert not [k for k in objs if k.startswith("k/.dxt/locks/")]
    cov = dxt(
        s3_env,
        tmp_path,
        *("coverage", "examon", "--archive", root, "--catalog", str(catalog)),
        *("--start-day", "2020-03-09", "--end-day", "2020-03-12"),
        "--verify",
    )
    assert cov.returncode == 0, cov.stdout + cov.stderr


def test_the_parquet_archive_reads_straight_from_s3_with_pyarrow(
    examon_sim, small_catalog, bucket, s3_server, s3_env, tmp_path
):
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    out = extract(
        examon_sim.url, small_catalog, f"s3://{bucket}/pq", s3_env, tmp_path, "--format", "parquet"
    )
    assert out.returncode == 0, out.stderr
    s3 = pafs.S3FileSystem(
        endpoint_override=s3_server.url,
        access_key=s3_env["AWS_ACCESS_KEY_ID"],
        secret_key=s3_env["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
    )
    table = ds.dataset(
        f"{bucket}/pq/examon/plugin=ipmi_pub",
        filesystem=s3,
        format="parquet",
        partitioning="hive",
    ).to_table()
    assert table.num_rows == 2 * FULL  # ambient and pcie; the manifests (_*) are skipped
    assert sorted(set(table.column("metric").to_pylist())) == ["ambient", "pcie"]

    # docs/archive.md's reading block, as printed, on this bucket and endpoint
    doc = (ROOT / "docs" / "archive.md").read_text()
    at = doc.index("Reading the Parquet archive straight from S3")
    block = doc[
        doc.index("```python\n", at) + 10 : doc.index("```", doc.index("```python", at) + 9)
    ]
    assert "https://rgw.example.org" in block and "hpc-archive/m100" in block
    block = block.replace("https://rgw.example.org", s3_server.url)
    block = block.replace("hpc-archive/m100", f"{bucket}/pq")
    names: dict = {}
    exec(compile(block, "docs/archive.md", "exec"), names)
    assert names["table"].num_rows == FULL
    assert set(names["table"].column("metric").to_pylist()) == {"ambient"}
    assert len(names["df"]) == FULL and {"timestamp", "value", "node"} <= set(names["df"].columns)
    assert names["counts"].fetchall() == [("ambient", FULL), ("pcie", FULL)]


def _commit_parquet(archive: Archive, key: DayKey, body: bytes, rows: int) -> None:
    """Commit ``key`` as a Parquet day of ``rows`` rows whose bytes are ``body``."""
    day = archive.begin(key)
    with day.open("parquet") as fh:
        fh.write(body)
    day.commit({"status": "archived", "file": f"{key.day}.parquet", "rows": rows,
                "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})  # fmt: skip


def _csv_day(archive: Archive, key: DayKey, rows: int, value: str = "1"):
    body = gzip.compress(
        ("timestamp,value\n" + "".join(f"{i},{value}\n" for i in range(rows))).encode(), mtime=0
    )
    day = archive.begin(key)
    with day.open("csv.gz") as fh:
        fh.write(body)
    doc = {
        "status": "archived",
        "file": f"{key.day}.csv.gz",
        "rows": rows,
        "bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return day, doc, body


def test_same_rows_other_values_are_refused_then_replace_keeps_a_version(bucket, s3_server, s3_env):
    from dxt_core.errors import ContentChanged

    root, key = f"s3://{bucket}/c", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    day, doc, _ = _csv_day(Archive(root), key, 10, value="2")
    with pytest.raises(ContentChanged, match="as many rows as the archive"):
        day.commit(doc)
    c = s3_server.client()
    assert objects(c, bucket)[f"c/toy/m/{DAY}.csv.gz"] == first
    day, doc, second = _csv_day(Archive(root, replace=True), key, 10, value="2")
    day.commit(doc)
    objs = objects(c, bucket)
    sha = hashlib.sha256(first).hexdigest()
    assert objs[f"c/toy/m/{DAY}.csv.gz"] == second
    assert objs[f"c/toy/m/.versions/{DAY}.csv.gz.prev-{sha[:8]}"] == first
    assert json.loads(objs[f"c/toy/m/{DAY}.manifest.json"])["replaced"][0]["sha256"] == sha


def test_a_deleted_manifest_still_protects_the_data_object(bucket, s3_server, s3_env):
    root, key = f"s3://{bucket}/d", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"d/toy/m/{DAY}.manifest.json")
    day, doc, _ = _csv_day(Archive(root), key, 5)
    with pytest.raises(SourceShrank, match=r"10 -> 5"):  # rows counted from the object
        day.commit(doc)
    assert objects(c, bucket)[f"d/toy/m/{DAY}.csv.gz"] == first


def test_a_damaged_object_is_repaired_by_a_rerun_and_its_bytes_kept(bucket, s3_server, s3_env):
    root, key = f"s3://{bucket}/e", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    damaged = first[:20]  # truncated behind the archive's back
    c.put_object(Bucket=bucket, Key=f"e/toy/m/{DAY}.csv.gz", Body=damaged)
    assert Archive(root).status(key)[0] == "corrupt"
    day, doc, again = _csv_day(Archive(root), key, 10)  # the same rows and values
    day.commit(doc)  # no ContentChanged: the archived content was not intact
    objs = objects(c, bucket)
    assert objs[f"e/toy/m/{DAY}.csv.gz"] == first == again
    sha = hashlib.sha256(damaged).hexdigest()
    assert objs[f"e/toy/m/.versions/{DAY}.csv.gz.prev-{sha[:8]}"] == damaged
    assert Archive(root).status(key, verify=True) == ("archived", "")


def test_a_damaged_manifest_is_kept_in_versions_and_the_day_rewritten(bucket, s3_server, s3_env):
    root, key = f"s3://{bucket}/g", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    c.put_object(Bucket=bucket, Key=f"g/toy/m/{DAY}.manifest.json", Body=b"{not json")
    assert Archive(root).status(key)[0] == "corrupt"
    # read, it is an error naming the object and saying what to do, as on a local archive
    with pytest.raises(ArchiveError) as bad:
        Archive(root).read_manifest(key)
    assert str(bad.value).startswith(f"s3://{bucket}/g/toy/m/{DAY}.manifest.json: unreadable")
    assert str(bad.value).endswith(DAMAGED_MANIFEST_ADVICE)
    day, doc, _ = _csv_day(Archive(root), key, 5)
    with pytest.raises(SourceShrank, match=r"10 -> 5"):  # the data object still protects the day
        day.commit(doc)
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    objs = objects(c, bucket)
    assert [v for k, v in objs.items() if "/.versions/" in k and ".manifest.json" in k] == [
        b"{not json"
    ]
    assert objs[f"g/toy/m/{DAY}.csv.gz"] == first
    assert Archive(root).status(key, verify=True) == ("archived", "")


#: A rerun with replace of the day _csv_day wrote with value 1: value 2, 10 rows.
REPLACE_DAY = """
import datetime as dt, gzip, hashlib, sys
from dxt_core import Archive
from dxt_core.archive import DayKey
root, day = sys.argv[1], dt.date.fromisoformat(sys.argv[2])
body = gzip.compress(
    ("timestamp,value\\n" + "".join(f"{i},2\\n" for i in range(10))).encode(), mtime=0
)
w = Archive(root, replace=True).begin(DayKey("toy", ("m",), day))
with w.open("csv.gz") as fh:
    fh.write(body)
w.commit({"status": "archived", "file": f"{day}.csv.gz", "rows": 10, "bytes": len(body),
          "sha256": hashlib.sha256(body).hexdigest()})
"""


@pytest.mark.parametrize("phase", ["claimed", "versions", "uploaded"])
def test_kill_9_mid_commit_is_seen_by_verify_and_a_rerun_completes_the_day(
    phase, bucket, s3_server, s3_env, tmp_path
):
    """A replace killed after its claim, during its .versions/ copy, or after its uploads
    (before the manifest): what the bucket shows, what coverage --verify says, and the rerun
    (a DAG retry, with replace as before) that completes the day."""
    root, key = f"s3://{bucket}/p", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    pid = _replace_killed_at(root, phase, s3_env)

    c = s3_server.client()
    objs = objects(c, bucket)
    data_key, manifest_key = f"p/toy/m/{DAY}.csv.gz", f"p/toy/m/{DAY}.manifest.json"
    version_key = f"p/toy/m/.versions/{DAY}.csv.gz.prev-{doc['sha256'][:8]}"
    marker = json.loads(objs[manifest_key])
    assert marker["status"] == "writing" and marker["previous"]["sha256"] == doc["sha256"]
    assert [(r["file"], r["version"]) for r in marker["replacing"]] == [
        (f"{DAY}.csv.gz", version_key.split("/toy/m/")[1])
    ]
    flagged: list[str] = []
    check_manifests(objs, "p", uncommitted=flagged)
    [[(status, detail, _)]] = Archive(root).unit_states("toy", [("m",)], [DAY], verify=True)
    if phase == "uploaded":  # the new bytes under the final key, no manifest naming them
        assert flagged == [data_key] and objs[data_key] != first
        assert status == "corrupt", detail
        assert f"s3://{bucket}/{data_key} is under its final key but no manifest names it" in (
            detail
        )
    else:  # the old object still there: the day reads missing, and says why
        assert flagged == [] and objs[data_key] == first
        assert status == "missing" and "previous manifest's objects are intact" in detail
    assert f"pid {pid}" in detail and "'writing' marker" in detail
    assert (version_key in objs) == (phase != "claimed")

    day, doc2, second = _csv_day(Archive(root, replace=True), key, 10, value="2")
    day.commit(doc2)  # takes over the dead writer's lock
    objs = objects(c, bucket)
    assert check_manifests(objs, "p") == 1
    assert objs[data_key] == second and objs[version_key] == first
    final = json.loads(objs[manifest_key])
    assert [(r["file"], r["sha256"]) for r in final["replaced"]] == [
        (f"{DAY}.csv.gz", doc["sha256"])
    ]
    assert Archive(root).status(key, verify=True) == ("archived", "")
    assert not [k for k in objs if k.startswith("p/.dxt/locks/")]


def test_after_a_replace_killed_after_its_uploads_the_new_bytes_are_the_archived_day(
    bucket, s3_server, s3_env, tmp_path
):
    """O archived; a replace by X killed after its uploads (O kept in .versions/). As a
    directory archive does, X is then the archived day: a rerun with other values and as
    many rows is refused (it replaced X silently, taking it for a damaged object), and a
    rerun with replace names both copies kept, X's and O's (it named only X's)."""
    root, key = f"s3://{bucket}/k", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    _replace_killed_at(root, "uploaded", s3_env)
    c = s3_server.client()
    data_key = f"k/toy/m/{DAY}.csv.gz"
    killed = c.get_object(Bucket=bucket, Key=data_key)["Body"].read()  # X, value 2
    assert killed != first
    day, other, third = _csv_day(Archive(root), key, 10, value="3")
    with pytest.raises(ContentChanged):
        day.commit(other)
    assert c.get_object(Bucket=bucket, Key=data_key)["Body"].read() == killed
    day, other, third = _csv_day(Archive(root, replace=True), key, 10, value="3")
    day.commit(other)
    objs = objects(c, bucket)
    final = json.loads(objs[f"k/toy/m/{DAY}.manifest.json"])
    x_sha = hashlib.sha256(killed).hexdigest()
    assert [r["sha256"] for r in final["replaced"]] == [x_sha, doc["sha256"]]
    for r in final["replaced"]:  # both copies are there, under the names the manifest gives
        assert hashlib.sha256(objs[f"k/toy/m/{r['version']}"]).hexdigest() == r["sha256"]
    assert objs[data_key] == third and check_manifests(objs, "k") == 1


def _replace_killed_at(root: str, phase: str, s3_env: dict[str, str]) -> int:
    """REPLACE_DAY (10 rows of value 2) killed (SIGKILL) at ``phase`` of its commit; its pid."""
    env = {**os.environ, **s3_env, "DXT_S3_TEST_STALL_AT": phase, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", REPLACE_DAY, root, DAY.isoformat()],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    flag = Archive(root).root / f".stalled-{phase}"
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no stall"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    flag.unlink()
    return proc.pid


def test_a_commit_killed_after_its_copies_but_before_its_upload_replaced_nothing(
    bucket, s3_server, s3_env
):
    """The rerun that took the day over with the archived bytes again claimed in its
    manifest to have replaced the object by its own bytes (replaced_rows, a warning); the
    killed commit had copied the old object into .versions/ and uploaded nothing."""
    root, key = f"s3://{bucket}/v4", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 8)
    day.commit(doc)
    _replace_killed_at(root, "versions", s3_env)
    day, again, body = _csv_day(Archive(root), key, 8)
    assert body == first
    day.commit(again)
    assert day.replaced == []
    c = s3_server.client()
    objs = objects(c, bucket)
    final = json.loads(objs[f"v4/toy/m/{DAY}.manifest.json"])
    assert final["status"] == "archived" and "replaced" not in final, final
    assert objs[f"v4/toy/m/{DAY}.csv.gz"] == first and check_manifests(objs, "v4") == 1


def test_a_rerun_with_fewer_rows_than_a_killed_commit_put_in_place_is_kept(
    bucket, s3_server, s3_env
):
    """8 rows archived; a replace by 10 rows killed after its upload. A rerun that reads the
    8 rows again was refused as 'as many rows, other values' (8 from the older manifest,
    the sha256 of the 10 rows in place); as a directory archive says: the source has fewer
    rows than the archive (10 -> 8), the objects kept."""
    root, key = f"s3://{bucket}/k3", DayKey("toy", ("m",), DAY)
    day, doc, _ = _csv_day(Archive(root), key, 8)
    day.commit(doc)
    _replace_killed_at(root, "uploaded", s3_env)
    c = s3_server.client()
    data_key = f"k3/toy/m/{DAY}.csv.gz"
    killed = c.get_object(Bucket=bucket, Key=data_key)["Body"].read()
    day, again, _ = _csv_day(Archive(root), key, 8)
    with pytest.raises(SourceShrank, match=r"10 -> 8"):
        day.commit(again)
    assert c.get_object(Bucket=bucket, Key=data_key)["Body"].read() == killed


def test_the_coverage_view_lists_units_archived_but_no_longer_configured(
    bucket, s3_server, s3_env, tmp_path, monkeypatch
):
    """The view's rows on S3 come from the bucket's index objects, not from the local
    staging folder (which a fresh API server, or another host, does not have)."""
    from dxt_core.airflow.ui import grid

    root = f"s3://{bucket}/v"
    day, doc, _ = _csv_day(Archive(root), DayKey("examon", ("ipmi_pub", "ambient"), DAY), 10)
    day.commit(doc)
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\npcie,ipmi_pub\n")  # ambient no longer configured
    monkeypatch.setenv("DXT_EXAMON_CATALOG", str(catalog))
    monkeypatch.setenv("DXT_S3_STAGING", str(tmp_path / "elsewhere"))  # a fresh host
    spec = grid.sources()["examon"]
    units = grid.source_units(spec, Archive(root))
    assert units.names == ["ipmi_pub/ambient", "ipmi_pub/pcie"] and not units.warnings
    doc_grid = grid.scan_states(Archive(root), "examon", units.parts, [DAY])
    assert doc_grid.rows == ["A", "M"]
    # index objects lost (deleted by hand): the view says so and names the fix
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key="v/.dxt/index/examon/ipmi_pub/ambient.json")
    units = grid.source_units(spec, Archive(root))
    assert units.names == ["ipmi_pub/pcie"]
    assert units.warnings == [
        f"s3://{bucket}/v holds examon data but no index objects: units no longer "
        f"configured are not shown; run dxt index rebuild --archive s3://{bucket}/v"
    ]
    out = dxt(s3_env, tmp_path, "index", "rebuild", "--archive", root)
    assert out.returncode == 0, out.stderr
    assert grid.source_units(spec, Archive(root)).names == ["ipmi_pub/ambient", "ipmi_pub/pcie"]


def test_begin_makes_no_request_and_the_zone_is_checked_at_commit(bucket, s3_server, s3_env):
    """Nothing is asked of S3 before the commit (boto3's client is made then, after the
    fetch); the zone the days are cut in is checked then, before anything is written."""
    from dxt_core.errors import ConfigError

    root, key = f"s3://{bucket}/z", DayKey("toy", ("m",), DAY)
    archive = Archive(root)
    assert archive.check_day_zone(key, "Europe/Rome")["time_zone"] == "Europe/Rome"
    day, doc, first = _csv_day(archive, key, 10)

    def clients_made() -> bool:
        """boto3's client or the light client's HTTP connection pool exists (either is
        made at its first request; which one asks depends on the environment's credentials
        and on an Airflow connection's client factory)."""
        light = archive.store._light
        return archive.store._made is not None or (light is not None and light._client is not None)

    assert not clients_made()  # no client yet: no request was made
    day.commit(doc)
    assert clients_made()
    c = s3_server.client()
    assert json.loads(objects(c, bucket)["z/.dxt-days-toy.json"])["time_zone"] == "Europe/Rome"
    other = Archive(root)
    other.check_day_zone(key, "UTC")  # checked at the commit
    day, doc, _ = _csv_day(other, key, 12)
    with pytest.raises(ConfigError, match=r"days of this archive are .* in Europe/Rome") as exc:
        day.commit(doc)
    # every day would fail alike: a run stops at the first, a task is not retried (as for
    # a directory archive; it was not said so on S3)
    assert exc.value.run_wide
    assert (other.recorded_day_zone("toy") or ("",))[0] == "Europe/Rome"
    objs = objects(c, bucket)
    assert objs[f"z/toy/m/{DAY}.csv.gz"] == first and check_manifests(objs, "z") == 1
    assert not [k for k in objs if k.startswith("z/.dxt/locks/")]


def test_a_full_staging_disk_names_the_s3_staging_folder(bucket, s3_server, s3_env, monkeypatch):
    """A day of an S3 archive is staged on a local disk first: when that disk is full, the
    error says it is the staging folder and how to move it (DXT_S3_STAGING), not only "the
    disk is full" with a path that looks like the archive's (the write is refused by a faked
    OS call, ENOSPC). Nothing reaches the bucket."""
    import builtins
    import errno

    root, key = f"s3://{bucket}/full", DayKey("toy", ("m",), DAY)
    day = Archive(root).begin(key)
    real = builtins.open

    def full_open(file, mode="r", *a, **k):
        if "w" in mode and str(file).endswith(f"{DAY}.csv.gz"):
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.raises(ArchiveError) as exc:
        with day.open("csv.gz") as fh:
            fh.write(b"x")
    monkeypatch.undo()
    day.abort()
    text = str(exc.value)
    assert "No space left on device; the disk is full" in text
    assert "stages a day before its upload (DXT_S3_STAGING" in text and exc.value.run_wide
    assert not [k for k in objects(s3_server.client(), bucket) if k.startswith("full/")]


def test_a_day_found_without_its_manifest_is_not_unchanged_when_rewritten(
    bucket, s3_server, s3_env
):
    """A commit killed after its upload, before the manifest (here: the manifest deleted),
    then the rerun that reads the same data: it was said "unchanged (archived so already)"
    (the recovered objects' sha256 matched), and an Airflow task then sent no asset event
    for a day never announced. The rerun now archives the day."""
    root, key = f"s3://{bucket}/u", DayKey("toy", ("m",), DAY)
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    s3_server.client().delete_object(Bucket=bucket, Key=f"u/toy/m/{DAY}.manifest.json")
    again, doc2, _ = _csv_day(Archive(root), key, 10)
    again.commit(doc2)
    assert again.previous is not None and again.previous.get("recovered_from")
    assert not again.unchanged
    # and a rerun once the manifest is there again is unchanged, as before
    third, doc3, _ = _csv_day(Archive(root), key, 10)
    third.commit(doc3)
    assert third.unchanged


def test_the_same_parquet_content_in_other_bytes_keeps_the_archived_object(
    bucket, s3_server, s3_env
):
    """Another pyarrow writes the same day in other bytes (each file names its writer): the
    rerun was refused as "other values"; the archived object now stays, the day unchanged.
    Here the other writer is pyarrow with another compression."""
    import io

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    def body(values: list[float], compression: str) -> bytes:
        out = io.BytesIO()
        pq.write_table(pa.table({"value": values}), out, compression=compression)
        return out.getvalue()

    root, key = f"s3://{bucket}/pq-same", DayKey("toy", ("m",), DAY)

    def commit(data: bytes):
        day = Archive(root).begin(key)
        with day.open("parquet") as fh:
            fh.write(data)
        doc = {"status": "archived", "file": f"{DAY}.parquet", "rows": 2, "bytes": len(data),
               "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
        day.commit(doc)
        return day

    first = body([1.0, 2.0], "zstd")
    commit(first)
    again = commit(body([1.0, 2.0], "snappy"))
    assert again.unchanged
    objs = objects(s3_server.client(), bucket)
    assert objs[f"pq-same/toy/m/{DAY}.parquet"] == first
    assert json.loads(objs[f"pq-same/toy/m/{DAY}.manifest.json"])["sha256"] == (
        hashlib.sha256(first).hexdigest()
    )
    assert not [k for k in objs if "/.versions/" in k]
    from dxt_core.errors import ContentChanged

    with pytest.raises(ContentChanged, match="as many rows as the archive"):
        commit(body([1.0, 3.0], "snappy"))


def test_a_day_archived_again_in_another_format_keeps_the_old_object_in_versions(
    bucket, s3_server, s3_env
):
    """The bucket's form of the directory archive's rule (tests/unit/core/test_archive.py):
    the CSV object no manifest names any more is kept in .versions/ and deleted."""
    root, key = f"s3://{bucket}/fmt", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    body = b"PAR1 ten rows"
    _commit_parquet(Archive(root), key, body, 10)
    objs = objects(s3_server.client(), bucket)
    sha = hashlib.sha256(first).hexdigest()
    assert f"fmt/toy/m/{DAY}.csv.gz" not in objs, sorted(objs)
    assert objs[f"fmt/toy/m/.versions/{DAY}.csv.gz.prev-{sha[:8]}"] == first
    assert objs[f"fmt/toy/m/{DAY}.parquet"] == body
    assert json.loads(objs[f"fmt/toy/m/{DAY}.manifest.json"])["replaced"][0]["file"] == (
        f"{DAY}.csv.gz"
    )
    assert check_manifests(objs, "fmt") == 1


def test_an_object_of_the_day_no_manifest_names_is_found_by_verify_and_removed_by_the_refill(
    bucket, s3_server, s3_env
):
    """The bucket's form of tests/unit/core/test_archive.py's rule: ``<day>.parquet`` put
    beside a day whose manifest names ``<day>.csv.gz`` (an older dxt's refetch, or by hand)
    is read by a reader's glob; ``coverage --verify`` says the day corrupt, naming the
    object, and the day's refill keeps it in .versions/ and deletes it."""
    root, key = f"s3://{bucket}/stray", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    c.put_object(Bucket=bucket, Key=f"stray/toy/m/{DAY}.parquet", Body=b"PAR1 stray")
    c.put_object(Bucket=bucket, Key=f"stray/toy/m/{DAY + dt.timedelta(days=1)}.parquet", Body=b"x")
    (plain,) = coverage_rows(Archive(root), "toy", [("m",)], [DAY])
    assert plain.status == "archived"  # without --verify: the listing and the index
    (row,) = coverage_rows(Archive(root), "toy", [("m",)], [DAY], verify=True)
    assert row.status == "corrupt", row
    assert row.detail.startswith(f"s3://{bucket}/stray/toy/m/{DAY}.parquet: data of {DAY}"), row
    assert Archive(root).status(key, verify=True)[0] == "corrupt"
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    objs = objects(c, bucket)
    sha8 = hashlib.sha256(b"PAR1 stray").hexdigest()[:8]
    assert f"stray/toy/m/{DAY}.parquet" not in objs and objs[f"stray/toy/m/{DAY}.csv.gz"] == first
    assert objs[f"stray/toy/m/.versions/{DAY}.parquet.prev-{sha8}"] == b"PAR1 stray"
    assert f"stray/toy/m/{DAY + dt.timedelta(days=1)}.parquet" in objs
    (record,) = json.loads(objs[f"stray/toy/m/{DAY}.manifest.json"])["replaced"]
    assert record["file"] == f"{DAY}.parquet" and record["unnamed"] is True, record
    (row,) = coverage_rows(Archive(root), "toy", [("m",)], [DAY], verify=True)
    assert row.status == "archived", row


def test_an_unchanged_rerun_keeps_the_record_of_what_the_day_replaced(bucket, s3_server, s3_env):
    """The bucket's form of tests/unit/core/test_archive.py's rule: a day replaced, then
    fetched again unchanged, still says what it replaced."""
    root, key = f"s3://{bucket}/keep-rec", DayKey("toy", ("m",), DAY)
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    day, doc, _ = _csv_day(Archive(root, replace=True), key, 10, value="2")
    day.commit(doc)
    first = Archive(root).read_manifest(key)
    assert first is not None and first["replaced"][0]["file"] == f"{DAY}.csv.gz"
    day, doc, _ = _csv_day(Archive(root), key, 10, value="2")
    day.commit(doc)
    assert day.unchanged
    again = Archive(root).read_manifest(key)
    assert again is not None and again["replaced"] == first["replaced"], again
    assert again["replaced_rows"] == first["replaced_rows"]


def test_a_rerun_over_a_deleted_object_says_restored_not_unchanged(bucket, s3_server, s3_env):
    """The same bytes written again over a data object deleted from the bucket: the
    directory archive says "restored", the bucket said "unchanged"."""
    root, key = f"s3://{bucket}/rs", DayKey("toy", ("m",), DAY)
    day, doc, first = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"rs/toy/m/{DAY}.csv.gz")
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    assert day.restored and not day.unchanged
    assert objects(c, bucket)[f"rs/toy/m/{DAY}.csv.gz"] == first
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    assert day.unchanged and not day.restored


def test_the_latest_manifest_of_a_unit_is_read_from_the_bucket(bucket, s3_server, s3_env):
    """What a refill asks of a unit with no manifest in its range (Kwollect's nodes, the
    Examon job table's service) comes from the unit's latest manifest: on S3 there was none."""
    root = f"s3://{bucket}/lm"
    for n, day in enumerate((DAY, DAY + dt.timedelta(days=1)), start=1):
        d, doc, _ = _csv_day(Archive(root), DayKey("toy", ("m",), day), n)
        d.commit({**doc, "nodes": [f"n{n}"]})
    latest = Archive(root).latest_manifest("toy", ("m",))
    assert latest is not None and latest["nodes"] == ["n2"], latest
    assert Archive(root).latest_manifest("toy", ("other",)) is None


def test_a_rerun_skips_complete_days_with_one_listing_and_one_index_read_per_unit(
    bucket, s3_server, s3_env, request
):
    """``dxt extract`` over a range skips the complete days first: per day, a listing of
    the unit's whole prefix and two reads of the manifest (3 x 365 days: 137 s on
    moto_server, measured). Now one listing and one index read per unit, and the same
    days are skipped; a day not over, with holes, or from another selector is not."""
    from dxt_core.runner import Unit, incomplete, is_complete

    root = f"s3://{bucket}/plan"
    days = [DAY + dt.timedelta(days=i) for i in range(6)]
    for i, day in enumerate(days[:5]):
        d, doc, _ = _csv_day(Archive(root), DayKey("toy", ("m",), day), 10)
        extra = [{}, {"selector": "up"}, {"selector": "down"}, {"holes": [{"points": 1}]},
                 {"day_not_over": {"ends": "2020-03-14T00:00:00+00:00"}}][i]  # fmt: skip
        d.commit({**doc, **extra, **({"selector": "up"} if i > 2 else {})})
    archive = Archive(root)
    units = [Unit(DayKey("toy", ("m",), day), lambda: None, expects=(("selector", "up"),))
             for day in days]  # fmt: skip
    calls: list[str] = []

    def count(model, **kw):
        calls.append(model.name)

    events = archive.store._client.meta.events
    events.register("before-call.s3", count)
    request.addfinalizer(lambda: events.unregister("before-call.s3", count))
    todo = incomplete(archive, units)
    # the first day lacks the field (taken as held), the second holds it; the third has
    # another selector, the fourth holes, the fifth was not over, the sixth is missing
    assert [u.key.day for u in todo] == days[2:], todo
    # the listing, the index object, and the one manifest without a selector (the index
    # keeps the others')
    assert sorted(calls) == ["GetObject", "GetObject", "ListObjectsV2"], calls
    # the same answers day by day
    assert [is_complete(archive, u.key, u.expects) for u in units] == [
        True, True, False, False, False, False,
    ]  # fmt: skip


def test_planning_reads_the_manifest_of_an_index_entry_an_older_version_wrote(
    bucket, s3_server, s3_env
):
    """The 2026-12-05/06 ``dxt index rebuild`` wrote ``day_not_over: None`` for a manifest
    older than the mark, though written before its day ended: trusted by the planning, such
    a day was never fetched again. An entry without this version's ``v`` is not trusted."""
    from dxt_core.runner import is_complete

    root, key = f"s3://{bucket}/old", DayKey("toy", ("m",), DAY)
    d, doc, _ = _csv_day(Archive(root), key, 10)
    d.commit({**doc, "query_window": {"end": "2099-01-01T00:00:00+00:00"}})
    assert not is_complete(Archive(root), key)  # not over: inferred from written_at
    c = s3_server.client()
    index_key = "old/.dxt/index/toy/m.json"
    index = json.loads(c.get_object(Bucket=bucket, Key=index_key)["Body"].read())
    entry = index["days"][DAY.isoformat()]
    assert entry["v"] == 2 and entry["day_not_over"] is not None
    entry.pop("v")
    entry["day_not_over"] = None  # as the older rebuild wrote it
    c.put_object(Bucket=bucket, Key=index_key, Body=json.dumps(index).encode())
    assert not is_complete(Archive(root), key)


def test_a_lost_data_object_does_not_block_the_repair(bucket, s3_server, s3_env):
    """The bucket's form of tests/unit/core/test_archive.py's rule: the manifest says 10
    rows, its data object is gone (deleted by hand, a lifecycle rule); a rerun that reads
    fewer rows has nothing left to protect and repairs the day, with no kept record."""
    root, key = f"s3://{bucket}/lost", DayKey("toy", ("m",), DAY)
    day, doc, _ = _csv_day(Archive(root), key, 10)
    day.commit(doc)
    c = s3_server.client()
    c.delete_object(Bucket=bucket, Key=f"lost/toy/m/{DAY}.csv.gz")
    assert Archive(root).status(key)[0] == "corrupt"
    day, doc, body = _csv_day(Archive(root), key, 4)
    day.commit(doc)
    objs = objects(c, bucket)
    assert objs[f"lost/toy/m/{DAY}.csv.gz"] == body
    assert f"lost/toy/m/{DAY}.kept.json" not in objs
    assert Archive(root).status(key, verify=True)[0] == "archived"


def test_a_stray_object_of_the_name_a_commit_writes_is_kept_before_it_is_written_over(
    bucket, s3_server, s3_env
):
    """The bucket's form of tests/unit/core/test_archive.py's rule: a day archived as
    Parquet with a stray ``<day>.csv.gz`` beside it, refetched as CSV, wrote over the stray
    with no copy (a plain bucket keeps no noncurrent version)."""
    root, key = f"s3://{bucket}/over", DayKey("toy", ("m",), DAY)
    _commit_parquet(Archive(root), key, b"PAR1 three rows", 3)
    c = s3_server.client()
    c.put_object(Bucket=bucket, Key=f"over/toy/m/{DAY}.csv.gz", Body=b"junk")
    day, doc, new = _csv_day(Archive(root), key, 3)
    day.commit(doc)
    objs = objects(c, bucket)
    sha8 = hashlib.sha256(b"junk").hexdigest()[:8]
    assert objs[f"over/toy/m/.versions/{DAY}.csv.gz.prev-{sha8}"] == b"junk"
    assert objs[f"over/toy/m/{DAY}.csv.gz"] == new
    records = {
        r["file"]: r for r in json.loads(objs[f"over/toy/m/{DAY}.manifest.json"])["replaced"]
    }
    assert (
        records[f"{DAY}.csv.gz"]["unnamed"] is True and "unnamed" not in records[f"{DAY}.parquet"]
    )
    (row,) = coverage_rows(Archive(root), "toy", [("m",)], [DAY], verify=True)
    assert row.status == "archived", row
