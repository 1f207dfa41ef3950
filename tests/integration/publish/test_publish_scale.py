"""``dxt publish examon`` on a hand-made archive with many damaged days (the scale review's
archive had 510 in one month): the published dataset names no path of the archive (its
datacard lists the skipped days by unit and day, capped), while the command's output names
the archive's files, capped too, with a count."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
from pathlib import Path

import pytest

from tests.integration.publish.checks import dxt

# one run of the command (a subprocess) over 250 small day files: a few seconds
pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("pyarrow")

UNITS = [("ipmi_pub", f"m{i:02d}") for i in range(25)]
DAYS = [dt.date(2025, 5, d) for d in range(1, 11)]
BAD_SIZE = (3, 4, 5, 9)  # days whose file is longer than its manifest says (found by the scan)
BAD_HASH = dt.date(2025, 5, 7)  # same size, other bytes (found when read), first unit only


def make_archive(root: Path) -> None:
    for plugin, metric in UNITS:
        d = root / "examon" / plugin / metric
        d.mkdir(parents=True)
        for day in DAYS:
            rows = "".join(
                f"{day}T{h:02d}:00:00+00:00,{h},{metric},n{n}\n" for h in range(24) for n in (1, 2)
            )
            data = gzip.compress(f"timestamp,value,name,node\n{rows}".encode(), mtime=0)
            doc = {
                "status": "archived",
                "day": str(day),
                "file": f"{day}.csv.gz",
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "rows": 48,
                "time_zone": "UTC",
                "written_at": "2026-01-01T00:00:00+00:00",
            }
            (d / f"{day}.manifest.json").write_text(json.dumps(doc))
            if day.day in BAD_SIZE:
                data += b"damaged"
            elif day == BAD_HASH and metric == "m00":
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
            (d / f"{day}.csv.gz").write_bytes(data)


def test_the_dataset_names_no_path_of_the_archive(tmp_path):
    archive = tmp_path / "operator-archive"
    make_archive(archive)
    out = tmp_path / "dataset"
    res = dxt(
        *("publish", "examon", "--archive", str(archive), "--out", str(out)),
        *("--from-month", "2025-05", "--to-month", "2025-05", "--keep-identities"),
    )
    skipped = len(UNITS) * len(BAD_SIZE) + 1
    assert f"{skipped} unit-days skipped" in res.stdout
    # the command's output names the archive's files, the first 20, and counts the rest
    named = [ln for ln in res.stdout.splitlines() if ln.startswith("warning: skipped ")]
    assert len(named) == 20
    assert all(str(archive) in ln for ln in named)
    assert f"... and {skipped - 20} more unit-days skipped ({skipped} in all" in res.stdout
    # the dataset: no path of the archive (nor of where it was made) anywhere
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".md", ".json", ""):
            text = p.read_text(errors="replace")
            assert str(tmp_path) not in text and "operator-archive" not in text, p
    readme = (out / "README.md").read_text()
    section = readme.split("## Skipped days\n", 1)[1].split("\n## ", 1)[0]
    assert f"{skipped} unit-days of {len(UNITS)} units are not published" in section
    listed = [ln for ln in section.splitlines() if ln.startswith("- ")]
    assert listed[0] == ("- ipmi_pub/m00: 2025-05-03..2025-05-05, 2025-05-07, 2025-05-09 (5 days)")
    assert listed[1] == "- ipmi_pub/m01: 2025-05-03..2025-05-05, 2025-05-09 (4 days)"
    assert len(listed) == 21  # 20 units, then a count of the others
    assert listed[-1] == "- and 20 unit-days of 5 more units"
    assert "| ipmi_pub/m00 | 2025-05 | 5 | 0 | 21 | 5 | 240 |" in readme
    # nothing else of the notes names a skipped day
    assert "skipped ipmi_pub" not in readme
