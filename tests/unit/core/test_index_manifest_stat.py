"""The manifest index notices a manifest rewritten in place (its size and mtime are indexed and
stat'ed on every read), rebuilds an index of an older schema by itself, and a rebuild that
meets a full or read-only disk is one ArchiveError line (exit 2), never a traceback."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dxt_core.archive import Archive
from dxt_core.coverage import coverage
from dxt_core.index import INDEX_NAME, SCHEMA_VERSION, ManifestIndex
from tests.unit.core.test_index import commit as commit_day

D1, D2 = dt.date(2024, 5, 1), dt.date(2024, 5, 2)
UNIT = ("ipmi_pub", "ambient")


def commit(archive: Archive, day: dt.date, payload: bytes) -> Path:
    return commit_day(archive, UNIT, day, payload)


@pytest.fixture
def archive(tmp_path) -> Archive:
    a = Archive(tmp_path / "archive")
    commit(a, D1, b"a,b\n1,2\n")
    commit(a, D2, b"a,b\n3,4\n")
    return a


def states(archive: Archive) -> dict[dt.date, tuple[str, str]]:
    return {r.day: (r.status, r.detail) for r in coverage(archive, "examon", [UNIT], [D1, D2])}


def rewrite_in_place(path: Path, text: str) -> None:
    """Rewrite a file in place (same inode, no new directory entry: the directory's mtime
    and number of entries stay as they were)."""
    time.sleep(0.02)  # past the file system clock's tick of the indexed write
    with open(path, "r+") as fh:
        fh.seek(0)
        fh.write(text)
        fh.truncate()


def test_a_manifest_garbled_in_place_reads_corrupt_through_the_index(archive):
    d = archive.root / "examon" / "ipmi_pub" / "ambient"
    assert states(archive)[D1] == ("archived", "")
    before = os.stat(d)
    rewrite_in_place(d / f"{D1}.manifest.json", "garbage\n")
    assert (os.stat(d).st_mtime_ns, len(os.listdir(d))) == (before.st_mtime_ns, 4)
    status, detail = states(archive)[D1]
    assert status == "corrupt", detail
    assert states(archive)[D2] == ("archived", "")
    # the index's row was repaired: the index alone now says so
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", "ipmi_pub/ambient", D1).status == "corrupt"


def test_an_edited_manifest_field_is_read_again_and_the_index_repaired(archive):
    d = archive.root / "examon" / "ipmi_pub" / "ambient"
    manifest = d / f"{D2}.manifest.json"
    doc = json.loads(manifest.read_text())
    doc["bytes"] = 999  # the data file no longer matches what the manifest says
    doc["rows"] = 12345
    rewrite_in_place(manifest, json.dumps(doc))
    status, detail = states(archive)[D2]
    assert status == "corrupt" and "manifest says 999" in detail
    with ManifestIndex(archive.root) as idx:
        entry = idx.get("examon", "ipmi_pub/ambient", D2)
        assert (entry.rows, entry.bytes) == (12345, 999)
    assert states(archive)[D1] == ("archived", "")


OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE manifests (
    source TEXT NOT NULL, unit TEXT NOT NULL, day TEXT NOT NULL, status TEXT NOT NULL,
    manifest TEXT NOT NULL, file TEXT, rows INTEGER, bytes INTEGER, sha256 TEXT,
    written_at TEXT, detail TEXT NOT NULL DEFAULT '', names TEXT NOT NULL DEFAULT '',
    sizes TEXT NOT NULL DEFAULT '', PRIMARY KEY (source, unit, day)) WITHOUT ROWID;
CREATE TABLE dirs (source TEXT NOT NULL, unit TEXT NOT NULL, mtime_ns INTEGER NOT NULL,
    entries INTEGER NOT NULL, PRIMARY KEY (source, unit)) WITHOUT ROWID;
INSERT INTO meta VALUES ('schema', '3');
"""


def test_an_index_of_the_older_schema_is_rebuilt_by_itself(archive):
    """An index written before manifests' stats were indexed (schema 3) cannot tell a
    manifest rewritten in place: the first process that may write it rebuilds it."""
    d = archive.root / "examon" / "ipmi_pub" / "ambient"
    (archive.root / INDEX_NAME).unlink()
    conn = sqlite3.connect(archive.root / INDEX_NAME)
    conn.executescript(OLD_SCHEMA)
    conn.close()
    assert states(archive)[D1] == ("archived", "")
    conn = sqlite3.connect(archive.root / INDEX_NAME)
    (schema,) = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    n = conn.execute("SELECT COUNT(*) FROM manifests WHERE msize IS NOT NULL").fetchone()[0]
    conn.close()
    assert (schema, n) == (SCHEMA_VERSION, 2)
    rewrite_in_place(d / f"{D1}.manifest.json", "garbage\n")
    assert states(archive)[D1][0] == "corrupt"


def test_threads_that_find_an_older_index_rebuild_it_once(archive, caplog):
    """The first run after an upgrade, with --workers: each worker thread found the older
    index and rebuilt it into the process's one temporary file, removing it under the others
    ("disk I/O error ... check the disk"; 3-6 rebuilds in one run)."""
    import threading

    (archive.root / INDEX_NAME).unlink()
    conn = sqlite3.connect(archive.root / INDEX_NAME)
    conn.executescript(OLD_SCHEMA)
    conn.close()
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def read() -> None:
        start.wait()
        try:
            ManifestIndex(archive.root).exists()
        except BaseException as exc:  # reported below
            errors.append(exc)

    with caplog.at_level("WARNING", logger="dxt_core"):
        threads = [threading.Thread(target=read) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    rebuilt = [r for r in caplog.records if "rebuilding it from the manifests" in r.getMessage()]
    assert len(rebuilt) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if "disk I/O" in r.getMessage()]
    assert states(archive)[D1] == ("archived", "")


# -- dxt index rebuild on a disk that refuses the write ----------------------------------------


def rebuild_cli(root: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        {prelude}
        from dxt_core.cli import main
        sys.exit(main(["index", "rebuild", "--archive", {str(root)!r}]))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )


def test_index_rebuild_on_a_full_disk_is_one_error_line(archive):
    (archive.root / INDEX_NAME).unlink()
    # a file size limit of 8 KiB: SQLite cannot grow the new index past its first pages
    out = rebuild_cli(
        archive.root,
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 10, 8 << 10))",
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"dxt: error: cannot write the index {archive.root / INDEX_NAME}.")
    assert "(ulimit -f)" in line, line
    assert not list(archive.root.glob(f"{INDEX_NAME}*"))  # no temporary file left behind


def private_mount(setup: str, root: str) -> subprocess.CompletedProcess[str]:
    """``dxt index rebuild --archive root`` in a private mount namespace after ``setup``
    (skipped where this process may not mount)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    where = Path(root) if Path(root).is_dir() else Path(root).parent
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {where} {where}"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("cannot make a private mount here")
    code = (
        "import sys; from dxt_core.cli import main; "
        f"sys.exit(main(['index', 'rebuild', '--archive', {root!r}]))"
    )
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{setup} && exec {sys.executable} -c \"{code}\""],
        capture_output=True, text=True, timeout=120, cwd=os.getcwd(),
    )  # fmt: skip


def test_index_rebuild_on_a_full_file_system_is_one_error_line(archive, tmp_path):
    (archive.root / INDEX_NAME).unlink()
    small = tmp_path / "small"
    small.mkdir()
    root = str(small / "archive")
    # a 64 KiB file system holding the archive and little more
    out = private_mount(
        f"mount -t tmpfs -o size=64k tmpfs {small} && cp -r {archive.root} {root} && "
        f"(head -c 1000000 /dev/zero > {small}/filler 2>/dev/null || true)",
        root,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"dxt: error: cannot write the index {root}/{INDEX_NAME}"), line
    assert "the disk is full (or out of inodes: df -i): free space, then rerun" in line, line


def test_index_rebuild_on_a_read_only_file_system_is_one_error_line(archive):
    root = str(archive.root)
    out = private_mount(f"mount --bind {root} {root} && mount -o remount,bind,ro {root}", root)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("dxt: error: cannot write the index "), line
    assert "read-only file system" in line, line


def test_a_full_index_database_reports_the_full_disk_not_a_failed_rollback(tmp_path):
    """SQLite rolls a transaction back itself when the database is full (SQLITE_FULL): a
    ROLLBACK after it raised "cannot rollback - no transaction is active", which replaced
    the cause in every warning and error. The database is made full for real
    (``max_page_count``)."""
    import sqlite3

    from dxt_core.index import IndexEntry, ManifestIndex

    idx = ManifestIndex(tmp_path)
    idx.upsert([IndexEntry("s", "u", "2020-01-01", "archived", "m")])
    conn = idx._connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    many = [
        IndexEntry("s", "u", f"2020-02-{i:04d}", "archived", "m" * 200, detail="x" * 1000)
        for i in range(500)
    ]
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        idx.upsert(many)
    assert not conn.in_transaction
    import datetime as dt

    days = idx.entries("s", dt.date(2020, 1, 1), dt.date(2020, 12, 31))
    assert [day for _, day, *_ in days] == ["2020-01-01"]
