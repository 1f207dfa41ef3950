"""``dxt publish prometheus`` end to end, from the real VictoriaMetrics (the Debian package's
binary, a separate process, loaded with tests/integration/prometheus/data.py's series):
``dxt extract prometheus`` archives 2024-03-30 .. 2024-04-01 (Europe/Rome days, across a
month boundary and a DST change) in both archive formats, and the dataset is checked
against the generated samples."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.integration.prometheus import data, servers
from tests.integration.publish.checks import check_dataset, digests, dxt

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DAYS = data.SPRING  # 2024-03-30 .. 2024-04-01


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    servers.binary("victoria-metrics")  # missing: skipped locally, a failure under CI
    base = tmp_path_factory.mktemp("prometheus")
    server = servers.start_victoriametrics(base / "vm")
    try:
        for fmt in ("csv", "parquet"):
            dxt(
                *("extract", "prometheus", "--url", server.url, "--tz", data.TIME_ZONE),
                *("--start-day", str(DAYS[0]), "--end-day", str(DAYS[-1])),
                *("--archive", str(base / fmt), "--format", fmt, "-q"),
            )
    finally:
        server.stop()
    return base


def publish(archive: Path, out: Path, *extra: str):
    return dxt(
        *("publish", "prometheus", "--archive", str(archive), "--out", str(out)),
        *("--from-month", "2024-03", "--to-month", "2024-04", *extra),
    )


def test_layout_rows_and_order(archives, tmp_path):
    out = tmp_path / "ds"
    publish(archives / "csv", out)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
    assert files == sorted(
        f"year_month={ym}/metric={m}/a_0.parquet" for ym in ("24-03", "24-04") for m in data.METRICS
    )
    for ym, days in (("24-03", DAYS[:2]), ("24-04", DAYS[2:])):
        t = pq.read_table(out / f"year_month={ym}/metric=node_temp_celsius/a_0.parquet")
        assert t.num_rows == sum(data.expected_rows("node_temp_celsius", d) for d in days)
        assert t.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
        # the metric's columns are the union of its series' labels; rack is empty but on n3
        # (as the archive holds it: Prometheus takes an empty label for an absent one)
        assert {"instance", "job", "node", "rack"} <= set(t.schema.names)
        rows = t.to_pylist()
        specs = [s for s in data.SERIES if s.name == "node_temp_celsius"]
        for r in rows[:: max(1, len(rows) // 500)]:  # each value is the generator's
            k = next(i for i, s in enumerate(specs) if dict(s.labels)["instance"] == r["instance"])
            ms = int(r["timestamp"].timestamp() * 1000)
            assert r["value"] == specs[k].value(ms, k)
            assert r["rack"] == dict(specs[k].labels).get("rack", "")
        inst = [r["instance"] for r in rows]
        runs = [x for i, x in enumerate(inst) if i == 0 or inst[i - 1] != x]
        assert runs == ["n1:9100", "n2:9100", "n3:9100"]  # series contiguous, instance first
        ts = [r["timestamp"] for r in rows]
        assert all(ts[i] < ts[i + 1] for i in range(len(ts) - 1) if inst[i] == inst[i + 1])
        first = min(ts)
        local = first.astimezone(ZoneInfo(data.TIME_ZONE))  # the month starts at its midnight
        assert (local.date(), local.hour, local.minute) == (days[0], 0, 0)
    readme = (out / "README.md").read_text()
    assert "Europe/Rome" in readme and "| metric | month |" in readme
    march = sum(data.expected_rows("node_temp_celsius", d) for d in DAYS[:2])  # 23-hour 31st
    assert f"| node_temp_celsius | 2024-03 | 2 | 0 | 29 | 0 | {march:,} | 0 | 2/2 agree" in readme
    check_dataset(out)


def test_both_archive_formats_and_reruns_give_the_same_bytes(archives, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    publish(archives / "csv", a)
    publish(archives / "csv", b)
    assert digests(a) == digests(b)
    publish(archives / "parquet", c)
    da, dc = digests(a), digests(c)
    same = [k for k in da if k.endswith(".parquet")]
    assert len(same) == 2 * len(data.METRICS)  # two months of every metric
    # every sample is a float64: a whole-number counter is a double from either archive
    # (it was int64 from the CSV's digits), and every file is the same
    assert [k for k in same if da[k] != dc[k]] == []
    jobs = pq.read_schema(a / "year_month=24-03/metric=node_jobs_total/a_0.parquet")
    assert jobs.field("value").type == pa.float64()
