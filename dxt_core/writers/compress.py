"""Deterministic gzip: the same input bytes always give the same output bytes.

The gzip header carries no modification time and no file name (both zero), so rerunning a
metric-day over unchanged data rewrites an identical file. Three compressors write standard
gzip, best first when installed:

* ``libdeflate`` (the ``deflate`` package): compresses the stream in fixed 4 MiB pieces,
  each a gzip member (RFC 1952 allows several; ``gzip -d``, Python's ``gzip``, pandas and
  DuckDB read them as one stream). Level 6 gives smaller files than zlib's level 6 at
  about the speed of ISA-L, and it runs without the GIL, so up to two members are compressed
  at once on threads while the caller formats the next rows.
* ``isal`` (ISA-L): one member, the fastest, about 15-25 % larger files.
* ``zlib``: the standard library, always there.

The manifest records which compressor and level wrote a file, since they give different
(equally valid) bytes.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from typing import Any, BinaryIO, Literal

from dxt_core.errors import ConfigError

_isal_zlib: Any
try:  # pragma: no cover - depends on the installation
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover
    _isal_zlib = None

_libdeflate: Any
try:  # pragma: no cover - depends on the installation
    import deflate as _libdeflate
except ImportError:  # pragma: no cover
    _libdeflate = None

Backend = Literal["libdeflate", "isal", "zlib"]

#: Default levels, chosen for size close to ``gzip -9`` at a fraction of its time.
DEFAULT_LEVEL: dict[str, int] = {"libdeflate": 6, "isal": 2, "zlib": 6}
MAX_LEVEL: dict[str, int] = {"libdeflate": 12, "isal": 3, "zlib": 9}
#: libdeflate compresses whole buffers: the stream is cut into members of this many input
#: bytes, at fixed offsets, so the output does not depend on how ``write`` was called.
MEMBER_BYTES = 4 << 20
#: How many members libdeflate compresses at once, each on its own thread: two keep both
#: cores of a small machine busy while the caller formats rows.
IN_FLIGHT = 2


def default_backend() -> Backend:
    if _libdeflate is not None:
        return "libdeflate"
    return "isal" if _isal_zlib is not None else "zlib"


class GzipStream:
    """Compress to ``out`` as one gzip member, hashing and counting the compressed bytes."""

    def __init__(self, out: BinaryIO, backend: Backend | None = None, level: int | None = None):
        self.backend: Backend = backend or default_backend()
        mod: Any
        if self.backend == "libdeflate":
            if _libdeflate is None:
                raise ConfigError(
                    "gzip backend 'libdeflate' requested but the deflate package is missing: "
                    "pip install deflate"
                )
        elif self.backend == "isal":
            if _isal_zlib is None:
                raise ConfigError(
                    "gzip backend 'isal' requested but the isal package is missing: "
                    "pip install isal"
                )
            mod = _isal_zlib
        elif self.backend == "zlib":
            mod = zlib
        else:
            raise ConfigError(
                f"unknown gzip backend {backend!r}: use 'libdeflate', 'isal' or 'zlib'"
            )
        self.level = DEFAULT_LEVEL[self.backend] if level is None else level
        max_level = MAX_LEVEL[self.backend]
        if not 0 <= self.level <= max_level:
            raise ConfigError(f"gzip level for {self.backend} must be 0..{max_level}")
        self._c = (
            None if self.backend == "libdeflate" else mod.compressobj(self.level, mod.DEFLATED, 31)
        )
        # libdeflate: the member being filled (a reused buffer of MEMBER_BYTES), how much
        # of it is filled, the buffers free for reuse, and the members being compressed
        self._member: bytearray | None = None
        self._fill = 0
        self._free: list[bytearray] = []
        self._inflight: list[tuple[threading.Thread, list[bytes | BaseException], bytearray]] = []
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

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Compress ``data`` (any bytes-like object; it is not kept after the call)."""
        self.raw_bytes += len(data)
        if self._c is not None:
            self._emit(self._c.compress(data))
            return
        # Copied into the member's buffer: a fixed set of buffers, reused, so that a day of
        # text is not a stream of fresh 4 MiB allocations (glibc maps each one above its
        # mmap threshold, and every page faults when first written: measured at 10,000
        # series, about a fifth of the CSV's CPU time went to the kernel).
        view = memoryview(data).cast("B")
        pos, size = 0, len(view)
        while pos < size:
            if self._member is None:
                self._member = self._free_buffer()
            take = min(MEMBER_BYTES - self._fill, size - pos)
            # through a memoryview: a bytearray's own slice assignment copies its argument
            # first when it is not a bytearray
            memoryview(self._member)[self._fill : self._fill + take] = view[pos : pos + take]
            self._fill += take
            pos += take
            if self._fill == MEMBER_BYTES:
                self._compress_member(self._member, MEMBER_BYTES)

    def _free_buffer(self) -> bytearray:
        if self._free:
            return self._free.pop()
        return bytearray(MEMBER_BYTES)

    # libdeflate: one member per piece, compressed on worker threads (no GIL) while the
    # caller formats the next piece; at most IN_FLIGHT pieces at once, so memory stays
    # bounded (IN_FLIGHT + 1 buffers), and members are written in order.
    def _compress_member(self, member: bytearray, size: int) -> None:
        self._member, self._fill = None, 0
        while len(self._inflight) >= IN_FLIGHT:
            self._join_oldest()
        slot: list[bytes | BaseException] = []
        level = self.level
        piece = memoryview(member)[:size]

        def work() -> None:
            try:
                slot.append(_libdeflate.gzip_compress(piece, level))
            except BaseException as exc:  # pragma: no cover - re-raised in the caller
                slot.append(exc)

        worker = threading.Thread(target=work, name="dxt-gzip", daemon=True)
        worker.start()
        self._inflight.append((worker, slot, member))

    def _join_oldest(self) -> None:
        worker, slot, member = self._inflight.pop(0)
        worker.join()
        done = slot[0]
        if isinstance(done, BaseException):
            self._inflight.clear()  # the stream is broken: the caller discards the file
            raise done
        self._free.append(member)
        self._emit(done)

    def close(self) -> str:
        """Flush what is left and return the sha256 of all compressed bytes."""
        if self._c is not None:
            self._emit(self._c.flush())
        else:
            if self._fill or self.raw_bytes == 0:  # an empty stream: one empty member
                self._compress_member(self._member or bytearray(), self._fill)
            while self._inflight:
                self._join_oldest()
        return self._sha.hexdigest()
