"""Two writers creating the same object at the same moment (moto_server): the zone record
``<prefix>/.dxt-days-<source>.json`` that two threads of one run, or two runs, write with
the same bytes (the same second). The loser's refused create finds what it would have
written: no warning of a lost answer."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading

import pytest

from dxt_core import Archive
from dxt_core.archive import DayKey

pytestmark = [pytest.mark.integration]

KEY = DayKey("toy", ("m",), dt.date(2020, 3, 9))


@pytest.mark.parametrize("runs", [1, 2], ids=["two threads of one run", "two runs"])
def test_a_record_created_by_two_writers_at_once_is_no_lost_answer(
    bucket, s3_server, s3_env, monkeypatch, caplog, runs
):
    root = f"s3://{bucket}/z"
    archives = [Archive(root) for _ in range(runs)]
    writers = [archives[i % runs] for i in range(2)]
    both = threading.Barrier(2, timeout=30)
    # the same second for both (the record holds it): the same bytes
    monkeypatch.setattr("dxt_core.store.s3._now", lambda: "2026-12-07T10:00:00+00:00")
    for archive in archives:
        archive.check_day_zone(KEY, "Europe/Rome")
        put = archive.store._put

        def at_once(*args, _put=put, **kw):
            both.wait()  # both read "no record" before either writes it
            return _put(*args, **kw)

        monkeypatch.setattr(archive.store, "_put", at_once)
    failed: list[BaseException] = []

    def check(archive: Archive) -> None:
        try:
            archive.check_zone_now("toy")
        except BaseException as exc:
            failed.append(exc)

    with caplog.at_level(logging.DEBUG, logger="dxt_core.store"):
        threads = [threading.Thread(target=check, args=(a,)) for a in writers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert failed == []
    warned = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == []
    said = [r.message for r in caplog.records if "created meanwhile" in r.message]
    assert len(said) == 1
    assert ("another thread of this run" in said[0]) == (runs == 1)
    got = s3_server.client().get_object(Bucket=bucket, Key="z/.dxt-days-toy.json")
    assert json.loads(got["Body"].read())["time_zone"] == "Europe/Rome"
