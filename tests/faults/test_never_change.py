"""Fault matrix, third round: an archived day changes only on purpose, and never without a copy.

Each test is one case of issue 21 (docs/faults.md, section 4): it failed on the code before
the fix. The Examon cases run the real backend against the simulator (a separate process);
the archive cases go through :func:`dxt_core.archive_day.archive_one_day`, the template
every backend commits through.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core import Archive, RetryPolicy
from dxt_core.archive import DayKey
from dxt_core.archive_day import Staging, archive_one_day
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.examon.source import KairosDBSource
from dxt_core.errors import ArchiveError, ContentChanged, SourceShrank
from dxt_core.writers.base import WriteResult
from tests.conftest import SimulatorProcess

pytestmark = pytest.mark.integration

DAY = dt.date(2020, 3, 9)
AMBIENT = CatalogEntry("ambient", "ipmi_pub")
FULL = 4 * 4320
KEY = DayKey("toy", ("plugin", "metric"), DAY)


def examon_day(url: str, archive: Archive, tz: str = "Europe/Rome", day: dt.date = DAY):
    with KairosDBSource(
        ExamonConnection(url=url, time_zone=tz), retry=RetryPolicy(attempts=2, backoff_s=0.01)
    ) as src:
        return archive_examon_day(src, AMBIENT, day, archive)


@pytest.fixture(scope="module")
def late_sim(small_catalog):
    """The server after retention: the day's first hour gone."""
    sim = SimulatorProcess(
        ["--catalog", str(small_catalog), "--nodes", "4", "--data-start", "2020-03-09"]
    )
    yield sim
    sim.stop()


def toy_day(archive: Archive, lines: list[str], **kw) -> object:
    """Archive KEY with a gzip CSV of ``lines`` (after a header) through the template."""
    body = gzip.compress(("timestamp,value\n" + "".join(f"{x}\n" for x in lines)).encode(), mtime=0)

    def write(staging: Staging) -> None:
        with staging.open("csv.gz") as fh:
            fh.write(body)
        staging.done(
            "csv.gz",
            WriteResult(rows=len(lines), bytes=len(body), sha256=hashlib.sha256(body).hexdigest()),
        )

    return archive_one_day(archive, KEY, write, manifest={"source_url": "toy://"}, **kw)


# -- 1. the protection does not live only in the manifest ---------------------------------------


def test_a_deleted_manifest_still_protects_the_day(examon_sim, late_sim, tmp_path):
    archive = Archive(tmp_path)
    first = examon_day(examon_sim.url, archive)
    assert first.rows == FULL
    before = first.path.read_bytes()
    first.manifest.unlink()
    with pytest.raises(SourceShrank, match=r"\(17,280 -> 16,560\)"):
        examon_day(late_sim.url, archive)
    assert first.path.read_bytes() == before
    again = examon_day(examon_sim.url, archive)  # the full source: the manifest comes back
    assert again.rows == FULL and first.path.read_bytes() == before


def test_a_damaged_manifest_and_its_advice_never_lose_the_day(examon_sim, late_sim, tmp_path):
    archive = Archive(tmp_path)
    first = examon_day(examon_sim.url, archive)
    before = first.path.read_bytes()
    damaged = first.manifest.read_bytes()[:40]
    first.manifest.write_bytes(damaged)
    status, detail = archive.status(first.key)
    assert status == "corrupt"
    assert "delete" not in detail and "rerun the day" in detail
    with pytest.raises(SourceShrank):
        examon_day(late_sim.url, archive)  # following the advice against a shrunk source
    assert first.path.read_bytes() == before
    examon_day(examon_sim.url, archive)
    assert archive.status(first.key) == ("archived", "")
    versions = first.path.parent / ".versions"
    kept = [p for p in versions.iterdir() if p.name.startswith(first.manifest.name)]
    assert [p.read_bytes() for p in kept] == [damaged]


# -- 2. same rows, other content -----------------------------------------------------------------


def test_same_rows_other_content_needs_replace_and_keeps_a_version(tmp_path):
    archive = Archive(tmp_path)
    a = toy_day(archive, ["1,10", "2,20", "3,30"])
    old = a.path.read_bytes()
    with pytest.raises(ContentChanged, match=r"as many rows as the archive \(3\) but other"):
        toy_day(archive, ["1,10", "2,21", "3,30"])
    assert a.path.read_bytes() == old
    b = toy_day(Archive(tmp_path, replace=True), ["1,10", "2,21", "3,30"])
    assert b.path.read_bytes() != old
    sha8 = hashlib.sha256(old).hexdigest()[:8]
    version = a.path.parent / ".versions" / f"{a.path.name}.prev-{sha8}"
    assert version.read_bytes() == old
    doc = json.loads(b.manifest.read_bytes())
    assert doc["replaced"][0]["version"] == f".versions/{version.name}"
    assert doc["replaced_rows"] == 3
    assert b.extra["replaced"] == doc["replaced"]


def test_more_rows_keep_the_replaced_bytes_in_versions(tmp_path):
    archive = Archive(tmp_path)
    a = toy_day(archive, ["1,10", "2,20"])
    old = a.path.read_bytes()
    b = toy_day(archive, ["1,10", "2,20", "3,30"])  # the source's count grew: allowed
    assert b.rows == 3
    versions = list((a.path.parent / ".versions").glob(f"{a.path.name}.prev-*"))
    assert [p.read_bytes() for p in versions] == [old]
    assert json.loads(b.manifest.read_bytes())["replaced_rows"] == 2


def test_an_identical_rerun_keeps_no_version(tmp_path):
    archive = Archive(tmp_path)
    toy_day(archive, ["1,10", "2,20"])
    b = toy_day(archive, ["1,10", "2,20"])
    assert not (b.path.parent / ".versions").exists()
    assert "replaced" not in json.loads(b.manifest.read_bytes())


# -- 3. versions written under a temporary name ------------------------------------------------

_NO_LINKS_FULL_DISK = """
import errno, os, resource, signal, sys
sys.path.insert(0, {repo!r})
from dxt_core import Archive
from tests.faults.test_never_change import toy_day

def no_links(*a, **k):
    raise OSError(errno.EPERM, "Operation not permitted")

os.link = no_links  # a file system without hard links (vfat, some FUSE mounts)
if {limit}:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    toy_day(Archive({root!r}, replace=True), ["1,1"])
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
"""


def _replace_without_links(root: Path, limit: int) -> subprocess.CompletedProcess[str]:
    script = _NO_LINKS_FULL_DISK.format(repo=os.getcwd(), root=str(root), limit=limit)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def test_a_version_copy_that_meets_a_full_disk_leaves_no_version(tmp_path):
    archive = Archive(tmp_path)
    big = [f"{i},{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(4000)]
    a = toy_day(archive, big)
    old = a.path.read_bytes()
    assert len(old) > 64 << 10
    out = _replace_without_links(tmp_path, 64 << 10)
    assert out.returncode == 3, out.stderr
    assert "File too large" in out.stdout
    assert a.path.read_bytes() == old  # the day is untouched
    versions = a.path.parent / ".versions"
    assert [
        p.name for p in versions.iterdir() if ".prev-" in p.name and p.name.startswith(a.path.name)
    ] == []
    # The next replace (disk freed) copies the whole file, not trusting a partial one.
    out = _replace_without_links(tmp_path, 0)
    assert out.returncode == 0, out.stdout + out.stderr
    (version,) = versions.glob(f"{a.path.name}.prev-*")
    assert version.read_bytes() == old
    assert [p.name for p in versions.iterdir() if p.name.endswith(".tmp")] == []


def _full_disk_for_manifests(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The disk refuses (ENOSPC) the temporary file of the manifest ``name`` (its copy in
    .versions/ goes through), as a disk that the data file filled: the OS call is faked,
    the archive's code runs as it is."""
    import errno
    import tempfile

    real = tempfile.mkstemp

    def mkstemp(*a, prefix=None, **k):
        if prefix is not None and prefix.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, prefix=prefix, **k)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("first", [True, False])
def test_a_full_disk_at_the_manifest_leaves_the_day_as_it_was(tmp_path, monkeypatch, first):
    """A full disk when the manifest is written stops the commit before any file moves: a
    refetch that grew the day leaves the archived day and its manifest (it read "missing",
    its new data under the final name, the old manifest parked); a first write leaves no
    data file. Once there is space, the rerun commits."""
    archive = Archive(tmp_path)
    if not first:
        a = toy_day(archive, ["1,10", "2,20"])
        old, old_manifest = a.path.read_bytes(), a.manifest.read_bytes()
    day_dir = archive.manifest_path(KEY).parent
    with monkeypatch.context() as m:
        _full_disk_for_manifests(m, archive.manifest_path(KEY).name)
        with pytest.raises(ArchiveError, match=r"manifest\.json.*(No space left|disk is full)"):
            toy_day(archive, ["1,10", "2,20", "3,30"])
    left = sorted(p.name for p in day_dir.iterdir() if p.name != ".versions")
    if first:
        assert left == []
    else:
        assert a.path.read_bytes() == old and a.manifest.read_bytes() == old_manifest
        assert left == sorted([a.path.name, a.manifest.name])
    again = toy_day(archive, ["1,10", "2,20", "3,30"])
    assert again.rows == 3 and json.loads(again.manifest.read_text())["rows"] == 3


# -- 9. new directories are fsynced into their parents -----------------------------------------


def test_new_metric_directories_are_fsynced_into_their_parents(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:  # the OS call, watched: which directories reach the disk
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "archive"
    root.mkdir()
    toy_day(Archive(root), ["1,10"])
    for new in (root / "toy", root / "toy/plugin", root / "toy/plugin/metric"):
        assert str(new.parent) in synced, f"{new} created but {new.parent} never fsynced"


# -- 5. a point of another day in the middle of a series -----------------------------------------


def test_a_point_of_another_day_in_the_middle_of_a_series_is_dropped(examon_sim, tmp_path):
    import http.client
    from urllib.parse import urlsplit

    from tests.faults.proxy import Answer, FaultProxy

    up = urlsplit(examon_sim.url)
    stray = int(dt.datetime(2020, 3, 7, 12, tzinfo=dt.UTC).timestamp() * 1000)
    inserted = []

    def rewrite(req):
        if not req.path.split("?")[0].endswith("/api/v1/datapoints/query"):
            return None
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        conn.request("POST", req.path, body=req.body, headers={"Content-Type": "application/json"})
        doc = json.loads(conn.getresponse().read())
        conn.close()
        for result in doc["queries"][0]["results"]:
            values = result.get("values") or []
            if len(values) > 2 and not inserted:  # two days before, mid-series
                values.insert(len(values) // 2, [stray, 99.5])
                inserted.append(stray)
        return Answer(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    with FaultProxy(examon_sim.url) as proxy:
        proxy.rewrite = rewrite
        rep = examon_day(proxy.url, Archive(tmp_path))
    assert inserted
    text = gzip.decompress(rep.path.read_bytes()).decode()
    assert "2020-03-07" not in text
    assert rep.rows == FULL
    doc = json.loads(rep.manifest.read_bytes())
    assert doc["dropped_outside_window"] == 1
    assert doc["first_timestamp"].startswith("2020-03-09")
    assert doc["last_timestamp"].startswith("2020-03-09")


# -- 7. https redirected to http ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory):
    from tests.services import server_tls_context

    return server_tls_context(tmp_path_factory.mktemp("tls"))


class Downgrader:
    """An https server that redirects every request to ``target`` (http://), path kept."""

    def __init__(self, target: str, tls) -> None:
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(307)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_https_source_redirected_to_http_is_refused(examon_sim, tls_context, monkeypatch):
    from dxt_core.errors import QueryRejected
    from dxt_core.http import HttpClient
    from tests.faults.proxy import FaultProxy

    monkeypatch.delenv("DXT_ALLOW_HTTP_REDIRECT", raising=False)
    with FaultProxy(examon_sim.url) as clear:
        down = Downgrader(clear.url, tls_context)
        try:
            c = HttpClient(
                down.url, user="alice", password="s3cret", verify_tls=False,
                retry=RetryPolicy(attempts=1),
            )  # fmt: skip
            with c, pytest.raises(QueryRejected, match="redirected from https to http") as ei:
                c.get_json("api/v1/version")
            assert "DXT_ALLOW_HTTP_REDIRECT" in str(ei.value)
            assert clear.seen == []  # not a byte in clear text
        finally:
            down.close()


def test_an_allowed_downgrade_is_recorded_in_the_manifest(
    examon_sim, tls_context, tmp_path, monkeypatch
):
    monkeypatch.setenv("DXT_ALLOW_HTTP_REDIRECT", "1")
    down = Downgrader(examon_sim.url, tls_context)
    try:
        with KairosDBSource(
            ExamonConnection(url=down.url, verify_tls=False),
            retry=RetryPolicy(attempts=1),
        ) as src:
            rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path))
    finally:
        down.close()
    doc = json.loads(rep.manifest.read_bytes())
    assert doc["source_url"] == down.url
    assert doc["source_url_used"].startswith(examon_sim.url.rstrip("/") + "/api/v1/")


# -- 8. the answer cap bounds the process, all workers together -----------------------------------

_BOMB_SERVER = """
import http.server, sys, zlib
n = int(sys.argv[1])
z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
body = b"".join(z.compress(bytes(1 << 20)) for _ in range(n >> 20)) + z.flush()

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path.endswith("/warm"):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

_WORKERS = """
import os, sys, threading, time
sys.path.insert(0, {repo!r})
from dxt_core.budget import ANSWER_BUDGET, holding_answers, tune_malloc
from dxt_core.http import HttpClient, RetryPolicy

tune_malloc()  # as the dxt command and an Airflow task do

def status(field):
    # This process's own figures. Not getrusage's ru_maxrss: Linux carries it across exec,
    # so a child of a large process (pytest in a full run) starts from its parent's peak.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no " + field + " in /proc/self/status")

c = HttpClient({url!r}, max_answer_bytes={cap}, retry=RetryPolicy(attempts=1), deadline_s=30)
c.request("GET", "warm")  # imports, TLS-less client, one answer: the baseline after it
done = threading.Event()
peak = [status("VmRSS")]

def sample():
    while not done.is_set():
        peak.append(max(peak[-1], status("VmRSS")))
        time.sleep(0.001)

sampler = threading.Thread(target=sample)
sampler.start()
time.sleep(0.05)
base = status("VmRSS")  # with the sampler running
sizes, charged = [], []

def unit(i):
    # A unit (as the runner runs one) of two answers, each worked on for a while (a
    # parser) before the next request.
    with holding_answers():
        for _ in range(2):
            body = c.request("GET", "x")
            charged.append(ANSWER_BUDGET.held_by_this_thread() >= len(body))
            time.sleep(0.2)
            sizes.append(len(body))
            del body

threads = [threading.Thread(target=unit, args=(i,)) for i in range({workers})]
for t in threads:
    t.start()
for t in threads:
    t.join()
# Ended units keep no charge: one more answer still fits under the cap.
sizes.append(len(c.request("GET", "x")))
done.set()
sampler.join()
print(sizes, all(charged), peak[-1] - base, status("VmHWM") - base, len(peak), ANSWER_BUDGET.peak)
"""

#: What the process may hold beyond the cap with four workers: the readers' decoder states
#: (ISA-L's is 144 KiB), network chunks, the threads and the interpreter's own allocations;
#: 2-3 MiB measured (docs/faults.md).
MARGIN = 8 << 20


@pytest.mark.slow
def test_four_workers_with_near_cap_answers_stay_within_the_cap():
    cap, answer, workers = 64 << 20, 60 << 20, 4
    server = subprocess.Popen(
        [sys.executable, "-c", _BOMB_SERVER, str(answer)], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(server.stdout.readline())
        script = _WORKERS.format(
            repo=os.getcwd(), url=f"http://127.0.0.1:{port}", cap=cap, workers=workers
        )
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    assert out.returncode == 0, out.stderr
    sizes, charged, sampled, hwm, samples, budget_peak = out.stdout.rsplit(" ", 5)
    assert sizes.strip() == str([answer] * (2 * workers + 1))
    # The budget's own accounting: an answer stays charged while its worker holds it, and
    # what was charged at once (answers being read and answers in workers' hands) never
    # passed the cap. Before, an answer left the budget once read: four workers held four.
    assert charged == "True"
    assert int(budget_peak) <= cap
    # The process: its resident memory, sampled every millisecond by a thread, and the
    # kernel's own high-water mark, grew by at most the cap and the margin. Before the
    # budget, four workers fetching these answers grew it by 216-241 MiB.
    print(
        f"RSS grew {int(sampled) / 2**20:.1f} MiB ({int(samples)} samples; VmHWM "
        f"{int(hwm) / 2**20:.1f} MiB); budget peak {int(budget_peak) >> 20} MiB; cap "
        f"{cap >> 20} MiB + {MARGIN >> 20} MiB margin"
    )
    assert int(samples) > 100
    assert int(sampled) <= cap + MARGIN
    assert int(hwm) <= cap + MARGIN


# -- 4. the zone of the archive's days ----------------------------------------------------------


def test_a_run_in_another_zone_is_refused_naming_both(examon_sim, tmp_path):
    from dxt_core.errors import ConfigError

    archive = Archive(tmp_path)
    first = examon_day(examon_sim.url, archive, tz="Europe/Rome")
    record = json.loads((tmp_path / ".dxt-days-examon.json").read_bytes())
    assert record["time_zone"] == "Europe/Rome"
    assert json.loads(first.manifest.read_bytes())["day_definition"]["time_zone"] == "Europe/Rome"
    next_day = DAY + dt.timedelta(days=1)
    with pytest.raises(ConfigError, match=r"in Europe/Rome .*this run cuts them in UTC"):
        examon_day(examon_sim.url, Archive(tmp_path), tz="UTC", day=next_day)
    assert not (first.path.parent / f"{next_day}.csv.gz").exists()
    # An archive older than the record: the zone is read from the manifests beside the day.
    (tmp_path / ".dxt-days-examon.json").unlink()
    with pytest.raises(ConfigError, match=r"in Europe/Rome \(manifest .*this run cuts them in UTC"):
        examon_day(examon_sim.url, Archive(tmp_path), tz="UTC", day=next_day)
    assert not (tmp_path / ".dxt-days-examon.json").exists()
    examon_day(examon_sim.url, Archive(tmp_path), tz="Europe/Rome", day=next_day)


# -- 6. the index is a cache --------------------------------------------------------------------


def test_a_stale_index_never_reports_a_lost_day_as_empty(tmp_path, monkeypatch):
    import sqlite3

    import dxt_core.index as ix
    from dxt_core.coverage import coverage
    from dxt_core.scan import scan_states

    archive = Archive(tmp_path)
    toy_day(archive, [])  # an empty day, indexed as "empty"
    # The next commit's index update fails: another process holds the index's lock.
    monkeypatch.setattr(ix, "BUSY_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(ix.index_path(archive.root), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        day = toy_day(archive, ["1,10", "2,20"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert ix.ManifestIndex(tmp_path).get("toy", "plugin/metric", DAY).status == "empty"
    day.path.unlink()  # then the data file is lost
    (row,) = coverage(archive, "toy", [KEY.parts], [DAY])
    assert row.status == "corrupt", row
    grid = scan_states(archive, "toy", [KEY.parts], [DAY])
    assert grid.state(0, 0) == "corrupt"
    # The reader repaired the index from the manifest.
    assert ix.ManifestIndex(tmp_path).get("toy", "plugin/metric", DAY).status == "archived"


_READ_ONLY_READER = """
import logging, sys
sys.path.insert(0, {repo!r})
logging.basicConfig(level=logging.WARNING)
from dxt_core import Archive
from dxt_core.index import ManifestIndex
from dxt_core.scan import scan_states
import datetime as dt
archive = Archive({root!r})
grid = scan_states(archive, "toy", [("plugin", "metric")], [dt.date(2020, 3, 9)])
print(grid.rows, ManifestIndex({root!r}).exists())
"""


def test_a_read_only_archive_is_read_through_its_index_without_writing():
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="dxt-ro-"))  # outside pytest's 0700 directories
    try:
        os.chmod(base, 0o755)
        root = base / "archive"
        archive = Archive(root)
        toy_day(archive, ["1,10"])
        index = root / ".dxt-index.sqlite"
        before = (index.stat().st_mtime_ns, index.read_bytes())
        # Another user: the archive is readable, not writable (a read-only mount, as far
        # as this process can tell).
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", _READ_ONLY_READER.format(repo=os.getcwd(), root=str(root))],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "['A'] True"
        assert "reading the manifests instead" not in out.stderr, out.stderr
        assert (index.stat().st_mtime_ns, index.read_bytes()) == before
        assert sorted(p.name for p in root.iterdir()) == [".dxt-index.sqlite", "toy"]
    finally:
        shutil.rmtree(base)


def test_a_damaged_file_is_repaired_and_its_bytes_kept(tmp_path):
    archive = Archive(tmp_path)
    a = toy_day(archive, ["1,10", "2,20"])
    damaged = a.path.read_bytes()[:20]
    a.path.write_bytes(damaged)  # no longer what its manifest describes: corrupt
    b = toy_day(archive, ["1,10", "2,20"])  # the same rows: a repair, not a change
    assert archive.status(b.key, verify=True) == ("archived", "")
    (version,) = (a.path.parent / ".versions").glob(f"{a.path.name}.prev-*")
    assert version.read_bytes() == damaged
