"""What a coverage scan holds of each unit's directory follows the range asked, not the
archive's age: of a directory with years of days, a question about one day keeps the names
of that day (three years of Examon's 811 units were 1.7 M names, 232 MB, kept for a one-day
``dxt coverage``). A data file its manifest names otherwise is still found (on disk), and a
unit changed since indexed is still repaired from its whole listing."""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import tracemalloc

import pytest

from dxt_core.archive import Archive
from dxt_core.index import ManifestIndex, rebuild
from dxt_core.scan import _Layout, scan_states
from tests.unit.core.test_index import commit

UNITS = [("ipmi_pub", "ambient"), ("ipmi_pub", "pcie")]
HISTORY = [dt.date(2022, 1, 1) + dt.timedelta(i) for i in range(730)]
DAY = dt.date(2024, 5, 1)


@pytest.fixture
def archive(tmp_path) -> Archive:
    """Two units with two years of history (a manifest and a data file per day, written as
    files: the scan of one day reads none of them) and the day asked, committed."""
    a = Archive(tmp_path / "archive")
    for parts in UNITS:
        commit(a, parts, DAY, b"a,b\n1,2\n")
        d = a.root.joinpath("examon", *parts)
        for day in HISTORY:
            (d / f"{day}.csv.gz").write_bytes(b"")
            (d / f"{day}.manifest.json").write_bytes(b"{}")
    return a


def kept_bytes(make):
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        held = make()
        gc.collect()
        return held, tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


def test_a_one_day_layout_keeps_the_names_of_that_day(archive):
    lay, held = kept_bytes(lambda: _Layout.of(archive, "examon", UNITS, [DAY.isoformat()]))
    # 2 x 1,462 names listed: over 200 kB as sets of strings; the day's 2 x 2 names ~3 kB
    assert held < 40_000, f"{held:,} bytes kept for one day of 2 units"
    assert [st[1] if st else None for st in lay.states] == [1462, 1462]  # the directory state
    assert f"{DAY}.manifest.json" in lay.listings[0] and f"{DAY}.csv.gz" in lay.listings[1]
    assert f"{DAY + dt.timedelta(1)}.manifest.json" not in lay.listings[0]


def test_a_data_file_named_otherwise_is_found_on_disk(archive):
    d = archive.root.joinpath("examon", *UNITS[1])
    os.rename(d / f"{DAY}.csv.gz", d / "renamed.csv.gz")
    doc = json.loads((d / f"{DAY}.manifest.json").read_text())
    (d / f"{DAY}.manifest.json").write_text(json.dumps({**doc, "file": "renamed.csv.gz"}))
    (archive.root.joinpath("examon", *UNITS[0]) / f"{DAY}.csv.gz").unlink()
    rebuild(archive.root)
    grid = scan_states(archive, "examon", UNITS, [DAY], check_sizes=True)
    assert grid.rows == ["C", "A"]
    assert grid.details == {(0, 0): f"data file {DAY}.csv.gz is missing"}


def test_a_unit_changed_since_indexed_is_repaired_from_its_whole_listing(archive):
    """The repair of a stale unit reads its whole directory, not the day asked: the rows of
    the other days stay in the index, and one whose manifest was removed is dropped."""
    rebuild(archive.root)
    d = archive.root.joinpath("examon", *UNITS[0])
    with ManifestIndex(archive.root) as idx:
        assert len(idx.unit_stats("examon", "ipmi_pub/ambient")) == 731
    (d / f"{DAY}.csv.gz").unlink()  # files removed by hand: the directory changed
    (d / f"{HISTORY[0]}.manifest.json").unlink()
    assert scan_states(archive, "examon", UNITS, [DAY]).rows == ["C", "A"]
    with ManifestIndex(archive.root) as idx:
        rows = idx.unit_stats("examon", "ipmi_pub/ambient")
        assert len(rows) == 730 and str(HISTORY[0]) not in rows and str(HISTORY[1]) in rows
        assert idx.dir_states("examon")["ipmi_pub/ambient"] == (d.stat().st_mtime_ns, 1460)
