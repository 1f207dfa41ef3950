"""The manifest index after a run whose workers committed days of one unit side by side."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import threading

from dxt_core import scan
from dxt_core.archive import Archive, DayKey
from dxt_core.archive_day import DayReport
from dxt_core.runner import Unit, run_units

DAYS = [dt.date(2020, 3, 9), dt.date(2020, 3, 10)]


def test_days_of_one_unit_committed_side_by_side_leave_the_index_fresh(tmp_path, monkeypatch):
    """Two days of one metric on two workers, the second begun before the first commits (as
    the workers of ``dxt extract`` over a range do): a commit records its directory's state in
    the index only when no other commit changed the directory meanwhile, so the unit was
    left stale and the next coverage said "1 unit of toy changed since the index saw it:
    repairing the index" after every such run."""
    archive = Archive(tmp_path)
    # the first day begins, then the second; the first commits while the second is open,
    # then the second commits (what four workers over a range do, in some order)
    first_begun, second_begun, first_done = (threading.Event() for _ in range(3))

    def unit(day: dt.date, before: threading.Event | None, after: threading.Event,
             then: threading.Event | None, done: threading.Event | None) -> Unit:  # fmt: skip
        key = DayKey("toy", ("m",), day)

        def run() -> DayReport:
            if before is not None:
                assert before.wait(10)
            body = gzip.compress(b"timestamp,value\n1,1\n", mtime=0)
            w = archive.begin(key)
            with w.open("csv.gz") as fh:
                fh.write(body)
            after.set()
            if then is not None:
                assert then.wait(10)
            m = w.commit({"status": "archived", "file": f"{day}.csv.gz", "rows": 1,
                          "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})  # fmt: skip
            if done is not None:
                done.set()
            return DayReport(key, "archived", 1, len(body), None, m, 0.0)

        return Unit(key, run)

    units = [
        unit(DAYS[0], None, first_begun, second_begun, first_done),
        unit(DAYS[1], first_begun, second_begun, first_done, None),
    ]
    status = run_units(units, archive, workers=4, quiet=True,
                       out=io.StringIO(), err=io.StringIO())  # fmt: skip
    assert status == 0
    said: list[str] = []
    monkeypatch.setattr(scan, "repair_notice", said.append)
    grid = scan.scan_states(archive, "toy", [("m",)], DAYS)
    assert grid.rows == ["AA"] and said == [], said
