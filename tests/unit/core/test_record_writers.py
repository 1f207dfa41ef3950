"""The one record-to-bytes interface (dxt_core.writers.base.RecordWriter): header, rows, close,
for every format; a file's bytes do not depend on how its rows were cut into calls."""

from __future__ import annotations

import datetime as dt
import gzip
import io
from typing import Any

import orjson
import pytest

from dxt_core.backends.collectd_es.tokio_hdf5 import (
    TimeGrid,
    TokioHdf5Writer,
    TokioTimeSeriesBuilder,
    read_tokio_dataset,
    write_tokio_hdf5,
)
from dxt_core.errors import ArchiveError
from dxt_core.writers.base import RecordWriter, WriteResult, write_stream
from dxt_core.writers.csv_gzip import GzipCsvTableWriter
from dxt_core.writers.jsonl_gzip import JsonlGzipWriter
from dxt_core.writers.parquet import ParquetTableWriter

T0 = dt.datetime(2017, 12, 13, 8, 0, tzinfo=dt.UTC)
RECORDS = [{"job_id": i, "name": f"j{i}", "nodes": ["a", "b"][: i % 3]} for i in range(300)]


def by_calls(make: Any, head: Any, records: list[Any], step: int) -> bytes:
    buf = io.BytesIO()
    write_stream(make(buf), head, [records[i : i + step] for i in range(0, len(records), step)])
    return buf.getvalue()


@pytest.mark.parametrize("make", [JsonlGzipWriter, GzipCsvTableWriter])
def test_text_formats_give_the_same_bytes_however_the_rows_come(make):
    head = ["job_id", "name", "nodes"]
    whole = by_calls(make, head, RECORDS, len(RECORDS))
    assert by_calls(make, head, RECORDS, 7) == whole == by_calls(make, head, RECORDS, 1)


def test_jsonl_writes_each_document_and_the_span_of_its_times():
    buf = io.BytesIO()
    writer = JsonlGzipWriter(
        buf, shape=lambda h: {"_id": h["_id"]}, when=lambda h: (h.get("sort") or [None])[0]
    )
    hits = [{"_id": "b", "sort": [20]}, {"_id": "a", "sort": [10]}, {"_id": "c"}]
    res = write_stream(writer, ["_id"], [hits[:1], hits[1:]])
    lines = gzip.decompress(buf.getvalue()).splitlines()
    assert [orjson.loads(x) for x in lines] == [{"_id": "b"}, {"_id": "a"}, {"_id": "c"}]
    assert (res.rows, res.first_ms, res.last_ms, res.columns) == (3, 10, 20, ["_id"])


def test_parquet_table_rows_keep_one_type_per_column_across_calls():
    pq = pytest.importorskip("pyarrow.parquet")
    buf = io.BytesIO()
    writer = ParquetTableWriter(buf, {"job_id": "int64"}, table="job_table/x")
    res = write_stream(writer, ["job_id", "name", "nodes"], [RECORDS[:100], RECORDS[100:]])
    table = pq.read_table(io.BytesIO(buf.getvalue()))
    assert table.num_rows == res.rows == 300
    assert table.column("job_id").to_pylist() == list(range(300))
    assert pq.ParquetFile(io.BytesIO(buf.getvalue())).num_row_groups == 2
    with pytest.raises(ArchiveError, match=r"job_table/x: record 1 has job_id = 1.5"):
        write_stream(ParquetTableWriter(io.BytesIO(), {"job_id": "int64"}, "job_table/x"),
                     ["job_id"], [[{"job_id": 1}], [{"job_id": 1.5}]])  # fmt: skip


class _Failing(RecordWriter[list[str], list[int]]):
    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.calls: list[str] = []

    def header(self, head: list[str]) -> None:
        self.calls.append("header")

    def rows(self, rows: list[int]) -> None:
        self.calls.append("rows")
        if rows == [2]:
            raise ValueError("bad row")

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> WriteResult:
        self.calls.append("close")
        return WriteResult()


def test_a_failure_aborts_and_never_closes():
    w = _Failing()
    with pytest.raises(ValueError, match="bad row"):
        write_stream(w, ["x"], [[1], [2], [3]])
    assert w.calls == ["header", "rows", "rows", "abort"]


def disk_hit(i: int, seconds: int) -> dict[str, Any]:
    when = T0 + dt.timedelta(seconds=seconds)
    return {
        "_id": str(i),
        "_source": {
            "@timestamp": when.isoformat().replace("+00:00", "Z"),
            "hostname": f"bb{i % 3}",
            "plugin": "disk",
            "plugin_instance": "nvme0n1",
            "collectd_type": "disk_octets",
            "read": float(i),
            "write": 2.0 * i,
        },
    }


def test_the_hdf5_writer_is_the_builder_and_the_file_behind_one_interface(tmp_path):
    """Pages through TokioHdf5Writer give the file write_tokio_hdf5 gives from the same
    builder; the writer holds cells (the builder's columns), not the pages."""
    pages = [[disk_hit(i, 10 * i) for i in range(j, j + 10)] for j in range(0, 60, 10)]
    grid = TimeGrid.of(T0, T0 + dt.timedelta(minutes=10), 10)
    out = io.BytesIO()
    writer = TokioHdf5Writer(out, ["disk"], num_nodes=3, updated=T0)
    res = write_stream(writer, grid, pages)
    builder = TokioTimeSeriesBuilder(["disk"], grid, 3)
    builder.add_pages(pages)
    ref = write_tokio_hdf5(tmp_path / "ref.hdf5", builder, now=T0)
    (tmp_path / "w.hdf5").write_bytes(out.getvalue())
    for name in ("datatargets/readrates", "datatargets/writerates"):
        cols, values, _ = read_tokio_dataset(tmp_path / "w.hdf5", name)
        ref_cols, ref_values, _ = read_tokio_dataset(tmp_path / "ref.hdf5", name)
        assert cols == ref_cols and (values == ref_values).all()
    assert res.rows == ref.rows == 60 and res.extra["columns"] == ref.columns
    assert writer.stats.inserted == 60 and res.extra["out_of_range"] == 0
