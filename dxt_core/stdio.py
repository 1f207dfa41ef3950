"""The ``dxt`` command's standard output: a reader gone, a full disk or a closed stream said
as what it is, never taken for the archive's own disk and never changing the exit status of
work that was done."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


def flushed(rc: int) -> int:
    """``rc`` once standard output is flushed: a reader gone (BrokenPipeError) is seen here,
    not at exit. The command's own status stands (a failed or interrupted run says so
    whoever reads it); a command that succeeded but whose output was lost does not."""
    try:
        sys.stdout.flush()
        lost = getattr(sys.stdout, "failed", None)  # a write the command's run went past
        if lost is not None:
            raise lost
        return rc
    except BrokenPipeError:
        # the reader went away (``dxt coverage ... | head``): nothing more to say to it; the
        # interpreter's flush at exit must not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return rc or 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except OSError as exc:  # a full disk (> /dev/full), an I/O error
        return output_lost(exc, rc)


def output_lost(exc: OSError, rc: int | None) -> int:
    """Standard output could not be written (not a reader gone: a full disk, an I/O
    error): said as such, not as the archive's disk."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    done = (
        f"what it printed is lost; its work is done (its exit status was {rc})"
        if rc is not None
        else "the command stopped there"
    )
    print(
        f"dxt: error: standard output could not be written ({exc.strerror or exc}): {done}",
        file=sys.stderr,
    )
    return rc or 2


class Stdout:
    """``sys.stdout`` while a command runs: a write that fails is remembered, so that its
    error names standard output (``> /dev/full`` said "No space left on device" as a full
    archive disk does), and raised as before."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            self.failed = exc
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
