"""The manifest index: updated by every commit, rebuilt from manifests, checked against disk."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import sqlite3
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.cli import main as dxt_main
from dxt_core.coverage import coverage
from dxt_core.errors import SourceShrank
from dxt_core.index import INDEX_NAME, ManifestIndex, rebuild
from dxt_core.scan import scan_states

D1, D2, D3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)
DAYS = [D1, D2, D3]


def commit(archive: Archive, parts: tuple[str, ...], day: dt.date, payload: bytes | None) -> Path:
    """Commit one day the way the backends do: a transaction, data staged, manifest last."""
    key = DayKey("examon", parts, day)
    with archive.begin(key) as write:
        if payload is None:
            return write.commit({"status": "empty", "file": None, "rows": 0, "bytes": 0})
        with write.open("csv.gz") as fh:
            fh.write(payload)
        return write.commit(
            {
                "status": "archived",
                "file": f"{day.isoformat()}.csv.gz",
                "rows": len(payload),
                "bytes": len(payload),
                "sha256": hashlib.sha256(payload).hexdigest(),
            }
        )


@pytest.fixture
def archive(tmp_path) -> Archive:
    a = Archive(tmp_path / "archive")
    commit(a, ("ipmi_pub", "ambient"), D1, b"a,b\n1,2\n")
    commit(a, ("ipmi_pub", "ambient"), D2, None)
    commit(a, ("ipmi_pub", "pcie"), D1, b"x\n")
    return a


UNITS = [("ipmi_pub", "ambient"), ("ipmi_pub", "pcie"), ("nagios_pub", "state")]


def test_every_commit_updates_the_index(archive):
    assert (archive.root / INDEX_NAME).is_file()
    with ManifestIndex(archive.root) as idx:
        e = idx.get("examon", "ipmi_pub/ambient", D1)
        assert e is not None
        assert (e.status, e.file, e.rows, e.bytes) == ("archived", "2024-05-01.csv.gz", 8, 8)
        assert e.sha256 == hashlib.sha256(b"a,b\n1,2\n").hexdigest()
        assert idx.get("examon", "ipmi_pub/ambient", D2).status == "empty"
        assert idx.get("examon", "ipmi_pub/ambient", D3) is None
        assert idx.units("examon") == ["ipmi_pub/ambient", "ipmi_pub/pcie"]
    grid = scan_states(archive, "examon", UNITS, DAYS)
    assert grid.rows == ["AEM", "AMM", "MMM"]
    assert grid.counts() == {"archived": 2, "empty": 1, "missing": 6, "corrupt": 0, "kept": 0}


def test_a_kept_day_shows_kept_and_a_replace_updates_the_index(archive):
    # The source lost the day: the never-shrink rule keeps the archived file.
    with pytest.raises(SourceShrank):
        commit(archive, ("ipmi_pub", "ambient"), D1, None)
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", "ipmi_pub/ambient", D1).status == "archived"
    assert scan_states(archive, "examon", UNITS[:1], DAYS).rows == ["KEM"]
    [row] = [r for r in coverage(archive, "examon", UNITS[:1], [D1])]
    assert (row.status, row.kept) == ("archived", True)
    assert (
        row.detail.startswith("kept: on ") and "the source had 0 rows, the archive 8" in row.detail
    )
    # With replace the new (empty) day wins, and the index follows.
    commit(Archive(archive.root, replace=True), ("ipmi_pub", "ambient"), D1, None)
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", "ipmi_pub/ambient", D1).status == "empty"
    assert scan_states(archive, "examon", UNITS[:1], DAYS).rows == ["EEM"]


def test_deleted_files_show_although_the_index_still_lists_them(archive):
    (archive.root / "examon/ipmi_pub/ambient/2024-05-01.csv.gz").unlink()
    (archive.root / "examon/ipmi_pub/pcie/2024-05-01.manifest.json").unlink()
    grid = scan_states(archive, "examon", UNITS, DAYS)
    assert grid.rows[:2] == ["CEM", "MMM"]
    assert grid.details == {(0, 0): "data file 2024-05-01.csv.gz is missing"}


def test_sizes_are_compared_only_when_asked(archive):
    (archive.root / "examon/ipmi_pub/ambient/2024-05-01.csv.gz").write_bytes(b"a,b\n")
    assert scan_states(archive, "examon", UNITS[:1], DAYS).rows == ["AEM"]
    grid = scan_states(archive, "examon", UNITS[:1], DAYS, check_sizes=True)
    assert grid.rows == ["CEM"]
    assert "has 4 bytes, manifest says 8" in grid.details[(0, 0)]


def test_a_manifest_the_index_never_saw_is_read_from_disk(archive):
    (archive.root / INDEX_NAME).unlink()
    commit(archive, ("nagios_pub", "state"), D3, b"ok\n")  # creates a new index: one row
    with ManifestIndex(archive.root) as idx:
        assert idx.units("examon") == ["nagios_pub/state"]
    (archive.root / "examon/ipmi_pub/pcie/2024-05-02.manifest.json").write_text("{not json")
    grid = scan_states(archive, "examon", UNITS, DAYS)
    assert grid.rows == ["AEM", "ACM", "MMA"]
    assert "unreadable manifest" in grid.details[(1, 1)]


def test_a_new_index_does_not_take_over_a_unit_whose_earlier_days_it_never_read(archive):
    """The index removed (or replaced by an older copy), then a day of a unit that already
    has days committed: the index must not record the directory as seen, or the earlier
    days show missing in coverage and refill fetches them again."""
    (archive.root / INDEX_NAME).unlink()
    commit(archive, ("ipmi_pub", "pcie"), D2, b"y\n")  # a new index: pcie's day only
    commit(archive, ("ipmi_pub", "ambient"), D3, b"c\n")  # into the index, not its D1, D2
    grid = scan_states(archive, "examon", UNITS[:1], DAYS)
    assert grid.rows == ["AEA"], grid.rows


def test_a_failed_index_update_never_fails_the_commit(tmp_path, caplog):
    a = Archive(tmp_path / "archive")
    (a.root / INDEX_NAME).mkdir(parents=True)  # sqlite cannot open a directory
    with caplog.at_level(logging.WARNING, logger="dxt_core.index"):
        commit(a, ("ipmi_pub", "ambient"), D1, b"1\n")
    assert (a.root / "examon/ipmi_pub/ambient/2024-05-01.manifest.json").is_file()
    assert "dxt index rebuild --archive" in caplog.text
    assert a.status(DayKey("examon", ("ipmi_pub", "ambient"), D1)) == ("archived", "")


def test_rebuild_recreates_the_index_from_manifests(archive):
    (archive.root / "examon/ipmi_pub/pcie/2024-05-02.manifest.json").write_text("[]")
    hive = ("plugin=ipmi_pub", "metric=ambient")
    commit(archive, hive, D3, b"p\n")
    (archive.root / INDEX_NAME).unlink()
    report = rebuild(archive.root)
    assert (report.manifests, report.corrupt, report.sources) == (5, 1, {"examon": 5})
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", "ipmi_pub/pcie", D2).status == "corrupt"
        assert idx.get("examon", "plugin=ipmi_pub/metric=ambient", D3).manifest == (
            "_2024-05-03.manifest.json"
        )
        rows = idx._connection().execute("SELECT count(*) FROM manifests").fetchone()[0]
    assert rows == 5
    assert scan_states(archive, "examon", [hive], DAYS).rows == ["MMA"]
    assert not list(archive.root.glob(f"{INDEX_NAME}.*"))  # no temporary file left


def test_rebuild_of_a_missing_directory_says_so(tmp_path):
    with pytest.raises(Exception, match=r"nope does not exist: check --archive"):
        rebuild(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match=r"file is not a directory: check --archive"):
        rebuild(tmp_path / "file")


def test_coverage_from_the_index_agrees_with_reading_every_manifest(archive):
    (archive.root / "examon/ipmi_pub/pcie/2024-05-01.csv.gz").write_bytes(b"")
    (archive.root / "examon/ipmi_pub/ambient/2024-05-03.manifest.json").write_text("nope")
    fast = coverage(archive, "examon", UNITS, DAYS)  # the index, checked against the disk
    verified = coverage(archive, "examon", UNITS, DAYS, verify=True)  # every manifest read
    (archive.root / INDEX_NAME).unlink()
    slow = coverage(archive, "examon", UNITS, DAYS)  # no index: every manifest read
    assert not (archive.root / INDEX_NAME).exists()  # reading creates no index
    want = [(r.parts, r.day, r.status) for r in slow]
    assert [(r.parts, r.day, r.status) for r in fast] == want
    assert [(r.parts, r.day, r.status) for r in verified] == want
    assert {r.status for r in fast} == {"archived", "empty", "missing", "corrupt"}


def test_dxt_index_rebuild_and_coverage_use_it(archive, tmp_path, capsys):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\npcie,ipmi_pub\n")
    (archive.root / INDEX_NAME).unlink()
    assert dxt_main(["index", "rebuild", "--archive", str(archive.root)]) == 0
    out = capsys.readouterr().out
    assert f"{INDEX_NAME}: 3 manifests (3 examon), 0 unreadable" in out
    # A manifest rewritten in place (garbage now): the fast path stats every manifest
    # against the index's record of it, reads the changed one again and agrees with --verify.
    (archive.root / "examon/ipmi_pub/ambient/2024-05-02.manifest.json").write_text("junk")
    args = ["coverage", "--archive", str(archive.root), "--catalog", str(catalog)]
    args += ["--start-day", "2024-05-01", "--end-day", "2024-05-02", "--json"]
    assert dxt_main(args) == 3
    import json

    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"archived": 2, "empty": 0, "missing": 1, "corrupt": 1}
    assert dxt_main([*args, "--verify"]) == 3
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"archived": 2, "empty": 0, "missing": 1, "corrupt": 1}
    # a rebuild names the unreadable manifest once, on stderr, and says where its day shows
    # (it said "1 unreadable", exit 0, nothing more; then it named the file twice, on stdout)
    assert dxt_main(["index", "rebuild", "--archive", str(archive.root)]) == 0
    said = capsys.readouterr()
    assert "3 manifests (3 examon), 1 unreadable" in said.out
    assert "unreadable:" not in said.out and "corrupt (X)" not in said.out, said.out
    named = "  unreadable: examon/ipmi_pub/ambient/2024-05-02.manifest.json: unreadable manifest"
    assert named in said.err, said.err
    assert said.err.count("2024-05-02.manifest.json") == 1, said.err
    assert "show as corrupt (X) in 'dxt coverage'" in said.err


def test_dxt_index_rebuild_refuses_a_directory_that_is_not_an_archive(tmp_path, capsys):
    """No manifest, no day-zone record, no index: a mistyped --archive, said as coverage says
    it (exit 2), and no .dxt-index.sqlite left there (one was made, exit 0)."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "x").mkdir()
    (tmp_path / "notes" / "x" / "readme.txt").write_text("not an archive")
    assert dxt_main(["index", "rebuild", "--archive", str(tmp_path)]) == 2
    said = capsys.readouterr()
    assert f"no manifests found under {tmp_path}" in said.err and "check --archive" in said.err
    assert said.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
    # a root whose days' zone is recorded is an archive (every day of it removed): indexed
    (tmp_path / ".dxt-days-examon.json").write_text('{"time_zone": "UTC"}')
    assert dxt_main(["index", "rebuild", "--archive", str(tmp_path)]) == 0
    assert f"{INDEX_NAME}: 0 manifests, 0 unreadable" in capsys.readouterr().out
    assert (tmp_path / INDEX_NAME).exists()


def test_concurrent_writers_wait_for_each_other(tmp_path):
    a = Archive(tmp_path / "archive")
    commit(a, ("p", "m"), D1, b"1")
    holder = sqlite3.connect(a.root / INDEX_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    import threading

    t = threading.Thread(target=commit, args=(a, ("p", "m"), D2, b"2"))
    t.start()
    t.join(0.5)
    assert t.is_alive()  # waiting for the lock, not failing
    holder.execute("COMMIT")
    holder.close()
    t.join(10)
    with ManifestIndex(a.root) as idx:
        assert idx.get("examon", "p/m", D2).status == "archived"


def test_every_data_file_of_a_manifest_is_checked(tmp_path):
    # collectd days name two files (JSON Lines and HDF5): losing either one is corrupt.
    a = Archive(tmp_path / "archive")
    key = DayKey("collectd_es", ("disk",), D1)
    with a.begin(key) as write:
        files = []
        for ext, payload in (("jsonl.gz", b"{}\n"), ("hdf5", b"HDF")):
            with write.open(ext) as fh:
                fh.write(payload)
            files.append({"file": f"{D1}.{ext}", "bytes": len(payload), "sha256": "x"})
        write.commit({"status": "archived", "file": files[0]["file"], "files": files, "rows": 1})
    assert scan_states(a, "collectd_es", [("disk",)], [D1]).rows == ["A"]
    (a.root / f"collectd_es/disk/{D1}.hdf5").unlink()
    grid = scan_states(a, "collectd_es", [("disk",)], [D1])
    assert grid.rows == ["C"] and grid.details[(0, 0)] == f"data file {D1}.hdf5 is missing"
    assert [r.status for r in coverage(a, "collectd_es", [("disk",)], [D1])] == ["corrupt"]


def test_rebuild_removes_what_killed_rebuilds_left_and_says_so(archive):
    """A rebuild killed (SIGKILL) left ``.dxt-index.sqlite.<pid>.tmp``, named by a pid no
    later run looked at: it stayed, as large as the index. The next rebuild removes this
    host's whose process is gone, and counts them; a live one's (another rebuild now) stays."""
    import socket
    import subprocess
    import sys

    from dxt_core.procs import HOST_TAG as _HOST

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = archive.root / f"{INDEX_NAME}.{_HOST}.{gone.stdout.strip()}.tmp"
    live = archive.root / f"{INDEX_NAME}.{_HOST}.{os.getppid()}.tmp"
    other = archive.root / f"{INDEX_NAME}.{socket.gethostname()}x.123.tmp"
    for f in (dead, live, other):
        f.write_bytes(b"half an index")
    report = rebuild(archive.root)
    assert report.leftovers == 1
    assert not dead.exists() and live.exists() and other.exists()


def test_coverage_without_an_index_over_many_days_says_how_to_make_it_fast(tmp_path, caplog):
    """Without the index (an archive copied, or written by an old version) coverage reads
    every manifest: 48 s a year of the Marconi100 catalog, and nothing said why."""
    from dxt_core.coverage import SAY_NO_INDEX_FROM, coverage

    archive = Archive(tmp_path)
    (tmp_path / "examon").mkdir()
    units = [("ipmi_pub", f"m{i}") for i in range(100)]
    days = [D1 + dt.timedelta(days=i) for i in range(SAY_NO_INDEX_FROM // 100)]
    with caplog.at_level("WARNING"):
        rows = coverage(archive, "examon", units, days)
    assert len(rows) == SAY_NO_INDEX_FROM
    assert f"no manifest index in {tmp_path}" in caplog.text
    assert f"dxt index rebuild --archive {tmp_path}" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        coverage(archive, "examon", units[:1], days[:10])
    assert "no manifest index" not in caplog.text  # a small one is fast anyway
