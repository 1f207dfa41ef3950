"""noida-db as a local Elasticsearch 8.15 stand-in (tests, benchmarks, demos), and a bulk
loader for collectd documents. noida-db is a development dependency (the ``dev`` extra).

``noida-db start --only elasticsearch`` prints a harmless "GLIBC_2.39 not found" warning on
older C libraries; its stderr goes to a log file in the data directory.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson

from dxt_core import procs
from dxt_core.errors import DxtError

COLLECTD_MAPPINGS: dict[str, Any] = {
    "properties": {
        "@timestamp": {"type": "date"},
        "hostname": {"type": "keyword"},
        "plugin": {"type": "keyword"},
        "plugin_instance": {"type": "keyword"},
        "collectd_type": {"type": "keyword"},
        "type_instance": {"type": "keyword"},
        "value": {"type": "double"},
        "read": {"type": "double"},
        "write": {"type": "double"},
    }
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def noida_binary() -> str:
    exe = Path(sys.executable).parent / "noida-db"
    if exe.exists():
        return str(exe)
    found = shutil.which("noida-db")
    if not found:
        raise DxtError(
            "noida-db is not installed: pip install -e '.[dev]' (or pip install noida-db)"
        )
    return found


def spawn_noida_elasticsearch(
    data_dir: Path, timeout: float = 60
) -> tuple[subprocess.Popen[bytes], str]:
    """Start noida-db's Elasticsearch on a free loopback port; return the process and URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = (data_dir / "noida-db.log").open("wb")
    proc = procs.start(
        [
            noida_binary(),
            "start",
            "--only",
            "elasticsearch",
            "--data-dir",
            str(data_dir),
            "--host",
            "127.0.0.1",
            "--elasticsearch-port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        # the noida-db command is a Python launcher that runs the server as its child:
        # a session of its own lets procs.stop end both
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    procs.stop(proc)
    text = (data_dir / "noida-db.log").read_text(errors="replace")[-2000:]
    raise DxtError(f"noida-db did not answer on {url} within {timeout:.0f} s:\n{text}")


def bulk_load(url: str, hits: Iterable[dict[str, Any]], chunk: int = 5000) -> int:
    """Index hits (``_index``, ``_id``, ``_source``) with collectd mappings (``_bulk`` over
    plain HTTP, as :mod:`~dxt_core.backends.collectd_es.connection` talks); refresh once."""

    created: set[str] = set()
    loaded = 0
    with httpx.Client(base_url=url, timeout=600) as c:

        def send(lines: list[bytes]) -> int:
            r = c.post(
                "/_bulk",
                content=b"\n".join(lines) + b"\n",
                headers={"Content-Type": "application/x-ndjson"},
            )
            doc = r.json() if r.status_code == 200 else None
            if doc is None or doc.get("errors"):
                raise DxtError(f"bulk load into {url} failed: HTTP {r.status_code} {r.text:.500}")
            return len(doc.get("items", []))

        lines: list[bytes] = []
        for h in hits:
            index = h["_index"]
            if index not in created:
                r = c.put(f"/{index}", json={"mappings": COLLECTD_MAPPINGS})
                if r.status_code != 200 and b"resource_already_exists" not in r.content:
                    raise DxtError(f"creating index {index} in {url}: {r.text:.500}")
                created.add(index)
            action: dict[str, Any] = {"_index": index}
            if h.get("_id") is not None:
                action["_id"] = h["_id"]
            lines.append(orjson.dumps({"index": action}))
            lines.append(orjson.dumps(h["_source"]))
            if len(lines) >= 2 * chunk:
                loaded += send(lines)
                lines = []
        if lines:
            loaded += send(lines)
        for index in created:
            c.post(f"/{index}/_refresh").raise_for_status()
    return loaded
