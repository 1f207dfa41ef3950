"""A unit whose directory changed outside dxt (a ``touch``, a file removed, a backup's
temporary file) is repaired in the index by reading only its manifests that changed, once:
a coverage of one day never reads the unit's whole history, and no manifest is read twice.
What changed (a manifest replaced, even with its size and mtime kept; removed; added) is
still seen."""

from __future__ import annotations

import builtins
import datetime as dt
import io
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from dxt_core import scan
from dxt_core.archive import Archive
from dxt_core.coverage import coverage
from dxt_core.index import ManifestIndex
from dxt_core.manifests import MANIFEST_SUFFIX
from tests.unit.core.test_index import commit

UNIT = ("ipmi_pub", "ambient")
OTHER = ("ipmi_pub", "pcie")
DAYS = [dt.date(2024, 5, 1) + dt.timedelta(i) for i in range(12)]
ONE = DAYS[5]


@pytest.fixture
def archive(tmp_path) -> Archive:
    a = Archive(tmp_path / "archive")
    for day in DAYS:
        commit(a, UNIT, day, f"a,b\n{day.day},2\n".encode())
    commit(a, OTHER, DAYS[0], b"x\n")
    return a


@pytest.fixture
def manifest_reads(monkeypatch) -> Counter[str]:
    """The manifest files opened for reading, by ``unit-directory/name``, counted at the file
    system call (``io.open``, which ``Path.read_bytes`` and ``open`` use)."""
    reads: Counter[str] = Counter()
    real = io.open

    def counting(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        mode = args[0] if args else kwargs.get("mode", "r")
        if (
            isinstance(file, (str, os.PathLike))
            and os.fspath(file).endswith(MANIFEST_SUFFIX)
            and not set(mode) & set("wax+")
        ):
            path = Path(os.fspath(file))
            reads[f"{path.parent.name}/{path.name}"] += 1
        return real(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(builtins, "open", counting)
    return reads


def unit_dir(archive: Archive, parts: tuple[str, ...] = UNIT) -> Path:
    return archive.root.joinpath("examon", *parts)


def touch_dir(directory: Path) -> None:
    """Change the directory's mtime, as ``touch`` (or a backup's temporary file) does."""
    before = os.stat(directory).st_mtime_ns
    time.sleep(0.01)
    os.utime(directory)
    assert os.stat(directory).st_mtime_ns != before


def states(archive: Archive, days: list[dt.date], parts: tuple[str, ...] = UNIT) -> list[str]:
    return [r.status for r in coverage(archive, "examon", [parts], days)]


def test_a_one_day_coverage_of_a_touched_unit_reads_at_most_the_last_commit(
    archive, manifest_reads
):
    touch_dir(unit_dir(archive))
    assert states(archive, [ONE]) == ["archived"]
    # the repair stats the unit's 12 manifests and reads only one whose inode changed as
    # late as the directory the index last matched (the last commit's); never the 12
    assert sum(manifest_reads.values()) <= 1, manifest_reads
    manifest_reads.clear()
    assert states(archive, [ONE]) == ["archived"]  # repaired: fresh again, nothing read
    assert sum(manifest_reads.values()) == 0, manifest_reads


def test_a_file_removed_beside_the_manifests_reads_none_of_the_others(archive, manifest_reads):
    (unit_dir(archive) / f"{DAYS[0]}.csv.gz").unlink()
    assert states(archive, [DAYS[0], ONE]) == ["corrupt", "archived"]
    assert sum(manifest_reads.values()) <= 1, manifest_reads


def test_a_full_range_coverage_of_a_stale_unit_reads_each_manifest_at_most_once(
    archive, manifest_reads
):
    # a copy without mtimes: every manifest's mtime differs from what the index recorded
    d = unit_dir(archive)
    for day in DAYS:
        os.utime(d / f"{day}{MANIFEST_SUFFIX}", ns=(1, 10**18 + day.toordinal()))
    touch_dir(d)
    assert states(archive, DAYS) == ["archived"] * len(DAYS)
    assert set(manifest_reads) == {f"ambient/{day}{MANIFEST_SUFFIX}" for day in DAYS}
    assert max(manifest_reads.values()) == 1, manifest_reads
    manifest_reads.clear()
    assert states(archive, DAYS) == ["archived"] * len(DAYS)
    assert sum(manifest_reads.values()) == 0, manifest_reads


def test_a_manifest_replaced_with_its_size_and_mtime_kept_is_read(archive):
    """The replacement has the size and mtime the index recorded (a copy that keeps
    mtimes): its ctime, which nothing sets back, tells it changed since the index matched."""
    d = unit_dir(archive)
    manifest = d / f"{ONE}{MANIFEST_SUFFIX}"
    st = os.stat(manifest)
    time.sleep(0.01)
    tmp = d / ".replacement"
    tmp.write_bytes(b"x" * (st.st_size - 1) + b"\n")  # garbage of the same size
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, manifest)
    assert (os.stat(manifest).st_size, os.stat(manifest).st_mtime_ns) == (
        st.st_size,
        st.st_mtime_ns,
    )
    (row,) = coverage(archive, "examon", [UNIT], [ONE])
    assert row.status == "corrupt" and "unreadable manifest" in row.detail, row
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", unit_of(UNIT), ONE).status == "corrupt"
    assert states(archive, [DAYS[4], ONE, DAYS[6]]) == ["archived", "corrupt", "archived"]


def test_a_removed_manifest_is_missing_and_its_row_dropped(archive):
    (unit_dir(archive) / f"{ONE}{MANIFEST_SUFFIX}").unlink()
    assert states(archive, [ONE]) == ["missing"]
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", unit_of(UNIT), ONE) is None
        assert idx.get("examon", unit_of(UNIT), DAYS[4]) is not None
    assert states(archive, DAYS) == ["archived"] * 5 + ["missing"] + ["archived"] * 6


def test_a_manifest_copied_in_is_read_and_indexed(archive, manifest_reads):
    # a day of another unit copied in by hand (no index update): read once
    src, dst = unit_dir(archive), unit_dir(archive, OTHER)
    for name in (f"{ONE}{MANIFEST_SUFFIX}", f"{ONE}.csv.gz"):
        shutil.copy2(src / name, dst / name)
    manifest_reads.clear()
    assert states(archive, [ONE], OTHER) == ["archived"]
    assert manifest_reads[f"pcie/{ONE}{MANIFEST_SUFFIX}"] == 1, manifest_reads
    # and of the unit's own manifests at most the last commit's (see the first test)
    assert sum(manifest_reads.values()) <= 2, manifest_reads
    with ManifestIndex(archive.root) as idx:
        assert idx.get("examon", unit_of(OTHER), ONE).status == "archived"


def test_the_repair_is_told(archive, monkeypatch):
    told: list[str] = []
    monkeypatch.setattr(scan, "repair_notice", told.append)
    states(archive, [ONE])
    assert told == []  # fresh: nothing to repair
    touch_dir(unit_dir(archive))
    touch_dir(unit_dir(archive, OTHER))
    coverage(archive, "examon", [UNIT, OTHER], [ONE])
    assert len(told) == 2, told
    assert told[0].startswith("2 units of examon changed since the index saw them"), told
    assert told[1].startswith("index of 2 units of examon repaired: "), told


def test_a_read_only_index_still_reads_a_stale_unit_from_its_manifests(archive, monkeypatch):
    (unit_dir(archive) / f"{DAYS[0]}.csv.gz").unlink()
    monkeypatch.setattr(ManifestIndex, "_writable", lambda self: False)
    assert states(archive, [DAYS[0], ONE]) == ["corrupt", "archived"]


def unit_of(parts: tuple[str, ...]) -> str:
    return "/".join(parts)
