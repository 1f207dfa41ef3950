"""Deterministic gzip: the same input bytes always give the same output bytes.

The gzip header carries no modification time and no file name (both zero), so rerunning a
metric-day over unchanged data rewrites an identical file. ISA-L (``isal``) is used when
installed, several times faster than zlib for the same standard gzip format; the manifest
records which compressor wrote a file, since the two give different (equally valid) bytes.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, BinaryIO, Literal

from dxt_core.errors import ConfigError

_isal_zlib: Any
try:  # pragma: no cover - depends on the installation
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover
    _isal_zlib = None

Backend = Literal["isal", "zlib"]

#: Default levels: ISA-L level 2 compresses about as well as zlib level 6, several times faster.
DEFAULT_LEVEL: dict[str, int] = {"isal": 2, "zlib": 6}


def default_backend() -> Backend:
    return "isal" if _isal_zlib is not None else "zlib"


class GzipStream:
    """Compress to ``out`` as one gzip member, hashing and counting the compressed bytes."""

    def __init__(self, out: BinaryIO, backend: Backend | None = None, level: int | None = None):
        self.backend: Backend = backend or default_backend()
        if self.backend == "isal":
            if _isal_zlib is None:
                raise ConfigError("gzip backend 'isal' requested but the isal package is missing")
            mod: Any = _isal_zlib
            max_level = 3
        elif self.backend == "zlib":
            mod = zlib
            max_level = 9
        else:
            raise ConfigError(f"unknown gzip backend {backend!r}: use 'isal' or 'zlib'")
        self.level = DEFAULT_LEVEL[self.backend] if level is None else level
        if not 0 <= self.level <= max_level:
            raise ConfigError(f"gzip level for {self.backend} must be 0..{max_level}")
        self._c = mod.compressobj(self.level, mod.DEFLATED, 31)
        self._out = out
        self._sha = hashlib.sha256()
        self.raw_bytes = 0
        self.bytes = 0

    @property
    def label(self) -> str:
        return f"{self.backend}-{self.level}"

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self._sha.update(data)
            self.bytes += len(data)

    def write(self, data: bytes) -> None:
        self.raw_bytes += len(data)
        self._emit(self._c.compress(data))

    def close(self) -> str:
        """Flush the member and return the sha256 of all compressed bytes."""
        self._emit(self._c.flush())
        return self._sha.hexdigest()
