"""The sort of ``dxt publish`` (dxt_core/publish/series.py, monthfile.py) on hand-made day
files: whatever the buckets (many, overlapping, one series larger than a bucket, rows out of
time order), the month's file holds the rows a plain stable sort by series and time gives,
and the same bytes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")
pq = pytest.importorskip("pyarrow.parquet")

from dxt_core.backends import get_publisher  # noqa: E402
from dxt_core.publish import PublishOptions, publish  # noqa: E402

PLUGIN, METRIC = "p", "m"
T0 = int(dt.datetime(2020, 3, 1, tzinfo=dt.UTC).timestamp() * 1000)


def write_day(root: Path, day: str, table, fmt: str = "parquet") -> None:
    if fmt == "parquet":
        d = root / "examon" / f"plugin={PLUGIN}" / f"metric={METRIC}"
        d.mkdir(parents=True, exist_ok=True)
        f, mname = d / f"{day}.parquet", f"_{day}.manifest.json"
        pq.write_table(table, f, row_group_size=97)
    else:
        import pyarrow.csv as pcsv

        d = root / "examon" / PLUGIN / METRIC
        d.mkdir(parents=True, exist_ok=True)
        f, mname = d / f"{day}.csv.gz", f"{day}.manifest.json"
        text = table.set_column(
            0, "timestamp", pc.strftime(table.column("timestamp"), "%Y-%m-%dT%H:%M:%S+00:00")
        )
        with pa.CompressedOutputStream(str(f), "gzip") as out:
            pcsv.write_csv(text, out, pcsv.WriteOptions(quoting_style="none"))
    data = f.read_bytes()
    doc = {
        "status": "archived",
        "file": f.name,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": table.num_rows,
        "time_zone": "UTC",
    }
    (d / mname).write_text(json.dumps(doc))


def table_of(ts, values, nodes, **tags):
    n = len(ts)
    cols = {
        "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "value": pa.array(values),
        "name": pa.array([METRIC] * n),
        "node": pa.array(nodes, pa.string()),
    }
    for k, v in tags.items():
        cols[k] = pa.array(v, pa.string())
    return pa.table(cols)


@pytest.fixture
def paths(monkeypatch):
    """Counts the sort's paths taken (the real functions run; the count proves a test went
    where it says)."""
    from dxt_core.publish import monthfile

    seen: dict[str, int] = {}
    for name in ("route_rows", "_large_series", "_plan"):
        real = getattr(monthfile, name)

        def spy(*a, _real=real, _name=name, **k):
            seen[_name] = seen.get(_name, 0) + 1
            return _real(*a, **k)

        monkeypatch.setattr(monthfile, name, spy)
    return seen


def run(root: Path, out: Path, bucket_rows: int):
    rep = publish(
        get_publisher("examon").publish_role(),
        PublishOptions(
            archive=root,
            out=out,
            from_month="2020-03",
            to_month="2020-03",
            records=False,
            bucket_rows=bucket_rows,
        ),
    )
    path = out / f"year_month=20-03/plugin={PLUGIN}/metric={METRIC}/a_0.parquet"
    return rep, path


def expected(days, tags):
    """The rows a stable sort by (node, name, the other tags, timestamp) gives."""
    cols = ["timestamp", "value", "name", "node", *tags]
    parts = []
    for t in days:
        for c in cols:
            if c not in t.column_names:
                t = t.append_column(c, pa.nulls(t.num_rows, pa.string()))
        parts.append(t.select(cols))
    whole = pa.concat_tables(parts, promote_options="permissive")
    keys = [(c, "ascending") for c in ("node", "name", *sorted(tags), "timestamp")]
    return whole.take(pc.sort_indices(whole, sort_keys=keys))  # nulls last


def shuffled_days(seed: int, n_days: int, nodes: int, per: int):
    import random

    rnd = random.Random(seed)
    days = []
    for k in range(n_days):
        rows = [
            (T0 + (k * per + i) * 20_000, float(rnd.randint(0, 10_000)) / 10, f"n{j:03d}")
            for i in range(per)
            for j in range(nodes)
        ]
        rnd.shuffle(rows)  # not in time order within a series: the fallback sort
        ts, vals, names = zip(*rows, strict=True)
        days.append(table_of(list(ts), list(vals), list(names)))
    return days


@pytest.mark.parametrize("bucket_rows", [10_000_000, 1_000, 37])
def test_any_bucketing_gives_the_plain_sort_and_the_same_bytes(tmp_path, bucket_rows):
    days = shuffled_days(1, 3, nodes=23, per=40)
    for i, t in enumerate(days):
        write_day(tmp_path / "a", f"2020-03-0{i + 1}", t)
    rep, path = run(tmp_path / "a", tmp_path / "o", bucket_rows)
    assert rep.rows == 3 * 23 * 40
    want = expected(days, [])
    got = pq.read_table(path)
    assert got.column("timestamp").to_pylist() == want.column("timestamp").to_pylist()
    assert got.column("value").to_pylist() == want.column("value").to_pylist()
    assert pc.cast(got.column("node"), pa.string()).to_pylist() == want.column("node").to_pylist()
    _ref, ref_path = run(tmp_path / "a", tmp_path / "ref", 10_000_000)
    assert path.read_bytes() == ref_path.read_bytes()


def test_first_batch_with_one_node_is_resplit_into_budget(tmp_path, paths):
    """Bucket bounds come from the first batch's series: one node only there puts every
    later node in the last bucket, which is split again (exact ranges) before sorting."""
    first = table_of([T0 + i * 20_000 for i in range(50)], [1.0] * 50, ["a00"] * 50)
    later = shuffled_days(2, 2, nodes=30, per=20)
    for i, t in enumerate([first, *later]):
        write_day(tmp_path / "a", f"2020-03-0{i + 1}", t)
    _rep, path = run(tmp_path / "a", tmp_path / "o", 100)
    assert paths.get("route_rows", 0) > 0  # split again by exact ranges
    want = expected([first, *later], [])
    got = pq.read_table(path)
    assert got.column("timestamp").to_pylist() == want.column("timestamp").to_pylist()
    assert pc.cast(got.column("node"), pa.string()).to_pylist() == want.column("node").to_pylist()


@pytest.mark.parametrize("in_order", [True, False])
def test_one_series_larger_than_a_bucket(tmp_path, in_order, paths):
    """A single series cannot be split by series: streamed as it is when its times never go
    back, else split by time."""
    n = 3_000
    ts = [T0 + i * 1_000 for i in range(n)]
    if not in_order:
        ts = ts[1500:] + ts[:1500]
    t = table_of(ts, [float(i) for i in range(n)], ["only"] * n)
    write_day(tmp_path / "a", "2020-03-05", t)
    _rep, path = run(tmp_path / "a", tmp_path / "o", 200)
    assert paths.get("_large_series") == 1
    # one regrouping of the spooled rows (too many for a bucket), then split by time only
    # when the rows are out of time order
    assert paths.get("route_rows") == (1 if in_order else 2)
    got = pq.read_table(path)
    assert got.column("timestamp").to_pylist() == sorted(t.column("timestamp").to_pylist())
    want = expected([t], [])
    assert got.column("value").to_pylist() == want.column("value").to_pylist()


def test_types_widen_and_columns_are_the_union_over_the_month(tmp_path):
    """Day 1: whole numbers (int64), no rack tag; day 2: floats and a rack tag on one node;
    day 3: a text value. The month is typed string, every day's rows have the rack column
    (null where absent), nulls stay nulls."""
    d1 = table_of([T0, T0 + 1], [1, 2], ["a", "b"])
    d2 = table_of([T0 + 86_400_000, T0 + 86_400_001], [1.5, None], ["a", "b"], rack=["r1", None])
    d3 = table_of([T0 + 2 * 86_400_000], ["up"], ["c"], rack=["r2"])
    for i, t in enumerate([d1, d2, d3]):
        write_day(tmp_path / "a", f"2020-03-0{i + 1}", t)
    rep, path = run(tmp_path / "a", tmp_path / "o", 10_000_000)
    s = pq.read_schema(path)
    assert s.names == ["timestamp", "value", "name", "node", "rack"]
    assert s.field("value").type == pa.string()
    assert rep.schemas[f"{PLUGIN}/{METRIC}"]["type_changes"] == [
        {"type": "int64", "first_day": "2020-03-01"},
        {"type": "double", "first_day": "2020-03-02"},
        {"type": "string", "first_day": "2020-03-03"},
    ]
    got = pq.read_table(path).to_pylist()
    assert [(r["node"], r["value"], r["rack"]) for r in got] == [  # series: node, name, rack
        ("a", "1.5", "r1"),
        ("a", "1", None),
        ("b", "2", None),
        ("b", None, None),
        ("c", "up", "r2"),
    ]


def test_a_later_month_that_widens_the_type_rewrites_the_earlier_one(tmp_path):
    root = tmp_path / "a"
    write_day(root, "2020-03-31", table_of([T0 + 30 * 86_400_000], [7], ["a"]))
    april = int(dt.datetime(2020, 4, 1, tzinfo=dt.UTC).timestamp() * 1000)
    write_day(root, "2020-04-01", table_of([april], [7.25], ["a"]))
    rep = publish(
        get_publisher("examon").publish_role(),
        PublishOptions(archive=root, out=tmp_path / "o", from_month="2020-03", to_month="2020-04"),
    )
    assert rep.redone == 1
    for ym in ("20-03", "20-04"):
        f = tmp_path / "o" / f"year_month={ym}/plugin={PLUGIN}/metric={METRIC}/a_0.parquet"
        assert pq.read_schema(f).field("value").type == pa.float64()
    march = pq.read_table(
        tmp_path / "o" / f"year_month=20-03/plugin={PLUGIN}/metric={METRIC}/a_0.parquet"
    )
    assert march.column("value").to_pylist() == [7.0]


def test_csv_and_parquet_days_give_the_same_file(tmp_path):
    days = shuffled_days(3, 2, nodes=7, per=30)
    for i, t in enumerate(days):
        write_day(tmp_path / "pq", f"2020-03-0{i + 1}", t)
        write_day(tmp_path / "csv", f"2020-03-0{i + 1}", t, fmt="csv")
    _, a = run(tmp_path / "pq", tmp_path / "o1", 50)
    _, b = run(tmp_path / "csv", tmp_path / "o2", 10_000_000)
    assert a.read_bytes() == b.read_bytes()


def test_a_day_without_timestamps_is_a_clear_error(tmp_path):
    t = table_of([T0, None], [1.0, 2.0], ["a", "a"])
    write_day(tmp_path / "a", "2020-03-01", t)
    from dxt_core.errors import ArchiveError

    with pytest.raises(ArchiveError, match=r"2020-03-01.parquet: 1 rows have no timestamp"):
        run(tmp_path / "a", tmp_path / "o", 1000)
    assert not list((tmp_path / "o").rglob("*.parquet"))


def test_an_output_published_by_an_older_format_is_published_again(tmp_path, monkeypatch):
    """The same inputs and options into an output an older publication format wrote: its
    datasets are made again (they were "unchanged" and kept the older files)."""
    import dxt_core.publish.dataset as dataset

    root = tmp_path / "a"
    write_day(root, "2020-03-02", table_of([T0], [7], ["a"]))
    opts = {"archive": root, "out": tmp_path / "o", "from_month": "2020-03", "to_month": "2020-03"}
    role = get_publisher("examon").publish_role()
    now = dataset.PUBLICATION_FORMAT
    monkeypatch.setattr(dataset, "PUBLICATION_FORMAT", now - 1)
    first = publish(role, PublishOptions(**opts))
    assert not first.unchanged and not first.again  # a first publication: no "again"
    assert publish(role, PublishOptions(**opts)).unchanged  # the same format: a no-op
    monkeypatch.undo()
    again = publish(role, PublishOptions(**opts))
    assert not again.unchanged
    # the summary says why (it read as a first publication)
    assert again.summary().startswith(
        f"published again: the output was written in format {now - 1}, this version writes "
        f"format {now}"
    )
    assert publish(role, PublishOptions(**opts)).unchanged
    forced = publish(role, PublishOptions(**opts, force=True))
    assert forced.summary().startswith("published again: --force; published ")
    write_day(root, "2020-03-03", table_of([T0 + 86_400_000], [8], ["a"]))
    grown = publish(role, PublishOptions(**opts))
    assert grown.again == "published again: the archive's days or checks, or the options, changed"


def test_a_tag_named_as_a_folder_key_is_published_as_exported(tmp_path):
    """A tag ``metric`` or ``year_month`` (a Prometheus label may be called so) is published
    as ``exported_<key>``: read through the dataset's Hive partitions (pandas, pyarrow,
    DuckDB), a column of the folder's name would give every row the folder's value. So is
    Examon's ``plugin`` tag, though it holds the folder's value: as a plain-string column it
    refused pandas' read of the folder, whose Hive keys pyarrow infers as dictionaries."""
    import pyarrow.dataset as ds

    t = table_of(
        [T0, T0 + 1],
        [1.0, 2.0],
        ["a", "b"],
        metric=["inner0", "inner1"],
        year_month=["x", "y"],
        plugin=[PLUGIN, PLUGIN],
    )
    write_day(tmp_path / "a", "2020-03-01", t)
    rep, path = run(tmp_path / "a", tmp_path / "o", 10_000_000)
    names = pq.read_schema(path).names
    assert names == [
        "timestamp",
        *("value", "name", "exported_metric", "node", "exported_plugin", "exported_year_month"),
    ]
    assert rep.schemas[f"{PLUGIN}/{METRIC}"]["tags"] == [
        *("exported_metric", "node", "exported_plugin", "exported_year_month"),
    ]
    pd = pytest.importorskip("pandas")
    df = pd.read_parquet(tmp_path / "o" / "year_month=20-03")  # the Hive keys as dictionaries
    assert set(df["plugin"].astype(str)) == set(df["exported_plugin"]) == {PLUGIN}
    got = ds.dataset(
        [str(path)],
        partition_base_dir=str(tmp_path / "o"),
        format="parquet",
        partitioning="hive",  # the tags are plain strings, as the Hive keys are inferred
    ).to_table()
    rows = sorted(zip(*(got.column(c).to_pylist() for c in ("node", "metric", "exported_metric"))))
    assert rows == [("a", METRIC, "inner0"), ("b", METRIC, "inner1")]
    assert set(got.column("year_month").to_pylist()) == {"20-03"}
    assert got.column("exported_year_month").to_pylist() in (["x", "y"], ["y", "x"])


def test_units_differing_only_in_case_or_unicode_form_are_warned_of(tmp_path, monkeypatch):
    """``Temp``/``temp`` and ``café`` in NFC and NFD are distinct folders here, and one folder
    where the records are unpacked on macOS or Windows: the publication says so (the
    operator's summary and the datacard), and still publishes each."""
    import sys
    import unicodedata

    engine = sys.modules[__name__]
    names = ["Temp", "temp", unicodedata.normalize("NFC", "café"), "caf" + "e\u0301", "other"]
    for name in names:
        monkeypatch.setattr(engine, "METRIC", name)
        write_day(tmp_path / "a", "2020-03-01", table_of([T0], [1.0], ["a"]))
    rep, _ = run(tmp_path / "a", tmp_path / "o", 10_000_000)
    clashes = [w for w in rep.warnings if "differ only in letter case or Unicode form" in w]
    assert len(clashes) == 2, rep.warnings
    assert any("'p/Temp' and 'p/temp'" in w for w in clashes)
    assert len(rep.units) == 5
    card = (tmp_path / "o" / "README.md").read_text()
    assert card.count("differ only in letter case or Unicode form") == 2


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_days_of_older_versions_are_read_with_todays_column_names(tmp_path, fmt):
    """Days archived before a tag ``name`` became ``exported_name`` hold two ``name`` columns
    (the publication stopped on them with a KeyError); days archived before an Examon tag
    ``metric`` became ``exported_metric`` hold ``metric``, beside newer days of the unit with
    ``exported_metric`` (the tag was split over two columns). Both are read as this version
    names them: one column each."""
    old_name = pa.Table.from_arrays(
        [
            pa.array([T0], pa.timestamp("ms", tz="UTC")),
            pa.array([1.0]),
            pa.array([METRIC]),
            pa.array(["a"]),
            pa.array(["web"]),
        ],
        names=["timestamp", "value", "name", "node", "name"],
    )
    old_metric = table_of([T0 + 86_400_000], [2.0], ["a"], metric=["inner0"])
    new_metric = table_of([T0 + 2 * 86_400_000], [3.0], ["a"], exported_metric=["inner1"])
    for day, t in (
        ("2020-03-01", old_name),
        ("2020-03-02", old_metric),
        ("2020-03-03", new_metric),
    ):
        write_day(tmp_path / "a", day, t, fmt=fmt)
    _, path = run(tmp_path / "a", tmp_path / "o", 10_000_000)
    got = pq.read_table(path)
    assert got.column_names == [
        *("timestamp", "value", "name", "exported_metric", "exported_name", "node"),
    ]
    rows = [(r["value"], r["exported_name"], r["exported_metric"]) for r in got.to_pylist()]
    assert sorted(rows, key=lambda r: r[0]) == [
        (1.0, "web", None),
        (2.0, None, "inner0"),
        (3.0, None, "inner1"),
    ]
