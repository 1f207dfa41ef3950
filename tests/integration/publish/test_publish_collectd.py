"""``dxt publish collectd-es`` end to end: pytokio's sample hour of collectd disk documents,
moved to 2017-11-30 23:30 .. 2017-12-01 00:30 UTC (across a month boundary) and loaded into
noida-db (an Elasticsearch 8.15 stand-in, a separate process) with a few cpu documents
(single-valued) and disk documents without any value; the DAG's unit of work archives the
days (JSON Lines and HDF5), and the dataset is checked against the archived hits."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path

import orjson
import pytest

from tests.integration.publish.checks import check_dataset, digests, dxt
from tests.noida_fixtures import sample_hits

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("h5py")

INDEX = "pubtest-collectd-2017.11"
# the sample is 2017-12-13 08:00-09:00Z: its middle goes to the month's boundary
SHIFT = dt.datetime(2017, 12, 1, tzinfo=dt.UTC) - dt.datetime(2017, 12, 13, 8, 30, tzinfo=dt.UTC)
DAYS = (dt.date(2017, 11, 30), dt.date(2017, 12, 1))


def _moved(ts: str) -> str:
    t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00")) + SHIFT
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hits() -> list[dict]:
    out = []
    for h in sample_hits():
        src = dict(h["_source"])
        src["@timestamp"] = _moved(src["@timestamp"])
        out.append({"_index": INDEX, "_id": h["_id"], "_source": src})
    for i, minute in enumerate((-20, -10, 10, 20)):  # cpu: one value each
        t = dt.datetime(2017, 12, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
        for host in ("bb1", "bb2"):
            src = {
                "@timestamp": t.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "hostname": host,
                "plugin": "cpu",
                "plugin_instance": "0",
                "collectd_type": "cpu",
                "type_instance": "idle",
                "value": 90.0 + i,
            }
            out.append({"_index": INDEX, "_id": f"cpu-{host}-{i}", "_source": src})
    for minute in (-5, 5):  # a disk document without any value
        t = dt.datetime(2017, 12, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
        src = {
            "@timestamp": t.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "hostname": "bb3",
            "plugin": "disk",
            "plugin_instance": "nvme0n1",
            "collectd_type": "disk_ops",
        }
        out.append({"_index": INDEX, "_id": f"novalue-{minute}", "_source": src})
    return out


@pytest.fixture(scope="module")
def archive(noida_es, tmp_path_factory) -> Path:
    from dxt_core.archive import Archive
    from dxt_core.backends.collectd_es.archive_day import archive_collectd_es_day, es_pages
    from dxt_core.backends.collectd_es.simulator import bulk_load
    from dxt_core.backends.collectd_es.source import (
        CollectdEsConnection,
        CollectdEsSource,
        ExportStats,
    )

    bulk_load(noida_es.url, hits())
    root = tmp_path_factory.mktemp("collectd") / "archive"
    conn = CollectdEsConnection(noida_es.url, index="pubtest-collectd-*")
    with CollectdEsSource(conn) as src:
        for family in ("disk", "cpu"):
            for day in DAYS:
                stats = ExportStats()
                rep = archive_collectd_es_day(
                    es_pages(src, stats), family, day, Archive(root), stats=stats, num_nodes=16
                )
                assert rep.status == "archived", rep
    return root


def publish(archive: Path, out: Path, *extra: str):
    return dxt(
        *("publish", "collectd-es", "--archive", str(archive), "--out", str(out)),
        *("--from-month", "2017-11", "--to-month", "2017-12", *extra),
    )


def archived_hits(archive: Path, family: str, day: dt.date) -> list[dict]:
    with gzip.open(archive / "collectd_es" / family / f"{day}.jsonl.gz", "rb") as fh:
        return [orjson.loads(line)["_source"] for line in fh]


def test_one_row_per_value_every_hit_accounted_for(archive, tmp_path):
    out = tmp_path / "ds"
    publish(archive, out)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
    assert files == [
        f"year_month={ym}/family={f}/a_0.parquet"
        for ym in ("17-11", "17-12")
        for f in ("cpu", "disk")
    ]
    for family in ("disk", "cpu"):
        for ym, day in (("17-11", DAYS[0]), ("17-12", DAYS[1])):
            t = pq.read_table(out / f"year_month={ym}/family={family}/a_0.parquet")
            assert t.schema.names == [
                "timestamp",
                "value",
                "dsname",
                "node",
                "plugin",
                "plugin_instance",
                "type",
                "type_instance",
            ]
            assert t.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
            assert t.schema.field("value").type == pa.float64()
            want = []
            for h in archived_hits(archive, family, day):
                ds = [k for k in ("value", "read", "write") if h.get(k) is not None] or [None]
                for k in ds:
                    t0 = dt.datetime.fromisoformat(h["@timestamp"].replace("Z", "+00:00"))
                    want.append((h["hostname"], h["collectd_type"], k, t0, h.get(k) if k else None))
            got = [
                (r["node"], r["type"], r["dsname"], r["timestamp"], r["value"])
                for r in t.to_pylist()
            ]
            assert sorted(got, key=repr) == sorted(want, key=repr)
            series = [
                (
                    r["node"],
                    r["plugin"],
                    r["plugin_instance"],
                    r["type"],
                    r["type_instance"],
                    r["dsname"],
                )
                for r in t.to_pylist()
            ]  # the role's series order
            firsts = [s for i, s in enumerate(series) if i == 0 or series[i - 1] != s]
            assert len(firsts) == len(set(firsts))  # each series contiguous
            assert all(
                got[i][3] <= got[i + 1][3]
                for i in range(len(got) - 1)
                if series[i] == series[i + 1]
            )
    disk = pq.read_table(out / "year_month=17-12/family=disk/a_0.parquet").to_pylist()
    assert {r["dsname"] for r in disk} == {"read", "write", None}
    assert [r["value"] for r in disk if r["dsname"] is None] == [None]  # kept, marked
    readme = (out / "README.md").read_text()
    assert "| family | month |" in readme and "dsname" in readme
    check_dataset(out)


def test_reruns_are_byte_identical(archive, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    publish(archive, a)
    publish(archive, b)
    assert digests(a) == digests(b)
