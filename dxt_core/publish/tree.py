"""Where the archive being published is read from: a local directory or an ``s3://`` root.

Publishing reads an archive through its manifests only; this module gives it the few
operations it needs, the same for both places: the sub-directories of a directory (the units),
the files of a unit directory with their sizes (one listing per unit directory: locally the
names only, one ``os.scandir``, and the size of a file when it is asked for: a scan of one
month stats the data files of that month, not every file of every year), a manifest's JSON, and a
day's data file as a local file to read, hashed and checked against its manifest's size and
sha256 first (:class:`DayUnusable` when it does not match). A scan of the archive (which
days a month has, whether it is complete) reads manifests and sizes only, never whole files.
From S3 a day file is streamed into the scratch directory, checked, and removed once read;
nothing else is downloaded. The store's own API is used
(:class:`~dxt_core.store.s3.S3Archive`, its :class:`~dxt_core.store.client.S3Client`).
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from dxt_core.archive import Archive
from dxt_core.errors import ArchiveError, ConfigError
from dxt_core.fsio import sha256_file
from dxt_core.store import S3Location, parse_root
from dxt_core.store.client import json_object

if TYPE_CHECKING:
    from dxt_core.store.s3 import S3Archive

T = TypeVar("T")


class DayUnusable(ArchiveError):
    """A day file does not match its manifest once read (size or sha256): the day is skipped."""


class ArchiveTree(Protocol):
    """The archive root being published (paths are ``/``-separated, relative to it)."""

    @property
    def url(self) -> str:
        """The root, for messages (a directory or an ``s3://`` URL)."""

    #: an object store (days are copied to read them)
    remote: bool

    #: folders a scan passed over because no unit can have their name (``<backend>/a=b``
    #: where ``<key>=`` is expected), for the report
    left_out: list[str]

    def where(self, rel: str) -> str:
        """``rel`` as a path or URL, for messages."""

    def dirs(self, rel: str) -> list[str] | None:
        """The non-hidden sub-directories of ``rel``, sorted; None when ``rel`` is none."""

    def files(self, rel: str) -> Mapping[str, int]:
        """The files directly in ``rel`` and their sizes (empty when there is none)."""

    def read_json(self, rel: str) -> dict[str, Any] | None:
        """The JSON object in ``rel``; None when unreadable or not an object."""

    def fetch(
        self, rel: str, size: int, sha256: str, scratch: Path
    ) -> contextlib.AbstractContextManager[Path]:
        """A local copy of ``rel`` to read, checked against ``size`` and ``sha256``
        (:class:`DayUnusable` when it does not match); removed afterwards if it was copied."""

    def internal(self, parse: Callable[[bytes | None], T], name: str, *parts: str) -> T:
        """An internal record of the archive (:meth:`~dxt_core.archive.Archive.read_internal`:
        the reconcile's check records; None when there is none) as ``parse`` gives it, read
        and parsed once per tree: one month's check record serves every unit, and the tree
        keeps what ``parse`` made of it, not its bytes."""


#: Directory listings a tree keeps (a scan goes unit by unit: a unit's directories are listed
#: once and its months scanned from the listing; the whole archive's is never held at once).
LISTINGS_KEPT = 16


class _Listings:
    """The last :data:`LISTINGS_KEPT` directory listings of a tree, by path."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Mapping[str, int]] = OrderedDict()

    def get(self, rel: str) -> Mapping[str, int] | None:
        got = self._kept.get(rel)
        if got is not None:
            self._kept.move_to_end(rel)
        return got

    def put(self, rel: str, listing: Mapping[str, int]) -> None:
        self._kept[rel] = listing
        while len(self._kept) > LISTINGS_KEPT:
            self._kept.popitem(last=False)


class _Parsed:
    """The internal records a tree read, as their parser gave them, by parser and path."""

    def __init__(self, read: Callable[..., bytes | None]) -> None:
        self._read = read
        self._kept: dict[tuple[Any, ...], Any] = {}

    def get(self, parse: Callable[[bytes | None], T], name: str, parts: tuple[str, ...]) -> T:
        key = (parse, name, *parts)
        if key not in self._kept:
            self._kept[key] = parse(self._read(name, *parts))
        got: T = self._kept[key]
        return got


class LocalListing(Mapping[str, int]):
    """The files of a local directory: their names from one ``os.scandir`` (no ``stat``
    where the file system gives the entry's type), the size of one ``stat``-ed when it is
    asked for (then kept). A file gone since the listing has no size (``get`` gives None)."""

    __slots__ = ("_names", "_sizes", "_top")

    def __init__(self, top: Path) -> None:
        self._top = top
        self._sizes: dict[str, int] = {}
        names: set[str] = set()
        with contextlib.suppress(OSError), os.scandir(top) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    if entry.is_file():
                        names.add(entry.name)
        self._names = frozenset(names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __getitem__(self, name: str) -> int:
        size = self._sizes.get(name)
        if size is None:
            if name not in self._names:
                raise KeyError(name)
            try:
                size = os.stat(self._top / name).st_size
            except OSError:
                raise KeyError(name) from None
            self._sizes[name] = size
        return size

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class LocalTree:
    """An archive in a directory (local disk, NFS, GPFS, Lustre)."""

    remote = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.left_out: list[str] = []
        self._files = _Listings()
        #: internal records read and parsed (one month's check record serves every unit)
        self._internal = _Parsed(Archive(root).read_internal)

    @property
    def url(self) -> str:
        return str(self.root)

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def dirs(self, rel: str) -> list[str] | None:
        top = self.root / rel
        if not top.is_dir():
            return None
        return sorted(p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith("."))

    def files(self, rel: str) -> Mapping[str, int]:
        got = self._files.get(rel)
        if got is None:
            got = LocalListing(self.root / rel)
            self._files.put(rel, got)
        return got

    def internal(self, parse: Callable[[bytes | None], T], name: str, *parts: str) -> T:
        return self._internal.get(parse, name, parts)

    def read_json(self, rel: str) -> dict[str, Any] | None:
        try:
            doc = orjson.loads((self.root / rel).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    @contextlib.contextmanager
    def fetch(self, rel: str, size: int, sha256: str, scratch: Path) -> Iterator[Path]:
        path = self.root / rel  # read in place, once checked
        try:
            st = path.stat()
        except FileNotFoundError:
            raise DayUnusable(f"{path}: named by its manifest but absent") from None
        if st.st_size != size:
            raise DayUnusable(f"{path}: {st.st_size} bytes, the manifest says {size}")
        if sha256_file(path) != sha256:
            raise DayUnusable(f"{path}: sha256 differs from the manifest's")
        yield path
        # the file read is the one hashed: a commit renames a new file into place (another
        # inode), so the same inode, size and mtime after the read mean the same bytes
        try:
            now = path.stat()
        except FileNotFoundError:
            now = None
        if now is None or _identity(now) != _identity(st):
            raise ArchiveError(
                f"{path} was replaced while it was read (a writer committed its day "
                "meanwhile): publish again when the writes are done (the next run completes "
                "this publication)"
            )


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class S3Tree:
    """An archive in ``s3://bucket/prefix``, read through the store's client."""

    remote = True

    def __init__(self, location: S3Location, archive: S3Archive) -> None:
        self.location = location
        self.archive = archive
        self.store = archive.store
        self.left_out: list[str] = []
        self._files = _Listings()
        self._internal = _Parsed(archive.read_internal)

    @property
    def url(self) -> str:
        return self.location.url

    def where(self, rel: str) -> str:
        return self.store.url(self.location.key(rel))

    def dirs(self, rel: str) -> list[str] | None:
        parts = [p for p in rel.split("/") if p]
        names = self.archive.subdirectories(*parts)
        if not names and not self.archive.holds(rel.strip("/")):
            return None
        return names

    def files(self, rel: str) -> Mapping[str, int]:
        got = self._files.get(rel)
        if got is None:
            prefix = self.location.key(rel) + "/"
            got = {o.key[len(prefix) :]: o.size for o in self.store.list(prefix)}
            self._files.put(rel, got)
        return got

    def internal(self, parse: Callable[[bytes | None], T], name: str, *parts: str) -> T:
        return self._internal.get(parse, name, parts)

    def read_json(self, rel: str) -> dict[str, Any] | None:
        got = self.store.get(self.location.key(rel))
        return None if got is None else json_object(got[0])

    @contextlib.contextmanager
    def fetch(self, rel: str, size: int, sha256: str, scratch: Path) -> Iterator[Path]:
        local = scratch / ("fetch-" + rel.replace("/", "--"))
        try:
            self.store.download(self.location.key(rel), local)
            got = local.stat().st_size
            if got != size:
                raise DayUnusable(f"{self.where(rel)}: {got} bytes read, the manifest says {size}")
            if sha256_file(local) != sha256:
                raise DayUnusable(f"{self.where(rel)}: sha256 differs from the manifest's")
            yield local
        finally:
            with contextlib.suppress(FileNotFoundError):
                local.unlink()


def open_tree(root: str | Path) -> ArchiveTree:
    """The archive at ``root`` (a path, ``file://`` or ``s3://`` URL): a clear error when it
    is not there (an unknown scheme is refused by :func:`~dxt_core.store.parse_root`)."""
    where = parse_root(str(root))
    if isinstance(where, S3Location):
        from dxt_core.store.s3 import S3Archive

        return S3Tree(where, S3Archive(where.url))
    if not where.is_dir():
        raise ConfigError(f"archive root {where} is not a directory: check --archive")
    return LocalTree(where.expanduser().resolve())
