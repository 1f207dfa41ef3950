"""collectd_es benchmark: a day of burst buffer disk documents to TOKIO HDF5.

``python -m benchmarks --workloads collectd_es`` (``--size tiny`` for a smoke run). The
full size is one UTC day of 16 hosts x 4 NVMe devices (64 devices) at 10 s: 552,960
``disk_octets`` documents, bulk-loaded into noida-db (not timed). Pipelines, each in its own
process (peak RSS is that process's), after one warm-up run:

* ``pit``: through the client from noida-db, PIT + search_after, 2 slices, pages of 5,000
* ``scroll``: the same with sliced scrolls
* ``input``: from the same documents saved in pytokio's format (a JSON list of pages), no
  server: the client-side cost alone (JSON decoding, cells, HDF5)
* ``floor``: what the server can serve: the same query through scrolls over the same time
  slices as the pipelines (2 threads, raw HTTP), answers decoded with orjson and nothing else
  done with them
* ``replay``: ``scroll`` against benchmarks/es_replay.py, a scroll-only stand-in that
  answers from memory with pre-rendered hits: the client's own pace end to end over HTTP,
  where noida-db's (about 20,000 documents/s) would hide it
* ``replay_floor``: ``floor`` against the same replay server
* ``reference``: pytokio's document processing reproduced (``process_page`` then
  ``update_datasets``: dateutil timestamps made naive local, one insert tuple per value,
  one element at a time into per-dataset arrays), timed over already-decoded pages,
  as the issue's 20,000 documents/s figure was (processing alone)

Ratios are printed against ``floor`` and ``reference`` of the same run; pytokio's ~20,000
documents/s measured earlier on another setup is printed beside them (external).

``python -m benchmarks.collectd_es export --url URL ...`` is the measured pipeline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import peak_rss_mb
from dxt_core import procs

MODES = ("pit", "scroll", "input", "floor", "reference", "replay", "replay_floor")
#: the pipelines run against the replay server (benchmarks/es_replay.py), as scroll / floor
REPLAY = {"replay": "scroll", "replay_floor": "floor"}
PYTOKIO_DOCS_PER_S = 20_000  # external figure (pytokio archive_collectdes), not this run
DAY = dt.date(2017, 12, 13)


def generate_hits(hosts: int, hours: int, devices: int = 4, step_s: int = 10) -> Iterator[dict]:
    """Deterministic disk_octets documents, one per (host, device, 10 s step)."""
    rng = np.random.default_rng(42)
    t0 = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    steps = hours * 3600 // step_s
    index = f"cori-collectd-{DAY:%Y.%m.%d}"
    for i in range(steps):
        reads = rng.exponential(1e6, size=hosts * devices)
        writes = rng.exponential(2e6, size=hosts * devices)
        for h in range(hosts):
            jitter = (h * 37) % 1000  # collectd's per-host offset within the step, in ms
            ts = t0 + dt.timedelta(seconds=i * step_s, milliseconds=jitter)
            stamp = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            for d in range(devices):
                k = h * devices + d
                yield {
                    "_index": index,
                    "_id": f"{i}-{h}-{d}",
                    "_source": {
                        "@timestamp": stamp,
                        "hostname": f"bb{h + 1}",
                        "plugin": "disk",
                        "plugin_instance": f"nvme{d}n1",
                        "collectd_type": "disk_octets",
                        "read": float(reads[k]),
                        "write": float(writes[k]),
                    },
                }


def floor_scroll(url: str, hours: int, slices: int, page_size: int) -> dict[str, Any]:
    """Scrolls of the disk query over raw HTTP, one per time slice (as the pipelines cut the
    window), decoded and dropped: the server's pace plus JSON decoding, with no processing
    and no output."""
    import httpx
    import orjson

    from dxt_core.backends.collectd_es.source import family_query_ms, time_slices, to_ms

    start = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    windows = time_slices(to_ms(start), to_ms(start + dt.timedelta(hours=hours)), slices, 10_000)
    counts = [0] * len(windows)
    requests = [0] * len(windows)

    def one(i: int) -> None:
        query = family_query_ms("disk", *windows[i], "bb")
        with httpx.Client(base_url=url, timeout=600) as c:
            body: dict[str, Any] = {"query": query, "sort": [{"@timestamp": "asc"}]}
            body["size"] = page_size
            params = {"scroll": "2m", "allow_partial_search_results": "false"}
            r = c.post("/cori-collectd-*/_search", params=params, json=body)
            while True:
                r.raise_for_status()
                requests[i] += 1
                doc = orjson.loads(r.content)
                hits = doc["hits"]["hits"]
                if not hits:
                    break
                counts[i] += len(hits)
                r = c.post("/_search/scroll", json={"scroll": "2m", "scroll_id": doc["_scroll_id"]})
            c.request("DELETE", "/_search/scroll", json={"scroll_id": doc["_scroll_id"]})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(windows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"docs": sum(counts), "requests": sum(requests)}


class _RefSeries:
    """A time x column array filled one element at a time, as pytokio's TimeSeries was."""

    def __init__(self, start: dt.datetime, end: dt.datetime, step: int, width: int) -> None:
        self.start, self.step = start, step
        rows = int((end - start).total_seconds()) // step
        self.data = np.full((rows, width), -0.0)
        self.columns: dict[str, int] = {}

    def insert_element(self, when: dt.datetime, column: str, value: float) -> bool:
        row = int((when - self.start).total_seconds()) // self.step
        if not 0 <= row < self.data.shape[0]:
            return False
        col = self.columns.get(column)
        if col is None:
            if len(self.columns) >= self.data.shape[1]:
                return False
            col = self.columns[column] = len(self.columns)
        self.data[row, col] = value
        return True


def reference_processing(pages: list[list[dict[str, Any]]], hours: int, width: int) -> int:
    """pytokio's per-document processing of disk documents (process_page, then
    update_datasets), reproduced in our words; returns the elements inserted."""
    import dateutil.parser
    import dateutil.tz

    local = dateutil.tz.tzlocal()
    start = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=hours)
    naive = (start.astimezone(local).replace(tzinfo=None), end.astimezone(local))
    names = ("readrates", "writerates", "readoprates", "writeoprates")
    series = {n: _RefSeries(naive[0], naive[1].replace(tzinfo=None), 10, width) for n in names}
    inserted = 0
    for page in pages:
        inserts = []
        for doc in page:
            if "_source" not in doc:
                continue
            src = doc["_source"]
            if src["plugin"] != "disk":
                continue
            when = dateutil.parser.parse(src["@timestamp"]).astimezone(local).replace(tzinfo=None)
            column = "%s:%s" % (src["hostname"], src["plugin_instance"])  # noqa: UP031
            kind = src["collectd_type"]
            read, write = src.get("read"), src.get("write")
            if read is None or write is None:
                continue
            if kind == "disk_octets":
                inserts.append(("readrates", when, column, read))
                inserts.append(("writerates", when, column, write))
            elif kind == "disk_ops":
                inserts.append(("readoprates", when, column, read))
                inserts.append(("writeoprates", when, column, write))
        for name, when, column, value in inserts:
            inserted += series[name].insert_element(when, column, value)
    return inserted


def export(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.collectd_es export")
    p.add_argument("--url", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--hours", type=int, default=24)
    p.add_argument("--num-nodes", type=int, default=16)
    p.add_argument("--slices", type=int, default=2)
    p.add_argument("--page-size", type=int, default=5000)
    p.add_argument("--mode", choices=[m for m in MODES if m not in REPLAY], default="pit")
    p.add_argument("--input", help="saved pages (mode input)")
    a = p.parse_args(argv)
    from dxt_core.backends.collectd_es.archive_day import es_pages, export_window, saved_pages
    from dxt_core.backends.collectd_es.source import (
        CollectdEsConnection,
        CollectdEsSource,
        ExportStats,
        load_saved_pages,
    )

    t0 = time.perf_counter()
    start = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=a.hours)
    stats = ExportStats()
    out = Path(a.out)
    if a.mode == "floor":
        res = floor_scroll(a.url, a.hours, a.slices, a.page_size)
        res.update(seconds=time.perf_counter() - t0, peak_rss_mb=peak_rss_mb(), bytes=0)
        print(json.dumps(res))
        return 0
    if a.mode == "reference":
        pages = load_saved_pages(a.input)
        t0 = time.perf_counter()  # processing alone: the pages are already decoded
        inserted = reference_processing(pages, a.hours, a.num_nodes * 4)
        res = {"docs": sum(map(len, pages)), "inserted": inserted, "bytes": 0}
        res.update(seconds=time.perf_counter() - t0, peak_rss_mb=peak_rss_mb())
        print(json.dumps(res))
        return 0
    if a.mode == "input":
        report = export_window(
            saved_pages(Path(a.input), "bb", a.input), ["disk"], start, end, hdf5_path=out,
            num_nodes=a.num_nodes,
        )  # fmt: skip
    else:
        # noida-db's first answer to a query costs O(documents in the index): tens of
        # seconds for the full day, more than the default 60 s timeout on a busy machine
        with CollectdEsSource(
            CollectdEsConnection(a.url, timeout_s=900),
            slices=a.slices,
            page_size=a.page_size,
            use_pit=a.mode == "pit",
        ) as src:
            report = export_window(
                es_pages(src, stats), ["disk"], start, end, hdf5_path=out, num_nodes=a.num_nodes
            )
    seconds = time.perf_counter() - t0
    assert report.hdf5 is not None
    print(
        json.dumps(
            {
                "docs": report.hits,
                "seconds": seconds,
                "peak_rss_mb": peak_rss_mb(),
                "bytes": report.hdf5.bytes,
                "requests": stats.requests,
                "pages": stats.pages,
                "request_s": round(stats.request_s, 3),
                "inserted": report.build["inserted"],
                "columnar_pages": report.build["columnar_pages"],
            }
        )
    )
    return 0


def spawn_replay(saved: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the replay server (benchmarks/es_replay.py) on the saved documents."""
    proc = procs.start(
        [sys.executable, "-m", "benchmarks.es_replay", "--input", str(saved), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[-1]
    proc.wait(30)
    raise SystemExit(f"the replay server did not start (exit {proc.returncode})")


def run(hosts: int, hours: int, repeat: int, modes: tuple[str, ...] = MODES) -> dict:
    import orjson

    from dxt_core.backends.collectd_es.simulator import (
        bulk_load,
        spawn_noida_elasticsearch,
    )

    hits = list(generate_hits(hosts, hours))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="dxt-bench-es-") as tmp:
        work = Path(tmp)
        saved = work / "saved.json"
        saved.write_bytes(orjson.dumps([hits[i : i + 5000] for i in range(0, len(hits), 5000)]))
        proc, url = spawn_noida_elasticsearch(work / "noida")
        replay = replay_url = None
        try:
            t0 = time.perf_counter()
            loaded = bulk_load(url, hits)
            load_s = time.perf_counter() - t0
            del hits
            if any(m in REPLAY for m in modes):
                replay, replay_url = spawn_replay(saved)
            for mode in modes:
                cmd = [sys.executable, "-m", "benchmarks.collectd_es", "export",
                       "--url", replay_url if mode in REPLAY else url,
                       "--hours", str(hours), "--num-nodes", str(hosts),
                       "--mode", REPLAY.get(mode, mode), "--input", str(saved)]  # fmt: skip
                runs = []
                for i in range(repeat + 1):  # the first run warms up, not counted
                    out = subprocess.run(
                        [*cmd, "--out", str(work / f"{mode}{i}.hdf5")],
                        capture_output=True,
                        text=True,
                        timeout=3600,
                    )
                    if out.returncode != 0:
                        raise SystemExit(f"collectd_es {mode} failed:\n{out.stderr[-3000:]}")
                    if i:
                        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                secs = statistics.median(r["seconds"] for r in runs)
                docs = runs[0]["docs"]
                if docs != loaded:
                    raise SystemExit(f"{mode}: exported {docs} documents, loaded {loaded}")
                results[mode] = {
                    "docs": docs,
                    "seconds": round(secs, 3),
                    "docs_per_s": round(docs / secs),
                    "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
                    "output_bytes": runs[0]["bytes"],
                    "ratio_vs_pytokio_20k_external": round(docs / secs / PYTOKIO_DOCS_PER_S, 1),
                    "runs": runs,
                }
        finally:
            procs.stop(proc)
            if replay is not None:
                procs.stop(replay, 30)
    for base in ("floor", "reference"):
        if base in results:
            for r in results.values():
                r[f"ratio_vs_{base}"] = round(r["docs_per_s"] / results[base]["docs_per_s"], 2)
    if "replay" in results and "replay_floor" in results:
        r = results["replay"]
        r["ratio_vs_floor"] = round(r["docs_per_s"] / results["replay_floor"]["docs_per_s"], 2)
        results["replay_floor"]["ratio_vs_floor"] = 1.0
    return {
        "workload": "collectd_es",
        "hosts": hosts,
        "devices": hosts * 4,
        "hours": hours,
        "docs": loaded,
        "bulk_load_s": round(load_s, 1),
        "pipelines": results,
        "reference_docs_per_s_external": PYTOKIO_DOCS_PER_S,
    }


def print_result(res: dict) -> None:
    print(
        f"\ncollectd_es: {res['devices']} devices x {res['hours']} h at 10 s = {res['docs']} "
        f"documents -> TOKIO HDF5 (bulk load {res['bulk_load_s']} s, not timed)"
    )
    print(
        f"  {'pipeline':<9} {'seconds':>8} {'docs/s':>9} {'peak RSS MB':>11} {'bytes':>10} "
        f"{'x floor':>8} {'x reference':>11} {'x pytokio 20k/s (external)':>27}"
    )
    for mode, r in res["pipelines"].items():
        print(
            f"  {mode:<9} {r['seconds']:>8.3f} {r['docs_per_s']:>9} {r['peak_rss_mb']:>11} "
            f"{r['output_bytes']:>10} {r.get('ratio_vs_floor', '-'):>8} "
            f"{r.get('ratio_vs_reference', '-'):>11} {r['ratio_vs_pytokio_20k_external']:>27}"
        )
    print(
        "  floor: the server's pace, answers decoded and dropped; reference: pytokio's "
        "per-document processing alone, over decoded pages"
    )


#: size -> (hosts, hours, pipelines)
SIZES: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "tiny": (2, 1, MODES),
    # PIT through noida-db costs O(documents) per page (612 s for this day, measured once):
    # run it alone with `python -m benchmarks.collectd_es 16 24 pit`
    "full": (16, 24, ("scroll", "floor", "replay", "replay_floor", "input", "reference")),
}


def workload(size: str, repeat: int) -> dict:
    hosts, hours, modes = SIZES[size]
    res = run(hosts, hours, repeat, modes)
    print_result(res)
    return res


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "export":
        sys.exit(export(sys.argv[2:]))
    res = run(int(sys.argv[1]), int(sys.argv[2]), 1, tuple(sys.argv[3].split(",")))
    print_result(res)
