"""``dxt coverage`` over many units and days (a scale review: 811 units x 731 days): the JSON
is streamed, one row a line, with the same content; the text output caps its per-cell lines
(corrupt details, refetch and refill commands) and says where the rest is; ``--reconcile``
sums up the days not archived instead of a line each; ``--verify`` words a corrupt day as the
index does; the refetch commands name the server the manifests record."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from dxt_core import cli as dxt_cli
from dxt_core.archive import Archive, DayKey
from dxt_core.cli import MAX_COMMAND_LINES, main
from dxt_core.coverage import coverage
from dxt_core.errors import ArchiveError, SourceUnavailable
from dxt_core.jsonrows import print_json_rows
from dxt_core.reconcile import SourceCount

FIRST = dt.date(2024, 5, 1)
URL = "http://kairos.example:8083"


def day(i: int) -> dt.date:
    return FIRST + dt.timedelta(days=i)


def archive_day(root: Path, parts: tuple[str, ...], d: dt.date, rows: int = 3) -> None:
    data = b"row\n" * rows
    with Archive(root).begin(DayKey("examon", parts, d)) as txn:
        with txn.open("csv.gz") as fh:
            fh.write(data)
        txn.commit(
            {
                "status": "archived",
                "file": f"{d}.csv.gz",
                "rows": rows,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "source_url": URL,
                "made_by": {"tool": "dxt"},
            }
        )


def make_archive(tmp_path: Path, metrics: int, n_days: int, skip=lambda m, i: False):
    root = tmp_path / "archive"
    units = [("ipmi_pub", f"m{m:02d}") for m in range(metrics)]
    for m, parts in enumerate(units):
        for i in range(n_days):
            if not skip(m, i):
                archive_day(root, parts, day(i))
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\n" + "".join(f"{p[1]},{p[0]}\n" for p in units))
    return root, catalog, units


def run(capsys, root: Path, catalog: Path, n_days: int, *extra: str) -> tuple[int, str]:
    args = ["coverage", "examon", "--archive", str(root), "--catalog", str(catalog)]
    args += ["--start-day", str(day(0)), "--end-day", str(day(n_days - 1)), *extra]
    rc = main(args)
    return rc, capsys.readouterr().out


def corrupt(root: Path, parts: tuple[str, ...], d: dt.date) -> None:
    (root / "examon" / parts[0] / parts[1] / f"{d}.csv.gz").write_bytes(b"short")


# -- JSON: streamed, same content ----------------------------------------------------------------


def test_json_is_one_row_a_line_with_the_content_of_the_whole_document(capsys, tmp_path):
    root, catalog, units = make_archive(tmp_path, 3, 4, skip=lambda m, i: i == 2)
    corrupt(root, units[1], day(0))
    rc, out = run(capsys, root, catalog, 4, "--json")
    assert rc == 3
    # what json.dumps of the whole document held before
    rows = coverage(Archive(root), "examon", units, [day(i) for i in range(4)])
    want = {
        "counts": {"archived": 8, "empty": 0, "missing": 3, "corrupt": 1},
        "rows": [
            {
                "plugin": r.parts[0],
                "metric": r.parts[1],
                "day": r.day.isoformat(),
                "status": r.status,
                "kept": r.kept,
                "detail": r.detail,
            }
            for r in rows
        ],
    }
    assert json.loads(out) == want
    lines = out.splitlines()
    assert len(lines) == len(rows) + 3  # '{"rows": [', a line per row, '],', the counts
    row_lines = [json.loads(line.rstrip(",")) for line in lines[1:-2]]
    assert row_lines == want["rows"]
    corrupt_lines = [line for line in lines if '"status": "corrupt"' in line]
    assert len(corrupt_lines) == 1 and '"metric": "m01"' in corrupt_lines[0]


def test_json_rows_are_written_as_they_come(capsys):
    written_before_the_end: list[int] = []

    def rows() -> Iterator[dict[str, int]]:
        for i in range(2500):
            if i == 2400:
                written_before_the_end.append(capsys.readouterr().out.count("\n"))
            yield {"i": i}

    print_json_rows(rows(), lambda: {"n": 2500})
    rest = capsys.readouterr().out
    assert written_before_the_end[0] >= 2000  # not held until the last row
    assert rest.endswith('"counts": {"n": 2500}}\n')


def test_json_with_no_rows_is_valid(capsys):
    print_json_rows(iter([]), lambda: {"archived": 0})
    assert json.loads(capsys.readouterr().out) == {"rows": [], "counts": {"archived": 0}}


@pytest.mark.parametrize(
    "failure", [ArchiveError("cannot read s3://b/x: timed out"), KeyboardInterrupt()]
)
def test_rows_that_fail_midway_still_give_a_whole_document(capsys, failure):
    def rows() -> Iterator[dict[str, int]]:
        yield from ({"i": i} for i in range(1500))
        raise failure

    with pytest.raises(type(failure)):
        print_json_rows(rows(), lambda: {"n": 1500})
    doc = json.loads(capsys.readouterr().out)  # closed: no truncated document
    said = "interrupted (Ctrl-C)" if isinstance(failure, KeyboardInterrupt) else str(failure)
    assert doc == {"rows": [{"i": i} for i in range(1500)], "error": said}


# -- text: capped lines -------------------------------------------------------------------------


def test_corrupt_details_and_refetch_commands_are_capped(capsys, tmp_path):
    n = MAX_COMMAND_LINES + 7
    root, catalog, units = make_archive(tmp_path, n, 2)
    for parts in units:
        corrupt(root, parts, day(0))
    rc, out = run(capsys, root, catalog, 2)
    assert rc == 3
    lines = out.splitlines()
    details = [line for line in lines if line.startswith("corrupt: ")]
    assert len(details) == MAX_COMMAND_LINES
    assert "data file 2024-05-01.csv.gz has 5 bytes, manifest says 12" in details[0]
    (rest,) = [line for line in lines if line.startswith("... and ")]
    assert "and 7 more days with a detail (7 corrupt)" in rest
    assert '--json | grep \'"status": "corrupt"\'' in rest
    at = next(i for i, line in enumerate(lines) if "refetch the corrupt days with:" in line)
    refetch = [line for line in lines[at + 1 :] if "--refetch" in line]
    assert len(refetch) == MAX_COMMAND_LINES
    # the refetch commands name the server the manifests record, as the refill ones do
    for line in refetch:
        words = shlex.split(line)
        assert words[words.index("--url") + 1] == URL
    (more,) = [line for line in lines[at + 1 :] if "... and" in line]
    assert "and 7 more" in more and "7 more unit(s)" in more and "corrupt rows" in more
    assert '--json | grep \'"status": "corrupt"\'' in more


def test_refill_ranges_are_capped_the_rest_in_one_command(capsys, tmp_path):
    n_days = 2 * (MAX_COMMAND_LINES + 10)
    root, catalog, _ = make_archive(tmp_path, 1, n_days, skip=lambda m, i: i % 2 == 1)
    rc, out = run(capsys, root, catalog, n_days)
    assert rc == 3
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "with the dxt command" in line)
    block: list[str] = []
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    commands = [line for line in block if line.strip().startswith("dxt extract")]
    assert len(commands) == MAX_COMMAND_LINES
    assert f"--url {URL}" in commands[0]
    (note,) = [line for line in block if line.strip().startswith("#")]
    first = day(2 * (MAX_COMMAND_LINES - 1) + 1)
    last = day(n_days - 1)
    assert f"and 11 more ranges of days ({first}..{last})" in note
    assert f"--start-day {first} --end-day {last}" in commands[-1]


# -- --verify: the same details ------------------------------------------------------------------


def test_verify_words_a_corrupt_day_as_the_index_does(capsys, tmp_path):
    root, catalog, units = make_archive(tmp_path, 2, 2)
    corrupt(root, units[0], day(1))
    _, plain = run(capsys, root, catalog, 2, "--json")
    _, verified = run(capsys, root, catalog, 2, "--json", "--verify")
    assert json.loads(plain) == json.loads(verified)
    (row,) = [r for r in json.loads(verified)["rows"] if r["status"] == "corrupt"]
    assert row["detail"] == "data file 2024-05-02.csv.gz has 5 bytes, manifest says 12"
    assert str(root) not in verified
    # the same without the index (every manifest read)
    (root / ".dxt-index.sqlite").unlink(missing_ok=True)
    rows = coverage(Archive(root), "examon", units, [day(0), day(1)])
    assert [r.detail for r in rows if r.status == "corrupt"] == [row["detail"]]


# -- --reconcile: the days not archived summed up ------------------------------------------------


def test_reconcile_sums_up_the_days_not_archived(capsys, tmp_path, monkeypatch):
    n_days = 12
    # every unit lacks days 4..9; units m00, m01 also day 1
    root, catalog, units = make_archive(
        tmp_path, 5, n_days, skip=lambda m, i: 4 <= i <= 9 or (m < 2 and i == 1)
    )
    from dxt_core.backends.examon import cli as examon_cli

    @contextlib.contextmanager
    def counter(args) -> Iterator[object]:
        def count(parts: tuple[str, ...], d: dt.date) -> SourceCount:
            if (parts, d) == (units[3], day(0)):
                raise SourceUnavailable("the count timed out")
            return SourceCount(4 if (parts, d) == (units[2], day(0)) else 3, "faked")

        yield count

    monkeypatch.setattr(examon_cli, "reconcile_counter", counter)
    rc, out = run(capsys, root, catalog, n_days, "--reconcile")
    assert rc == 4  # one day grew at the source
    lines = out.splitlines()
    assert not [line for line in lines if line.startswith("not archived (not counted): ipmi")]
    (summary,) = [line for line in lines if line.startswith("not archived (not counted)")]
    assert "32 metric-days of 5 unit(s), 2024-05-02..2024-05-10" in summary
    # the coverage that shows them takes the units as the reconcile did (its catalog)
    assert f"'dxt coverage examon --archive {root} --catalog {catalog} --start-day" in summary
    assert "--reconcile" not in summary
    # a day grew (exit 4) and a count failed: both said
    assert "exit status 4 (more at the source), and 1 count(s) FAILED (listed above)" in out
    groups = [line for line in lines if line.startswith("  ") and "2024-05-05..2024-05-10" in line]
    assert groups == [
        "  3 units (e.g. ipmi_pub/m02): 2024-05-05..2024-05-10",
        "  2 units (e.g. ipmi_pub/m00): 2024-05-02, 2024-05-05..2024-05-10",
    ]
    # the rows that matter keep a line each
    assert any(line.startswith("MORE at the source") and "ipmi_pub/m02" in line for line in lines)
    assert len(lines) < 20


@pytest.mark.parametrize("password", ["--pass", "--passw=Pw-SECRET-7781"])
def test_the_coverage_it_suggests_repeats_no_credential(capsys, tmp_path, monkeypatch, password):
    """An abbreviated --password (argparse takes --pass) and a --jobs-url with credentials
    were repeated in the coverage command the reconcile prints; and the refetch commands of
    a plain coverage printed the --jobs-url's password."""
    root, catalog, units = make_archive(tmp_path, 2, 3, skip=lambda m, i: i == 1)
    from dxt_core.backends.examon import cli as examon_cli

    @contextlib.contextmanager
    def counter(args) -> Iterator[object]:
        yield lambda parts, d: SourceCount(3, "faked")

    monkeypatch.setattr(examon_cli, "reconcile_counter", counter)
    secret = [
        "--user",
        "arch",
        *([password, "Pw-SECRET-7781"] if "=" not in password else [password]),
    ]
    jobs = ["--jobs-url", "http://arch:it's SECRET-7781@127.0.0.1:21102"]
    url = ["--url=http://arch:SECRET-7781@127.0.0.1:21101"]
    rc, out = run(capsys, root, catalog, 3, "--reconcile", *secret, *jobs, *url)
    (summary,) = [line for line in out.splitlines() if line.startswith("not archived")]
    assert "SECRET" not in out and "--jobs-url http://127.0.0.1:21102 " in summary, summary
    # the server's URL is kept (its refill commands name it: "--url URL" without it)
    assert "--url=http://127.0.0.1:21101 " in summary, summary
    corrupt(root, units[0], day(0))
    rc, out = run(capsys, root, catalog, 3, *jobs)
    assert rc != 0 and "--refetch" in out and "--jobs-url http://127.0.0.1:21102 " in out
    assert "SECRET" not in out


def test_reconcile_json_keeps_every_row(capsys, tmp_path, monkeypatch):
    root, catalog, _ = make_archive(tmp_path, 2, 3, skip=lambda m, i: i == 1)
    from dxt_core.backends.examon import cli as examon_cli

    @contextlib.contextmanager
    def counter(args) -> Iterator[object]:
        yield lambda parts, d: SourceCount(3, "faked")

    monkeypatch.setattr(examon_cli, "reconcile_counter", counter)
    rc, out = run(capsys, root, catalog, 3, "--reconcile", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["counts"] == {"equal": 4, "missing": 2}
    assert [r["state"] for r in doc["rows"]].count("missing") == 2


@pytest.mark.parametrize("n", [MAX_COMMAND_LINES, MAX_COMMAND_LINES + 1])
def test_spans_says_how_many_more(n):
    text = dxt_cli.name_spans(list(range(n)))
    assert text.endswith("and 1 more") == (n > MAX_COMMAND_LINES)


@pytest.mark.parametrize(
    ("first", "n", "kind"),
    [
        (dt.date(2024, 1, 1), 546, "week"),  # a Monday: 78 weeks
        (dt.date(2024, 1, 3), 546, "month"),  # a Wednesday: the days touch 79 weeks
        (dt.date(2024, 1, 3), 540, "week"),
        (dt.date(2024, 1, 1), 92, "day"),
    ],
)
def test_a_weekly_table_has_at_most_its_78_columns(first, n, kind):
    """546 days from a Wednesday were shown weekly in 79 columns (the days divided by 7,
    not the weeks they touch)."""
    from dxt_core.coverage_table import WEEKS_AT_MOST, scale

    days = [first + dt.timedelta(days=i) for i in range(n)]
    name, column = scale(days)
    assert name == kind
    assert len({column(d) for d in days}) <= (WEEKS_AT_MOST if kind == "week" else n)
