"""Parquet output (M100 ExaData style) against the simulator; read back with pandas and DuckDB."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dxt_core import Archive
from dxt_core.backends.examon.archive_day import archive_examon_day
from dxt_core.backends.examon.catalog import CatalogEntry, ExamonOptions
from dxt_core.backends.examon.source import WindowPolicy
from tests.integration.examon.test_examon_extract import (
    AMBIENT,
    DAY,
    NODES,
    PER_DAY,
    read_rows,
    source,
)

pytestmark = pytest.mark.integration
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def test_parquet_day_matches_the_csv_day(examon_sim, tmp_path):
    with source(examon_sim.url) as src:
        csv_rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "c"))
        pq_rep = archive_examon_day(src, AMBIENT, DAY, Archive(tmp_path / "p"), fmt="parquet")
    path = tmp_path / "p/examon/plugin=ipmi_pub/metric=ambient/2020-03-09.parquet"
    assert pq_rep.path == path and pq_rep.rows == NODES * PER_DAY
    table = pq.read_table(path)
    assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("value").type == pa.float64()
    assert pa.types.is_dictionary(table.schema.field("node").type)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    csv_rows = read_rows(csv_rep.path)
    keys = csv_rows[0][3:]
    got = table.to_pylist()
    assert len(got) == len(csv_rows) - 1
    # The two formats group rows in different blocks: compare them in (series, time) order.
    got.sort(key=lambda r: ([r[k] for k in keys], r["timestamp"]))
    want = sorted(csv_rows[1:], key=lambda c: (c[3:], dt.datetime.fromisoformat(c[0])))
    for row, c in zip(got, want, strict=True):
        assert row["timestamp"] == dt.datetime.fromisoformat(c[0])
        assert row["value"] == float(c[1])  # CSV keeps KairosDB's digits ("24" for 24.0)
        assert [row[k] for k in keys] == c[3:]
    m = json.loads((path.parent / "_2020-03-09.manifest.json").read_text())
    assert (
        m["format"] == "parquet" and m["rows"] == pq_rep.rows and m["bytes"] == path.stat().st_size
    )


def test_parquet_types_and_split_windows_give_identical_bytes(examon_sim, tmp_path):
    options = tmp_path / "plugins.toml"
    options.write_text('[plugins.slurm_pub]\ncluster_tag = true\nvalue_type = "int64"\n')
    declared = ExamonOptions.from_toml(options)
    with source(examon_sim.url) as src:
        d = archive_examon_day(
            src, CatalogEntry("num_nodes", "slurm_pub"), DAY, Archive(tmp_path / "d"), fmt="parquet"
        )
        s = archive_examon_day(
            src, CatalogEntry("state", "nagios_pub"), DAY, Archive(tmp_path / "a"), fmt="parquet"
        )
    with source(examon_sim.url, options=declared) as src:
        a = archive_examon_day(
            src, CatalogEntry("num_nodes", "slurm_pub"), DAY, Archive(tmp_path / "a"), fmt="parquet"
        )
    # The rule: double for numeric metrics unless the plugin options declare int64.
    assert pq.read_schema(d.path).field("value").type == pa.float64()
    assert pq.read_schema(a.path).field("value").type == pa.int64()
    assert pq.read_schema(s.path).field("value").type == pa.string()
    examon_sim.faults(max_points=300)
    try:
        with source(
            examon_sim.url, options=declared, windows=WindowPolicy(initial_s=86_400)
        ) as src:
            b = archive_examon_day(
                src,
                CatalogEntry("num_nodes", "slurm_pub"),
                DAY,
                Archive(tmp_path / "b"),
                fmt="parquet",
            )
    finally:
        examon_sim.reset_faults()
    assert b.stats.splits > 0
    assert b.path.read_bytes() == a.path.read_bytes()


def test_duckdb_and_pandas_read_the_archive_as_one_dataset(examon_sim, small_catalog, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    pd = pytest.importorskip("pandas")
    archive = Archive(tmp_path)
    with source(examon_sim.url, jobs_url=examon_sim.url) as src:
        for d in (DAY, DAY + dt.timedelta(days=1)):
            for entry in (
                AMBIENT,
                CatalogEntry("pcie", "ipmi_pub"),
                CatalogEntry("num_nodes", "slurm_pub"),
            ):
                archive_examon_day(src, entry, d, archive, fmt="parquet")
    glob = str(tmp_path / "examon/*/*/*.parquet")
    rows = duckdb.sql(
        f"SELECT plugin, metric, count(*) AS n FROM read_parquet('{glob}', "
        "hive_partitioning = true, union_by_name = true) GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert rows == [
        ("ipmi_pub", "ambient", 2 * NODES * PER_DAY),
        ("ipmi_pub", "pcie", 2 * NODES * PER_DAY),
        ("slurm_pub", "num_nodes", 2 * NODES * PER_DAY),
    ]
    df = pd.read_parquet(tmp_path / "examon" / "plugin=ipmi_pub")
    assert set(df["metric"].astype(str)) == {"ambient", "pcie"}
    assert len(df) == 4 * NODES * PER_DAY


@pytest.mark.slow  # four CLI processes importing pyarrow: 6-7.6 s in the fast tier's runs
def test_cli_parquet_and_coverage(examon_sim, small_catalog, tmp_path):
    import subprocess
    import sys

    def dxt(*args):
        return subprocess.run(
            [sys.executable, "-m", "dxt_core.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    out = dxt(
        "extract",
        "examon",
        "--url",
        examon_sim.url,
        "--jobs-url",
        examon_sim.url,
        "--catalog",
        str(small_catalog),
        "--start-day",
        "2020-03-09",
        "--archive",
        str(tmp_path),
        "--format",
        "parquet",
        "-q",
    )
    assert out.returncode == 0, out.stderr
    assert (
        tmp_path / "examon/plugin=job_table/metric=job_info_marconi100/2020-03-09.parquet"
    ).exists()
    cov = dxt(
        "coverage",
        "--archive",
        str(tmp_path),
        "--catalog",
        str(small_catalog),
        "--start-day",
        "2020-03-09",
        "--end-day",
        "2020-03-09",
        "--format",
        "parquet",
        "--verify",
        "--json",
    )
    assert cov.returncode == 0, cov.stdout + cov.stderr
    doc = json.loads(cov.stdout)
    assert doc["counts"]["archived"] == 6
    assert {r["plugin"] for r in doc["rows"]} >= {"ipmi_pub", "job_table"}
    # without --format, coverage reads the layout the archive holds
    days = ("--start-day", "2020-03-09", "--end-day", "2020-03-10")
    cov = dxt("coverage", "--archive", str(tmp_path), "--catalog", str(small_catalog), *days)
    assert cov.returncode == 3, cov.stdout + cov.stderr
    assert "6 archived" in cov.stdout and "6 missing" in cov.stdout, cov.stdout
    assert "--format parquet --start-day 2020-03-10" in cov.stdout, cov.stdout
    # without --format, extract follows the layout too: the next day in Parquet (it went
    # to a CSV layout beside the Parquet one, which coverage then refused to read)
    more = dxt("extract", "examon", "--url", examon_sim.url, "--jobs-url", examon_sim.url,
               "--catalog", str(small_catalog), "--start-day", "2020-03-10",
               "--archive", str(tmp_path), "-q")  # fmt: skip
    assert more.returncode == 0, more.stderr
    assert (
        "examon/ holds the Parquet layout (plugin=<plugin>/): archiving in Parquet" in more.stderr
    )
    assert not [p for p in (tmp_path / "examon").iterdir() if not p.name.startswith("plugin=")]
    cov = dxt("coverage", "--archive", str(tmp_path), "--catalog", str(small_catalog), *days)
    assert cov.returncode == 0 and "12 archived" in cov.stdout, cov.stdout + cov.stderr
    # both layouts under examon/: the format must be named
    (tmp_path / "examon/ipmi_pub/ambient").mkdir(parents=True)
    (tmp_path / "examon/ipmi_pub/ambient/2020-03-09.csv.gz").write_bytes(b"")  # a folder in use
    cov = dxt("coverage", "--archive", str(tmp_path), "--catalog", str(small_catalog), *days)
    assert cov.returncode == 2, cov.stdout + cov.stderr
    assert "give --format csv or --format parquet" in cov.stderr, cov.stderr


def test_job_table_parquet_schema_is_the_same_every_day(examon_sim, small_catalog, tmp_path):
    """Job columns are typed by declaration, never by one day's values: two days with
    different null patterns read back as one dataset with one schema."""
    import subprocess
    import sys

    opts = tmp_path / "options.toml"
    opts.write_text(
        '[plugins.job_table]\njob_table = true\ncolumn_types = { job_id = "int64", '
        'run_time = "double" }\n'
    )
    archive = tmp_path / "archive"
    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "extract", "examon"),
            *("--url", examon_sim.url, "--jobs-url", examon_sim.url),
            *("--catalog", str(small_catalog), "--plugins", "job_table"),
            *("--start-day", "2020-03-09", "--end-day", "2020-03-10"),
            *("--archive", str(archive), "--format", "parquet", "-q"),
            *("--plugin-options", str(opts)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    files = sorted((archive / "examon/plugin=job_table").rglob("*.parquet"))
    assert [f.name for f in files] == ["2020-03-09.parquet", "2020-03-10.parquet"]
    schemas = [pq.read_schema(f) for f in files]
    assert schemas[0] == schemas[1]
    types = {f.name: str(f.type) for f in schemas[0]}
    assert types["job_id"] == "int64" and types["run_time"] == "double"
    # undeclared: strings, whether the day's values are numbers, text or all null
    assert types["num_nodes"] == "string" and types["resv_name"] == "string"
    assert types["job_name"] == "string"
    both = pq.read_table(archive / "examon/plugin=job_table")
    assert both.num_rows == sum(pq.read_metadata(f).num_rows for f in files)
    row = both.slice(0, 1).to_pylist()[0]
    assert isinstance(row["job_id"], int) and row["num_nodes"].isdigit()
    manifest = json.loads((files[0].parent / "_2020-03-09.manifest.json").read_text())
    assert manifest["column_types"]["job_id"] == "int64"
