"""Workload ``command``: ``dxt extract examon`` as a user runs it, start to exit.

The command runs as a subprocess (``.venv/bin/dxt``, the console script) against the Examon
simulator running as its own process, in its default realistic mode (millisecond jitter,
doubles printed as KairosDB's org.json prints them, M100 tag sets, nagios strings). Next to
it, in the same run against the same server, the seed-style reference: dxt_examon's way
(examon-client-like JSON -> row dicts -> pandas -> ``to_csv(compression="gzip")``), also a
process timed from start to exit (its ``import pandas`` is part of what a user waits for).

Two cases:

* ``metric_day``: one ipmi metric-day, 200 nodes x 4,320 samples = 864,000 points;
* ``catalog_day``: one day of a 20-metric slice of the M100 catalog (every KairosDB plugin,
  nagios strings included) at the simulator's default 8 nodes, the command's default
  ``--workers 4`` against the reference's one metric after the other.

Measured per run: wall seconds (process start to exit), peak RSS (``VmHWM`` of the process,
read from ``/proc`` every few milliseconds while it runs; ``ru_maxrss`` from ``wait4`` is kept
beside it, but on Linux it includes the forking parent's image), output bytes (data files),
rows (from the manifests), and, in separate runs through a TCP relay that notes when the
first request arrives, the time from process start to the first request. One
``python -X importtime`` run lists what the command imports.

Beside both, for the metric-day: ``curl`` receiving the same day from the same server in one
request (every tag grouped, to /dev/null), the least any client must wait. Twice: from the
cached simulator above (the wire alone: the answer is repeated from memory; ``curl.cached``)
and, the comparison of issue 18, from a simulator started with ``--no-cache``, which computes
every answer as a real KairosDB reads it from storage, for curl and for the command alike,
runs alternating (``curl.cold``); the command's time over curl's there is
``ratios.vs_curl`` (goal: at most 1.3), the cached one ``ratios.vs_curl_cached``.

``python -m benchmarks.command reference ...`` is the reference pipeline's process.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import peak_rss_mb
from dxt_core import procs

ROOT = Path(__file__).resolve().parent.parent
DXT = str(Path(sys.executable).parent / "dxt")
DAY = "2020-03-10"
#: size: (nodes of the metric-day, nodes of the catalog day)
SIZES = {"tiny": (4, 2), "full": (200, 8)}
#: How many metrics of each plugin the 20-metric catalog day takes (catalog order).
CATALOG_SLICE = {
    "ganglia_pub": 6,
    "ipmi_pub": 4,
    "schneider_pub": 3,
    "slurm_pub": 2,
    "logics_pub": 2,
    "nagios_pub": 1,
    "vertiv_pub": 1,
    "weather_pub": 1,
}
#: The goals of issue 14.1, and issue 18's: the metric-day within 1.3x of curl receiving it.
GOALS = {
    "speedup_vs_reference_min": 25.0,
    "peak_rss_mb_max": 100.0,
    "bytes_vs_reference_max": 1.1,
    "first_request_ms_max": 100.0,
    "vs_curl_max": 1.3,
}
#: Modules a CSV extract of Examon must not import (each is tens of ms or MB).
HEAVY = ("numpy", "pandas", "pyarrow", "elasticsearch", "h5py", "rich", "click", "pygments")


def catalog_slice() -> str:
    """The 20-metric catalog (CSV text): the first metrics of every KairosDB plugin."""
    lines = (ROOT / "dxt_core/data/M100_metrics.csv").read_text().splitlines()
    taken: dict[str, int] = {}
    out = ["metric,plugin"]
    for line in lines[1:]:
        plugin = line.split(",")[1]
        if taken.get(plugin, 0) < CATALOG_SLICE.get(plugin, 0):
            taken[plugin] = taken.get(plugin, 0) + 1
            out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------
# A process, timed start to exit, with its peak RSS
# ------------------------------------------------------------------------------------------


def _vm_hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def timed_process(
    argv: list[str], env: dict[str, str] | None = None, poll_s: float = 0.002
) -> dict[str, Any]:
    """Run ``argv``; wall seconds from just before the fork to the exit, peak RSS.

    ``VmHWM`` is the kernel's high-water mark of the process's resident set; it is read from
    ``/proc`` until the process exits (a zombie has no memory lines), so a peak reached in
    its last ``poll_s`` could be missed; the peaks measured here come well before the end.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        hwm = 0
        while True:
            kb = _vm_hwm_kb(proc.pid)
            if kb is not None:
                hwm = max(hwm, kb)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(poll_s)
        seconds = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "seconds": seconds,
            "returncode": proc.returncode,
            "peak_rss_mb": round(hwm / 1024, 1),
            "ru_maxrss_mb": round(usage.ru_maxrss / 1024, 1),
            "user_s": round(usage.ru_utime, 3),
            "sys_s": round(usage.ru_stime, 3),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


# ------------------------------------------------------------------------------------------
# Time to the first request: a TCP relay in front of the server
# ------------------------------------------------------------------------------------------


class FirstRequestRelay:
    """Relays TCP connections to ``upstream`` and notes when the first request byte arrives
    (``time.monotonic``). Used only in runs of their own: it is not in the timed runs."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split("://", 1)[1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.first_at: float | None = None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.first_at = None

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as server:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            back = threading.Thread(target=self._pipe, args=(server, client), daemon=True)
            back.start()
            first = True
            while True:
                try:
                    data = client.recv(1 << 16)
                except OSError:
                    break
                if first and data:
                    now = time.monotonic()
                    with self._lock:
                        if self.first_at is None:
                            self.first_at = now
                    first = False
                if not data:
                    break
                try:
                    server.sendall(data)
                except OSError:
                    break
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_WR)
            back.join(60)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                break
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._listener.close()


# ------------------------------------------------------------------------------------------
# The reference pipeline (its own process)
# ------------------------------------------------------------------------------------------

_CLUSTER_PLUGINS = ("ganglia_pub", "ipmi_pub", "nagios_pub", "slurm_pub")


def reference_metric_day(url: str, metric: str, plugin: str, day: dt.date, out: Path) -> dict:
    """dxt_examon's way for one metric-day: the whole day in one query (both ends included,
    as its TSTART/TSTOP did; here the day's last millisecond, so rows match ours), every tag
    grouped, JSON -> row dicts -> pandas -> gzip CSV with pandas' defaults. The cluster
    filter only for plugins whose series carry the tag, as dxt_examon did."""
    import httpx
    import pandas as pd

    from dxt_core.windows import day_window

    w = day_window(day, "Europe/Rome")
    flt = {"cluster": ["marconi100"]} if plugin in _CLUSTER_PLUGINS else {}
    body: dict[str, Any] = {
        "start_absolute": w.start_ms,
        "end_absolute": w.end_ms - 1,
        "metrics": [{"name": metric, "tags": flt}],
    }
    tags = httpx.post(f"{url}/api/v1/datapoints/query/tags", json=body, timeout=600).json()
    results = tags["queries"][0]["results"]
    keys = sorted(results[0]["tags"]) if results else []
    if not keys:
        return {"points": 0, "bytes": 0}
    body["metrics"][0]["group_by"] = [{"name": "tag", "tags": keys}]
    doc = httpx.post(f"{url}/api/v1/datapoints/query", json=body, timeout=600).json()
    rows = []
    for res in doc["queries"][0]["results"]:
        group = next(g["group"] for g in res["group_by"] if g.get("name") == "tag")
        for ts, v in res["values"]:
            row = {"timestamp": ts, "value": v, "name": res["name"]}
            row.update(group)
            rows.append(row)
    if not rows:
        return {"points": 0, "bytes": 0}
    df = pd.DataFrame(rows)
    df["timestamp"] = pd.to_datetime(df["timestamp"], unit="ms", utc=True).dt.tz_convert(
        "Europe/Rome"
    )
    path = out / plugin / metric / f"{metric.replace('.', '_')}_{day}.csv.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, compression="gzip", index=False)
    return {"points": len(df), "bytes": path.stat().st_size}


def reference_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.command reference")
    p.add_argument("--url", required=True)
    p.add_argument("--catalog", required=True)
    p.add_argument("--day", default=DAY)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    points = size = 0
    for line in Path(a.catalog).read_text().splitlines()[1:]:
        metric, plugin = line.split(",")
        r = reference_metric_day(a.url, metric, plugin, dt.date.fromisoformat(a.day), Path(a.out))
        points += r["points"]
        size += r["bytes"]
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - t0,
                "points": points,
                "bytes": size,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )
    return 0


# ------------------------------------------------------------------------------------------
# The workload
# ------------------------------------------------------------------------------------------


def _archive_totals(root: Path) -> tuple[int, int]:
    """(rows, data bytes) from the manifests under ``root``."""
    rows = size = 0
    for m in root.rglob("*.manifest.json"):
        doc = json.loads(m.read_text())
        if doc.get("status") == "archived":
            rows += int(doc["rows"])
            size += int(doc["bytes"])
    return rows, size


def _command(url: str, catalog: Path, archive: Path) -> list[str]:
    return [
        DXT,
        *("extract", "examon", "--url", url, "--catalog", str(catalog)),
        *("--start-day", DAY, "--archive", str(archive), "-q"),
    ]


def _env() -> dict[str, str]:
    """The user's environment, without settings of ours that would change what runs, and
    with bytecode caching on: a pip-installed package has its ``.pyc`` files, and compiling
    dxt_core's sources at every start (PYTHONDONTWRITEBYTECODE) costs about 30 ms."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DXT_") and k != "PYTHONDONTWRITEBYTECODE"
    }


def httpx_cli_ms(repeat: int = 15) -> dict[str, float]:
    """What ``import httpx`` costs in a fresh interpreter, plain and the way dxt_core.http
    imports it (httpx's command line left out), medians of ``repeat`` alternating runs."""
    stand_in = "import dxt_core.http"
    runs: dict[str, list[float]] = {"python": [], "import_httpx": [], "dxt_core_http": []}
    codes = {"python": "pass", "import_httpx": "import httpx", "dxt_core_http": stand_in}
    for _ in range(repeat):
        for name, code in codes.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=_env(), check=True)
            runs[name].append((time.perf_counter() - t0) * 1000)
    out = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    # dxt_core.http imports more than httpx (orjson, ssl, dxt_core.errors): its figure is an
    # upper bound of httpx's cost without the command line.
    out["saved_at_least"] = round(out["import_httpx"] - out["dxt_core_http"], 1)
    return out


def run_ours(url: str, catalog: Path, work: Path) -> dict[str, Any]:
    archive = work / "ours"
    shutil.rmtree(archive, ignore_errors=True)
    r = timed_process(_command(url, catalog, archive), env=_env())
    if r["returncode"] != 0:
        raise SystemExit(f"dxt extract examon failed ({r['returncode']}):\n{r['stderr'][-3000:]}")
    rows, size = _archive_totals(archive)
    return {
        "seconds": round(r["seconds"], 3),
        "points": rows,
        "bytes": size,
        **{k: r[k] for k in ("peak_rss_mb", "ru_maxrss_mb", "user_s", "sys_s")},
    }


def run_reference(url: str, catalog: Path, work: Path) -> dict[str, Any]:
    out = work / "reference"
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "benchmarks.command", "reference"]
    argv += ["--url", url, "--catalog", str(catalog), "--out", str(out)]
    r = timed_process(argv, env={**_env(), "PYTHONPATH": str(ROOT)})
    if r["returncode"] != 0:
        raise SystemExit(f"reference failed ({r['returncode']}):\n{r['stderr'][-3000:]}")
    inner = json.loads(r["stdout"].strip().splitlines()[-1])
    return {
        "seconds": round(r["seconds"], 3),
        "inner_seconds": round(inner["seconds"], 3),
        "points": inner["points"],
        "bytes": inner["bytes"],
        "peak_rss_mb": round(inner["peak_rss_mb"], 1),
        "ru_maxrss_mb": r["ru_maxrss_mb"],
        "user_s": r["user_s"],
        "sys_s": r["sys_s"],
    }


def curl_metric_day(
    url: str, catalog: Path, work: Path, repeat: int, warm_up: bool = True
) -> dict[str, Any]:
    """The least any client must wait for the metric-day: ``curl`` receiving the whole day's
    points in one request (every tag grouped, the day's window in Examon's zone), to
    /dev/null, from the same server. Its tag keys are asked first and not timed; the first
    data request is a warm-up (the simulator then answers it from its cache, as it answers
    the command's own repeated requests) unless ``warm_up`` is false; the next ``repeat`` are
    timed, process start to exit, as the command is. One answer is kept to count its points
    (the others go to /dev/null)."""
    import httpx

    from dxt_core.windows import day_window

    metric, plugin = catalog.read_text().splitlines()[1].split(",")
    w = day_window(dt.date.fromisoformat(DAY), "Europe/Rome")
    flt = {"cluster": ["marconi100"]} if plugin in _CLUSTER_PLUGINS else {}
    body: dict[str, Any] = {
        "start_absolute": w.start_ms,
        "end_absolute": w.end_ms - 1,
        "metrics": [{"name": metric, "tags": flt}],
    }
    tags = httpx.post(f"{url}/api/v1/datapoints/query/tags", json=body, timeout=600).json()
    results = tags["queries"][0]["results"]
    keys = sorted(results[0]["tags"]) if results else []
    body["metrics"][0]["group_by"] = [{"name": "tag", "tags": keys}]
    path = work / "curl-body.json"
    path.write_text(json.dumps(body))
    argv = [
        "curl", "-sS", "--compressed", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
        "-H", "Content-Type: application/json", "--data-binary", f"@{path}",
        f"{url}/api/v1/datapoints/query",
    ]  # fmt: skip
    answer = work / "curl-answer.json"
    runs: list[float] = []
    size = 0
    first = 0 if warm_up else 1
    for i in range(first, repeat + 1):
        # the first run keeps the answer, to count its points (the others discard theirs)
        keep = i == first
        r = timed_process([*argv[:4], str(answer), *argv[5:]] if keep else argv, env=_env())
        code, size_s = r["stdout"].split()
        if r["returncode"] != 0 or code != "200":
            raise SystemExit(f"curl failed ({r['returncode']}, HTTP {code}): {r['stderr']}")
        size = int(size_s)
        if i:
            runs.append(round(r["seconds"], 3))
    doc = json.loads(answer.read_bytes())
    points = sum(len(res["values"]) for res in doc["queries"][0]["results"])
    return {
        "seconds": statistics.median(runs),
        "runs": runs,
        "answer_bytes": size,
        "points": points,
    }


def first_request_ms(url: str, catalog: Path, work: Path, repeat: int) -> list[float]:
    """Milliseconds from just before the fork to the first request byte at the server."""
    relay = FirstRequestRelay(url)
    out: list[float] = []
    try:
        for _ in range(repeat):
            relay.reset()
            archive = work / "ttfr"
            shutil.rmtree(archive, ignore_errors=True)
            t0 = time.monotonic()
            argv = _command(relay.url, catalog, archive)
            r = subprocess.run(argv, env=_env(), capture_output=True)
            if r.returncode != 0 or relay.first_at is None:
                raise SystemExit(f"first-request run failed:\n{r.stderr.decode()[-3000:]}")
            out.append(round((relay.first_at - t0) * 1000, 1))
    finally:
        relay.close()
    return out


_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_profile(url: str, catalog: Path, work: Path) -> dict[str, Any]:
    """One run under ``python -X importtime``: total import time, the largest top-level
    imports, and which heavy modules were imported at all."""
    archive = work / "importtime"
    shutil.rmtree(archive, ignore_errors=True)
    argv = [sys.executable, "-X", "importtime", *_command(url, catalog, archive)]
    r = subprocess.run(argv, env=_env(), capture_output=True, text=True)
    top: list[tuple[str, float]] = []
    loaded: set[str] = set()
    total_us = 0
    for line in r.stderr.splitlines():
        m = _IMPORT_LINE.match(line)
        if not m:
            continue
        self_us, cum_us, indent, name = int(m[1]), int(m[2]), m[3], m[4]
        total_us += self_us
        loaded.add(name)
        if len(indent) == 1:
            top.append((name, cum_us / 1000))
    top.sort(key=lambda t: -t[1])
    return {
        "returncode": r.returncode,
        "import_ms": round(total_us / 1000, 1),
        "top_level_ms": {n: round(ms, 1) for n, ms in top[:12]},
        "heavy_imported": sorted(
            h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in loaded)
        ),
        "modules": len(loaded),
    }


def _median_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    secs = statistics.median(r["seconds"] for r in runs)
    return {
        "seconds": round(secs, 3),
        "points": runs[0]["points"],
        "points_per_s": round(runs[0]["points"] / secs) if secs else 0,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "output_bytes": runs[0]["bytes"],
        "runs": runs,
    }


def cold_vs_curl(sim_args: list[str], catalog: Path, work: Path, repeat: int) -> dict[str, Any]:
    """curl and the command, alternating, against a simulator that computes every answer
    (``--no-cache``): the day's answer takes the server its real time to produce each time."""
    from dxt_core.simulate import spawn_simulator

    sim, url = spawn_simulator(
        "examon", ["--catalog", str(catalog), "--no-cache", "--jobs-port", "off", *sim_args]
    )
    try:
        curl_runs: list[float] = []
        ours: list[float] = []
        points = 0
        for _ in range(repeat):
            c = curl_metric_day(url, catalog, work, 1, warm_up=False)
            curl_runs.append(c["seconds"])
            points = c["points"]
            ours.append(run_ours(url, catalog, work)["seconds"])
    finally:
        procs.stop(sim)
    curl_s, ours_s = statistics.median(curl_runs), statistics.median(ours)
    return {
        "curl": {"seconds": curl_s, "runs": curl_runs, "points": points},
        "command": {"seconds": ours_s, "runs": ours},
        "ratio": round(ours_s / curl_s, 2),
    }


def _case(
    name: str, sim_args: list[str], catalog_text: str, work: Path, repeat: int
) -> dict[str, Any]:
    from dxt_core.simulate import spawn_simulator

    catalog = work / f"{name}.csv"
    catalog.write_text(catalog_text)
    sim, url = spawn_simulator("examon", ["--catalog", str(catalog), *sim_args])
    try:
        # One warm-up run of each fills the simulator's answer cache for its queries.
        run_ours(url, catalog, work)
        run_reference(url, catalog, work)
        ours = [run_ours(url, catalog, work) for _ in range(repeat)]
        ref = [run_reference(url, catalog, work) for _ in range(repeat)]
        ttfr = first_request_ms(url, catalog, work, max(repeat, 3))
        imports = import_profile(url, catalog, work)
        curl = None
        if name == "metric_day":
            imports["httpx_cli_ms"] = httpx_cli_ms()
            curl = {
                "cached": curl_metric_day(url, catalog, work, max(repeat, 3)),
                "cold": cold_vs_curl(sim_args, catalog, work, max(repeat, 3)),
            }
    finally:
        procs.stop(sim)
    o, r = _median_summary(ours), _median_summary(ref)
    res: dict[str, Any] = {
        "case": name,
        "simulator": " ".join(sim_args) + " (realistic data)",
        "metrics": len(catalog_text.splitlines()) - 1,
        "pipelines": {"command": o, "reference": r},
        "first_request_ms": {"median": statistics.median(ttfr), "runs": ttfr},
        "imports": imports,
        "ratios": {
            "speedup_vs_reference": round(r["seconds"] / o["seconds"], 1),
            "bytes_vs_reference": round(o["output_bytes"] / r["output_bytes"], 3),
        },
    }
    if curl is not None:
        res["curl"] = curl
        res["ratios"]["vs_curl"] = curl["cold"]["ratio"]
        res["ratios"]["vs_curl_cached"] = round(o["seconds"] / curl["cached"]["seconds"], 2)
        got = {"cached": curl["cached"]["points"], "cold": curl["cold"]["curl"]["points"]}
        bad = [kind for kind, n in got.items() if n != o["points"]]
        if bad:
            res["invalid"] = f"curl ({', '.join(bad)}) did not receive the {o['points']} points"
    if {x["points"] for x in ours + ref} != {o["points"]}:
        res["invalid"] = "the runs did not all archive the same number of points"
    return res


def workload(size: str, repeat: int) -> dict[str, Any]:
    day_nodes, catalog_nodes = SIZES[size]
    with tempfile.TemporaryDirectory(prefix="dxt-bench-command-") as tmp:
        work = Path(tmp)
        cases = [
            _case(
                "metric_day",
                ["--nodes", str(day_nodes), "--interval", "20"],
                "metric,plugin\nambient,ipmi_pub\n",
                work,
                repeat,
            ),
            _case(
                "catalog_day",
                ["--nodes", str(catalog_nodes), "--interval", "20"],
                catalog_slice(),
                work,
                repeat,
            ),
        ]
    day = cases[0]
    rss = [c["pipelines"]["command"]["peak_rss_mb"] for c in cases]
    size_ratios = [c["ratios"]["bytes_vs_reference"] for c in cases]
    goals = {
        "speedup_vs_reference": [
            day["ratios"]["speedup_vs_reference"],
            day["ratios"]["speedup_vs_reference"] >= GOALS["speedup_vs_reference_min"],
        ],
        "peak_rss_mb": [max(rss), max(rss) <= GOALS["peak_rss_mb_max"]],
        "bytes_vs_reference": [
            max(size_ratios),
            max(size_ratios) <= GOALS["bytes_vs_reference_max"],
        ],
        "first_request_ms": [
            max(c["first_request_ms"]["median"] for c in cases),
            all(c["first_request_ms"]["median"] <= GOALS["first_request_ms_max"] for c in cases),
        ],
        "vs_curl": [day["ratios"]["vs_curl"], day["ratios"]["vs_curl"] <= GOALS["vs_curl_max"]],
    }
    res: dict[str, Any] = {
        "workload": "command",
        "day": DAY,
        "repeat": repeat,
        "cases": {c["case"]: c for c in cases},
        "goals": {"targets": GOALS, "measured_and_met": goals},
    }
    bad = [c["case"] for c in cases if "invalid" in c]
    if bad:
        res["invalid"] = "; ".join(f"{c['case']}: {c['invalid']}" for c in cases if "invalid" in c)
    return res


def print_result(res: dict[str, Any]) -> None:
    for c in res["cases"].values():
        print(f"\ncommand / {c['case']}: {c['metrics']} metric(s), simulator {c['simulator']}")
        print(
            f"  {'pipeline':<10} {'points':>10} {'seconds':>8} {'points/s':>11} "
            f"{'peak RSS MB':>11} {'output bytes':>13}"
        )
        for name, s in c["pipelines"].items():
            print(
                f"  {name:<10} {s['points']:>10} {s['seconds']:>8.3f} {s['points_per_s']:>11} "
                f"{s['peak_rss_mb']:>11.1f} {s['output_bytes']:>13}"
            )
        print(
            f"  first request after {c['first_request_ms']['median']} ms; imports "
            f"{c['imports']['import_ms']} ms; heavy modules imported: "
            f"{', '.join(c['imports']['heavy_imported']) or 'none'}"
        )
        if "curl" in c:
            cached, cold = c["curl"]["cached"], c["curl"]["cold"]
            print(
                f"  curl, the day in one request: {cold['curl']['seconds']:.3f} s from a server "
                f"computing it (the command there: {cold['command']['seconds']:.3f} s), "
                f"{cached['seconds']:.3f} s repeated from the cache "
                f"({cached['answer_bytes']} bytes received)"
            )
        print("  ratios: " + ", ".join(f"{k}={v}" for k, v in c["ratios"].items()))
    print("  goals (measured, met): " + json.dumps(res["goals"]["measured_and_met"]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["reference"]:
        sys.exit(reference_main(sys.argv[2:]))
    sys.exit("usage: python -m benchmarks.command reference --url URL --catalog CSV --out DIR")
