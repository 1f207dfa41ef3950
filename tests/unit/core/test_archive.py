"""The archive's commit API: the never-shrink rule, versions, locks, durability, OS errors.

These tests drive :class:`dxt_core.archive.Archive` directly (no backend); the same faults
through each backend and its simulator are in ``tests/faults/``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.coverage import coverage
from dxt_core.errors import ArchiveError, ArchiveLocked, ConfigError, ContentChanged, SourceShrank
from dxt_core.fsio import atomic_file
from dxt_core.scan import scan_states

DAY = dt.date(2020, 3, 9)
KEY = DayKey("examon", ("ipmi_pub", "ambient"), DAY)
HIVE = DayKey("examon", ("plugin=ipmi_pub", "metric=ambient"), DAY)


def write_day(
    archive: Archive,
    rows: int,
    key: DayKey = KEY,
    payload: bytes | None = None,
    source_count: int | None = None,
):
    """What a backend does: begin, write the data file staged, commit with the row count
    (and the source's own count of the day, when given)."""
    data = payload if payload is not None else b"row\n" * rows
    with archive.begin(key) as day:
        if rows:
            with day.open("csv.gz") as fh:
                fh.write(data)
            doc = {
                "status": "archived",
                "file": f"{key.day}.csv.gz",
                "rows": rows,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        else:
            day.remove("csv.gz")
            doc = {"status": "empty", "file": None, "rows": 0, "bytes": 0}
        if source_count is not None:
            doc["source_count"] = source_count
        return day.commit(doc)


def parquet_day(archive: Archive, body: bytes = b"PAR1 three rows") -> dict:
    """Commit the day as Parquet (three rows, ``body`` as its bytes); its manifest's doc."""
    with archive.begin(KEY) as day:
        with day.open("parquet") as fh:
            fh.write(body)
        doc = {"status": "archived", "file": f"{DAY}.parquet", "rows": 3,
               "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}  # fmt: skip
        day.commit(doc)
    return doc


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


# -- the never-shrink rule ---------------------------------------------------------------------


def test_rerun_with_fewer_rows_keeps_the_archived_file_and_manifest(tmp_path):
    archive = Archive(tmp_path)
    manifest = write_day(archive, 34_560)
    d = manifest.parent
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with pytest.raises(SourceShrank) as ei:
        write_day(archive, 33_120)
    msg = str(ei.value)
    assert "source has fewer rows than the archive (34,560 -> 33,120)" in msg
    assert "kept the archived file" in msg and "replace" in msg
    assert str(d / f"{DAY}.csv.gz") in msg
    assert ei.value.archive_rows == 34_560 and ei.value.source_rows == 33_120
    # data and manifest byte for byte as they were; a sidecar records the attempt
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.name != f"{DAY}.kept.json"}
    assert after == before
    kept = json.loads((d / f"{DAY}.kept.json").read_text())
    assert kept["archive_rows"] == 34_560 and kept["source_rows"] == 33_120
    assert kept["source_status"] == "archived" and kept["schema"] == "dxt-archive/kept/1"
    # archived stays archived, and coverage shows the marker
    (row,) = coverage(archive, "examon", [KEY.parts], [DAY], verify=True)
    assert row.status == "archived" and row.kept
    assert "34,560" in row.detail and "33,120" in row.detail
    # no lock, temporary or staged file is left behind
    assert listing(d) == [f"{DAY}.csv.gz", f"{DAY}.kept.json", f"{DAY}.manifest.json"]


def test_rerun_that_finds_the_day_empty_keeps_the_archived_file(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 100)
    with pytest.raises(SourceShrank, match=r"\(100 -> 0\)"):
        write_day(archive, 0)
    assert archive.status(KEY, verify=True)[0] == "archived"
    assert (archive.data_path(KEY, "csv.gz")).read_bytes() == b"row\n" * 100


def test_replace_overwrites_and_keeps_the_previous_version(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 100)
    old = archive.data_path(KEY, "csv.gz").read_bytes()
    old_manifest = archive.read_manifest(KEY)
    with pytest.raises(SourceShrank):
        write_day(archive, 60)
    archive_r = Archive(tmp_path, replace=True)
    write_day(archive_r, 60)
    assert archive.data_path(KEY, "csv.gz").read_bytes() == b"row\n" * 60
    assert archive.read_manifest(KEY)["rows"] == 60
    sha8 = hashlib.sha256(old).hexdigest()[:8]
    versions = archive.directory(KEY) / ".versions"
    assert listing(versions) == [f"{DAY}.csv.gz.prev-{sha8}", f"{DAY}.manifest.json.prev-{sha8}"]
    assert (versions / f"{DAY}.csv.gz.prev-{sha8}").read_bytes() == old
    assert json.loads((versions / f"{DAY}.manifest.json.prev-{sha8}").read_text()) == old_manifest
    # the kept marker is gone once the day is rewritten
    assert not archive.kept_path(KEY).exists()
    (row,) = coverage(archive, "examon", [KEY.parts], [DAY], verify=True)
    assert row.status == "archived" and not row.kept


def test_a_kept_record_left_beside_a_replaced_day_is_not_reported_kept(tmp_path):
    """A replace whose removal of the kept record failed (S3: a policy refusing its delete;
    tests/integration/s3/test_s3_permissions.py) leaves a record older than the manifest:
    the day is the replace's, not a kept one, in a directory archive as in a bucket."""
    archive = Archive(tmp_path)
    write_day(archive, 100)
    with pytest.raises(SourceShrank):
        write_day(archive, 60)
    record = archive.kept_path(KEY).read_bytes()
    assert archive.status(KEY)[1].startswith("kept:")
    write_day(Archive(tmp_path, replace=True), 60)
    archive.kept_path(KEY).write_bytes(record)  # as if its removal had failed
    assert archive.status(KEY) == ("archived", "")
    for verify in (False, True):  # from the manifest index, and from the files
        (row,) = coverage(archive, "examon", [KEY.parts], [DAY], verify=verify)
        assert (row.status, row.detail, row.kept) == ("archived", "", False)
    assert scan_states(archive, "examon", [KEY.parts], [DAY]).rows == ["A"]
    assert _published_kept(tmp_path) == []  # the dataset's datacard said "1 kept"


def _published_kept(root: Path) -> list[dt.date]:
    """The kept days ``dxt publish`` finds in March 2020 of the archive's one unit."""
    from dxt_core.backends import get_publisher
    from dxt_core.publish.tree import open_tree

    role, tree = get_publisher("examon").publish_role(), open_tree(root)
    (unit,) = role.units(tree)
    return [day for day, _ in role.scan(tree, unit, 2020, 3).kept]


def test_a_kept_day_is_published_as_kept(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 100)
    with pytest.raises(SourceShrank):
        write_day(archive, 60)
    assert _published_kept(tmp_path) == [DAY]


def test_replace_with_an_empty_source_removes_the_file_but_keeps_a_version(tmp_path):
    write_day(Archive(tmp_path), 10)
    archive = Archive(tmp_path)
    with archive.begin(KEY, replace=True) as day:
        day.remove("csv.gz")
        day.commit({"status": "empty", "file": None, "rows": 0, "bytes": 0})
    assert archive.status(KEY) == ("empty", "")
    assert not archive.data_path(KEY, "csv.gz").exists()
    (version,) = (archive.directory(KEY) / ".versions").glob("*.csv.gz.prev-*")
    assert version.read_bytes() == b"row\n" * 10


def test_as_many_rows_other_bytes_need_replace_and_more_rows_keep_a_version(tmp_path):
    # Issue 21: a rerun never changes archived bytes silently (docs/faults.md, section 1).
    archive = Archive(tmp_path)
    write_day(archive, 10)
    write_day(archive, 10)  # the same bytes: no version
    assert not (archive.directory(KEY) / ".versions").exists()
    with pytest.raises(ContentChanged):
        write_day(archive, 10, payload=b"x" * 7)
    write_day(archive, 12)
    assert archive.read_manifest(KEY)["rows"] == 12
    assert len(list((archive.directory(KEY) / ".versions").glob("*.csv.gz.prev-*"))) == 1


def test_other_bytes_with_an_unchanged_source_count_are_refused_and_a_grown_one_replaces(
    tmp_path,
):
    """A grown source count (the source holds more than when the day was archived: late
    points of a value that changed) lets a rerun of as many rows replace the file, kept in
    .versions/; the same count with other bytes is a change, refused without --replace."""
    archive = Archive(tmp_path)
    write_day(archive, 3, payload=b"a\nb\nc\n", source_count=3)
    with pytest.raises(ContentChanged):
        write_day(archive, 3, payload=b"a\nB\nc\n", source_count=3)
    assert archive.data_path(KEY, "csv.gz").read_bytes() == b"a\nb\nc\n"
    write_day(archive, 3, payload=b"a\nB\nc\n", source_count=4)
    assert archive.data_path(KEY, "csv.gz").read_bytes() == b"a\nB\nc\n"
    assert [r["file"] for r in archive.read_manifest(KEY)["replaced"]] == [f"{DAY}.csv.gz"]


@pytest.mark.parametrize(
    ("name", "body", "rows"),
    [
        ("csv.gz", b"timestamp,value\n1,2\n3,4\n", 2),
        ("csv.gz", b"timestamp,value\n1,2\n3,4", 2),  # no final newline (a foreign file)
        ("jsonl.gz", b"{}\n{}\n", 2),
        ("jsonl.gz", b"{}\n{}", 2),
        ("csv.gz", b"timestamp,value\n", 0),
        ("csv.gz", b"", 0),
    ],
)
def test_rows_are_counted_from_a_file_without_its_final_newline_too(tmp_path, name, body, rows):
    """The count that protects a day whose manifest is lost (never-shrink): a file without
    a final newline held one row more than its newlines."""
    import gzip

    from dxt_core.manifests import count_rows

    path = tmp_path / f"{DAY}.{name}"
    path.write_bytes(gzip.compress(body))
    assert count_rows(path) == rows


def test_an_empty_day_can_fill_up_later(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 0)
    assert archive.status(KEY)[0] == "empty"
    write_day(archive, 5)
    assert archive.status(KEY, verify=True)[0] == "archived"


def test_a_lost_data_file_does_not_block_the_repair(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 10)
    archive.data_path(KEY, "csv.gz").unlink()
    assert archive.status(KEY)[0] == "corrupt"
    write_day(archive, 4)  # nothing left to protect: the rerun repairs the day
    assert archive.status(KEY, verify=True)[0] == "archived"


def test_a_crash_between_data_and_manifest_still_protects_the_rows(tmp_path):
    """After the data rename the old manifest is parked (.pending) until the new one is
    written: a crash in between leaves the day 'missing', and the next run still compares
    with the parked row count."""
    archive = Archive(tmp_path)
    write_day(archive, 10)
    d = archive.directory(KEY)
    # the state such a crash leaves: the manifest parked, no manifest under its final name
    os.replace(d / f"{DAY}.manifest.json", d / f".{DAY}.manifest.json.pending")
    assert archive.status(KEY)[0] == "missing"
    with pytest.raises(SourceShrank, match=r"\(10 -> 3\)"):
        write_day(archive, 3)
    write_day(archive, 10)
    assert listing(d) == [f"{DAY}.csv.gz", f"{DAY}.manifest.json"]


def test_manifest_may_only_name_files_written_in_the_transaction(tmp_path):
    archive = Archive(tmp_path)
    with archive.begin(KEY) as day, pytest.raises(ArchiveError, match="not written through"):
        day.commit({"status": "archived", "file": f"{DAY}.csv.gz", "rows": 1, "bytes": 1})


def test_failure_before_commit_leaves_the_day_and_no_staged_file(tmp_path):
    archive = Archive(tmp_path)
    write_day(archive, 10)
    d = archive.directory(KEY)
    before = listing(d)
    with pytest.raises(RuntimeError), archive.begin(KEY) as day:
        with day.open("csv.gz") as fh:
            fh.write(b"partial")
        raise RuntimeError("source failed mid-day")
    assert listing(d) == before


def test_hive_layout_sidecars_start_with_underscore(tmp_path):
    archive = Archive(tmp_path)
    with archive.begin(HIVE) as day:
        with day.open("parquet") as fh:
            fh.write(b"PAR1")
        day.commit({"status": "archived", "file": f"{DAY}.parquet", "rows": 9, "bytes": 4})
    with pytest.raises(SourceShrank), archive.begin(HIVE) as day:
        day.remove("parquet")
        day.commit({"status": "empty", "file": None, "rows": 0, "bytes": 0})
    d = archive.directory(HIVE)
    assert listing(d) == [f"{DAY}.parquet", f"_{DAY}.kept.json", f"_{DAY}.manifest.json"]


# -- stale temporary files ---------------------------------------------------------------------


def test_stale_temporary_files_are_cleaned_including_hive_manifests(tmp_path):
    archive = Archive(tmp_path)
    d = archive.directory(HIVE)
    d.mkdir(parents=True)
    stale = [
        d / f".{DAY}.parquet.abc123.tmp",
        d / f"._{DAY}.manifest.json.k2j3h4.tmp",  # left by a crash while writing a manifest
        d / f".{DAY}.parquet.staged.tmp",
    ]
    other_day = d / "._2020-03-10.manifest.json.zz.tmp"
    for p in [*stale, other_day]:
        p.write_bytes(b"x")
    with archive.begin(HIVE) as day:
        day.remove("parquet")
        day.commit({"status": "empty", "file": None, "rows": 0, "bytes": 0})
    assert not any(p.exists() for p in stale)
    assert other_day.exists()  # another day's file is that day's business


# -- the lock ----------------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import datetime as dt, sys, time
    from dxt_core.archive import Archive, DayKey
    a = Archive(sys.argv[1])
    w = a.begin(DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9)))
    print("locked", flush=True)
    sys.stdin.readline()
    """
)


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ArchiveLocked) as ei:
            write_day(Archive(tmp_path), 5)
        msg = str(ei.value)
        assert f"pid {holder.pid} on host {os.uname().nodename}" in msg
        assert "examon/ipmi_pub/ambient 2020-03-09 is being archived by" in msg
        assert ei.value.holder["pid"] == holder.pid and "started" in ei.value.holder
        # the refused writer touched nothing
        assert archive_listing_without_lock(tmp_path) == []
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    write_day(Archive(tmp_path), 5)  # the lock went with its holder


def archive_listing_without_lock(root: Path) -> list[str]:
    d = root / "examon/ipmi_pub/ambient"
    return [n for n in listing(d) if n != f".{DAY}.lock"]


def test_other_days_and_metrics_are_not_blocked(tmp_path):
    archive = Archive(tmp_path)
    with archive.begin(KEY):
        other = Archive(tmp_path)
        write_day(other, 3, key=DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 10)))
        write_day(other, 3, key=DayKey("examon", ("ipmi_pub", "pcie"), DAY))


def test_the_same_thread_beginning_again_aborts_its_unfinished_write(tmp_path):
    """A backend that raised between begin and commit (no context manager) does not keep
    the lock once its thread moves on."""
    archive = Archive(tmp_path)
    first = archive.begin(KEY)
    with first.open("csv.gz") as fh:
        fh.write(b"abandoned")
    write_day(archive, 2)
    assert first.closed
    assert archive.data_path(KEY, "csv.gz").read_bytes() == b"row\n" * 2


# -- durability --------------------------------------------------------------------------------


def test_directory_is_fsynced_after_the_data_rename_and_after_the_manifest(tmp_path, monkeypatch):
    """Spy on the OS calls (not on our code): after the data file's rename and after the
    manifest's rename, the directory itself must be fsynced before anything else happens."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(("fsync", kind))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", Path(dst).name))
        return real_replace(src, dst)

    archive = Archive(tmp_path)
    archive.directory(KEY).mkdir(parents=True)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_day(archive, 3)
    data_at = events.index(("replace", f"{DAY}.csv.gz"))
    manifest_at = events.index(("replace", f"{DAY}.manifest.json"))
    assert ("fsync", "dir") in events[data_at + 1 : manifest_at]
    assert events[manifest_at + 1] == ("fsync", "dir")
    # and the data itself was fsynced before its rename
    assert ("fsync", "file") in events[:data_at]


def test_atomic_file_fsyncs_the_directory(tmp_path, monkeypatch):
    kinds: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os,
        "fsync",
        lambda fd: (
            kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"),
            real(fd),
        )[1],
    )
    with atomic_file(tmp_path / "x.json") as fh:
        fh.write(b"{}")
    assert kinds == ["file", "dir"]


# -- coverage --verify and manifests naming other files -----------------------------------------


@pytest.mark.parametrize("name", ["/etc/hostname", "../../../etc/hostname", "..", "a/b.csv.gz"])
def test_a_manifest_naming_a_file_outside_its_directory_is_corrupt(tmp_path, name):
    archive = Archive(tmp_path)
    target = Path("/etc/hostname")
    size = target.stat().st_size if target.exists() else 0
    archive.write_manifest(
        KEY,
        {
            "status": "archived",
            "file": name,
            "rows": 1,
            "bytes": size,
            "sha256": hashlib.sha256(target.read_bytes()).hexdigest() if size else "",
        },
    )
    status, detail = archive.status(KEY, verify=True)
    assert status == "corrupt"
    assert "not a file of its own directory" in detail


def test_every_file_of_a_multi_file_manifest_is_checked(tmp_path):
    archive = Archive(tmp_path)
    with archive.begin(KEY) as day:
        for ext in ("jsonl.gz", "hdf5"):
            with day.open(ext) as fh:
                fh.write(ext.encode())
        files = [
            {
                "file": f"{DAY}.{ext}",
                "bytes": len(ext),
                "sha256": hashlib.sha256(ext.encode()).hexdigest(),
            }
            for ext in ("jsonl.gz", "hdf5")
        ]
        day.commit({"status": "archived", "rows": 1, **files[0], "files": files})
    assert archive.status(KEY, verify=True)[0] == "archived"
    archive.data_path(KEY, "hdf5").write_bytes(b"HDF5")
    assert archive.status(KEY, verify=True) == (
        "corrupt",
        f"{archive.data_path(KEY, 'hdf5')} does not match the manifest's sha256",
    )


# -- OS errors become one-line ArchiveErrors ----------------------------------------------------


def test_a_file_where_a_directory_should_be(tmp_path):
    (tmp_path / "examon").mkdir()
    (tmp_path / "examon" / "ipmi_pub").write_text("not a directory")
    with pytest.raises(ArchiveError) as ei:
        write_day(Archive(tmp_path), 3)
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(tmp_path / "examon" / "ipmi_pub") in msg
    assert "a file stands where a directory should be" in msg


def test_a_path_too_long_for_the_file_system(tmp_path):
    deep = tmp_path.joinpath(*["d" * 250] * 17)  # > PATH_MAX (4096 bytes)
    key = DayKey("examon", ("ipmi_pub", "ambient"), DAY)
    with pytest.raises(ArchiveError) as ei:
        write_day(Archive(deep), 3, key=key)
    msg = str(ei.value)
    assert "\n" not in msg and "too long" in msg.lower() and "cannot create directory" in msg


def test_a_component_over_255_bytes_is_refused_before_any_write(tmp_path):
    with pytest.raises(ConfigError, match=r"300 bytes long in UTF-8.*at most 255"):
        DayKey("examon", ("ipmi_pub", "m" * 300), DAY)
    with pytest.raises(ConfigError, match="256 bytes"):
        DayKey("examon", ("ipmi_pub", "é" * 128), DAY)  # 128 characters, 256 bytes
    DayKey("examon", ("ipmi_pub", "m" * 255), DAY)


DISK_FULL = textwrap.dedent(
    """
    import datetime as dt, resource, signal, sys
    from dxt_core.archive import Archive, DayKey
    from dxt_core.errors import ArchiveError
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # writes past 4 KiB fail: EFBIG
    a = Archive(sys.argv[1])
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    try:
        with a.begin(key) as day:
            with day.open("csv.gz", buffer_size=1024) as fh:
                for _ in range(100):
                    fh.write(b"x" * 1000)
    except ArchiveError as exc:
        print("ArchiveError:", exc)
    """
)


def test_a_write_the_disk_refuses_names_the_file(tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse writes past 4 KiB (EFBIG), as a full disk
    refuses them (ENOSPC), in a child process."""
    out = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("ArchiveError: cannot write ")
    assert str(tmp_path / "examon/ipmi_pub/ambient/2020-03-09.csv.gz") in line
    assert "File too large" in line and "\n" not in line
    assert "Traceback" not in out.stderr
    d = tmp_path / "examon/ipmi_pub/ambient"
    assert listing(d) == []  # nothing staged left behind, no lock


READ_ONLY = textwrap.dedent(
    """
    import datetime as dt, os, sys
    from dxt_core.archive import Archive, DayKey
    from dxt_core.errors import ArchiveError
    if os.geteuid() == 0:
        os.setgid(65534); os.setuid(65534)  # root ignores permissions: become nobody
    a = Archive(sys.argv[1])
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    try:
        with a.begin(key) as day:
            pass
    except ArchiveError as exc:
        print("ArchiveError:", exc)
    """
)


def test_a_read_only_archive(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    tmp_path.chmod(0o755)
    try:
        out = subprocess.run(
            [sys.executable, "-c", READ_ONLY, str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
    finally:
        root.chmod(0o755)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("ArchiveError: cannot create directory ")
    assert str(root / "examon") in line and "Permission denied" in line
    assert "make the archive writable" in line and "\n" not in line


def test_a_unit_folder_left_empty_by_a_failed_day_is_not_listed(tmp_path):
    # A day that failed leaves its unit's folder empty; listed, it became a unit of
    # `dxt coverage prometheus` (no --catalog) whose refill the server refused.
    archive = Archive(tmp_path)
    (tmp_path / "prometheus" / "failed").mkdir(parents=True)
    (tmp_path / "prometheus" / "up").mkdir()
    (tmp_path / "prometheus" / "up" / "2024-01-01.csv.gz").write_bytes(b"x")
    (tmp_path / "examon" / "ipmi_pub" / "ambient").mkdir(parents=True)
    (tmp_path / "examon" / "ipmi_pub" / "ambient" / "2024-01-01.manifest.json").write_text("{}")
    (tmp_path / "examon" / "plugin=x" / "metric=y").mkdir(parents=True)
    assert archive.subdirectories("prometheus") == ["up"]
    assert archive.subdirectories("examon") == ["ipmi_pub"]  # files deeper down count


def test_a_lock_file_the_disk_refuses_is_let_go(tmp_path, monkeypatch):
    """A full disk when the lock file's holder is written fails the day with a clear error
    and lets go of the lock: the same process can take the day again once there is space
    (a worker retrying the day found it held by itself), and no lock file is left."""
    import errno

    from dxt_core.locks import DayLock

    path = tmp_path / ".2020-03-09.lock"
    real = os.pwrite

    def full(fd, data, offset):  # the OS call refuses, as a full disk does
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(ArchiveError, match=r"\.2020-03-09\.lock.*(No space|disk is full)"):
        DayLock(path, "the day").acquire()
    assert not path.exists()
    fds = os.listdir("/proc/self/fd")
    assert str(path) not in [os.path.realpath(f"/proc/self/fd/{f}") for f in fds]
    monkeypatch.setattr(os, "pwrite", real)
    lock = DayLock(path, "the day")
    lock.acquire()
    assert lock.held and path.exists()
    lock.release()
    assert not path.exists()


def test_a_root_gone_or_replaced_during_the_run_is_not_created_again(tmp_path):
    """After the first day of a run, an archive root that disappeared (a file system
    unmounted under the run, the folder removed) or is another directory is an error: the
    days went on into a new folder of the same name, on another disk. A first write still
    creates a missing root."""
    root = tmp_path / "archive"
    archive = Archive(root)
    write_day(archive, 5)
    other = DayKey("toy", ("p", "m"), dt.date(2020, 3, 10))
    root.rename(tmp_path / "moved")
    with pytest.raises(ArchiveError, match=r"archive root .*/archive disappeared .*mount or "):
        write_day(archive, 5, other)
    assert not root.exists()
    root.mkdir()
    with pytest.raises(ArchiveError, match=r"archive root .*/archive was replaced by another"):
        write_day(archive, 5, other)
    assert listing(root) == []
    fresh = Archive(tmp_path / "new")  # another run: its first day creates its root
    write_day(fresh, 5, other)
    assert (tmp_path / "new").is_dir()


def test_a_day_folder_this_user_may_not_list_is_a_clear_error(tmp_path, monkeypatch):
    """A day's folder whose listing is refused (chmod 000 for another user) fails the day
    naming the folder and what to do, not with a bare PermissionError (the OS call is faked:
    this test may run as root)."""
    archive = Archive(tmp_path)
    directory = archive.directory(KEY)
    directory.mkdir(parents=True)
    real = os.listdir

    def listdir(path="."):
        if os.fspath(path) == str(directory):
            raise PermissionError(13, "Permission denied", str(directory))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    with pytest.raises(
        ArchiveError, match=r"cannot read .*/ipmi_pub/ambient: Permission denied; permission"
    ):
        write_day(archive, 5)


def test_a_write_error_without_an_os_error_number_is_told_from_the_file_system(
    tmp_path, monkeypatch
):
    """pyarrow reports a short write on a full disk as "5760 requested and 1536 written",
    with no error number nor path: the error names the file and tells the cause from the
    file system (the statvfs answer is faked: a full disk, then inodes exhausted, then
    space left)."""
    from dxt_core.fsio import unnumbered_write_error

    target = tmp_path / "year_month=20-03" / "a_0.parquet"
    target.parent.mkdir()  # the folder the file was being written in
    exc = OSError("5760 requested and 1536 written")
    real = os.statvfs(tmp_path)
    fields = {n: getattr(real, n) for n in dir(real) if n.startswith("f_")}

    def fake(**over):
        return type("V", (), {**fields, **over})()

    for over in ({"f_bavail": 0}, {"f_files": 100, "f_favail": 0}):
        monkeypatch.setattr(os, "statvfs", lambda p, o=over: fake(**o))
        err = unnumbered_write_error(exc, target)
        assert str(err).startswith(f"cannot write {target}: No space left on device; the disk")
        assert "df -i" in str(err)
    monkeypatch.setattr(os, "statvfs", lambda p: fake(f_bavail=1000, f_favail=1000, f_flag=0))
    err = unnumbered_write_error(exc, target)
    assert str(err) == f"cannot write {target}: 5760 requested and 1536 written"


def test_a_manifest_this_user_may_not_read_is_named_a_manifest(tmp_path, monkeypatch):
    """Coverage words a day's unreadable file by its name, with what it is: the manifest
    was called a "data file" (the read is refused by a faked OS call: this test may run as
    root)."""
    import pathlib

    archive = Archive(tmp_path)
    write_day(archive, 3)
    manifest = archive.manifest_path(KEY)
    real = pathlib.Path.read_bytes

    def read_bytes(self):
        if self == manifest:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    (row,) = coverage(archive, "examon", [KEY.parts], [DAY], verify=True)
    assert row.status == "corrupt"
    assert row.detail.startswith(f"manifest {manifest.name}: the manifest cannot be read"), row
    assert "give this user read access" in row.detail


def test_a_rerun_that_names_the_columns_otherwise_says_so(tmp_path):
    """A day an older version archived with other column names (a tag ``name`` or ``metric``
    before it became ``exported_<tag>``) is refused on a plain refetch, as any change of
    bytes; the message said the source had other values, it now says the columns differ."""
    archive = Archive(tmp_path)

    def commit(columns: list[str], payload: bytes) -> None:
        with archive.begin(KEY) as day:
            with day.open("csv.gz") as fh:
                fh.write(payload)
            day.commit(
                {"status": "archived", "file": f"{DAY}.csv.gz", "rows": 1, "columns": columns,
                 "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
            )  # fmt: skip

    commit(["timestamp", "value", "name", "metric"], b"old")
    with pytest.raises(ContentChanged) as exc:
        commit(["timestamp", "value", "name", "exported_metric"], b"new")
    text = str(exc.value)
    assert "in other columns" in text and "this version writes timestamp, value, name, exp" in text
    assert "an older version of dxt-archive named them otherwise" in text
    assert "to rewrite it in this version's columns" in text
    with pytest.raises(ContentChanged, match=r"the source has as many rows .* but other values"):
        commit(["timestamp", "value", "name", "metric"], b"other")


def test_a_day_archived_again_in_another_format_keeps_the_old_file_in_versions(tmp_path):
    """A day archived as CSV, then again as Parquet (``--refetch --format parquet``): the new
    manifest names ``<day>.parquet`` only, and ``<day>.csv.gz`` stayed beside it with no
    manifest describing it (a glob of the folder read both). It is kept in .versions/ and
    removed, and the manifest says so."""
    archive = Archive(tmp_path)
    write_day(archive, 3)
    old = archive.data_path(KEY, "csv.gz").read_bytes()
    body = b"PAR1 three rows"
    with archive.begin(KEY) as day:
        with day.open("parquet") as fh:
            fh.write(body)
        day.commit({"status": "archived", "file": f"{DAY}.parquet", "rows": 3,
                    "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})  # fmt: skip
        assert not day.unchanged and not day.restored
    d = archive.directory(KEY)
    sha8 = hashlib.sha256(old).hexdigest()[:8]
    assert listing(d) == [".versions", f"{DAY}.manifest.json", f"{DAY}.parquet"]
    assert (d / f".versions/{DAY}.csv.gz.prev-{sha8}").read_bytes() == old
    doc = archive.read_manifest(KEY)
    assert [r["file"] for r in doc["replaced"]] == [f"{DAY}.csv.gz"], doc
    assert "unnamed" not in doc["replaced"][0]  # the old manifest named it: a replacement
    assert archive.status(KEY, verify=True)[0] == "archived"


def test_a_data_file_no_manifest_names_is_found_by_verify_and_removed_by_the_refill(
    tmp_path, caplog
):
    """A data file of the day beside its manifest that names another (an older dxt's
    refetch in another format left ``<day>.csv.gz`` beside ``<day>.parquet``; or a file put
    there by hand): a glob of the folder reads it as archived data. Coverage with
    ``--verify`` says the day corrupt, naming the file; the day's next commit (its refill)
    keeps it in .versions/ and removes it; then verify says archived."""
    archive = Archive(tmp_path)
    parquet_day(archive)
    d = archive.directory(KEY)
    stray = b"timestamp,value\nold rows\n"
    (d / f"{DAY}.csv.gz").write_bytes(stray)
    (d / f"{DAY + dt.timedelta(days=1)}.csv.gz").write_bytes(b"another day's: not this one's")
    (d / f".{DAY}.csv.gz.staged.tmp").write_bytes(b"a staging file: not data")
    assert archive.status(KEY)[0] == "archived"  # without verify: what the manifest says
    status, detail = archive.status(KEY, verify=True)
    assert status == "corrupt" and f"{d}/{DAY}.csv.gz: data of {DAY}" in detail, detail
    assert "its manifest does not name" in detail and ".versions/" in detail
    (row,) = coverage(archive, "examon", [KEY.parts], [DAY], verify=True)
    assert row.status == "corrupt" and row.detail.startswith(f"data file {DAY}.csv.gz: "), row
    parquet_day(archive)  # the refill: the same day again
    sha8 = hashlib.sha256(stray).hexdigest()[:8]
    assert (d / f".versions/{DAY}.csv.gz.prev-{sha8}").read_bytes() == stray
    assert not (d / f"{DAY}.csv.gz").exists()
    assert (d / f"{DAY + dt.timedelta(days=1)}.csv.gz").exists()
    (record,) = archive.read_manifest(KEY)["replaced"]
    assert record["file"] == f"{DAY}.csv.gz" and record["unnamed"] is True, record
    # said as the removal of a stray, not as a replacement of the archived day
    assert (
        f"{KEY}: removed {DAY}.csv.gz, a data file of the day its manifest did not name; "
        f"the old bytes are kept as .versions/{DAY}.csv.gz.prev-{sha8}"
    ) in caplog.text
    assert "replaced the archived" not in caplog.text
    assert archive.status(KEY, verify=True) == ("archived", "")


@pytest.mark.parametrize("name", ["jsonl.gz", "csv.gz"], ids=["another-format", "its-format"])
def test_a_stray_data_file_beside_an_empty_day_is_kept_and_removed(tmp_path, name):
    """A stray beside an empty day is found, kept in .versions/ and removed; one of the name
    the empty day's commit removes (``<day>.csv.gz``, its format's) was deleted with no
    copy and no record."""
    archive = Archive(tmp_path)
    write_day(archive, 0)
    d = archive.directory(KEY)
    (d / f"{DAY}.{name}").write_bytes(b"someone's rows")
    assert archive.status(KEY, verify=True)[0] == "corrupt"
    write_day(archive, 0)
    sha8 = hashlib.sha256(b"someone's rows").hexdigest()[:8]
    assert (d / f".versions/{DAY}.{name}.prev-{sha8}").read_bytes() == b"someone's rows"
    assert listing(d) == [".versions", f"{DAY}.manifest.json"]
    (record,) = archive.read_manifest(KEY)["replaced"]
    assert record["file"] == f"{DAY}.{name}" and record["unnamed"] is True
    assert archive.status(KEY, verify=True) == ("empty", "")


def test_a_stray_of_the_name_a_commit_writes_is_kept_before_it_is_written_over(tmp_path):
    """A day archived as Parquet with a stray ``<day>.csv.gz`` beside it, refetched as CSV:
    the new file took the stray's name and its bytes were gone with no copy."""
    archive = Archive(tmp_path)
    body = b"PAR1 three rows"
    parquet_day(archive, body)
    d = archive.directory(KEY)
    (d / f"{DAY}.csv.gz").write_bytes(b"junk")
    write_day(archive, 3)
    versions = sorted(p.name for p in (d / ".versions").iterdir() if ".manifest." not in p.name)
    sha = {n: hashlib.sha256(b).hexdigest()[:8] for n, b in (("csv", b"junk"), ("pq", body))}
    assert versions == [f"{DAY}.csv.gz.prev-{sha['csv']}", f"{DAY}.parquet.prev-{sha['pq']}"]
    assert (d / f".versions/{DAY}.csv.gz.prev-{sha['csv']}").read_bytes() == b"junk"
    assert archive.data_path(KEY, "csv.gz").read_bytes() == b"row\n" * 3
    records = {r["file"]: r for r in archive.read_manifest(KEY)["replaced"]}
    assert (
        records[f"{DAY}.csv.gz"]["unnamed"] is True and "unnamed" not in records[f"{DAY}.parquet"]
    )
    assert archive.status(KEY, verify=True) == ("archived", "")


def test_a_stray_symlink_is_kept_as_the_bytes_it_showed_and_a_directory_is_no_stray(tmp_path):
    """``<day>.csv -> <day>.csv.gz`` (relative): its version was a hard link of the link
    itself, pointing at nothing from .versions/, and every refetch failed. A directory named
    like a data file was reported corrupt for ever (no commit moves a directory)."""
    archive = Archive(tmp_path)
    write_day(archive, 3)
    d = archive.directory(KEY)
    (d / f"{DAY}.csv").symlink_to(f"{DAY}.csv.gz")
    (d / f"{DAY}.csv.gz.d").mkdir()
    status, detail = archive.status(KEY, verify=True)
    assert status == "corrupt" and f"/{DAY}.csv: data of" in detail, detail
    (d / f"{DAY}.jsonl.gz").write_bytes(b"{}\n")
    status, detail = archive.status(KEY, verify=True)
    assert f"/{DAY}.csv and 1 more: data of {DAY} that its manifest does not name" in detail
    assert "keeps them in .versions/ and removes them" in detail, detail
    old = archive.data_path(KEY, "csv.gz").read_bytes()
    write_day(archive, 3)
    sha8 = hashlib.sha256(old).hexdigest()[:8]
    kept = d / f".versions/{DAY}.csv.prev-{sha8}"
    assert not kept.is_symlink() and kept.read_bytes() == old
    assert not (d / f"{DAY}.csv").exists() and not (d / f"{DAY}.csv").is_symlink()
    assert archive.status(KEY, verify=True) == ("archived", "")
    # a link to a file outside the archive: copied, never a hard link sharing that file
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_bytes(b"not the archive's")
    (d / f"{DAY}.csv").symlink_to(outside)
    write_day(archive, 3)
    sha8 = hashlib.sha256(outside.read_bytes()).hexdigest()[:8]
    kept = d / f".versions/{DAY}.csv.prev-{sha8}"
    assert kept.read_bytes() == b"not the archive's" and outside.stat().st_nlink == 1
    assert outside.read_bytes() == b"not the archive's"  # left as it was


def test_a_rerun_of_the_same_content_keeps_the_record_of_what_it_replaced(tmp_path):
    """A day replaced (a refill over a damaged file), then fetched again unchanged: the
    second commit rewrote the manifest without ``replaced``, so nothing named the version
    kept in .versions/ and the datacard counted one replaced day fewer."""
    write_day(Archive(tmp_path), 3, payload=b"old rows")
    write_day(Archive(tmp_path, replace=True), 3, payload=b"new rows")
    first = Archive(tmp_path).read_manifest(KEY)
    assert first is not None and [r["file"] for r in first["replaced"]] == [f"{DAY}.csv.gz"]
    write_day(Archive(tmp_path), 3, payload=b"new rows")  # unchanged
    again = Archive(tmp_path).read_manifest(KEY)
    assert again is not None and again["replaced"] == first["replaced"], again
    assert again["replaced_rows"] == first["replaced_rows"] == 3
    write_day(Archive(tmp_path, replace=True), 4, payload=b"newer rows")  # replaced again
    last = Archive(tmp_path).read_manifest(KEY)
    assert last is not None and last["replaced"] != first["replaced"]
    assert [r["sha256"] for r in last["replaced"]] == [hashlib.sha256(b"new rows").hexdigest()]


def test_a_replaced_day_found_empty_names_its_file_once(tmp_path):
    """``--replace`` of a day the source now holds empty: its file was named twice in the
    manifest's ``replaced`` (and in the warning), once as removed and once as left behind."""
    archive = Archive(tmp_path)
    write_day(archive, 10)
    write_day(Archive(tmp_path, replace=True), 0)
    doc = archive.read_manifest(KEY)
    assert doc["status"] == "empty" and [r["file"] for r in doc["replaced"]] == [f"{DAY}.csv.gz"]
