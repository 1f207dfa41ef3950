"""What a published dataset says about itself: ``SHA256SUMS``, ``datapackage.json``
(Frictionless Data Package), ``croissant.json`` (MLCommons Croissant 1.0) and a ``README.md``
datacard. Everything is generated from what was written and from the archive's manifests,
with sorted keys and no wall-clock time, so publishing the same months again rewrites the
same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dxt_core.fsio import atomic_file

PARQUET_MEDIATYPE = "application/vnd.apache.parquet"
#: Parquet's encodingFormat in croissant.json: the name Croissant 1.0's examples and its
#: reference reader (mlcroissant, ``EncodingFormat.PARQUET``) know; with the IANA name above,
#: mlcroissant found no reader for any file and loaded no record.
CROISSANT_PARQUET = "application/x-parquet"


@dataclass(slots=True)
class FileEntry:
    """One published file: path relative to the dataset root, size, sha256, schema."""

    path: str
    bytes: int
    sha256: str
    fields: list[tuple[str, str]] = field(default_factory=list)  # (name, frictionless type)
    description: str = ""


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_file(path, sync_dir=False) as fh:
        fh.write(data)


def sha256sums(entries: Sequence[FileEntry]) -> bytes:
    """``sha256sum -c`` input: two spaces between hash and path (text mode)."""
    return "".join(
        f"{e.sha256}  {e.path}\n" for e in sorted(entries, key=lambda e: e.path)
    ).encode()


def frictionless_type(arrow_type: Any) -> str:
    import pyarrow as pa

    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    if pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "number"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_list(t):
        return "array"
    return "string"


def parquet_fields(path: Path) -> list[tuple[str, str]]:
    import pyarrow.parquet as pq

    return [(f.name, frictionless_type(f.type)) for f in pq.read_schema(path)]


def _slug(path: str) -> str:
    s = re.sub(r"[^a-z0-9._-]+", "-", path.lower().replace("/", "--")).strip("-")
    return s or "file"


def _field(name: str, kind: str) -> dict[str, str]:
    if kind == "array":
        # A Parquet list<string> (the job table's node list). Frictionless reads Parquet
        # through pandas, which hands a list cell over as a NumPy array that its "array"
        # type rejects, so the field is declared "any" and described.
        return {
            "name": name,
            "type": "any",
            "description": "list of strings (Parquet list<string>)",
        }
    return {"name": name, "type": kind}


def datapackage(name: str, title: str, meta: dict[str, Any], entries: Sequence[FileEntry]) -> bytes:
    doc = {
        "$schema": "https://datapackage.org/profiles/2.0/datapackage.json",
        "name": name,
        "title": title,
        "description": meta["description"],
        "version": meta["version"],
        "licenses": [{"name": meta["licence"], "path": meta["licence_url"]}]
        if meta.get("licence_url")
        else [{"name": meta["licence"]}],
        "temporalCoverage": {"start": meta["first_day"], "end": meta["last_day"]},
        "resources": [
            {
                "name": _slug(e.path),
                "path": e.path,
                "type": "table",
                "format": "parquet",
                "mediatype": PARQUET_MEDIATYPE,
                "bytes": e.bytes,
                "hash": f"sha256:{e.sha256}",
                "description": e.description,
                # Parquet holds real nulls; readers that go through pandas (frictionless
                # does) see them as NaN / NaT in numeric and time columns.
                "schema": {
                    "fields": [_field(n, t) for n, t in e.fields],
                    "missingValues": ["", "nan", "NaT"],
                },
            }
            for e in sorted(entries, key=lambda e: e.path)
        ],
    }
    return dumps(doc)


_CROISSANT_TYPES = {
    "datetime": "sc:DateTime",
    "integer": "sc:Integer",
    "number": "sc:Float",
    "boolean": "sc:Boolean",
    "string": "sc:Text",
    "array": "sc:Text",
}


#: The JSON-LD context of a Croissant 1.0 document (the names it uses, mapped).
_CROISSANT_CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "extract": "cr:extract",
    "field": "cr:field",
    "fileObject": "cr:fileObject",
    "fileProperty": "cr:fileProperty",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}


def croissant(name: str, title: str, meta: dict[str, Any], entries: Sequence[FileEntry]) -> bytes:
    """MLCommons Croissant 1.0 JSON-LD: one FileObject per file, one RecordSet per table kind
    (plugin and metric) reading the FileObjects of every month."""
    files = sorted(entries, key=lambda e: e.path)
    groups: dict[str, list[FileEntry]] = {}
    for e in files:
        table = "/".join(e.path.split("/")[1:-1])  # plugin=<p>/metric=<m>
        groups.setdefault(table, []).append(e)
    doc = {
        "@context": _CROISSANT_CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "name": name,
        "description": meta["description"],
        "license": meta.get("licence_url") or meta["licence"],
        # where the dataset is published (--url); none given: no url, not an empty one
        **({"url": meta["url"]} if meta.get("url") else {}),
        "version": meta["version"],
        **({"datePublished": meta["date_published"]} if meta.get("date_published") else {}),
        "citeAs": meta["cite"],
        "temporalCoverage": f"{meta['first_day']}/{meta['last_day']}",
        "distribution": _croissant_files(files, sorted(groups)),
        "recordSet": [_record_set(t, members) for t, members in sorted(groups.items())],
    }
    return dumps(doc)


def _record_set(table: str, members: list[FileEntry]) -> dict[str, Any]:
    """The RecordSet of one table kind: a field per column its files hold, read from its
    FileSet."""
    rs_id = _slug(table)
    seen: dict[str, str] = {}
    for e in members:
        for n, t in e.fields:
            seen.setdefault(n, t)
    return {
        "@type": "cr:RecordSet",
        "@id": rs_id,
        "name": rs_id,
        "description": f"{table}: one Parquet file per month",
        "field": [
            {
                "@type": "cr:Field",
                "@id": f"{rs_id}/{n}",
                "name": n,
                "dataType": _CROISSANT_TYPES[t],
                **({"repeated": True} if t == "array" else {}),
                "source": {"fileSet": {"@id": f"{rs_id}-files"}, "extract": {"column": n}},
            }
            for n, t in seen.items()
        ],
    }


def _croissant_files(files: list[FileEntry], tables: list[str]) -> list[dict[str, Any]]:
    """A FileObject per file, then a FileSet per table kind (its months' files)."""
    out: list[dict[str, Any]] = [
        {
            "@type": "cr:FileObject",
            "@id": _slug(e.path),
            "name": _slug(e.path),
            "contentUrl": e.path,
            "contentSize": f"{e.bytes} B",
            "encodingFormat": CROISSANT_PARQUET,
            "sha256": e.sha256,
        }
        for e in files
    ]
    out += [
        {
            "@type": "cr:FileSet",
            "@id": f"{_slug(table)}-files",
            "name": f"{_slug(table)}-files",
            "encodingFormat": CROISSANT_PARQUET,
            "includes": f"year_month=*/{table}/a_0.parquet",
        }
        for table in tables
    ]
    return out
