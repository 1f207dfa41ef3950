"""The fault round of issue 21: random kill -9s and injected faults against the archive's rules.

``python -m benchmarks.fault_round [--kills 50] [--metrics 30 --days 100] [--out FILE]``

Both parts run ``dxt extract examon`` as processes against the Examon simulator (its own
process, ``--nodes 1 --interval 3600``: small data per metric-day, as the soak's) and compare
every archived file with a fault-free run of the same metric-days (``reference``):

1. **kills**: ``--kills`` runs over a few metric-days (CSV and Parquet in turn), each killed
   with SIGKILL after a random delay; after each kill the archive is checked (no file under
   a final name without its manifest's size and sha256, nothing archived lost or changed
   without a ``.versions/`` copy), then one clean run completes the days.
2. **faults**: ``--metrics`` x ``--days`` metric-days through the fault proxy
   (tests/faults/proxy.py; the soak's fault groups: 5xx bursts, resets, trickled answers,
   refused windows), then the same again (a rerun through faults: nothing may change).

Figures, printed as JSON: runs, kills, faults injected, metric-days, rows lost, rows
duplicated, files changed without a ``.versions/`` copy, files differing from the reference.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.production import ROOT, FaultInjector, _catalog
from dxt_core.simulate import spawn_simulator

FIRST = dt.date(2020, 3, 9)


def _extract(
    url: str, catalog: Path, root: Path, days: int, fmt: str, *extra: str, workers: int = 2
) -> list[str]:
    last = FIRST + dt.timedelta(days=days - 1)
    return [
        sys.executable, "-m", "dxt_core.cli", "extract", "examon", "--url", url,
        "--jobs-url", url, "--catalog", str(catalog), "--start-day", FIRST.isoformat(),
        "--end-day", last.isoformat(), "--archive", str(root), "--format", fmt,
        "--workers", str(workers), "--retries", "6", "-q", *extra,
    ]  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _days(root: Path) -> dict[str, dict[str, Any]]:
    """Every committed day under ``root``: manifest path -> {rows, files: {path: sha256}}."""
    out: dict[str, dict[str, Any]] = {}
    for m in root.rglob("*.manifest.json"):
        if ".versions" in m.parts:
            continue
        doc = json.loads(m.read_bytes())
        files = {}
        if doc.get("status") == "archived":
            names = [f["file"] for f in doc.get("files") or []] or [doc["file"]]
            files = {str(m.parent / n): _sha(m.parent / n) for n in names}
        out[str(m.relative_to(root))] = {"rows": doc.get("rows", 0), "files": files}
    return out


def _check(root: Path, before: dict[str, dict[str, Any]], report: dict[str, int]) -> None:
    """Compare the archive with what it held before a run (rules of docs/faults.md)."""
    now = _days(root)
    for name, was in before.items():
        day = now.get(name)
        if day is None:
            # a crash between the data rename and the manifest: the day reads "missing",
            # the parked manifest still protects it; the next run writes it again
            report["days_missing_after_a_kill"] += 1
            continue
        report["rows_lost"] += max(was["rows"] - day["rows"], 0)
        for path, sha in was["files"].items():
            new = day["files"].get(path)
            if new is not None and new != sha:
                version = Path(path).parent / ".versions" / f"{Path(path).name}.prev-{sha[:8]}"
                if not (version.exists() and _sha(version) == sha):
                    report["changed_without_a_version"] += 1
    for m in root.rglob("*.manifest.json"):
        if ".versions" in m.parts:
            continue
        doc = json.loads(m.read_bytes())
        for f in doc.get("files") or ([doc] if doc.get("status") == "archived" else []):
            p = m.parent / f["file"]
            if not p.exists() or p.stat().st_size != f["bytes"] or _sha(p) != f["sha256"]:
                report["manifests_that_lie"] += 1


def _compare(root: Path, ref: Path, report: dict[str, int], prefix: str) -> None:
    mine, theirs = _days(root), _days(ref)
    report[f"{prefix}metric_days"] = len(theirs)
    for name, want in theirs.items():
        got = mine.get(name)
        if got is None:
            report[f"{prefix}days_missing"] += 1
            continue
        report[f"{prefix}rows_lost"] += max(want["rows"] - got["rows"], 0)
        report[f"{prefix}rows_duplicated"] += max(got["rows"] - want["rows"], 0)
        for path, sha in want["files"].items():
            mine_path = str(root / Path(path).relative_to(ref))
            if got["files"].get(mine_path) != sha:
                report[f"{prefix}files_differing"] += 1


def kills(url: str, catalog: Path, work: Path, n: int, rng: random.Random) -> dict[str, Any]:
    report: dict[str, int] = dict.fromkeys(
        ("runs", "kills", "days_missing_after_a_kill", "rows_lost", "changed_without_a_version",
         "manifests_that_lie", "stale_temporaries_after_the_last_run", "locks_left",
         "final_days_missing", "final_rows_lost", "final_rows_duplicated",
         "final_files_differing", "final_metric_days"), 0,
    )  # fmt: skip
    names: list[str] = []
    for fmt in ("csv", "parquet"):
        ref, root = work / f"kill-ref-{fmt}", work / f"kill-{fmt}"
        t0 = time.perf_counter()
        subprocess.run(_extract(url, catalog, ref, 2, fmt), check=True, capture_output=True)
        whole = time.perf_counter() - t0  # a run from start to exit: kills land inside it
        kills_here = 0
        while kills_here < n // 2 and report["runs"] < 3 * n:
            before = _days(root) if root.exists() else {}
            # --refetch: every run rewrites the days (a rerun over archived data), so that
            # runs after the first still have something to be killed in
            p = subprocess.Popen(
                _extract(url, catalog, root, 2, fmt, "--refetch"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.1, 0.9) * whole)
            report["runs"] += 1
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                report["kills"] += 1
                kills_here += 1
            p.wait()
            _check(root, before, report)
        before = _days(root)
        subprocess.run(_extract(url, catalog, root, 2, fmt), check=True, capture_output=True)
        report["runs"] += 1
        _check(root, before, report)
        # Left by killed reruns beside days the last run skipped as complete: not under a
        # final name, and removed by the next run of their day.
        left = [p for p in root.rglob("*.tmp") if ".versions" not in p.parts]
        report["stale_temporaries_after_the_last_run"] += len(left)
        report["locks_left"] += sum(1 for _ in root.rglob(".*.lock"))
        names.extend(str(p.relative_to(root)) for p in left)
        _compare(root, ref, report, "final_")
    return {**report, "temporaries_left": names}


def faults(url: str, catalog: Path, work: Path, days: int, every: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.faults.proxy import FaultProxy

    ref, root = work / "faults-ref", work / "faults"
    t0 = time.perf_counter()
    out = subprocess.run(
        _extract(url, catalog, ref, days, "csv", workers=4), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"the fault-free run failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    reference_s = time.perf_counter() - t0
    report: dict[str, Any] = {"reference_s": round(reference_s, 1)}
    counts: dict[str, int] = dict.fromkeys(
        ("rows_lost", "changed_without_a_version", "manifests_that_lie",
         "days_missing_after_a_kill", "first_days_missing", "first_rows_lost",
         "first_rows_duplicated", "first_files_differing", "first_metric_days",
         "rerun_days_missing", "rerun_rows_lost", "rerun_rows_duplicated",
         "rerun_files_differing", "rerun_metric_days", "failed_runs"), 0,
    )  # fmt: skip
    with FaultProxy(url) as proxy:
        injector = FaultInjector(proxy, every, refusals=3).start()
        t0 = time.perf_counter()
        for label in ("first", "rerun"):
            before = _days(root) if root.exists() else {}
            out = subprocess.run(
                _extract(proxy.url, catalog, root, days, "csv", workers=4),
                capture_output=True,
                text=True,
            )
            counts["failed_runs"] += out.returncode != 0
            if out.returncode != 0:  # failed metric-days are rerun, as an operator would
                out = subprocess.run(
                    _extract(proxy.url, catalog, root, days, "csv", workers=4),
                    capture_output=True,
                    text=True,
                )
                counts["failed_runs"] += out.returncode != 0
            _check(root, before, counts)
            _compare(root, ref, counts, f"{label}_")
        report["faults_s"] = round(time.perf_counter() - t0, 1)
        report["proxy"] = injector.stop()
    versions = sum(1 for _ in root.rglob(".versions/*"))
    return {**report, **counts, "versions_written": versions}


class _Skip(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--metrics", type=int, default=30, help="catalog metrics of part 2")
    ap.add_argument("--days", type=int, default=100, help="days of part 2")
    ap.add_argument("--fault-every", type=int, default=30, help="one fault group every N requests")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--skip-kills", action="store_true")
    ap.add_argument("--skip-faults", action="store_true")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dxt-fault-round-"))
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        small, _ = _catalog(work, 6)
        sim, url = spawn_simulator(
            "examon", ["--catalog", str(small), "--nodes", "4", "--delay", "0.05"]
        )
        try:
            t0 = time.perf_counter()
            if args.skip_kills:
                raise _Skip
            result["kills"] = kills(url, small, work, args.kills, rng)
            result["kills"]["seconds"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(result["kills"]), file=sys.stderr, flush=True)
        except _Skip:
            pass
        finally:
            sim.kill()
            sim.wait()
        if not args.skip_faults:
            (work / "big").mkdir()
            big, _ = _catalog(work / "big", args.metrics)
            sim, url = spawn_simulator(
                "examon", ["--catalog", str(big), "--nodes", "1", "--interval", "3600"]
            )
            try:
                result["faults"] = faults(url, big, work, args.days, args.fault_every)
            finally:
                sim.kill()
                sim.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
