"""What a scan of the archive keeps in memory and what it asks of the file system, on a
hand-made archive: only the fields of a manifest that shape the dataset (the fingerprint
reads the same values), one ``stat`` per data file of the months scanned (not of every file
of the unit's directory), and the datacard's list of skipped days as ranges."""

from __future__ import annotations

import datetime as dt
import gc
import gzip
import hashlib
import json
import os
import tracemalloc
from pathlib import Path

from dxt_core.archive import Archive
from dxt_core.backends import get_publisher
from dxt_core.publish.archive_scan import (
    CHECK_FIELDS,
    COMPARED,
    KEPT_FIELDS,
    MANIFEST_FIELDS,
    month_days,
    scan_unit_month,
)
from dxt_core.publish.datacard import day_ranges
from dxt_core.publish.tree import LocalListing, LocalTree
from dxt_core.reconcile import CHECKS_SCHEMA

#: what the archive writes besides the fields that shape the dataset (a manifest of the
#: scale review's archive is ~1.7 kB of JSON; this pads one to ~20 kB)
EXTRA = {
    "columns": ["timestamp", "value", "name", "cluster", "node", "org", "plugin"],
    "requests": {"bytes_received": 77459, "requests": 7, "retries": 0, "seconds": 0.071},
    "written_at": "2026-12-06T01:39:41+00:00",
    "padding": "x" * 20_000,
}


def make_unit(root: Path, parts: tuple[str, str], days: list[dt.date]) -> Path:
    d = root / "examon" / parts[0] / parts[1]
    d.mkdir(parents=True, exist_ok=True)
    for day in days:
        text = f"timestamp,value,name,node\n{day}T00:00:00+00:00,1,{parts[1]},n1\n"
        data = gzip.compress(text.encode(), mtime=0)
        (d / f"{day}.csv.gz").write_bytes(data)
        doc = {
            "status": "archived",
            "day": str(day),
            "file": f"{day}.csv.gz",
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "rows": 1,
            "time_zone": "Europe/Rome",
            "source_url": "http://127.0.0.1:18080",
            "source_count": {"count": 1, "method": "KairosDB count aggregator"},
            "holes": [],
            **EXTRA,
        }
        (d / f"{day}.manifest.json").write_text(json.dumps(doc))
    return d


def days_of(*months: tuple[int, int]) -> list[dt.date]:
    return [d for y, m in months for d in month_days(y, m)]


def test_a_scan_keeps_only_the_fields_that_shape_the_dataset(tmp_path):
    d = make_unit(tmp_path, ("p", "m"), days_of((2025, 2)))
    (d / "2025-02-03.kept.json").write_text(
        json.dumps({"archive_rows": 5, "source_rows": 4, "by": "rerun", "prev": {"x": "y" * 99}})
    )
    role = get_publisher("examon").publish_role()
    um = role.scan(LocalTree(tmp_path), ("p", "m"), 2025, 2)
    assert len(um.days) == 28 and len(um.manifests) == 28
    full = json.loads((d / "2025-02-03.manifest.json").read_text())
    for day in um.days:
        assert set(day.manifest) <= set(MANIFEST_FIELDS)
        assert day.manifest["rows"] == 1
    # every field the fingerprint and the datacard read, as the whole manifest gives it
    assert {k: um.days[2].manifest.get(k) for k in MANIFEST_FIELDS} == {
        k: full.get(k) for k in MANIFEST_FIELDS
    }
    assert all(set(m) <= set(MANIFEST_FIELDS) for m in um.manifests)
    assert [(day, set(doc) <= set(KEPT_FIELDS)) for day, doc in um.kept] == [
        (dt.date(2025, 2, 3), True)
    ]
    assert all(set(c) <= set(CHECK_FIELDS) for c in um.checks.values())
    # the shared strings: one zone for every day
    assert len({id(day.manifest["time_zone"]) for day in um.days}) == 1


def test_scanned_months_hold_no_whole_manifest(tmp_path):
    """A bound on what the scans of 3 units x 4 months hold: far below one 20 kB manifest
    per day (what they held before)."""
    months = [(2025, 1), (2025, 2), (2025, 3), (2025, 4)]
    units = [("p", f"m{i}") for i in range(3)]
    for u in units:
        make_unit(tmp_path, u, days_of(*months))
    role = get_publisher("examon").publish_role()
    tree = LocalTree(tmp_path)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        scans = {u: [role.scan(tree, u, y, m) for y, m in months] for u in units}
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    n = sum(len(um.days) for ums in scans.values() for um in ums)
    assert n == 3 * 120
    assert held / n < 2_000, f"{held / n:.0f} bytes per day"


def test_a_month_scan_stats_only_that_months_data_files(tmp_path, monkeypatch):
    """The unit directory holds two years of days: scanning February stats its 28 data files
    (the sizes its manifests give), not the 1,460 files of the directory."""
    years = [(y, m) for y in (2024, 2025) for m in range(1, 13)]
    make_unit(tmp_path, ("p", "m"), days_of(*years))
    seen: list[str] = []
    real = os.stat

    def counting(path, *a, **k):
        if str(path).startswith(str(tmp_path)):
            seen.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(os, "stat", counting)
    role = get_publisher("examon").publish_role()
    um = role.scan(LocalTree(tmp_path), ("p", "m"), 2025, 2)
    assert len(um.days) == 28
    assert len(seen) <= 28 + 2, seen[:40]
    assert all("2025-02-" in p for p in seen if p.endswith(".gz"))


def test_a_listing_sizes_files_when_asked(tmp_path):
    (tmp_path / "a").write_bytes(b"12345")
    (tmp_path / "sub").mkdir()
    listing = LocalListing(tmp_path)
    assert "a" in listing and "sub" not in listing and "b" not in listing
    assert listing.get("a") == 5 and listing.get("b") is None and len(listing) == 1
    (tmp_path / "a").unlink()
    assert listing.get("a") == 5  # asked once, kept
    listing = LocalListing(tmp_path / "none")
    assert len(listing) == 0 and listing.get("a") is None


def test_a_file_gone_since_the_listing_is_absent(tmp_path):
    d = make_unit(tmp_path, ("p", "m"), days_of((2025, 2)))
    tree = LocalTree(tmp_path)
    tree.files("examon/p/m")  # listed before the file goes
    (d / "2025-02-05.csv.gz").unlink()
    um = scan_unit_month(tree, ["examon/p/m"], ("p", "m"), 2025, 2)
    assert len(um.days) == 27
    assert [day for day, _ in um.skipped] == [dt.date(2025, 2, 5)]
    assert "named by its manifest but absent" in um.skipped[0][1]


def test_day_ranges():
    days = [dt.date(2025, 5, d) for d in (1, 2, 3, 5, 7, 8, 31)]
    assert day_ranges(days) == ["2025-05-01..2025-05-03", "2025-05-05", "2025-05-07..2025-05-08",
                                "2025-05-31"]  # fmt: skip
    assert day_ranges([]) == []


def test_days_committed_while_published_are_told_from_damaged_ones(tmp_path):
    """A publication that ran while an extract committed days skipped them as bad (exit 0,
    a citable dataset without them); a fresh scan tells them from days really damaged."""
    from dxt_core.publish.dataset import changed_while_publishing

    role = get_publisher("examon").publish_role()
    unit = ("ipmi_pub", "ambient")
    days = [dt.date(2020, 3, d) for d in (1, 2, 3, 4)]
    d = make_unit(tmp_path, unit, days)
    for day in days[:2]:  # a file whose size is not its manifest's, when scanned
        (d / f"{day}.csv.gz").write_bytes(b"being replaced")
    um = role.scan(LocalTree(tmp_path), unit, 2020, 3)
    assert [s[0] for s in um.skipped] == days[:2]
    for day in days[2:]:  # found bad when read (an object store's sha256 check)
        um.unusable(next(f for f in um.days if f.day == day), "sha256 differs")
    # the writer commits days 1 and 3 (other bytes); 2 and 4 stay as they were
    for day in (days[0], days[2]):
        (d / f"{day}.csv.gz").write_bytes(gzip.compress(b"timestamp,value\nother\n", mtime=0))
        doc = json.loads((d / f"{day}.manifest.json").read_text())
        data = (d / f"{day}.csv.gz").read_bytes()
        doc.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        (d / f"{day}.manifest.json").write_text(json.dumps(doc))
    changed = changed_while_publishing(role, LocalTree(tmp_path), {unit: [um]})
    assert changed == [f"ipmi_pub/ambient {days[0]}", f"ipmi_pub/ambient {days[2]}"]


def test_a_day_replaced_between_its_check_and_its_read_stops_the_publication(tmp_path):
    """The sha256 was checked, then the path opened again to read: a commit in between had
    the day's new bytes published under the old manifest's counts."""
    import pytest

    from dxt_core.errors import ArchiveError

    d = make_unit(tmp_path, ("ipmi_pub", "ambient"), [dt.date(2020, 3, 1)])
    rel = "examon/ipmi_pub/ambient/2020-03-01.csv.gz"
    data = (tmp_path / rel).read_bytes()
    tree, sha = LocalTree(tmp_path), hashlib.sha256(data).hexdigest()
    with tree.fetch(rel, len(data), sha, tmp_path) as path:
        assert path.read_bytes() == data  # read, nothing changed: no error
    with pytest.raises(ArchiveError, match="was replaced while it was read"):
        with tree.fetch(rel, len(data), sha, tmp_path) as path:
            (d / "new.tmp").write_bytes(data)  # the same bytes, another file: a commit
            os.replace(d / "new.tmp", path)


def write_checks(root: Path, month: str, units: dict[str, dict[str, dict]]) -> None:
    """A reconcile's check record of one month, as the archive holds it."""
    path = root / ".dxt-checks" / "examon" / f"{month}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": CHECKS_SCHEMA, "source": "examon", "month": month, "units": units}
    path.write_text(json.dumps(doc))


def check(state: str, at: str) -> dict:
    return {"state": state, "archive_count": 1, "source_count": 1, "method": "KairosDB count",
            "checked_at": at, "checks": 1}  # fmt: skip


def test_a_months_check_record_is_parsed_once_for_every_unit(tmp_path, monkeypatch):
    """The check record of a month holds every unit (~7 MB for Examon's 811): a publication
    decodes it once, not once per unit (811 decodes, 24.5 s of a month's 28 s at scale), and
    each unit gets the same days as reading the record for it alone gives."""
    import types

    import orjson
    import pytest

    pytest.importorskip("pyarrow")
    from dxt_core import reconcile
    from dxt_core.publish import PublishOptions, publish

    months = [(2025, 1), (2025, 2)]
    units = [("p", f"m{i}") for i in range(6)]
    for u in units:
        make_unit(tmp_path, u, days_of(*months)[:-3])  # 2025-02-26..28 not archived
    for y, m in months:
        at = f"{y}-{m + 1:02d}-05T00:00:00Z"
        write_checks(tmp_path, f"{y}-{m:02d}", {
            "p/m0": {f"{y}-{m:02d}-01": check("equal", at), f"{y}-{m:02d}-02": check("more", at),
                     f"{y}-{m:02d}-03": check("error", at), f"{y}-{m:02d}-28": check("equal", at),
                     "not a day": check("equal", at)},
            "p/m3": {f"{y}-{m:02d}-09": check("fewer", at)},
            "p/gone": {f"{y}-{m:02d}-01": check("equal", at)},
        })  # fmt: skip
    decoded: list[int] = []

    def loads(data):
        decoded.append(len(data))
        return orjson.loads(data)

    counting = types.SimpleNamespace(loads=loads, JSONDecodeError=orjson.JSONDecodeError)
    monkeypatch.setattr(reconcile, "orjson", counting)  # the check records' decoder only
    role = get_publisher("examon").publish_role()
    tree = LocalTree(tmp_path)
    scans = {u: [role.scan(tree, u, y, m) for y, m in months] for u in units}
    assert len(decoded) == len(months)
    for u, ums in scans.items():  # as the record read for one unit alone gives
        for um in ums:
            alone = reconcile.unit_checks(Archive(tmp_path).read_internal, "examon", u,
                                          um.year, um.month)  # fmt: skip
            held = {str(d.day) for d in um.days}
            want = {dt.date.fromisoformat(d): {k: v[k] for k in CHECK_FIELDS}
                    for d, v in alone.items() if v["state"] in COMPARED and d in held}  # fmt: skip
            assert um.checks == want
    assert [sorted(str(d) for d in um.checks) for um in scans[("p", "m0")]] == [
        ["2025-01-01", "2025-01-02", "2025-01-28"], ["2025-02-01", "2025-02-02"]
    ]  # fmt: skip
    decoded.clear()
    publish(role, PublishOptions(tmp_path, tmp_path / "out", "2025-01", "2025-02",
                                 records=False))  # fmt: skip
    assert len(decoded) == len(months)  # one publication: each month's record once
    card = (tmp_path / "out" / "README.md").read_text()
    assert "3 checked (2 equal, 1 more; last 2025-02-05)" in card
    assert "2 checked (1 equal, 1 more; last 2025-03-05)" in card
    assert "1 checked (1 fewer; last 2025-03-05)" in card
