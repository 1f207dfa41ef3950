"""noida-db as a local Elasticsearch 8.15 stand-in (tests, benchmarks, demos), plus a bulk
loader for collectd documents. noida-db is a development dependency (the ``dev`` extra).

``noida-db start --only elasticsearch`` prints a harmless "GLIBC_2.39 not found" warning on
older C libraries; its stderr goes to a log file in the data directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

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
    proc = subprocess.Popen(
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
        # a session of its own lets stop_process end both
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
    stop_process(proc)
    text = (data_dir / "noida-db.log").read_text(errors="replace")[-2000:]
    raise DxtError(f"noida-db did not answer on {url} within {timeout:.0f} s:\n{text}")


def stop_process(proc: subprocess.Popen[Any], grace: float = 10) -> None:
    """Terminate the process group started by :func:`spawn_noida_elasticsearch` (the
    launcher and the server), then kill it if needed; always reap the launcher."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
        # the launcher is gone; give the server in its group the same grace
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def bulk_load(url: str, hits: Iterable[dict[str, Any]], chunk: int = 5000) -> int:
    """Index hits (``_index``, ``_id``, ``_source``) with collectd mappings; refresh once."""
    from elasticsearch import Elasticsearch, helpers

    es = Elasticsearch(url, request_timeout=120)
    created: set[str] = set()

    def actions() -> Iterator[dict[str, Any]]:
        for h in hits:
            index = h["_index"]
            if index not in created:
                if not es.indices.exists(index=index):
                    es.indices.create(index=index, mappings=COLLECTD_MAPPINGS)
                created.add(index)
            yield {"_index": index, "_id": h.get("_id"), "_source": h["_source"]}

    try:
        ok, errors = helpers.bulk(es, actions(), chunk_size=chunk, refresh=False)
        if errors:
            raise DxtError(f"bulk load into {url} failed: {errors!r:.500}")
        for index in created:
            es.indices.refresh(index=index)
        return int(ok)
    finally:
        es.close()
