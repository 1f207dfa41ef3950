"""What noida-db costs per document served: the bound on any collectd ES export through it.

``python -m benchmarks.noida_probe [HOURS]`` (default 6: 138,240 documents) loads HOURS of
the collectd_es workload's documents into noida-db, then reads them back in three ways,
printing wall time, documents/s and the CPU seconds the noida-db processes used:

* one scroll, pages of 5,000, sorted on ``@timestamp`` (what a 1-slice export asks);
* two scrolls at once over the two halves of the window (parallel requests);
* plain searches (no scroll) of 10-minute windows, pages of 10,000.

When the server's CPU time is about the wall time, the server is the bound and it serves
one request at a time.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchmarks.collectd_es import DAY, generate_hits
from dxt_core import procs
from dxt_core.backends.collectd_es.simulator import (
    bulk_load,
    spawn_noida_elasticsearch,
)
from dxt_core.backends.collectd_es.source import family_query


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every process in a process group."""
    ticks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main(hours: int = 6) -> None:
    start = dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=hours)
    hits = list(generate_hits(16, hours))
    with tempfile.TemporaryDirectory(prefix="dxt-noida-probe-") as tmp:
        proc, url = spawn_noida_elasticsearch(Path(tmp))
        try:
            n = bulk_load(url, hits)
            del hits
            print(f"noida-db: {n} documents ({hours} h of 64 devices at 10 s)")

            def body(a: dt.datetime, b: dt.datetime, size: int) -> dict[str, Any]:
                q = family_query("disk", a, b, "bb")
                return {"query": q, "sort": [{"@timestamp": "asc"}], "size": size}

            def scroll(a: dt.datetime, b: dt.datetime) -> int:
                got = 0
                with httpx.Client(base_url=url, timeout=600) as c:
                    r = c.post("/cori-collectd-*/_search", params={"scroll": "2m"},
                               json=body(a, b, 5000))  # fmt: skip
                    while True:
                        r.raise_for_status()
                        doc = orjson.loads(r.content)
                        if not doc["hits"]["hits"]:
                            break
                        got += len(doc["hits"]["hits"])
                        more = {"scroll": "2m", "scroll_id": doc["_scroll_id"]}
                        r = c.post("/_search/scroll", json=more)
                    c.request("DELETE", "/_search/scroll", json={"scroll_id": doc["_scroll_id"]})
                return got

            def in_parallel(parts: int, fn: Callable[[dt.datetime, dt.datetime], int]) -> int:
                step = (end - start) / parts
                counts = [0] * parts

                def one(i: int) -> None:
                    counts[i] = fn(start + i * step, start + (i + 1) * step)

                threads = [threading.Thread(target=one, args=(i,)) for i in range(parts)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                return sum(counts)

            def windows() -> int:
                got = 0
                with httpx.Client(base_url=url, timeout=600) as c:
                    for i in range(hours * 6):
                        a = start + dt.timedelta(minutes=10 * i)
                        r = c.post("/cori-collectd-*/_search",
                                   json=body(a, a + dt.timedelta(minutes=10), 10_000))  # fmt: skip
                        r.raise_for_status()
                        got += len(orjson.loads(r.content)["hits"]["hits"])
                return got

            for name, fn in [
                ("one scroll", lambda: scroll(start, end)),
                ("two scrolls at once (halves)", lambda: in_parallel(2, scroll)),
                ("plain searches of 10 minutes", windows),
            ]:
                cpu0, t0 = group_cpu_s(proc.pid), time.perf_counter()
                got = fn()
                wall, cpu = time.perf_counter() - t0, group_cpu_s(proc.pid) - cpu0
                print(f"  {name:<30} {got:>8} docs {wall:7.1f} s {got / wall:>9,.0f} docs/s  "
                      f"server CPU {cpu:6.1f} s = {cpu / got * 1e6:5.0f} us/doc")  # fmt: skip
        finally:
            procs.stop(proc)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
