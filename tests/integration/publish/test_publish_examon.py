"""``dxt publish examon`` end to end: a simulator archive made by ``dxt extract examon``
across a month boundary (2020-03-30 .. 2020-04-02, Europe/Rome days), published from the CSV
and from the Parquet archive, and checked the way a user of the dataset would."""

from __future__ import annotations

import csv
import gzip
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SimulatorProcess
from tests.integration.publish.checks import check_dataset, digests, dxt

# Each test needs the module's simulator archive (11-17 s to make) or publishes months of it
# (6-55 s measured with --durations): the full tier.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")

DAYS = ("2020-03-30", "2020-04-02")
KEY = b"site-secret-for-tests-0123456789"
METRICS = {
    ("ipmi_pub", "ambient"),
    ("ipmi_pub", "ps0_input_power"),
    ("ipmi_pub", "ps1_input_power"),
    ("nagios_pub", "state"),
    ("slurm_pub", "num_nodes"),
}
JOBS = ("job_table", "job_info_marconi100")


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    base = tmp_path_factory.mktemp("publish")
    catalog = base / "catalog.csv"
    catalog.write_text(
        "metric,plugin\n"
        + "".join(f"{m},{p}\n" for p, m in sorted(METRICS))
        + "job_info_marconi100,job_table\n"
    )
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "24"])
    try:
        for fmt in ("csv", "parquet"):
            dxt(
                *("extract", "examon", "--url", sim.url, "--jobs-url", sim.url),
                *("--catalog", str(catalog), "--start-day", DAYS[0], "--end-day", DAYS[1]),
                *("--archive", str(base / fmt), "--format", fmt, "-q"),
            )
    finally:
        sim.stop()
    key = base / "key"
    key.write_bytes(KEY)
    return base


def publish(archive: Path, out: Path, *extra: str, check: bool = True):
    return dxt(
        *("publish", "examon", "--archive", str(archive), "--out", str(out)),
        *("--from-month", "2020-03", "--to-month", "2020-04", *extra),
        check=check,
    )


@pytest.fixture(scope="module")
def published(archives):
    out = archives / "out-csv"
    publish(archives / "csv", out, "--pseudonymise-key-file", str(archives / "key"))
    return out


def raw_jobs(archive: Path) -> list[dict[str, str]]:
    rows = []
    for f in sorted((archive / "examon" / JOBS[0] / JOBS[1]).glob("*.csv.gz")):
        with gzip.open(f, "rt", newline="") as fh:
            rows += list(csv.DictReader(fh))
    return rows


def test_refuses_a_job_table_with_identities_without_a_choice(archives, tmp_path):
    out = publish(archives / "csv", tmp_path / "o", check=False)
    assert out.returncode == 2
    assert "identities of people" in out.stderr and "--pseudonymise-key-file" in out.stderr
    assert "--keep-identities" in out.stderr and not (tmp_path / "o").exists()


def test_months_with_nothing_archived_are_refused(archives, tmp_path):
    """A range of months holding no archived day was published as a dataset of nothing (a
    README, checksums and descriptions of no file), exit 0."""
    out = dxt(
        *("publish", "examon", "--archive", str(archives / "csv"), "--out", str(tmp_path / "o")),
        *("--from-month", "2021-01", "--to-month", "2021-02", "--keep-identities"),
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nothing to publish:" in out.stderr and "2021-01..2021-02" in out.stderr
    assert "dxt coverage examon --archive" in out.stderr and "nothing was written" in out.stderr
    assert not (tmp_path / "o").exists()


def test_layout_types_and_order(published, archives):
    files = sorted(str(p.relative_to(published)) for p in published.rglob("*.parquet"))
    want = sorted(
        f"year_month={ym}/plugin={p}/metric={m}/a_0.parquet"
        for ym in ("20-03", "20-04")
        for p, m in [*METRICS, JOBS]
    )
    assert files == want
    months = (
        ("20-03", ("2020-03-30", "2020-03-31"), "2020-03-29T22:00"),
        ("20-04", ("2020-04-01", "2020-04-02"), "2020-03-31T22:00"),
    )
    for ym, days, first_utc in months:
        path = published / f"year_month={ym}/plugin=ipmi_pub/metric=ambient/a_0.parquet"
        t = pq.read_table(path)
        assert t.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
        assert t.schema.field("value").type == pa.float64()
        # plain strings, as M100 ExaData has them: pandas read the stored dictionary type
        # as Categorical, on which PM100's groupby(["timestamp"]).sum() fails (pandas >= 2)
        assert t.schema.field("node").type == pa.string()
        node = pq.ParquetFile(path).schema_arrow.get_field_index("node")
        assert "RLE_DICTIONARY" in pq.ParquetFile(path).metadata.row_group(0).column(node).encodings
        df = t.to_pandas()
        assert str(df["node"].dtype) in ("object", "str", "string"), df.dtypes
        summed = df[["timestamp", "node", "value"]].groupby(["timestamp"]).sum()
        assert len(summed) == len(t.column("timestamp").unique())
        manifests = [
            json.loads(
                (archives / "csv/examon/ipmi_pub/ambient" / f"{d}.manifest.json").read_text()
            )
            for d in days
        ]
        assert t.num_rows == sum(m["rows"] for m in manifests)
        # Rome's midnight is 22:00 UTC in summer time: the month's first sample is then
        ts = t.column("timestamp").to_pylist()
        assert min(ts).isoformat().startswith(first_utc)
        # a node's series is contiguous, and in time order
        nodes = t.column("node").to_pylist()
        runs = [n for i, n in enumerate(nodes) if i == 0 or nodes[i - 1] != n]
        assert runs == sorted(set(nodes)) and len(runs) == 24
        for i in range(1, len(nodes)):
            if nodes[i] == nodes[i - 1]:
                assert ts[i] >= ts[i - 1]
        meta = pq.ParquetFile(path).metadata
        assert meta.row_group(0).column(0).statistics.has_min_max
        # and the first sort column's, as the datacard says (a filter on node skips groups)
        node = meta.schema.names.index("node")
        stats = meta.row_group(0).column(node).statistics
        assert stats is not None and stats.has_min_max and stats.min == runs[0], stats
    kinds = {
        m: pq.read_schema(published / f"year_month=20-03/plugin={p}/metric={m}/a_0.parquet")
        .field("value")
        .type
        for p, m in METRICS
    }
    assert kinds["state"] == pa.string() and kinds["num_nodes"] == pa.int64()
    readme = (published / "README.md").read_text()
    assert (
        "Europe/Rome" in readme
        and "| slurm_pub/num_nodes | int64 | int64 from 2020-03-30" in readme
    )
    assert (
        "| ipmi_pub/ambient | 2020-03 | 2 | 0 | 29 | 0 | 207,360 | 0 | 2/2 agree | none recorded |"
        in readme
    )


def test_job_table_types_and_the_join_with_power(published):
    path = published / "year_month=20-03/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    s = pq.read_schema(path)
    assert s.field("start_time").type == pa.timestamp("ms", tz="UTC")
    assert s.field("num_nodes").type == pa.int64() and s.field("job_id").type == pa.int64()
    assert s.field("nodes").type == pa.list_(pa.string())
    jobs = pq.read_table(path).to_pylist()
    assert all(len(j["nodes"]) == j["num_nodes"] for j in jobs)
    # PM100's join: a job's power is ps0 + ps1 over its nodes between start and end
    power = str(published / "year_month=20-03/plugin=ipmi_pub/metric=ps0_input_power/a_0.parquet")
    got = duckdb.sql(
        f"""
        WITH j AS (SELECT job_id, unnest(nodes) AS node, start_time, end_time FROM '{path}')
        SELECT j.job_id, count(*) AS n FROM j JOIN '{power}' p
          ON p.node = j.node AND p.timestamp >= j.start_time AND p.timestamp < j.end_time
        GROUP BY ALL ORDER BY 1
        """
    ).fetchall()
    pc = pytest.importorskip("pyarrow.compute")
    ps = pq.read_table(power)
    node, ts = pc.cast(ps.column("node"), pa.string()), ps.column("timestamp")
    want = {}
    for j in jobs:  # the same, computed without SQL
        mask = pc.and_(
            pc.is_in(node, pa.array(j["nodes"])),
            pc.and_(
                pc.greater_equal(ts, pa.scalar(j["start_time"], ts.type)),
                pc.less(ts, pa.scalar(j["end_time"], ts.type)),
            ),
        )
        if n := pc.sum(pc.cast(mask, pa.int64())).as_py():
            want[j["job_id"]] = n
    assert dict(got) == want and len(want) > 10
    assert any(len(j["nodes"]) > 1 for j in jobs if j["job_id"] in want)


def test_no_raw_identity_survives_and_pseudonyms_are_stable(published, archives, tmp_path):
    pc = pytest.importorskip("pyarrow.compute")
    raw = raw_jobs(archives / "csv")
    idents = {
        v
        for r in raw
        for c in ("user_name", "account", "job_name", "user_id", "group_id")
        if (v := r.get(c))
    }
    assert len(idents) > 20
    texts = set()
    for f in published.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert KEY not in data
            if f.suffix == ".parquet":
                for col in pq.read_table(f).columns:  # every distinct text cell
                    if pa.types.is_list(col.type):
                        col = pc.list_flatten(col)
                    kind = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
                    if not pa.types.is_string(kind):
                        continue  # times and numbers hold no name (numeric ids: below)
                    texts.update(str(v) for v in pc.unique(col).to_pylist() if v is not None)
            elif f.suffix == ".tar":
                with tarfile.open(f) as tar:
                    for m in tar.getmembers():
                        if not m.name.endswith(".parquet"):
                            texts.add(tar.extractfile(m).read().decode())
            else:
                texts.add(data.decode())
    blob = "\n".join(texts)
    names = {v for v in idents if not v.isdigit()}
    assert not [v for v in names if v in blob]
    ids = {v for v in idents if v.isdigit()}
    jobs = pq.read_table(
        published / "year_month=20-03/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    )
    for c in ("user_id", "group_id"):
        assert not ids & set(jobs.column(c).to_pylist())
    # HMAC-SHA256 with the site's key; the same user has the same pseudonym in both months
    # and when April is published alone
    user = raw[0]["user_name"]
    mac = hmac.new(KEY, f"user\0{user}".encode(), hashlib.sha256).hexdigest()[:16]
    months = [
        set(
            pq.read_table(
                published
                / f"year_month={ym}/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
            )
            .column("user_name")
            .to_pylist()
        )
        for ym in ("20-03", "20-04")
    ]
    assert f"user_{mac}" in months[0] | months[1]
    assert months[0] & months[1]
    alone = tmp_path / "april"
    dxt(
        *("publish", "examon", "--archive", str(archives / "csv"), "--out", str(alone)),
        *("--from-month", "2020-04", "--to-month", "2020-04"),
        *("--pseudonymise-key-file", str(archives / "key")),
    )
    april = pq.read_table(
        alone / "year_month=20-04/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    )
    assert set(april.column("user_name").to_pylist()) == months[1]
    work = " ".join(april.column("work_dir").to_pylist())
    assert "account_" in work and "user_" in work


def test_checksums_records_and_frictionless(published, tmp_path):
    check_dataset(published)
    listed = (published / "SHA256SUMS").read_text()
    assert "records/" in listed
    (record,) = sorted((published / "records").glob("*.tar"))
    assert record.name == "examon-dataset_20-03_20-04.tar"
    with tarfile.open(record) as tar:
        members = tar.getmembers()
        assert {m.mtime for m in members} == {1588291200} and {m.uid for m in members} == {0}
        tar.extractall(tmp_path / "x", filter="data")
    sums = f"_{record.name[:-4]}.SHA256SUMS"
    assert {m.name for m in members} >= {sums, f"_{record.name[:-4]}.files.json"}
    assert subprocess.run(["sha256sum", "-c", "--quiet", sums], cwd=tmp_path / "x").returncode == 0
    # an extracted record reads as one Hive dataset (its listings were read as Parquet:
    # "Could not read schema from '....SHA256SUMS'", on every pyarrow)
    pd = pytest.importorskip("pandas")
    df = pd.read_parquet(tmp_path / "x", filters=[("metric", "==", "ps0_input_power")])
    assert len(df) > 0 and set(df["year_month"].astype(str)) == {"20-03", "20-04"}
    # the datacard's reading recipe, run as written in the published folder
    readme = (published / "README.md").read_text()
    block = readme.split("## Reading it", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    cwd = os.getcwd()
    try:
        os.chdir(published)
        lines = block.strip().splitlines()
        lines[-1] = "df = " + lines[-1]  # the last expression's value
        names: dict[str, Any] = {}
        exec(compile("\n".join(lines), "README.md", "exec"), names)
    finally:
        os.chdir(cwd)
    df = names["df"]
    assert list(df.columns) == ["node", 'avg("value")'] and len(df) == 24, df


def test_reruns_are_byte_identical_and_both_archive_formats_agree(published, archives, tmp_path):
    first = digests(published)
    out = publish(archives / "csv", published, "--pseudonymise-key-file", str(archives / "key"))
    assert "unchanged: " in out.stdout and "nothing written" in out.stdout
    assert digests(published) == first
    forced = publish(
        archives / "csv", published, "--pseudonymise-key-file", str(archives / "key"), "--force"
    )
    assert "published 12 files" in forced.stdout
    assert digests(published) == first
    again = tmp_path / "again"
    publish(archives / "csv", again, "--pseudonymise-key-file", str(archives / "key"))
    assert digests(again) == first
    from_pq = tmp_path / "from-parquet"
    publish(archives / "parquet", from_pq, "--pseudonymise-key-file", str(archives / "key"))
    other = digests(from_pq)
    # the Parquet archive types whole-number metrics as double (docs/examon.md); the rest,
    # including the job table, comes out byte for byte the same
    same = [k for k in first if k.endswith(".parquet") and "num_nodes" not in k]
    assert same and all(first[k] == other[k] for k in same)


def test_skipped_days_and_records_per_month(archives, tmp_path):
    archive = tmp_path / "archive"
    shutil.copytree(archives / "csv", archive)
    bad = archive / "examon/ipmi_pub/ambient/2020-03-31.csv.gz"
    bad.write_bytes(bad.read_bytes()[:-10])
    # a later count at the source found fewer points of April 1st than archived (the
    # reconcile step keeps the archive's rows and records it; the source's answer is faked)
    import datetime as dt

    from dxt_core.archive import Archive
    from dxt_core.reconcile import SourceCount, reconcile

    unit_dir = archive / "examon/ipmi_pub/ps0_input_power"
    rows = {
        d: json.loads((unit_dir / f"{d}.manifest.json").read_text())["rows"]
        for d in (dt.date(2020, 4, 1), dt.date(2020, 4, 2))
    }
    found = reconcile(
        Archive(archive),
        "examon",
        [("ipmi_pub", "ps0_input_power")],
        sorted(rows),
        lambda parts, day: SourceCount(
            rows[day] - (100 if day.day == 1 else 0), "a count lower than the archive's"
        ),
        now=dt.datetime(2020, 4, 5, 3, 0, tzinfo=dt.UTC),
    )
    assert [r.state for r in found] == ["fewer", "equal"]
    # April 2nd as an older version wrote it before that day ended (no day_not_over mark):
    # the datacard says so (a publication read it as a whole day)
    m = unit_dir / "2020-04-02.manifest.json"
    early = {**json.loads(m.read_text()), "written_at": "2020-04-02T12:00:00+02:00"}
    m.write_text(json.dumps(early))
    out = tmp_path / "o"
    res = publish(archive, out, "--keep-identities", "--max-record-bytes", "1500000")
    assert (
        "skipped ipmi_pub/ambient 2020-03-31" in res.stdout
        and "bytes, the manifest says" in res.stdout
    )
    assert "1 unit-days skipped" in res.stdout
    hint = f"to refetch the skipped days: dxt coverage examon --archive {archive} --start-day "
    assert hint + "2020-03-01 --end-day 2020-04-30 --verify (with the options" in res.stdout
    # which does list the day, with its refetch
    words = [*hint.split(": ", 1)[1].split(), "2020-03-01", "--end-day", "2020-04-30"]
    cov = dxt(*words[1:], "--verify", "--catalog", str(archives / "catalog.csv"), check=False)
    assert cov.returncode == 3, cov.stdout + cov.stderr
    assert "--metric ambient --plugin ipmi_pub" in cov.stdout and "--refetch" in cov.stdout
    readme = (out / "README.md").read_text()
    assert "| ipmi_pub/ambient | 2020-03 | 1 | 0 | 29 | 1 | 103,680 |" in readme
    assert (
        "| ipmi_pub/ps0_input_power | 2020-04 | 2 (1 before the day ended) | 0 | 28 | 0 | "
        "207,360 | 0 | 2/2 agree "
        "| 2 checked (1 equal, 1 fewer; last 2020-04-05), 1 kept (source held fewer; 1 found "
        "by reconcile) |" in readme
    ), readme
    assert "as recorded" in readme or "as the site recorded them" in readme
    records = sorted(p.name for p in (out / "records").glob("*.tar"))
    assert records == ["examon-dataset_20-03.tar", "examon-dataset_20-04.tar"]
    # as a user downloads them: the records extracted into one folder, with the metadata;
    # each record's listings keep their own names (one SHA256SUMS each overwrote the other)
    got = tmp_path / "downloaded"
    got.mkdir()
    for name in records:
        with tarfile.open(out / "records" / name) as tar:
            tar.extractall(got, filter="data")
    assert sorted(p.name for p in got.glob("*.SHA256SUMS")) == [
        "_examon-dataset_20-03.SHA256SUMS",
        "_examon-dataset_20-04.SHA256SUMS",
    ]
    for name in ("README.md", "datapackage.json", "croissant.json", "SHA256SUMS"):
        shutil.copy(out / name, got / name)

    def check() -> int:
        argv = ["sha256sum", "-c", "--quiet", "--ignore-missing", "SHA256SUMS"]
        return subprocess.run(argv, cwd=got, capture_output=True).returncode

    assert check() == 0
    one = next(got.rglob("*.parquet"))
    data = bytearray(one.read_bytes())
    data[len(data) // 2] ^= 1
    one.write_bytes(bytes(data))
    assert check() != 0
    jobs = pq.read_table(
        out / "year_month=20-03/plugin=job_table/metric=job_info_marconi100/a_0.parquet"
    )
    raw = raw_jobs(archive)
    assert set(jobs.column("user_name").to_pylist()) <= {r["user_name"] for r in raw}


def test_many_small_buckets_give_the_same_bytes(published, archives, tmp_path):
    # buckets of 4,000 rows (~50 a month-file) instead of one
    from dxt_core.backends import get_publisher
    from dxt_core.publish import PublishOptions, publish

    out = tmp_path / "small-runs"
    publish(
        get_publisher("examon").publish_role(),
        PublishOptions(
            archive=archives / "csv",
            out=out,
            from_month="2020-03",
            to_month="2020-04",
            pseudonymise_key_file=archives / "key",
            bucket_rows=4_000,
        ),
    )
    files = sorted(p.relative_to(published) for p in published.rglob("a_0.parquet"))
    assert len(files) == 12
    for rel in files:
        assert (out / rel).read_bytes() == (published / rel).read_bytes(), rel


def test_source_named_by_the_publisher_replaces_the_servers_urls(published, archives, tmp_path):
    manifest = next((archives / "csv" / "examon").rglob("*.manifest.json"))
    server = json.loads(manifest.read_text())["source_url"]
    assert server.startswith("http://127.0.0.1:")
    # by default the datacard names the server the days were read from
    assert f"- Source URL(s): {server}" in (published / "README.md").read_text()
    out = tmp_path / "named"
    publish(
        archives / "csv", out, "--pseudonymise-key-file", str(archives / "key"),
        "--source", "Examon at CINECA",
    )  # fmt: skip
    readme = (out / "README.md").read_text()
    assert "- Source: Examon at CINECA\n" in readme and "Source URL" not in readme
    host = server.split("//", 1)[1]
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".md", ".json", ".csv", ".txt"):
            assert host not in f.read_text(), f  # the server's address is nowhere
    # the data are the same; the datacard (and what describes it) differs
    same = {k for k in digests(out) if k.endswith(".parquet")}
    assert same and all(digests(out)[k] == digests(published)[k] for k in same)


def test_the_docs_pm100_energy_query_runs_as_written(published):
    """docs/publish.md's "PM100-style" query joined ps0 only and one month: a quarter of
    each job's energy, less for jobs running into the next month. Run as written in the
    dataset's folder, it gives ps0 + ps1 over every month, as computed here without SQL."""
    import re

    text = (Path(__file__).resolve().parents[3] / "docs/publish.md").read_text()
    sql = re.search(r"```sql\n(-- DuckDB, in the dataset's folder.*?)```", text, re.S)
    assert sql is not None
    cwd = os.getcwd()
    try:
        os.chdir(published)
        got = dict(duckdb.sql(sql.group(1)).fetchall())
    finally:
        os.chdir(cwd)
    jobs = [j for f in sorted(published.glob("year_month=*/plugin=job_table/*/a_0.parquet"))
            for j in pq.read_table(f).to_pylist()]  # fmt: skip
    samples = [s for f in sorted(published.glob("year_month=*/plugin=ipmi_pub/metric=ps*/a_0.parquet"))
               for s in pq.read_table(f, columns=["node", "timestamp", "value"]).to_pylist()]  # fmt: skip
    by_node: dict[str, list[tuple[Any, float]]] = {}
    for s in samples:
        by_node.setdefault(s["node"], []).append((s["timestamp"], s["value"]))
    want = {}
    for j in jobs:
        e = sum(v for n in j["nodes"] for t, v in by_node.get(n, [])
                if j["start_time"] <= t < j["end_time"])  # fmt: skip
        if any(
            j["start_time"] <= t < j["end_time"] for n in j["nodes"] for t, _ in by_node.get(n, [])
        ):
            want[j["job_id"]] = e * 20
    assert got.keys() == want.keys() and len(want) > 10
    assert all(abs(got[k] - want[k]) <= 1e-6 * max(1.0, want[k]) for k in want)
    spans = [j for j in jobs if j["start_time"].month == 3 and j["end_time"].month == 4]
    assert any(j["job_id"] in want for j in spans)  # a job across the month's end is counted
