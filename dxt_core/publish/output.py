"""Where a dataset is written: a local directory, or an ``s3://`` prefix.

A dataset is always built in a local directory first (``--out`` itself, or for ``s3://`` a
staging directory: ``DXT_PUBLISH_STAGING``, default the system's temporary directory), then,
for S3, uploaded through the store's client (:class:`~dxt_core.store.client.S3Client`: files
above its threshold in checksummed multipart uploads, each object checked against S3's
SHA-256 of what it stored). Objects whose bytes the previous publication's ``SHA256SUMS``
already lists are not uploaded again.

Before the first byte of a publication reaches the output (a file written into the
directory, an object uploaded), ``.dxt-publish.json`` is rewritten to say the publication is
in progress and ``SHA256SUMS`` is removed; ``SHA256SUMS`` is written again once every file is
in place, the files the previous publication listed that this one did not write are removed,
and the state record, written last, names the finished publication. So a reader never sees
a ``SHA256SUMS`` naming a file that is not what it says, and a publication that was
interrupted is neither taken for finished nor refused: the next run publishes again over it.

The output must be empty, a previous publication (it holds ``datapackage.json`` and
``SHA256SUMS``) or one left in progress (its state record says so); anything else is
refused. ``.dxt-publish.json`` (hidden, not part of the dataset) records what was published
from what and the size of every file, so that publishing the same inputs again can be a
no-op that says so.
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
from dxt_core.procs import killed_leftovers, owned_prefix
from dxt_core.publish.describe import dumps, write_bytes
from dxt_core.store import S3Location, client_factory, parse_root
from dxt_core.store.client import json_object
from dxt_core.urls import redact_value

#: The hidden record of the last publication into an output (not part of the dataset).
STATE_FILE = ".dxt-publish.json"
STATE_SCHEMA = "dxt-archive/publish-state/1"


def in_progress(backend: str) -> dict[str, Any]:
    """The state record of a publication under way (no fingerprint: never taken for done)."""
    return {"schema": STATE_SCHEMA, "backend": backend, "in_progress": True}


def _is_in_progress(state: dict[str, Any] | None) -> bool:
    return state is not None and state.get("in_progress") is True


def _sizes(state: dict[str, Any]) -> dict[str, int] | None:
    """The file sizes a finished state record lists (None for an older record without)."""
    sizes = state.get("sizes")
    if not isinstance(sizes, dict) or not sizes:
        return None
    if not all(isinstance(v, int) for v in sizes.values()):
        return None
    return sizes


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
        #: the output holds a publication that was interrupted (set by :meth:`previous`)
        self.interrupted = False
        #: half-made files such a publication left (killed, not stopped): removed
        self.debris = 0

    @property
    def url(self) -> str:
        return str(self.path)

    def _clear_debris(self) -> int:
        """Remove what a killed publication left half-made: its scratch directories and the
        temporary files of its atomic writes (``.<name>.<random>.tmp``)."""
        n = 0
        for p in sorted(self.path.glob(".dxt-publish-*")):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                n += 1
        for p in sorted(self.path.rglob(".*.tmp")):
            if p.is_file():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    n += 1
        return n

    def previous(self) -> dict[str, str]:
        """The files (path -> sha256) of the publication already there; {} when empty;
        ConfigError when the directory holds something else. After an interrupted
        publication: every file there (but ``SHA256SUMS``), none with a trusted sha256."""
        out = self.path
        if not out.exists():
            return {}
        if not out.is_dir():
            raise ConfigError(f"--out {out} is not a directory")
        self.interrupted = _is_in_progress(self.state())
        if self.interrupted:
            self.debris = self._clear_debris()
        entries = [p for p in out.iterdir() if not p.name.startswith(".")]
        if not entries:
            return {}
        if self.interrupted:
            return {
                rel: ""
                for p in sorted(out.rglob("*"))
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(out).parts)
                and (rel := p.relative_to(out).as_posix()) != "SHA256SUMS"
            }
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

    def intact(self, state: dict[str, Any]) -> bool:
        """Every file the finished publication's state record lists is there, of the size
        it lists (bytes are not read: ``sha256sum -c SHA256SUMS`` checks them)."""
        sizes = _sizes(state)
        if sizes is None:
            return False
        for rel, size in sizes.items():
            try:
                st = (self.path / rel).stat()
            except OSError:
                return False
            if st.st_size != size:
                return False
        return True

    def scratch_parent(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def begin(self, backend: str) -> None:
        """Before the first data file is written: the state record says in progress, and
        ``SHA256SUMS`` (which would name files about to change) goes."""
        write_bytes(self.path / STATE_FILE, dumps(in_progress(backend)))
        with contextlib.suppress(FileNotFoundError):
            (self.path / "SHA256SUMS").unlink()

    def remove_stale(self, stale: list[str]) -> list[str]:
        """Remove these files, and the directories they leave empty; returns those removed."""
        gone = []
        for rel in stale:
            with contextlib.suppress(FileNotFoundError):
                (self.path / rel).unlink()
                gone.append(rel)
            parent = (self.path / rel).parent
            while parent != self.path and parent.is_relative_to(self.path):
                try:
                    parent.rmdir()
                except OSError:  # not empty (or gone)
                    break
                parent = parent.parent
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
        # what killed publications of this host left there (each up to a whole dataset)
        self.swept = 0
        for old in killed_leftovers(Path(base or tempfile.gettempdir()), "dxt-publish-out-"):
            shutil.rmtree(old, ignore_errors=True)
            self.swept += not old.exists()  # another user's stays: not counted as removed
        self.root = Path(tempfile.mkdtemp(prefix=owned_prefix("dxt-publish-out-"), dir=base))
        #: bytes of the previous SHA256SUMS and state record (unchanged: not uploaded)
        self._known: dict[str, bytes] = {}
        #: the prefix holds a publication that was interrupted (set by :meth:`previous`)
        self.interrupted = False
        #: its unfinished multipart uploads (a killed upload's parts cost storage): aborted;
        #: and the local copies killed publications left (above): removed
        self.debris = self.swept
        self._backend = ""
        self._state: dict[str, Any] | None = None
        self._state_read = False

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
        """As :meth:`LocalOut.previous`, of the objects under the prefix."""
        prefix = self.base
        names = {
            o.key[len(prefix) :]
            for o in self.store.list(prefix, recursive=True)
            if not o.key[len(prefix) :].startswith(".")
        }
        self.interrupted = _is_in_progress(self.state())
        if self.interrupted:
            self.debris += self.store.abort_uploads(prefix)
        if not names:
            return {}
        if self.interrupted:
            return {rel: "" for rel in sorted(names) if rel != "SHA256SUMS"}
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
        """The state record there (read once: :meth:`previous` reads it first)."""
        if not self._state_read:
            got = self.store.get(self._key(STATE_FILE))
            if got is not None:
                self._known[STATE_FILE] = got[0]
                self._state = json_object(got[0])
            self._state_read = True
        return self._state

    def intact(self, state: dict[str, Any]) -> bool:
        """As :meth:`LocalOut.intact`, from the listing's sizes."""
        sizes = _sizes(state)
        if sizes is None:
            return False
        prefix = self.base
        there = {o.key[len(prefix) :]: o.size for o in self.store.list(prefix, recursive=True)}
        return all(there.get(rel) == size for rel, size in sizes.items())

    def scratch_parent(self) -> Path:
        return self.root

    def begin(self, backend: str) -> None:
        """Nothing reaches the prefix until :meth:`commit`, which marks it in progress."""
        self._backend = backend

    def remove_stale(self, stale: list[str]) -> list[str]:
        return list(stale)  # deleted by commit, after the new SHA256SUMS is up

    def commit(self, files: list[str], previous: dict[str, str], sums: dict[str, str]) -> Uploaded:
        """Upload ``files`` (paths under the staging root) then ``SHA256SUMS``, delete what
        ``previous`` listed and ``sums`` does not, then upload the state record. When
        anything but the state record changes, the prefix is marked in progress first (the
        state record says so, ``SHA256SUMS`` is deleted): an interruption leaves no
        ``SHA256SUMS`` naming objects that are not what it says."""
        res = Uploaded()
        prefix = self.base
        sizes = {o.key[len(prefix) :]: o.size for o in self.store.list(prefix, recursive=True)}
        last = [f for f in ("SHA256SUMS", STATE_FILE) if f in files]
        order = [f for f in files if f not in last] + last
        changed = {rel for rel in order if not self._there(rel, previous, sums, sizes)}
        gone = sorted(set(previous) - set(sums))
        if changed - {STATE_FILE} or gone:
            self.store.put(self._key(STATE_FILE), dumps(in_progress(self._backend)))
            if "SHA256SUMS" in sizes:
                self.store.delete(self._key("SHA256SUMS"))
            changed |= set(last)  # written again, whatever they held
        res.unchanged = len(order) - len(changed)
        for rel in order:
            if rel in changed and rel != STATE_FILE:
                self._upload(rel, sums.get(rel), res)
        for rel in gone:
            self.store.delete(self._key(rel))
            res.deleted += 1
        if STATE_FILE in changed:
            self._upload(STATE_FILE, None, res)
        return res

    def _there(
        self, rel: str, previous: dict[str, str], sums: dict[str, str], sizes: dict[str, int]
    ) -> bool:
        """The object already holds the staged file's bytes: the previous publication's
        ``SHA256SUMS`` (or the bytes read of it and of the state record) and the size say so."""
        local = self.root / rel
        if rel in self._known:
            same = self._known[rel] == local.read_bytes()
        else:
            sha = sums.get(rel)
            same = sha is not None and previous.get(rel) == sha
        return same and sizes.get(rel) == local.stat().st_size

    def _upload(self, rel: str, sha: str | None, res: Uploaded) -> None:
        local = self.root / rel
        size = local.stat().st_size
        self.store.upload_file(local, self._key(rel), sha)
        res.uploaded += 1
        res.bytes += size
        res.objects.append(rel)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def open_out(out: str | Path) -> LocalOut | S3Out:
    """The output ``--out`` names: a directory (or ``file://``) or an ``s3://`` prefix;
    another scheme is refused (never taken for a folder name)."""
    try:
        where = parse_root(str(out), "the output")
    except ConfigError as exc:
        error = ConfigError(f"--out {redact_value(str(out))}: {exc}")
        error.run_wide = exc.run_wide
        raise error from None
    if isinstance(where, S3Location):
        return S3Out(where)
    return LocalOut(where)
