"""Where a dataset is written: a local directory, or an ``s3://`` prefix.

A dataset is always built in a local directory first (``--out`` itself, or for ``s3://`` a
staging directory: ``DXT_PUBLISH_STAGING``, default the system's temporary directory), then,
for S3, uploaded through the store's client (:class:`~dxt_core.store.client.S3Client`: files
above its threshold in checksummed multipart uploads, each object checked against S3's
SHA-256 of what it stored). Objects whose bytes the previous publication's ``SHA256SUMS``
already lists are not uploaded again; ``SHA256SUMS`` goes up last and the files the previous
publication listed that this one did not write are deleted after it, so a reader never sees a
``SHA256SUMS`` naming an object that is not what it says.

The output must be empty or a previous publication (it holds ``datapackage.json`` and
``SHA256SUMS``); anything else is refused. ``.dxt-publish.json`` (hidden, not part of the
dataset) records what was published from what, so that publishing the same inputs again can
be a no-op that says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dxt_core.errors import ConfigError
from dxt_core.store import S3Location, client_factory, parse_root
from dxt_core.store.client import json_object
from dxt_core.urls import redact_text

#: The hidden record of the last publication into an output (not part of the dataset).
STATE_FILE = ".dxt-publish.json"
STATE_SCHEMA = "dxt-archive/publish-state/1"


def parse_sums(text: str) -> dict[str, str]:
    """``SHA256SUMS`` as {path: sha256}."""
    out = {}
    for line in text.splitlines():
        if "  " in line:
            sha, path = line.split("  ", 1)
            out[path] = sha
    return out


@dataclass
class Uploaded:
    """What an upload to S3 did, with counts."""

    uploaded: int = 0
    unchanged: int = 0
    deleted: int = 0
    bytes: int = 0
    objects: list[str] = field(default_factory=list)


class LocalOut:
    """A dataset in a local directory: built in place."""

    remote = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root = path  # where the files are built

    @property
    def url(self) -> str:
        return str(self.path)

    def previous(self) -> dict[str, str]:
        """The files (path -> sha256) of the publication already there; {} when empty;
        ConfigError when the directory holds something else."""
        out = self.path
        if not out.exists():
            return {}
        if not out.is_dir():
            raise ConfigError(f"--out {out} is not a directory")
        entries = [p for p in out.iterdir() if not p.name.startswith(".")]
        if not entries:
            return {}
        sums = out / "SHA256SUMS"
        if not (out / "datapackage.json").is_file() or not sums.is_file():
            raise ConfigError(
                f"--out {out} is neither empty nor a dataset published by dxt (no "
                "datapackage.json and SHA256SUMS): choose an empty directory"
            )
        return parse_sums(sums.read_text())

    def state(self) -> dict[str, Any] | None:
        try:
            doc = orjson.loads((self.path / STATE_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def intact(self, files: dict[str, str]) -> bool:
        """Every listed file is there (sizes are checked by the caller's sums)."""
        return all((self.path / p).is_file() for p in files)

    def scratch_parent(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def remove_stale(self, stale: list[str]) -> list[str]:
        gone = []
        for rel in stale:
            with contextlib.suppress(FileNotFoundError):
                (self.path / rel).unlink()
                gone.append(rel)
        return gone

    def commit(self, files: list[str], previous: dict[str, str], sums: dict[str, str]) -> Uploaded:
        return Uploaded()

    def close(self) -> None:
        pass


class S3Out:
    """A dataset under ``s3://bucket/prefix``: built in a local staging directory, then
    uploaded."""

    remote = True

    def __init__(self, location: S3Location) -> None:
        from dxt_core.store.client import S3Client

        self.location = location
        factory = client_factory()
        client = factory(location) if factory is not None else None
        self.store = S3Client(location, client)
        base = os.environ.get("DXT_PUBLISH_STAGING", "").strip() or None
        if base:
            Path(base).mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="dxt-publish-out-", dir=base))
        #: bytes of the previous SHA256SUMS and state record (unchanged: not uploaded)
        self._known: dict[str, bytes] = {}

    @property
    def url(self) -> str:
        return self.location.url

    def _key(self, rel: str) -> str:
        return self.base + rel

    @property
    def base(self) -> str:
        """The key prefix of the dataset's objects (``prefix/``, or nothing)."""
        return f"{self.location.prefix}/" if self.location.prefix else ""

    def previous(self) -> dict[str, str]:
        prefix = self.base
        names = {
            o.key[len(prefix) :]
            for o in self.store.list(prefix, recursive=True)
            if not o.key[len(prefix) :].startswith(".")
        }
        if not names:
            return {}
        got = self.store.get(self._key("SHA256SUMS"))
        if got is not None:
            self._known["SHA256SUMS"] = got[0]
        if "datapackage.json" not in names or got is None:
            raise ConfigError(
                f"--out {self.url} is neither empty nor a dataset published by dxt (no "
                "datapackage.json and SHA256SUMS): choose an empty prefix"
            )
        return parse_sums(got[0].decode())

    def state(self) -> dict[str, Any] | None:
        got = self.store.get(self._key(STATE_FILE))
        if got is None:
            return None
        self._known[STATE_FILE] = got[0]
        return json_object(got[0])

    def intact(self, files: dict[str, str]) -> bool:
        prefix = self.base
        names = {o.key[len(prefix) :] for o in self.store.list(prefix, recursive=True)}
        return all(p in names for p in files)

    def scratch_parent(self) -> Path:
        return self.root

    def remove_stale(self, stale: list[str]) -> list[str]:
        return list(stale)  # deleted by commit, after the new SHA256SUMS is up

    def commit(self, files: list[str], previous: dict[str, str], sums: dict[str, str]) -> Uploaded:
        """Upload ``files`` (paths under the staging root) then ``SHA256SUMS``, then the
        state record; delete what ``previous`` listed and ``sums`` does not."""
        res = Uploaded()
        prefix = self.base
        sizes = {o.key[len(prefix) :]: o.size for o in self.store.list(prefix, recursive=True)}
        last = [f for f in ("SHA256SUMS", STATE_FILE) if f in files]
        for rel in [f for f in files if f not in last] + last:
            local = self.root / rel
            sha = sums.get(rel)
            size = local.stat().st_size
            same = sha is not None and previous.get(rel) == sha
            if rel in self._known:
                same = self._known[rel] == local.read_bytes()
            if same and sizes.get(rel) == size:
                res.unchanged += 1
                continue
            self.store.upload_file(local, self._key(rel), sha)
            res.uploaded += 1
            res.bytes += size
            res.objects.append(rel)
        for rel in sorted(set(previous) - set(sums)):
            self.store.delete(self._key(rel))
            res.deleted += 1
        return res

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def open_out(out: str | Path) -> LocalOut | S3Out:
    """The output ``--out`` names: a directory (or ``file://``) or an ``s3://`` prefix;
    another scheme is refused (never taken for a folder name)."""
    try:
        where = parse_root(str(out))
    except ConfigError as exc:
        raise ConfigError(f"--out {redact_text(str(out))}: {exc}") from None
    if isinstance(where, S3Location):
        return S3Out(where)
    return LocalOut(where)
