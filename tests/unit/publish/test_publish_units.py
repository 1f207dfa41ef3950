"""Pure pieces of ``dxt publish``: host lists, pseudonyms, type widening, record grouping."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac

import pytest

from dxt_core.errors import ConfigError
from dxt_core.publish.describe import FileEntry
from dxt_core.publish.hostlist import expand_hostlist
from dxt_core.publish.pseudonym import EmbeddedScrubber, Pseudonymiser
from dxt_core.publish.records import Record, _size, group_months, tar_bytes, write_record
from dxt_core.publish.series import type_history


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("r207n[07-08],r208n01", ["r207n07", "r207n08", "r208n01"]),
        ("r000n[05-07]", ["r000n05", "r000n06", "r000n07"]),
        ("r1n[08-10]", ["r1n08", "r1n09", "r1n10"]),  # zero padding kept across a digit
        ("r1n[01,03-04,9]", ["r1n01", "r1n03", "r1n04", "r1n9"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("r[1-2]n[01-02]x,gpu7", ["r1n01x", "r1n02x", "r2n01x", "r2n02x", "gpu7"]),
        ("r207n07", ["r207n07"]),
        ("a,b", ["a", "b"]),
        ("", []),
        (None, []),
    ],
)
def test_expand_hostlist(text, want):
    assert expand_hostlist(text) == want


@pytest.mark.parametrize("bad", ["r1n[01-", "r1n]01[", "r1n[a-b]", "r1n[05-01]"])
def test_expand_hostlist_rejects_malformed_lists(bad):
    with pytest.raises(ConfigError, match="host list"):
        expand_hostlist(bad)


def test_a_node_list_is_not_a_substring_match():
    # "r208n0" in the string is true; in the list of names it is not
    assert "r208n0" in "r207n[07-08],r208n01"
    assert "r208n0" not in expand_hostlist("r207n[07-08],r208n01")


def test_pseudonyms_are_keyed_hmac_stable_and_kind_specific():
    key = b"k" * 32
    p, q = Pseudonymiser(key), Pseudonymiser(key)
    want = hmac.new(key, b"user\0a08tra01", hashlib.sha256).hexdigest()[:16]
    assert p.pseudonym("user", "a08tra01") == f"user_{want}" == q.pseudonym("user", "a08tra01")
    assert p.pseudonym("account", "a08tra01") != p.pseudonym("user", "a08tra01")
    assert Pseudonymiser(b"x" * 32).pseudonym("user", "a08tra01") != p.pseudonym("user", "a08tra01")
    with pytest.raises(ConfigError, match="shorter than 16 bytes"):
        Pseudonymiser(b"short")


def test_embedded_identities_are_replaced_longest_first():
    p = Pseudonymiser(b"k" * 32)
    s = EmbeddedScrubber(
        p, [("user", "a08tra01"), ("user", "a08tra0"), ("account", "PRJ"), ("user", "42")]
    )
    out = s.scrub("/work/PRJ/a08tra01/job_42.sh")
    assert "a08tra0" not in out and "PRJ" not in out
    assert p.pseudonym("user", "a08tra01") in out and p.pseudonym("account", "PRJ") in out
    assert "job_42" in out  # numeric ids are not searched inside text


def test_type_history_lists_every_widening_with_its_first_day():
    d = dt.date
    got = type_history(
        {
            d(2020, 3, 1): "int64",
            d(2020, 3, 2): "int64",
            d(2020, 3, 3): "double",
            d(2020, 3, 4): "int64",
            d(2020, 3, 9): "string",
        }
    )
    assert got == [
        {"type": "int64", "first_day": "2020-03-01"},
        {"type": "double", "first_day": "2020-03-03"},
        {"type": "string", "first_day": "2020-03-09"},
    ]


def test_months_group_into_records_under_the_limit():
    def month(n: int, sizes: list[int]) -> list[FileEntry]:
        return [
            FileEntry(f"year_month=20-{n:02d}/m={i}/a", s, "0" * 64) for i, s in enumerate(sizes)
        ]

    by_month = {
        (2020, 3): month(3, [40_000]),
        (2020, 4): month(4, [40_000]),
        (2020, 5): month(5, [120_000, 120_000, 120_000, 60_000]),  # over the limit: split
        (2020, 6): month(6, [10_000]),
    }
    warnings: list[str] = []
    recs = group_months("ds", by_month, 400_000, warnings)
    assert [r.name for r in recs] == [
        "ds_20-03_20-04",
        "ds_20-05_part1",
        "ds_20-05_part2",
        "ds_20-06",
    ]
    assert [len(r.entries) for r in recs] == [2, 3, 1, 1]
    assert all(_size(r.entries) <= 400_000 for r in recs)
    assert warnings == []  # no record above the limit
    assert tar_bytes([1]) == 10240 and tar_bytes([10_000]) == 20480


def test_only_a_single_file_above_the_limit_makes_a_record_above_it():
    entries = [
        FileEntry("year_month=20-05/m=a/a_0.parquet", 10_000, "0" * 64),
        FileEntry("year_month=20-05/m=b/a_0.parquet", 900_000, "0" * 64),
        FileEntry("year_month=20-05/m=c/a_0.parquet", 10_000, "0" * 64),
    ]
    warnings: list[str] = []
    recs = group_months("ds", {(2020, 5): entries}, 250_000, warnings)
    assert [[e.path[19] for e in r.entries] for r in recs] == [["a"], ["b"], ["c"]]
    assert len(warnings) == 1 and "m=b/a_0.parquet alone is 900,000 bytes" in warnings[0]


def test_a_records_size_bound_holds_for_the_tar_it_writes(tmp_path):
    """The size a record is planned with (files, headers and its two listings) is never below
    the tar written, however many files and however long their paths."""
    entries = []
    for i in range(600):
        path = f"year_month=20-05/plugin=p{i % 7}/metric={'m' * (i % 90)}{i}/a_0.parquet"
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x" * (i * 37 % 3000))
        entries.append(FileEntry(path, (tmp_path / path).stat().st_size, "f" * 64))
    record = Record("ds_20-05", ((2020, 5),), tuple(entries))
    written = write_record(tmp_path, record)
    assert written.bytes <= _size(entries)
    assert _size(entries) - written.bytes < 0.1 * written.bytes  # and not far above it


def test_the_datacard_says_why_days_were_replaced():
    """Every replaced day was published as "replaced (source grew)": a damaged file
    refetched (the same rows) and a --replace after the source's retention (fewer rows) too."""
    import datetime as dt

    from dxt_core.publish.archive_scan import DayFile, UnitMonth
    from dxt_core.publish.datacard import _after_archiving

    def day(n: int, **manifest) -> DayFile:
        return DayFile(dt.date(2020, 3, n), "csv", f"{n}.csv.gz", 1, "0" * 64, manifest)

    def said(*days: DayFile) -> str:
        return _after_archiving(UnitMonth(("ipmi_pub", "ambient"), 2020, 3, days=list(days)))

    grew = day(1, rows=20, replaced=1, replaced_rows=10)
    same = day(2, rows=10, replaced=1, replaced_rows=10)
    fewer = day(3, rows=5, replaced=1, replaced_rows=10)
    assert said(grew, day(4, rows=10)) == "1 replaced (source grew)"
    assert said(same) == "1 replaced (same rows)"
    assert said(fewer) == "1 replaced (source held fewer)"
    assert said(grew, same, fewer, day(5, replaced=1)) == (
        "4 replaced (1 source grew, 1 same rows, 1 source held fewer, 1 rows not recorded)"
    )
    # a day whose commit only removed a data file no manifest named was not replaced
    stray = [{"file": "7.parquet", "unnamed": True}]
    cleaned = day(7, rows=10, replaced=stray, replaced_rows=10)
    assert said(cleaned) == "1 with stray data files removed (no manifest named them)"
    assert said(cleaned, grew) == (
        "1 replaced (source grew), 1 with stray data files removed (no manifest named them)"
    )
