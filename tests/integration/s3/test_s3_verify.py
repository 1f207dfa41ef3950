"""``coverage --verify`` on an S3 archive (moto_server): every data object fetched and
hashed, ``--workers`` at once, with the same rows and progress as a directory archive."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading

import pytest

from dxt_core import Archive
from dxt_core.archive import DayKey
from dxt_core.coverage import Verified, VerifyOptions, iter_coverage
from dxt_core.store.client import S3Client

pytestmark = [pytest.mark.integration]

DAYS = [dt.date(2020, 3, 1) + dt.timedelta(days=i) for i in range(4)]
UNITS = [("m",), ("n",), ("o",)]


def _commit(archive: Archive, key: DayKey, body: bytes) -> None:
    day = archive.begin(key)
    with day.open("csv.gz") as fh:
        fh.write(body)
    day.commit(
        {
            "status": "archived",
            "file": f"{key.day}.csv.gz",
            "rows": 1,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
    )


@pytest.fixture
def archive(bucket, s3_server, s3_env) -> Archive:
    """3 units x 4 days, the last day of every unit missing, and ``n``'s second day changed
    behind the archive's back (same size: only a hash sees it)."""
    a = Archive(f"s3://{bucket}/v")
    for parts in UNITS:
        for day in DAYS[:-1]:
            _commit(a, DayKey("toy", parts, day), f"{parts[0]} {day}\n".encode() * 50)
    body = b"n 2020-03-02\n" * 50
    tampered = body[:-2] + b"X\n"
    s3_server.client().put_object(Bucket=bucket, Key="v/toy/n/2020-03-02.csv.gz", Body=tampered)
    return a


def _pass(archive: Archive, workers: int) -> tuple[list[tuple[str, str, str]], list[Verified]]:
    seen: list[Verified] = []
    rows = iter_coverage(archive, "toy", UNITS, DAYS, True, VerifyOptions(workers, seen.append))
    return [(r.parts[0], r.day.isoformat(), r.status) for r in rows], seen


def test_verify_hashes_every_object_with_workers_and_reports_progress(archive, monkeypatch):
    threads: set[str] = set()
    hashed = S3Client.sha256_of
    together: list[threading.Barrier] = []
    started: list[str] = []
    lock = threading.Lock()

    def sha256_of(self: S3Client, key: str) -> str:  # the real read, with its thread noted
        threads.add(threading.current_thread().name)
        if together:
            # the first two hashes must be under way at once, or this times out
            with lock:
                first_two = len(started) < 2
                started.append(key)
            if first_two:
                together[0].wait(timeout=10)
        return hashed(self, key)

    monkeypatch.setattr(S3Client, "sha256_of", sha256_of)
    one, progress_one = _pass(archive, 1)
    assert threads == {"dxt-verify_0"}
    threads.clear()
    together.append(threading.Barrier(2))
    four, progress_four = _pass(archive, 4)
    assert one == four  # the rows and their order do not depend on the workers
    statuses = {(u, d): s for u, d, s in one}
    assert statuses.pop(("n", "2020-03-02")) == "corrupt"
    assert {s for (_, d), s in statuses.items() if d == "2020-03-04"} == {"missing"}
    assert {s for (_, d), s in statuses.items() if d != "2020-03-04"} == {"archived"}
    for seen in (progress_one, progress_four):
        assert [v.done for v in seen] == list(range(1, 13))
        assert seen[-1].total == 12 and seen[-1].corrupt == 1 and not seen[-1].stopped
    # every object was hashed on the pool's threads, never on the consumer's, two at once
    assert len(threads) > 1 and all(name.startswith("dxt-verify") for name in threads), threads


@pytest.mark.slow  # 40 commits
def test_more_workers_than_the_s3_clients_connections_are_capped(
    bucket, s3_server, s3_env, monkeypatch, caplog
):
    a = Archive(f"s3://{bucket}/many")
    days = [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(40)]
    for day in days:
        _commit(a, DayKey("toy", ("m",), day), f"{day}\n".encode() * 20)
    threads: set[str] = set()
    hashed = S3Client.sha256_of

    def sha256_of(self: S3Client, key: str) -> str:  # the real read, with its thread noted
        threads.add(threading.current_thread().name)
        return hashed(self, key)

    monkeypatch.setattr(S3Client, "sha256_of", sha256_of)
    rows = list(iter_coverage(a, "toy", [("m",)], days, True, VerifyOptions(64)))
    assert [r.status for r in rows] == ["archived"] * 40
    # 64 asked for, 16 at most: the client's connections (none opened and dropped)
    assert 1 < len(threads) <= 16 and all(t.startswith("dxt-verify_") for t in threads), threads
    assert "Connection pool is full" not in caplog.text


def test_verify_stopped_early_says_how_far(archive):
    seen: list[Verified] = []
    rows = iter_coverage(archive, "toy", UNITS, DAYS, True, VerifyOptions(2, seen.append))
    taken = [next(rows) for _ in range(5)]
    rows.close()  # type: ignore[attr-defined]  # a consumer that takes no more
    assert len(taken) == 5
    assert seen[-1].stopped and seen[-1].done == 5 and seen[-1].total == 12
