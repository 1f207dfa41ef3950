"""One Examon metric-day through one pipeline, in its own process (for an honest peak RSS).

Pipelines:
  ours       dxt_core.archive_examon_day: windows, streaming writer, atomic commit.
  ours_parquet  the same, writing Parquet (zstd) instead of gzip CSV.
  reference  the seed's approach, faithfully: the whole day in one query, JSON -> a list of
             row dicts -> pandas DataFrame -> to_csv(compression="gzip") with pandas' defaults.
  floor      only what no pipeline can avoid: fetch and decode the same day, and compress the
             CSV bytes ours produced (prepared before the clock starts).

Prints one JSON line: seconds, points, output bytes, peak RSS.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import sys
import time
from pathlib import Path

import httpx
import orjson

from benchmarks import peak_rss_mb
from dxt_core import Archive
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.windows import day_window


def run_ours(url: str, entry: CatalogEntry, day: dt.date, out: Path, fmt: str = "csv") -> dict:
    t0 = time.perf_counter()
    with KairosDBSource(ExamonConnection(url=url)) as src:
        rep = archive_examon_day(src, entry, day, Archive(out), fmt=fmt)
    return {
        "seconds": time.perf_counter() - t0,
        "points": rep.rows,
        "bytes": rep.bytes,
        "requests": rep.stats.requests,
    }


def _day_query(url: str, entry: CatalogEntry, day: dt.date) -> tuple[dict, list[str]]:
    w = day_window(day, "Europe/Rome")
    body = {
        "start_absolute": w.start_ms,
        "end_absolute": w.end_ms - 1,
        "metrics": [{"name": entry.metric, "tags": {"cluster": ["marconi100"]}}],
    }
    tags = httpx.post(f"{url}/api/v1/datapoints/query/tags", json=body, timeout=600).json()
    keys = sorted(tags["queries"][0]["results"][0]["tags"])
    body["metrics"][0]["group_by"] = [{"name": "tag", "tags": keys}]
    return body, keys


def run_reference(url: str, entry: CatalogEntry, day: dt.date, out: Path) -> dict:
    import pandas as pd

    t0 = time.perf_counter()
    body, _keys = _day_query(url, entry, day)
    doc = httpx.post(f"{url}/api/v1/datapoints/query", json=body, timeout=600).json()
    rows = []
    for res in doc["queries"][0]["results"]:
        group = next(g["group"] for g in res["group_by"] if g.get("name") == "tag")
        for ts, v in res["values"]:
            row = {"timestamp": ts, "value": v, "name": res["name"]}
            row.update(group)
            rows.append(row)
    df = pd.DataFrame(rows)
    df["timestamp"] = pd.to_datetime(df["timestamp"], unit="ms", utc=True).dt.tz_convert(
        "Europe/Rome"
    )
    path = out / f"{entry.metric}_{day}.csv.gz"
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, compression="gzip", index=False)
    return {
        "seconds": time.perf_counter() - t0,
        "points": len(df),
        "bytes": path.stat().st_size,
        "requests": 2,
    }


def run_floor(url: str, entry: CatalogEntry, day: dt.date, out: Path, csv_gz: Path) -> dict:
    from dxt_core.writers.compress import GzipStream

    csv_bytes = gzip.decompress(csv_gz.read_bytes())  # prepared before the clock starts

    class Sink:
        def write(self, b: bytes) -> None:
            pass

    t0 = time.perf_counter()
    body, _ = _day_query(url, entry, day)
    with httpx.Client(headers={"Accept-Encoding": "gzip"}, timeout=600) as c:
        doc = orjson.loads(c.post(f"{url}/api/v1/datapoints/query", json=body).content)
    points = sum(len(r["values"]) for r in doc["queries"][0]["results"])
    g = GzipStream(Sink())  # type: ignore[arg-type]
    step = 1 << 20
    for i in range(0, len(csv_bytes), step):
        g.write(csv_bytes[i : i + step])
    g.close()
    return {"seconds": time.perf_counter() - t0, "points": points, "bytes": g.bytes, "requests": 2}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("pipeline", choices=["ours", "ours_parquet", "reference", "floor"])
    p.add_argument("--url", required=True)
    p.add_argument("--metric", default="ambient")
    p.add_argument("--plugin", default="ipmi_pub")
    p.add_argument("--day", default="2020-03-10")
    p.add_argument("--out", required=True)
    p.add_argument("--csv-gz", help="floor: the CSV file ours wrote")
    a = p.parse_args(argv)
    entry = CatalogEntry(a.metric, a.plugin)
    day = dt.date.fromisoformat(a.day)
    out = Path(a.out)
    if a.pipeline.startswith("ours"):
        from dxt_core.budget import tune_malloc

        tune_malloc()  # as the dxt command does
    if a.pipeline == "ours":
        res = run_ours(a.url, entry, day, out)
    elif a.pipeline == "ours_parquet":
        res = run_ours(a.url, entry, day, out, fmt="parquet")
    elif a.pipeline == "reference":
        res = run_reference(a.url, entry, day, out)
    else:
        res = run_floor(a.url, entry, day, out, Path(a.csv_gz))
    res["peak_rss_mb"] = peak_rss_mb()
    res["pipeline"] = a.pipeline
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
