"""A rerun that writes the archived Parquet day's content in other bytes (another pyarrow:
each file records the library that wrote it) is the same day, not "other values".

Found by a review of upgrades: with pyarrow 15 then 26, every rerun of an unchanged Parquet
day failed ("the source has as many rows as the archive but other values"), under the CLI
and in every Airflow task. Here the other writer is pyarrow itself with other options (the
same table compressed otherwise: other bytes, the same content)."""

from __future__ import annotations

import datetime as dt
import hashlib
import io

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from dxt_core.archive import Archive, DayKey  # noqa: E402
from dxt_core.errors import ContentChanged  # noqa: E402

KEY = DayKey("examon", ("plugin=ipmi_pub", "metric=ambient"), dt.date(2020, 3, 9))


def parquet(values: list[float], compression: str) -> bytes:
    table = pa.table({"timestamp": list(range(len(values))), "value": values})
    out = io.BytesIO()
    pq.write_table(table, out, compression=compression)
    return out.getvalue()


def commit(archive: Archive, body: bytes) -> tuple[object, dict]:
    day = archive.begin(KEY)
    with day.open("parquet") as fh:
        fh.write(body)
    doc = {
        "status": "archived",
        "file": f"{KEY.day}.parquet",
        "rows": 3,
        "bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    day.commit(doc)
    return day, doc


def test_the_same_content_in_other_bytes_keeps_the_archived_file(tmp_path):
    archive = Archive(tmp_path)
    first = parquet([1.0, 2.0, 3.0], "zstd")
    commit(archive, first)
    other = parquet([1.0, 2.0, 3.0], "snappy")
    assert other != first
    day, _ = commit(archive, other)
    assert day.unchanged
    path = archive.directory(KEY) / f"{KEY.day}.parquet"
    assert path.read_bytes() == first  # the archived bytes, as their manifest says
    manifest = archive.read_manifest(KEY)
    assert manifest["sha256"] == hashlib.sha256(first).hexdigest()
    assert manifest["bytes"] == len(first)
    assert archive.status(KEY, verify=True) == ("archived", "")
    assert not (archive.directory(KEY) / ".versions").exists()  # nothing replaced


def test_other_values_in_as_many_rows_are_still_refused(tmp_path):
    archive = Archive(tmp_path)
    commit(archive, parquet([1.0, 2.0, 3.0], "zstd"))
    with pytest.raises(ContentChanged, match="as many rows as the archive"):
        commit(archive, parquet([1.0, 2.0, 4.0], "snappy"))


def test_the_temporary_files_of_a_killed_run_are_removed_and_said(tmp_path, caplog):
    """What a run killed mid-write left (staged files under hidden names) was removed by the
    next run of the day without a word."""
    archive = Archive(tmp_path)
    directory = archive.directory(KEY)
    directory.mkdir(parents=True)
    (directory / f".{KEY.day}.parquet.staged.tmp").write_bytes(b"half")
    (directory / f"._{KEY.day}.manifest.json.x1.tmp").write_bytes(b"{")
    with caplog.at_level("WARNING"):
        commit(archive, parquet([1.0, 2.0, 3.0], "zstd"))
    assert "removed 2 temporary file(s) an earlier run of this day left" in caplog.text
    assert not list(directory.glob(".*.tmp"))


def test_values_are_compared_as_stored_nan_and_signed_zero():
    """NaN never equalled NaN, so a Prometheus day with a NaN sample was refused after a
    pyarrow upgrade all the same; -0.0 equalled 0.0, so other values were kept as the same."""
    from dxt_core.samecontent import parquet_content_equal

    def file(values, compression, tmp):
        path = tmp / f"{compression}-{len(list(tmp.iterdir()))}.parquet"
        path.write_bytes(parquet(values, compression))
        return path

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        nan = float("nan")
        assert parquet_content_equal(
            file([1.0, nan, 3.0], "zstd", tmp), file([1.0, nan, 3.0], "snappy", tmp)
        )
        assert not parquet_content_equal(
            file([1.0, -0.0, 3.0], "zstd", tmp), file([1.0, 0.0, 3.0], "snappy", tmp)
        )
        assert not parquet_content_equal(file([1.0], "zstd", tmp), tmp / "not-there.parquet")
