"""``dxt publish``: the subcommand's arguments and its call."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from dxt_core.backends import publishers
from dxt_core.publish.records import DEFAULT_MAX_RECORD_BYTES

#: Skipped unit-days the command names one by one (with the archive's paths); the rest counted.
SKIPPED_PRINTED = 20


def add_publish_parser(sub: argparse._SubParsersAction[Any]) -> None:
    layouts = "; ".join(
        f"{b.command}: {' and '.join(b.publish_role().layout)}" for b in publishers()
    )
    p = sub.add_parser(
        "publish",
        help="publish months of the archive as a dataset",
        description="Turn months of a backend's archive into a dataset for a repository: one "
        f"typed, sorted Parquet file per metric and month ({layouts}), "
        "the job table with node lists and pseudonymised people, SHA256SUMS, "
        "datapackage.json (Frictionless), croissant.json, a README.md datacard and tar "
        "records under --max-record-bytes. Reads the archive through its manifests only "
        "(days whose file matches its manifest's size and sha256), CSV or Parquet. "
        "See docs/publish.md.",
    )
    names = [b.command for b in publishers()]
    p.add_argument(
        "backend", metavar="BACKEND", help=f"which archive: {', '.join(names) or 'none publish'}"
    )
    p.add_argument(
        "--archive", required=True, help="archive root: a directory or s3://bucket/prefix"
    )
    p.add_argument("--from-month", required=True, help="first month, YYYY-MM")
    p.add_argument("--to-month", required=True, help="last month, YYYY-MM (included)")
    p.add_argument(
        "--out",
        required=True,
        help="output: a directory or s3://bucket/prefix, empty or a previous dataset",
    )
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--pseudonymise-key-file",
        type=Path,
        help="file holding the site's secret (>= 16 bytes): identity columns get HMAC-SHA256 "
        "pseudonyms, the same in every month; the key is never written out",
    )
    who.add_argument(
        "--keep-identities",
        action="store_true",
        help="publish user, account, group and job names as recorded",
    )
    p.add_argument(
        "--pseudonymise-column",
        action="append",
        default=[],
        metavar="COLUMN",
        help="another job-table column that identifies people (repeatable)",
    )
    p.add_argument(
        "--max-record-bytes",
        type=int,
        default=DEFAULT_MAX_RECORD_BYTES,
        help="largest record (tar of whole months); default %(default)s, Zenodo's limit",
    )
    p.add_argument("--no-records", action="store_true", help="write no tar records")
    p.add_argument(
        "--force",
        action="store_true",
        help="publish even when --out already holds the same archive days published with the "
        "same options (default: say so and write nothing)",
    )
    p.add_argument(
        "--name",
        default="",
        help="dataset name (records are named after it); default <backend>-dataset",
    )
    _add_datacard_arguments(p)
    p.set_defaults(func=cmd_publish)


def _add_datacard_arguments(p: argparse.ArgumentParser) -> None:
    """What the datacard and the descriptions say of the dataset."""
    p.add_argument("--title", default="", help="dataset title; default the backend's")
    p.add_argument(
        "--licence",
        default="CC-BY-4.0",
        help="licence, an SPDX identifier (https://spdx.org/licenses/), default %(default)s",
    )
    p.add_argument(
        "--licence-url",
        default="",
        help="URL of the licence's text; default: the known one of CC-BY, CC0, ODbL, ODC-By, "
        "PDDL, CDLA and a few others (another licence needs it)",
    )
    p.add_argument("--cite", default="", help="how to cite (e.g. the paper or the DOI)")
    p.add_argument("--url", default="", help="where the dataset is published (e.g. a DOI URL)")
    p.add_argument(
        "--source",
        default="",
        help="what the datacard names as the source (e.g. 'the facility monitoring of "
        "cluster X'); default the source URLs the manifests record, which name the "
        "monitoring servers",
    )
    p.add_argument("--dataset-version", default="1", help="dataset version, default %(default)s")
    p.add_argument(
        "--date-published",
        default="",
        help="publication date, YYYY-MM-DD (Croissant's datePublished, the datacard); default "
        "none, so that the same inputs give the same bytes on any day",
    )


def cmd_publish(args: argparse.Namespace) -> int:
    from dxt_core.backends import get_publisher
    from dxt_core.publish.dataset import PublishOptions, publish

    role = get_publisher(args.backend).publish_role()
    # The options named as their PublishOptions fields are, then the others.
    given = {
        "pseudonymise_columns": tuple(args.pseudonymise_column),
        "version": args.dataset_version,
        "records": not args.no_records,
    }
    for f in dataclasses.fields(PublishOptions):
        if f.name not in given and hasattr(args, f.name):
            given[f.name] = getattr(args, f.name)
    report = publish(role, PublishOptions(**given))
    for w in report.operator_warnings(SKIPPED_PRINTED):
        print(f"warning: {w}")
    for rel in report.leftovers:
        print(f"removed {rel}: left by an interrupted publication, not part of this one")
    print(report.summary())
    return 0
