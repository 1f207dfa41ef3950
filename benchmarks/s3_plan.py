"""Planning a rerun on S3: ``python -m benchmarks.s3_plan [--units 3] [--days 365]``.

``dxt extract`` over a range first leaves out the days the archive holds complete
(:func:`dxt_core.runner.incomplete`). This fills a ``moto_server`` bucket on loopback (and a
local directory) with ``--units`` x ``--days`` small archived days, then times, in the same
run, that planning and the day-by-day way it replaced (``Archive.status`` and then the
manifest, per day: on S3 a listing of the unit's prefix and two reads each), counting the
S3 requests of each. Prints seconds, requests and ms per day.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.s3_archive import _start_moto
from dxt_core import procs
from dxt_core.archive import Archive, DayKey
from dxt_core.manifests import day_complete
from dxt_core.runner import Unit, incomplete

FIRST = dt.date(2024, 1, 1)


def _fill(root: str, units: int, days: int) -> None:
    body = b"x" * 100
    for u in range(units):
        for d in range(days):
            key = DayKey("toy", (f"m{u}",), FIRST + dt.timedelta(days=d))
            day = Archive(root).begin(key)
            with day.open("csv.gz") as fh:
                fh.write(body)
            sha = hashlib.sha256(body).hexdigest()
            day.commit({"status": "archived", "file": f"{key.day}.csv.gz", "rows": 1,
                        "bytes": len(body), "sha256": sha})  # fmt: skip


def _day_by_day(archive: Archive, units: list[Unit]) -> int:
    """The planning before: each day's status, then its manifest."""
    done = 0
    for u in units:
        status, _ = archive.status(u.key)
        doc = archive.read_manifest(u.key) if status in ("archived", "empty") else None
        done += bool(doc) and day_complete(status, doc or {}, u.expects)
    return done


def _timed(archive: Archive, how: Any, units: list[Unit]) -> dict[str, Any]:
    calls: Counter[str] = Counter()
    store = getattr(archive, "store", None)
    events = store._client.meta.events if store is not None else None

    def count(model: Any, **kw: Any) -> None:
        calls[model.name] += 1

    if events is not None:
        events.register("before-call.s3", count)
    try:
        t0 = time.perf_counter()
        done = how(archive, units)
        seconds = time.perf_counter() - t0
    finally:
        if events is not None:
            events.unregister("before-call.s3", count)
    return {"complete": done, "seconds": round(seconds, 3), "requests": dict(calls),
            "ms_per_day": round(1000 * seconds / len(units), 3)}  # fmt: skip


def workload(units: int = 3, days: int = 365) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="dxt-bench-plan-"))
    moto, s3_url = _start_moto()
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_url,
           "DXT_S3_STAGING": str(work / "staging")}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out: dict[str, Any] = {"units": units, "days": days}
    try:
        import boto3

        boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1").create_bucket(
            Bucket="dxt-bench"
        )
        todo = [Unit(DayKey("toy", (f"m{u}",), FIRST + dt.timedelta(days=d)), lambda: None)
                for u in range(units) for d in range(days)]  # fmt: skip
        for name, root in (("local", str(work / "a")), ("s3", "s3://dxt-bench/a")):
            t0 = time.perf_counter()
            _fill(root, units, days)
            out[f"{name}_fill_seconds"] = round(time.perf_counter() - t0, 1)
            archive = Archive(root)
            out[name] = {
                "incomplete": _timed(archive, lambda a, us: len(us) - len(incomplete(a, us)), todo),
                "day_by_day": _timed(archive, _day_by_day, todo),
            }
    finally:
        procs.stop(moto)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--units", type=int, default=3)
    ap.add_argument("--days", type=int, default=365)
    args = ap.parse_args(argv)
    report = workload(args.units, args.days)
    for name in ("local", "s3"):
        for how, r in report[name].items():
            print(
                f"{name:5} {how:10} {r['complete']} complete of {args.units * args.days} in "
                f"{r['seconds']} s ({r['ms_per_day']} ms/day), requests {r['requests']}"
            )
    return report


if __name__ == "__main__":
    main()
