"""``publish`` workload: one metric-month through ``dxt publish examon``, from the Parquet
archive and from the CSV archive, beside a plain pyarrow read-and-write of the same rows.

The archive is generated in its documented formats (docs/archive.md: daily Parquet files and
daily gzip CSV files with manifests), ``nodes`` series at 20 s sampling for ``days`` days,
without the simulator (127 million rows over HTTP would measure the simulator). Each
pipeline runs in its own process, which reports its peak RSS and CPU time; rows/s per core
is rows / (user + system CPU seconds).

Sizes: tiny = 8 nodes x 2 days (smoke test); small = 50 nodes x 31 days (6.7 million rows);
full = 980 nodes x 31 days at 20 s (127 million rows, M100's month of one metric).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

SIZES = {"tiny": (8, 2), "small": (50, 31), "full": (980, 31)}
ROME = ZoneInfo("Europe/Rome")
PLUGIN, METRIC = "ipmi_pub", "ps0_input_power"


def _manifest(path: Path, rows: int, day: dt.date) -> dict:
    data = path.read_bytes()
    return {
        "status": "archived",
        "file": path.name,
        "rows": rows,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "time_zone": "Europe/Rome",
        "day": day.isoformat(),
        "plugin": PLUGIN,
        "metric": METRIC,
    }


def make_archive(root: Path, nodes: int, days: int) -> int:
    """Write ``days`` days from 2020-03-01 in both formats; returns the rows per format."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"r{201 + i // 20}n{1 + i % 20:02d}" for i in range(nodes)]
    total = 0
    for k in range(days):
        day = dt.date(2020, 3, 1) + dt.timedelta(days=k)
        start = dt.datetime(day.year, day.month, day.day, tzinfo=ROME)
        end = start + dt.timedelta(days=1)
        s_ms, e_ms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        per = (e_ms - s_ms) // 20_000
        ts = np.tile(s_ms + np.arange(per, dtype=np.int64) * 20_000, nodes)
        node_idx = np.repeat(np.arange(nodes, dtype=np.int32), per)
        rng = np.random.default_rng(k)
        value = np.round(200 + 100 * rng.random(len(ts)), 1)
        # the archive's row order: blocks of time, series by series within a block
        order = np.lexsort((ts, node_idx, ts // 300_000))
        ts, node_idx, value = ts[order], node_idx[order], value[order]
        table = pa.table(
            {
                "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                "value": value,
                "name": pa.DictionaryArray.from_arrays(
                    np.zeros(len(ts), np.int32), pa.array([METRIC])
                ),
                "node": pa.DictionaryArray.from_arrays(node_idx, pa.array(names)),
                "plugin": pa.DictionaryArray.from_arrays(
                    np.zeros(len(ts), np.int32), pa.array([PLUGIN])
                ),
                "units": pa.DictionaryArray.from_arrays(
                    np.zeros(len(ts), np.int32), pa.array(["Watts"])
                ),
            }
        )
        pdir = root / "parquet/examon" / f"plugin={PLUGIN}" / f"metric={METRIC}"
        pdir.mkdir(parents=True, exist_ok=True)
        pf = pdir / f"{day}.parquet"
        pq.write_table(table, pf, compression="zstd", row_group_size=nodes * 180)
        (pdir / f"_{day}.manifest.json").write_text(json.dumps(_manifest(pf, len(ts), day)))
        cdir = root / "csv/examon" / PLUGIN / METRIC
        cdir.mkdir(parents=True, exist_ok=True)
        cf = cdir / f"{day}.csv.gz"
        offset = start.strftime("%z")
        offset = f"{offset[:3]}:{offset[3:]}"
        stamps = (
            np.datetime_as_string(
                (ts + (start.utcoffset() or dt.timedelta()).total_seconds() * 1000).astype(
                    "datetime64[ms]"
                ),
                unit="ms",
            ).astype(object)
            + offset
        )
        with gzip.open(cf, "wt", compresslevel=1, newline="") as fh:
            fh.write("timestamp,value,name,node,plugin,units\n")
            nn = np.array(names, dtype=object)[node_idx]
            for i in range(0, len(ts), 200_000):
                sl = slice(i, i + 200_000)
                fh.write(
                    "".join(
                        f"{a},{v!r},{METRIC},{n},{PLUGIN},Watts\n"
                        for a, v, n in zip(stamps[sl], value[sl].tolist(), nn[sl], strict=True)
                    )
                )
        (cdir / f"{day}.manifest.json").write_text(json.dumps(_manifest(cf, len(ts), day)))
        total += len(ts)
    return total


def child(mode: str, archive: Path, out: Path) -> None:
    t0 = time.perf_counter()
    if mode == "baseline":
        import pyarrow.parquet as pq

        files = sorted(archive.rglob("*.parquet"))
        writer = None
        rows = 0
        for f in files:
            pf = pq.ParquetFile(f)
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i)
                if writer is None:
                    writer = pq.ParquetWriter(out / "plain.parquet", t.schema, compression="zstd")
                writer.write_table(t)
                rows += t.num_rows
        if writer is not None:
            writer.close()
    else:
        from dxt_core.backends import get_publisher
        from dxt_core.publish import PublishOptions, publish

        rep = publish(
            get_publisher("examon").publish_role(),
            PublishOptions(
                archive=archive, out=out, from_month="2020-03", to_month="2020-03", records=False
            ),
        )
        rows = rep.rows
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM: this process's peak RSS (ru_maxrss keeps the parent's across exec on Linux:
    # the parent that generated the archive)
    hwm = next(
        int(line.split()[1]) / 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    print(
        json.dumps(
            {
                "rows": rows,
                "wall_s": time.perf_counter() - t0,
                "cpu_s": ru.ru_utime + ru.ru_stime,
                "peak_rss_mb": hwm,
            }
        )
    )


def _run(mode: str, archive: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.publish", mode, str(archive), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode:
        raise SystemExit(f"benchmarks.publish {mode} failed:\n{p.stderr[-3000:]}")
    res: dict = json.loads(p.stdout.strip().splitlines()[-1])
    res["rows_per_core_s"] = res["rows"] / max(res["cpu_s"], 1e-9)
    # the machine is shared: the 1-minute load average before and after, for the record
    res["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return res


def workload(size: str, keep: Path | None = None) -> dict:
    nodes, days = SIZES[size]
    with tempfile.TemporaryDirectory(prefix="dxt-bench-publish-") as tmp:
        base = keep or Path(tmp)
        t = time.perf_counter()
        rows = make_archive(base / "archive", nodes, days)
        made = time.perf_counter() - t
        res = {
            "workload": "publish",
            "size": size,
            "nodes": nodes,
            "days": days,
            "rows": rows,
            "archive_generation_s": made,
            "from_parquet": _run("publish", base / "archive/parquet", base / "out-parquet"),
            "from_csv": _run("publish", base / "archive/csv", base / "out-csv"),
            "plain_pyarrow": _run("baseline", base / "archive/parquet", base / "out-plain"),
            "cpus": os.cpu_count(),
        }
    plain = res["plain_pyarrow"]["rows_per_core_s"]
    for k in ("from_parquet", "from_csv"):
        res[k]["ratio_to_plain_pyarrow"] = round(res[k]["rows_per_core_s"] / plain, 3)
    return res


def print_result(res: dict) -> None:
    print(
        f"\npublish: one metric-month, {res['nodes']} nodes x {res['days']} days at 20 s "
        f"= {res['rows']:,} rows"
    )
    for k in ("from_parquet", "from_csv", "plain_pyarrow"):
        r = res[k]
        ratio = r.get("ratio_to_plain_pyarrow")
        print(
            f"  {k:<14} {r['wall_s']:7.1f} s wall {r['cpu_s']:7.1f} s CPU "
            f"{r['rows_per_core_s'] / 1e6:6.2f} M rows/s per core  "
            f"peak RSS {r['peak_rss_mb']:6.0f} MB"
            + (f"  {ratio:.2f}x plain pyarrow" if ratio is not None else "")
            + f"  (load {r['load_avg_1m'][0]:.1f} -> {r['load_avg_1m'][1]:.1f} on "
            f"{res.get('cpus')} cores)"
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("publish", "baseline"):
        child(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        size = sys.argv[1] if len(sys.argv) > 1 else "tiny"
        r = workload(size)
        print_result(r)
        print(json.dumps(r, indent=2))
