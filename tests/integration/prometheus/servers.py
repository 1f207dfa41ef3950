"""The real Prometheus and VictoriaMetrics, started as separate processes for the tests.

Each server runs from the Debian package's binary on a free loopback port, with its data
directory in the test's temporary folder, in a process group of its own that the fixture
ends (SIGTERM, then SIGKILL) in its teardown.

* Prometheus: the test data is backfilled into a TSDB with ``promtool tsdb
  create-blocks-from openmetrics FILE DIR``, which Prometheus opens with a retention long
  enough for 2024's samples.
* VictoriaMetrics: the test data goes through ``/api/v1/import/prometheus`` and
  ``/internal/force_flush`` makes it searchable at once.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from dxt_core import procs
from tests.integration.prometheus import data
from tests.services import program

INSTALL = "apt-get install prometheus victoria-metrics"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(name: str) -> str:
    """The program's path; missing, the test skips locally and fails under CI
    (:func:`tests.services.program`)."""
    return program(name, INSTALL)


@dataclass
class ServerProcess:
    """One server process: its kind, URL, log file and the flags it was started with."""

    kind: str  # "prometheus" or "victoriametrics"
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    flags: tuple[str, ...] = field(default_factory=tuple)

    def stop(self) -> None:
        procs.stop(self.proc, grace=15)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def _spawn(
    kind: str,
    argv: Sequence[str],
    workdir: Path,
    ready_path: str,
    port: int,
    scheme: str = "http",
    auth: tuple[str, str] | None = None,
) -> ServerProcess:
    log = workdir / f"{kind}.log"
    with log.open("wb") as fh:
        proc = procs.start(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,  # a process group of its own: the teardown ends it whole
        )
    server = ServerProcess(kind, f"{scheme}://127.0.0.1:{port}", proc, log, tuple(argv[1:]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            r = httpx.get(server.url + ready_path, timeout=2, verify=False, auth=auth)
            if r.status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{kind} not ready within 60 s:\n{server.log_tail()}")


def build_blocks(workdir: Path) -> Path:
    """A TSDB directory holding the test data, made by promtool (once per session)."""
    promtool = binary("promtool")
    text = workdir / "data.om"
    text.write_text(data.openmetrics())
    blocks = workdir / "blocks"
    blocks.mkdir()
    run = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(text), str(blocks)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode != 0:
        raise RuntimeError(f"promtool failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    return blocks


#: A Prometheus that takes late samples: the remote-write receiver (``/api/v1/write``) and an
#: out-of-order window. Prometheus 2.42 refuses a sample older than the head's
#: ``appendableMinValidTime`` (the end of the newest block: the backfilled TSDB's) as "out of
#: bounds" unless ``storage.tsdb.out_of_order_time_window`` is set; then a sample not older
#: than the head's max time minus the window goes to the out-of-order head, which queries
#: read at once (prometheus/prometheus v2.42.0 tsdb/head_append.go ``appendable``,
#: ``initAppender``; tsdb/db.go ``Querier``: ``NewOOORangeHead``;
#: storage/remote/write_handler.go; config/config.go ``TSDBConfig``).
WRITABLE_FLAGS = ("--web.enable-remote-write-receiver",)
WRITABLE_CONFIG = "storage:\n  tsdb:\n    out_of_order_time_window: 36500d\n"


def start_prometheus(
    workdir: Path,
    blocks: Path,
    flags: Iterable[str] = (),
    web_config: Path | None = None,
    scheme: str = "http",
    auth: tuple[str, str] | None = None,
    config_extra: str = "",
) -> ServerProcess:
    """Prometheus over a copy of ``blocks``, no scrape targets; ``web_config`` is its
    ``--web.config.file`` (TLS, basic auth users), with the ``scheme`` and ``auth`` the
    readiness check then needs; ``config_extra`` is added to its configuration file."""
    exe = binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    tsdb = workdir / "tsdb"
    shutil.copytree(blocks, tsdb)
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n" + config_extra)
    for _ in range(3):
        port = free_port()
        argv = [
            exe,
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            *(["--web.config.file=" + str(web_config)] if web_config else []),
            *flags,
        ]
        try:
            return _spawn("prometheus", argv, workdir, "/-/ready", port, scheme, auth)
        except RuntimeError as exc:
            if "address already in use" not in str(exc):
                raise
    raise RuntimeError("prometheus: no free port after 3 tries")


def start_victoriametrics(
    workdir: Path,
    flags: Iterable[str] = (),
    load: bool = True,
    auth: tuple[str, str] | None = None,
) -> ServerProcess:
    """VictoriaMetrics with the test data imported and flushed; ``auth`` also starts it with
    ``-httpAuth.username``/``-httpAuth.password``."""
    exe = binary("victoria-metrics")
    workdir.mkdir(parents=True, exist_ok=True)
    storage = workdir / "vmdata"
    for _ in range(3):
        port = free_port()
        argv = [
            exe,
            f"-storageDataPath={storage}",
            "-retentionPeriod=100y",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-search.disableCache",  # answers straight from storage, as loaded
            *([f"-httpAuth.username={auth[0]}", f"-httpAuth.password={auth[1]}"] if auth else []),
            *flags,
        ]
        try:
            scheme = "https" if "-tls" in argv else "http"
            server = _spawn("victoriametrics", argv, workdir, "/health", port, scheme, auth)
            break
        except RuntimeError as exc:
            if "address already in use" not in str(exc):
                raise
    else:
        raise RuntimeError("victoria-metrics: no free port after 3 tries")
    if load:
        try:
            with httpx.Client(base_url=server.url, timeout=120, auth=auth, verify=False) as c:
                for chunk in data.exposition():
                    r = c.post("/api/v1/import/prometheus", content=chunk.encode())
                    r.raise_for_status()
                c.get("/internal/force_flush").raise_for_status()
        except BaseException:
            server.stop()
            raise
    return server


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _snappy_literal(data: bytes) -> bytes:
    """``data`` as a snappy block made of literals only (no compression): what
    ``snappy.Decode`` reads (github.com/golang/snappy decode.go: the uncompressed length as
    a varint, then elements; a literal's tag is ``(length - 1) << 2``, or 60..63 << 2 with
    the length in the next 1..4 bytes)."""
    out = bytearray(_varint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + n.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def remote_write(
    url: str, series: Sequence[tuple[dict[str, str], Sequence[tuple[int, float]]]]
) -> None:
    """Send samples to Prometheus's remote-write receiver: a ``prompb.WriteRequest``
    (prometheus/prometheus v2.42.0 prompb/remote.proto, types.proto: TimeSeries = 1 labels,
    2 samples; Label = 1 name, 2 value; Sample = 1 double value, 2 int64 timestamp),
    snappy-compressed (storage/remote/codec.go ``DecodeWriteRequest``)."""
    import struct

    request = b""
    for labels, samples in series:
        ts = b"".join(
            _field(1, _field(1, k.encode()) + _field(2, v.encode()))
            for k, v in sorted(labels.items())
        )
        for t, v in samples:
            ts += _field(2, b"\x09" + struct.pack("<d", v) + b"\x10" + _varint(t))
        request += _field(1, ts)
    r = httpx.post(
        url + "/api/v1/write",
        content=_snappy_literal(request),
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
        timeout=30,
    )
    if r.status_code != 204:
        raise RuntimeError(f"remote write refused: {r.status_code} {r.text}")


def vm_import(
    url: str, series: Sequence[tuple[dict[str, str], Sequence[tuple[int, float]]]]
) -> None:
    """Samples into VictoriaMetrics (``/api/v1/import/prometheus``, ms timestamps), flushed
    so that the next query sees them."""
    lines = []
    for labels, samples in series:
        name = labels["__name__"]
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        lines += [f"{name}{{{lab}}} {v!r} {t}" for t, v in samples]
    with httpx.Client(base_url=url, timeout=60) as c:
        c.post("/api/v1/import/prometheus", content="\n".join(lines) + "\n").raise_for_status()
        c.get("/internal/force_flush").raise_for_status()


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for Prometheus's ``basic_auth_users`` (glibc's crypt: ``$2b$``)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
