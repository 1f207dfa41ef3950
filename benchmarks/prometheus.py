"""Prometheus-family workload: one metric-day of N series at 15 s from the real servers.

Full size: 10,000 series x 5,760 samples = 57.6 million samples (``--size full``); ``medium``
2,000 series (11.52 million); ``small`` 500 series (2.88 million); ``tiny`` 10 series (a
smoke test). Debian's Prometheus (a TSDB backfilled by ``promtool``, one OpenMetrics file per
two-hour block: promtool reads its whole input into memory and parses it again for every
block it writes) and VictoriaMetrics (``/api/v1/import``) are started on loopback ports with
the same data; for each server, in its own process each:

* ``ours_csv`` / ``ours_parquet``: ``archive_prometheus_day`` of the day (samples, wall and
  CPU seconds, samples per CPU second, peak RSS, bytes);
* ``curl``: the server's own answer for the whole day in one request (VictoriaMetrics
  ``/api/v1/export``, Prometheus the range-vector query), ``curl -o /dev/null``, timed in the
  same run, asking for the same encoding as ours (``--compressed`` when ours asks for gzip:
  ``--compression``, default ``auto``, which on these loopback servers is none);
  ``ours_vs_curl`` is our wall time over curl's.

Prometheus is started with ``--query.max-samples=200000000`` so that one request can hold the
full day (the default 50,000,000 would refuse curl's; ours splits), and with its block
durations pinned to the backfilled blocks' two hours, so that no compaction runs during the
measurements. CPU seconds are this process's (user + system, every thread), not the
server's. The machine's load average is recorded before and after each run (a shared machine
makes wall times, and the ratios to curl, depend on what else runs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import peak_rss_mb

DAY = dt.date(2024, 5, 1)
STEP_MS = 15_000
METRIC = "bench_metric"
SIZES = {"tiny": 10, "small": 500, "medium": 2000, "full": 10_000}  # series
BLOCK_MS = 2 * 3_600_000  # promtool's default block


def _day_ms() -> tuple[int, int]:
    from dxt_core.windows import day_window

    w = day_window(DAY, "UTC")
    return w.start_ms, w.end_ms


def _value(t: int, k: int) -> float:
    return round(20 + (((t // STEP_MS) * 7 + k * 13) % 1000) / 100, 2)


def _times() -> range:
    a, b = _day_ms()
    return range(a, b + 1, STEP_MS)  # the next midnight's sample too: it must be left out


def write_openmetrics(path: Path, series: int, times: range | None = None) -> None:
    with path.open("w") as fh:
        fh.write(f"# TYPE {METRIC} gauge\n")
        for k in range(series):
            lab = f'{METRIC}{{instance="node-{k:05d}",job="bench"}} '
            fh.writelines(f"{lab}{_value(t, k)!r} {t // 1000}\n" for t in times or _times())
        fh.write("# EOF\n")


def build_blocks(work: Path, series: int) -> Path:
    """The day's TSDB blocks: one OpenMetrics file per two-hour block, each given to
    ``promtool tsdb create-blocks-from openmetrics`` on its own (promtool holds its whole
    input in memory and parses it once per block: one file of the day would be about 4 GB
    at full size, parsed 13 times)."""
    from tests.integration.prometheus import servers

    blocks = work / "blocks"
    times = _times()
    first = times[0] // BLOCK_MS * BLOCK_MS
    for a in range(first, times[-1] + 1, BLOCK_MS):
        part = range(max(a, times[0]), min(a + BLOCK_MS, times[-1] + 1), STEP_MS)
        om = work / f"data-{a}.om"
        write_openmetrics(om, series, part)
        subprocess.run(
            [str(servers.binary("promtool")), "tsdb", "create-blocks-from", "openmetrics",
             str(om), str(blocks)],
            check=True, capture_output=True, timeout=7200,
        )  # fmt: skip
        om.unlink()
    return blocks


def load() -> list[float]:
    """The machine's load average (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def load_victoriametrics(url: str, series: int) -> None:
    import httpx
    import orjson

    times = list(_times())
    with httpx.Client(base_url=url, timeout=600) as c:
        batch: list[bytes] = []
        for k in range(series):
            doc = {
                "metric": {"__name__": METRIC, "instance": f"node-{k:05d}", "job": "bench"},
                "values": [_value(t, k) for t in times],
                "timestamps": times,
            }
            batch.append(orjson.dumps(doc) + b"\n")
            if len(batch) >= 200 or k == series - 1:
                c.post("/api/v1/import", content=b"".join(batch)).raise_for_status()
                batch = []
        c.get("/internal/force_flush").raise_for_status()


def run_ours(url: str, fmt: str, out: Path) -> dict[str, object]:
    """One archive of the day in this process."""
    from dxt_core.archive import Archive
    from dxt_core.backends.prometheus.archive_day import archive_prometheus_day
    from dxt_core.backends.prometheus.catalog import CatalogEntry
    from dxt_core.backends.prometheus.connection import PrometheusConnection
    from dxt_core.backends.prometheus.source import PrometheusSource, WindowPolicy
    from dxt_core.budget import tune_malloc

    tune_malloc()  # as the dxt command does

    conn = PrometheusConnection(url, time_zone="UTC", timeout_s=600, compression=_compression())
    policy: dict[str, int] = {}
    if target := os.environ.get("DXT_BENCH_TARGET_POINTS"):  # workload --target-points
        policy["target_points"] = int(target)
    if ahead := os.environ.get("DXT_BENCH_IN_FLIGHT"):  # workload --in-flight
        policy["in_flight"] = int(ahead)
    windows = WindowPolicy(**policy) if policy else None
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    with PrometheusSource(conn, windows=windows) as src:
        report = archive_prometheus_day(src, CatalogEntry(METRIC, METRIC), DAY, Archive(out), fmt)
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {
        "samples": report.rows,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "samples_per_cpu_s": round(report.rows / cpu) if cpu else None,
        "samples_per_s": round(report.rows / seconds),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "output_bytes": report.bytes,
        "requests": report.stats.requests,
        "splits": report.stats.splits,
        "retries": report.stats.retries,
    }


def _ours(url: str, fmt: str, out: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.prometheus", "run", url, fmt, str(out)],
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if proc.returncode != 0:
        raise SystemExit(f"ours ({fmt}) failed:\n{proc.stderr[-3000:]}")
    doc: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def _timed(run: Callable[[], dict[str, object]]) -> dict[str, object]:
    """``run()``'s figures with the machine's load average before and after."""
    before = load()
    doc = run()
    doc["load_before"], doc["load_after"] = before, load()
    return doc


def _compression() -> str:
    """The runs' ``compression`` (workload ``--compression``)."""
    return os.environ.get("DXT_BENCH_COMPRESSION", "auto")


def _curl(url: str) -> dict[str, object]:
    """curl of ``url``, asking for gzip exactly when our runs do."""
    from dxt_core.urls import wants_gzip

    gzip = ["--compressed"] if wants_gzip(_compression(), url) else []
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total} %{size_download}",
         *gzip, url],
        capture_output=True, text=True, timeout=7200, check=True,
    )  # fmt: skip
    code, seconds, size = out.stdout.split()
    return {"status": int(code), "seconds": float(seconds), "bytes": int(size)}


def _day_url(kind: str, url: str) -> str:
    from urllib.parse import urlencode

    a, b = _day_ms()
    if kind == "victoriametrics":
        q = urlencode(
            {"match[]": METRIC, "start": f"{a / 1000:.3f}", "end": f"{(b - 1) / 1000:.3f}"}
        )
        return f"{url}/api/v1/export?{q}"
    q = urlencode({"query": f"{METRIC}[{b - a + 1}ms]", "time": f"{(b - 1) / 1000:.3f}"})
    return f"{url}/api/v1/query?{q}"


def workload(
    size: str,
    repeat: int = 1,
    kinds: tuple[str, ...] = ("prometheus", "victoriametrics"),
    formats: tuple[str, ...] = ("csv", "parquet"),
) -> dict[str, object]:
    from tests.integration.prometheus import servers

    series = SIZES[size]
    if not all(shutil.which(p) for p in ("prometheus", "victoria-metrics", "promtool")):
        raise SystemExit("prometheus and victoria-metrics are needed (apt-get install ...)")
    if shutil.which("curl") is None:
        raise SystemExit("curl is needed")
    result: dict[str, object] = {
        "workload": "prometheus",
        "size": size,
        "series": series,
        "samples_expected": series * 5760,
        "machine": {"cpus": os.cpu_count(), "load_at_start": load()},
    }
    with tempfile.TemporaryDirectory(prefix="dxt-bench-prom-") as tmp:
        work = Path(tmp)
        started = []
        try:
            for kind in kinds:
                t0 = time.perf_counter()
                if kind == "prometheus":
                    blocks = build_blocks(work, series)
                    server = servers.start_prometheus(
                        work / "prom",
                        blocks,
                        ["--query.max-samples=200000000", "--query.timeout=30m",
                         "--storage.tsdb.min-block-duration=2h",
                         "--storage.tsdb.max-block-duration=2h"],
                    )  # fmt: skip
                else:
                    server = servers.start_victoriametrics(
                        work / "vm", ["-search.maxQueryDuration=1h"], load=False
                    )
                    load_victoriametrics(server.url, series)
                started.append(server)
                result[f"{kind}_load_s"] = round(time.perf_counter() - t0, 1)
            for server in started:
                result[server.kind] = _runs(server, work, repeat, formats)
        finally:
            for s in started:
                s.stop()
    result["machine"]["load_at_end"] = load()  # type: ignore[index]
    print_result(result)
    return result


def _runs(server: Any, work: Path, repeat: int, formats: tuple[str, ...]) -> dict[str, object]:
    """One server's runs: ours per format (the best of ``repeat``), then curl of the day."""
    runs: dict[str, dict[str, object]] = {}

    def seconds(doc: dict[str, object]) -> float:
        return float(doc["seconds"])  # type: ignore[arg-type]

    for fmt in formats:
        tries = []
        for i in range(repeat):
            out = work / f"{server.kind}-{fmt}-{i}"
            tries.append(_timed(lambda out=out, fmt=fmt: _ours(server.url, fmt, out)))  # type: ignore[misc]
            shutil.rmtree(out, ignore_errors=True)
        runs[f"ours_{fmt}"] = min(tries, key=seconds)
    url = _day_url(server.kind, server.url)
    runs["curl"] = min((_timed(lambda: _curl(url)) for _ in range(repeat)), key=seconds)
    for fmt in formats:
        r = runs[f"ours_{fmt}"]
        r["ours_vs_curl"] = round(seconds(r) / seconds(runs["curl"]), 2)
    return dict(runs)


def print_result(res: dict[str, object]) -> None:
    print(f"\nprometheus ({res['size']}: {res['series']} series x 1 day at 15 s):")
    for kind in ("prometheus", "victoriametrics"):
        runs = res.get(kind)
        if not isinstance(runs, dict):
            continue
        for name in ("ours_csv", "ours_parquet"):
            r = runs.get(name)
            if not isinstance(r, dict):
                continue
            print(
                f"  {kind:<16} {name:<13} {r['samples']:>10} samples {r['seconds']:>8.2f} s "
                f"{r['samples_per_cpu_s']:>10} samples/CPU-s {r['peak_rss_mb']:>7.1f} MB "
                f"{r['ours_vs_curl']:>5}x curl"
            )
        c = runs["curl"]
        print(f"  {kind:<16} {'curl':<13} {c['bytes']:>10} bytes   {c['seconds']:>8.2f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prometheus")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one archive in this process (prints JSON)")
    r.add_argument("url")
    r.add_argument("format", choices=("csv", "parquet"))
    r.add_argument("out")
    w = sub.add_parser("workload", help="the whole workload")
    w.add_argument("--size", choices=sorted(SIZES), default="tiny")
    w.add_argument("--repeat", type=int, default=1)
    w.add_argument("--servers", default="prometheus,victoriametrics", help="comma-separated")
    w.add_argument("--formats", default="csv,parquet", help="comma-separated")
    w.add_argument("--out", help="also write the JSON here")
    w.add_argument(
        "--target-points",
        type=int,
        help="samples a query aims at (default: the source's, 500,000)",
    )
    w.add_argument(
        "--in-flight",
        type=int,
        help="query windows asked for at once (default: the source's, by server)",
    )
    w.add_argument(
        "--compression",
        choices=("auto", "gzip", "none"),
        default="auto",
        help="how answers travel, for ours and for curl (default auto: none on loopback)",
    )
    a = p.parse_args(argv)
    if a.cmd == "workload":
        os.environ["DXT_BENCH_COMPRESSION"] = a.compression
    if a.cmd == "workload" and a.target_points:
        os.environ["DXT_BENCH_TARGET_POINTS"] = str(a.target_points)  # the runs' processes
    if a.cmd == "workload" and a.in_flight:
        os.environ["DXT_BENCH_IN_FLIGHT"] = str(a.in_flight)
    if a.cmd == "run":
        print(json.dumps(run_ours(a.url, a.format, Path(a.out))))
        return 0
    doc = workload(a.size, a.repeat, tuple(a.servers.split(",")), tuple(a.formats.split(",")))
    doc["target_points"] = a.target_points or "default"
    doc["in_flight"] = a.in_flight or "default"
    doc["compression"] = a.compression
    text = json.dumps(doc, indent=2)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
