"""``dxt publish kwollect`` end to end: ``dxt extract kwollect`` archives two metrics of the
Kwollect simulator (a separate process) across a month boundary (2024-11-30 .. 2024-12-01,
Europe/Paris days), and the dataset is checked against the archive's own points."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from tests.integration.publish.checks import check_dataset, digests, dxt
from tests.kwollect_sim import KwollectSimProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

METRICS = ("bmc_node_power_watt", "network_ifacein_bytes_total")
PARIS_MIDNIGHT = "2024-11-30T23:00:00"  # December's first local midnight, in UTC


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def extract(sim, root: Path, *extra: str) -> None:
    dxt(
        *("extract", "kwollect", "--api-url", sim.url, "--clusters", "nancy/gros"),
        *("--metrics", ",".join(METRICS), "--archive", str(root)),
        *("--start-day", "2024-11-30", "--end-day", "2024-12-01", *extra),
    )


@pytest.fixture(scope="module")
def archive(sim, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kwollect") / "archive"
    extract(sim, root)
    return root


def publish(archive: Path, out: Path, *extra: str):
    return dxt(
        *("publish", "kwollect", "--archive", str(archive), "--out", str(out)),
        *("--from-month", "2024-11", "--to-month", "2024-12", *extra),
    )


def points(archive: Path, metric: str, day: str) -> list[dict]:
    path = archive / "kwollect/nancy" / metric / f"{day}.jsonl.gz"
    with gzip.open(path, "rb") as fh:
        return [orjson.loads(line) for line in fh]


def test_layout_types_order_and_every_point(archive, tmp_path):
    out = tmp_path / "ds"
    res = publish(archive, out)
    assert "published 4 files (184,320 rows) for 2 units x 2 months" in res.stdout
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
    assert files == sorted(
        f"year_month={ym}/site=nancy/metric={m}/a_0.parquet"
        for ym in ("24-11", "24-12")
        for m in METRICS
    )
    for ym, day in (("24-11", "2024-11-30"), ("24-12", "2024-12-01")):
        for metric in METRICS:
            t = pq.read_table(out / f"year_month={ym}/site=nancy/metric={metric}/a_0.parquet")
            assert t.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
            want_type = pa.int64() if metric.endswith("_total") else pa.float64()
            assert t.schema.field("value").type == want_type  # a counter stays whole
            raw = points(archive, metric, day)
            got = t.to_pylist()
            assert len(got) == len(raw)
            # every point, its labels flattened as Kwollect's CSV export does
            assert sorted(
                (r["node"], r["timestamp"].isoformat(), r["value"], r.get("label__device_orig"))
                for r in got
            ) == sorted(
                (
                    p["device_id"],
                    _utc(p["timestamp"]),
                    p["value"],
                    ";".join(p["labels"]["_device_orig"])
                    if "_device_orig" in p["labels"]
                    else None,
                )
                for p in raw
            )
            nodes = [r["node"] for r in got]
            runs = [n for i, n in enumerate(nodes) if i == 0 or nodes[i - 1] != n]
            assert runs == sorted(set(nodes)) == ["gros-1", "gros-2", "gros-3", "gros-4"]
            ts = [r["timestamp"] for r in got]
            assert all(ts[i] <= ts[i + 1] for i in range(len(ts) - 1) if nodes[i] == nodes[i + 1])
        first = min(
            r["timestamp"]
            for r in pq.read_table(
                out / f"year_month={ym}/site=nancy/metric={METRICS[0]}/a_0.parquet"
            ).to_pylist()
        )
        if ym == "24-12":
            assert first.isoformat().startswith(PARIS_MIDNIGHT)
    counter = pq.read_schema(out / f"year_month=24-11/site=nancy/metric={METRICS[1]}/a_0.parquet")
    assert counter.names == [
        "timestamp",
        "value",
        "name",
        "label__device_orig",
        "label_interface",
        "node",
    ]
    readme = (out / "README.md").read_text()
    assert "Europe/Paris" in readme and "microsecond precision" in readme
    assert "| site/metric | month |" in readme
    assert (
        "| nancy/bmc_node_power_watt | 2024-11 | 1 | 0 | 29 | 0 | 69,120 | 0 | 1/1 agree" in readme
    )
    check_dataset(out)


def _utc(text: str) -> str:
    import datetime as dt

    return dt.datetime.fromisoformat(text).astimezone(dt.UTC).isoformat()


def test_reruns_are_byte_identical(sim, archive, tmp_path):
    first, again = tmp_path / "a", tmp_path / "b"
    publish(archive, first)
    publish(archive, again)
    assert digests(first) == digests(again)
    before = digests(first)
    same = publish(archive, first)
    assert "unchanged: " in same.stdout and digests(first) == before
    publish(archive, first, "--force")
    assert digests(first) == before
    # the days archived again from the same source: new manifests (another written_at),
    # the same points: still unchanged, nothing written
    manifest = archive / "kwollect/nancy" / METRICS[0] / "2024-12-01.manifest.json"
    written = manifest.read_bytes()
    extract(sim, archive, "--refetch")
    assert manifest.read_bytes() != written
    assert "unchanged: " in publish(archive, first).stdout and digests(first) == before
