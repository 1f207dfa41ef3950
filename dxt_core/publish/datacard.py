"""The dataset's README.md: a datacard generated from the archive's manifests and from
what was written (no wall-clock time in it: the same months give the same text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dxt_core._version import __version__

if TYPE_CHECKING:
    from dxt_core.backends.roles import PublishRole
    from dxt_core.publish.dataset import PublishOptions, PublishReport
    from dxt_core.publish.records import Record


def _source_counts(manifests: Sequence[dict[str, Any]]) -> str:
    """From manifests that carry ``source_count`` (rows the source said it held): how many
    days agree with the rows archived."""
    counted = [m for m in manifests if isinstance(m.get("source_count"), dict | int)]
    if not counted:
        return "n/a"
    agree = 0
    for m in counted:
        sc = m["source_count"]
        n = sc.get("rows", sc.get("count")) if isinstance(sc, dict) else sc
        if n == m.get("rows", 0):
            agree += 1
    return f"{agree}/{len(counted)} agree"


def _holes(manifests: Sequence[dict[str, Any]]) -> int:
    return sum(len(m["holes"]) for m in manifests if isinstance(m.get("holes"), list))


def datacard(
    role: PublishRole,
    opts: PublishOptions,
    meta: dict[str, Any],
    report: PublishReport,
    records: Sequence[Record],
) -> bytes:
    y0, m0 = report.months[0]
    y1, m1 = report.months[-1]
    zones = ", ".join(meta["zones"]) or "not recorded in the manifests"
    lines = [
        f"# {opts.title}",
        "",
        meta["description"],
        "",
        "## Source",
        "",
        f"{role.source}, archived day by day by dxt-archive and published with "
        f"`dxt publish {role.backend}` (dxt-archive {__version__}) "
        "from the archive's manifests: a day is included only when its manifest names a "
        "file whose size and sha256 match.",
        "",
        f"- Source URL(s): {', '.join(meta['sources']) or 'not recorded'}",
        f"- Period: {y0}-{m0:02d} to {y1}-{m1:02d} (archived days {meta['first_day']} to "
        f"{meta['last_day']})",
        f"- Days and months: calendar days of the archive's zone ({zones}); a day is "
        "[local midnight, next local midnight), so a month holds the days whose local date "
        "falls in it.",
        "- Timestamps: UTC, millisecond precision (`timestamp[ms, tz=UTC]`).",
        "",
        "## Layout",
        "",
        "```",
        *role.layout,
        "```",
        "",
        "Metric files: `timestamp`, `value` (typed per metric, see below), `name`, then one "
        "dictionary-encoded string column per tag. Rows are sorted by `node`, then the other "
        "tags, then `timestamp`: a node's series is contiguous. Row groups of "
        "262,144 rows carry min/max statistics. Parquet: zstd level 3, format 2.6.",
        "",
        "## Metrics",
        "",
        "| plugin/metric | value type | type changes (first day) | units (tag) "
        "| sampling (median) |",
        "|---|---|---|---|---|",
    ]
    units_by: dict[str, set[str]] = {}
    sampling_by: dict[str, float] = {}
    for u in report.units:
        k = f"{u.scan.plugin}/{u.scan.metric}"
        units_by.setdefault(k, set()).update(u.units)
        if u.sampling_s is not None and k not in sampling_by:
            sampling_by[k] = u.sampling_s
    for k, doc in sorted(report.schemas.items()):
        if "columns" in doc:
            continue
        changes = ", ".join(f"{c['type']} from {c['first_day']}" for c in doc["type_changes"])
        sampling = f"{sampling_by[k]:g} s" if k in sampling_by else "n/a"
        units = ", ".join(sorted(units_by.get(k, ()))) or "n/a"
        lines.append(f"| {k} | {doc['value_type']} | {changes or 'n/a'} | {units} | {sampling} |")
    lines += [
        "",
        "## Coverage per metric and month",
        "",
        "Days archived / empty (fetched, the source held nothing) / missing (never archived) / "
        "skipped (a manifest whose file was absent or did not match its size or sha256), "
        "rows published, unreadable windows (holes) and source counts where the manifests "
        "record them.",
        "",
        "| plugin/metric | month | archived | empty | missing | skipped | rows | holes "
        "| source counts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for u in sorted(
        report.units, key=lambda u: (u.scan.plugin, u.scan.metric, u.scan.year, u.scan.month)
    ):
        s = u.scan
        used = [d.manifest for d in s.days]
        lines.append(
            f"| {s.plugin}/{s.metric} | {s.year}-{s.month:02d} | {len(s.days)} | {len(s.empty)} "
            f"| {len(s.missing)} | {len([x for x in s.skipped if not x[1].endswith('was used)')])} "
            f"| {u.rows:,} | {_holes(used)} | {_source_counts(used)} |"
        )
    jobs = {k: d for k, d in report.schemas.items() if "columns" in d}
    if jobs:
        lines += ["", "## Job table", ""]
        for k, doc in sorted(jobs.items()):
            cols = ", ".join(f"`{c}` {t}" for c, t in doc["columns"].items())
            lines += [
                f"`{k}`: one row per job that started that day; times are UTC timestamps, "
                "`nodes` is the list of node names (Slurm host lists expanded), so it joins "
                "exactly with the `node` column of the metric files.",
                "",
                f"Columns: {cols}.",
                "",
            ]
    lines += ["## People", ""]
    if report.identities:
        cols = ", ".join(f"`{c}`" for c in sorted(report.identities))
        if report.pseudonymised:
            lines.append(
                f"Identity columns ({cols}) hold pseudonyms: HMAC-SHA256 keyed with a secret "
                "of the site that is not part of the dataset, so the same person (or account, "
                "group, job name) has the same pseudonym in every month and nobody can "
                "recompute one from a list of names. The same pseudonyms replace those names "
                "wherever they appear inside other text (paths, commands, comments)."
            )
        else:
            lines.append(
                f"Identity columns ({cols}) are published as the site recorded them "
                "(`--keep-identities`)."
            )
    else:
        lines.append("No identity columns were found.")
    lines += ["", "## Records", ""]
    if records:
        lines.append(
            f"Months are grouped into records of at most {opts.max_record_bytes:,} bytes "
            "(tar files under `records/`, each with its own `SHA256SUMS` and `files.json`):"
        )
        lines.append("")
        lines += [
            f"- `{r.file}`: " + ", ".join(f"{y}-{m:02d}" for y, m in r.months) for r in records
        ]
    else:
        lines.append("No data files, so no records.")
    lines += [
        "",
        "## Checking it",
        "",
        "```sh",
        "sha256sum -c SHA256SUMS",
        "frictionless validate datapackage.json",
        "```",
        "",
        "## Reading it",
        "",
        "```python",
        "import duckdb",
        'duckdb.sql("SELECT node, avg(value) FROM read_parquet('
        f"'{role.example_glob}', hive_partitioning = true) GROUP BY node\")",
        "```",
        "",
        "## How to cite",
        "",
        meta["cite"],
        "",
        "## Licence",
        "",
        f"{opts.licence}" + (f" ({opts.licence_url})" if opts.licence_url else ""),
        "",
    ]
    if report.warnings:
        lines += ["## Notes from publishing", ""] + [f"- {w}" for w in report.warnings] + [""]
    return "\n".join(lines).encode()
