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
