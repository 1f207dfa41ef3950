"""What every publish test checks of a dataset, the way its users would: ``sha256sum -c``,
``datapackage.json`` against the files, ``frictionless validate`` (a real run of the program,
through tests/services: skipped locally when missing, a failure under CI=true), Croissant,
and byte-identical reruns."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.services import require_service


def dxt(*args: str, check: bool = True, env: dict[str, str] | None = None):
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if check:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def digests(root: Path) -> dict[str, str]:
    """Every file of a dataset (hidden ones included) and its sha256."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def frictionless() -> str:
    exe = Path(sys.executable).with_name("frictionless")
    found = str(exe) if exe.exists() else shutil.which("frictionless")
    if found is None:
        require_service("frictionless", "the dataset check needs it: pip install -e '.[dev]'")
    return found


def check_dataset(root: Path, rows: int = 2000) -> dict:
    """sha256sum -c, datapackage.json's sizes and hashes, frictionless validate, Croissant;
    returns the Data Package."""
    sums = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=root)
    assert sums.returncode == 0
    listed = (root / "SHA256SUMS").read_text()
    for name in ("README.md", "datapackage.json", "croissant.json"):
        assert f"  {name}\n" in listed
    doc = json.loads((root / "datapackage.json").read_text())
    assert doc["resources"]
    for res in doc["resources"]:
        f = root / res["path"]
        assert res["bytes"] == f.stat().st_size
        assert res["hash"] == "sha256:" + hashlib.sha256(f.read_bytes()).hexdigest()
    # frictionless reads Parquet through pyarrow, never through its byte stream, so it
    # cannot count bytes or hash them (checked just above, and by sha256sum); it checks
    # ~10k rows/s: the first rows of every file
    v = subprocess.run(
        [
            frictionless(),
            *("validate", "datapackage.json", "--skip-errors", "byte-count,hash-count"),
            *("--limit-rows", str(rows)),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-2000:]
    cro = json.loads((root / "croissant.json").read_text())
    assert cro["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    assert {d["@type"] for d in cro["distribution"]} == {"cr:FileObject", "cr:FileSet"}
    files = {d["contentUrl"] for d in cro["distribution"] if d["@type"] == "cr:FileObject"}
    assert files == {r["path"] for r in doc["resources"]}
    # the Parquet media type mlcroissant (the reference reader) knows: with the IANA name it
    # found no reader for any file; timestamps are date-times, not dates
    assert {d["encodingFormat"] for d in cro["distribution"]} == {"application/x-parquet"}
    types = {f["name"]: f["dataType"] for rs in cro["recordSet"] for f in rs["field"]}
    assert types.get("timestamp") == "sc:DateTime", types
    assert cro.get("url") != "", "an empty url: leave it out when --url is not given"
    return doc
