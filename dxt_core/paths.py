"""Checks of path components that come from input (catalog names, sites, families).

Every backend builds archive paths from names it was given; one check keeps them all inside
the archive.
"""

from __future__ import annotations

_FORBIDDEN_CHARS = ("/", "\\", "\x00")

#: Longest file or directory name most file systems accept (ext4, XFS, Btrfs, ZFS, NFS):
#: 255 bytes, counted in UTF-8.
MAX_COMPONENT_BYTES = 255


def check_path_component(value: str, what: str) -> str | None:
    """Return why ``value`` cannot be one directory name in the archive, or None if it can."""
    if not value:
        return f"empty {what}"
    if value in (".", ".."):
        return f"{what} {value!r} would escape the archive directory"
    for ch in _FORBIDDEN_CHARS:
        if ch in value:
            return f"{what} {value!r} contains {ch!r}, which would escape the archive directory"
    if any(ord(c) < 32 for c in value):
        return f"{what} {value!r} contains a control character"
    if value != value.strip():
        return f"{what} {value!r} has leading or trailing spaces"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_COMPONENT_BYTES:
        return (
            f"{what} {value[:40]!r}... is {size} bytes long in UTF-8; file systems accept at "
            f"most {MAX_COMPONENT_BYTES} bytes per name: shorten it"
        )
    return None


#: Bytes the archive adds to a unit's name in a file name of its own: the longest is the
#: temporary file of Examon's tag-key cache of a Hive-partitioned (Parquet) metric,
#: ``.metric=<metric>.json.<8 random characters>.tmp`` (``tempfile.mkstemp``; the files named
#: after units are not written with ``atomic_file(owned=True)``, which adds a host tag).
UNIT_NAME_RESERVE = len(".metric=.json.12345678.tmp")


def check_unit_name(value: str, what: str) -> str | None:
    """Why ``value`` cannot name a unit (a catalog's or a server's metric, plugin, ...), or
    None if it can: one directory name (:func:`check_path_component`) that leaves room for
    the longest file name the archive makes of it; not hidden (a leading ``.``: listings, the
    manifest index and ``dxt publish`` skip hidden directories, which hold dxt's own state);
    without ``=`` (Hive partitions' ``key=value``: ``plugin=p`` would be taken for one) or
    ``%`` (Hive readers, pyarrow and DuckDB, decode it: ``a%20b`` would read as ``a b``)."""
    problem = check_path_component(value, what)
    if problem:
        return problem
    limit = MAX_COMPONENT_BYTES - UNIT_NAME_RESERVE
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        return (
            f"{what} {value[:40]!r}... is {size} bytes long in UTF-8; the archive makes file "
            f"names of it up to {UNIT_NAME_RESERVE} bytes longer, and file systems accept at "
            f"most {MAX_COMPONENT_BYTES}: at most {limit} bytes"
        )
    if value.startswith("."):
        return f"{what} {value!r} starts with '.': hidden directories are dxt's own state"
    for ch, why in (("=", "a Hive partition's separator"), ("%", "decoded by Hive readers")):
        if ch in value:
            return (
                f"{what} {value!r} contains {ch!r} ({why}: pyarrow and DuckDB would read "
                "another name)"
            )
    return None
