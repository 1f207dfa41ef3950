"""A command's rows as one JSON document on stdout, streamed (``dxt coverage --json``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any


class _state:
    #: a document was begun on stdout by this command (:func:`print_json_rows`)
    began = False


def failed_before_rows(said: str) -> None:
    """A ``--json`` command that failed before its document began: the document all the
    same, with no rows and the error (a reader of stdout got nothing at all), once."""
    if not _state.began:
        _state.began = True
        sys.stdout.write('{"rows": [],\n"error": ' + json.dumps(said) + "}\n")


def new_command() -> None:
    """No document begun yet (``dxt_core.cli.main`` called again in one process)."""
    _state.began = False


def print_json_rows(rows: Iterable[dict[str, Any]], counts: Callable[[], dict[str, int]]) -> None:
    """``{"rows": [...], "counts": {...}}`` on stdout, one row a line (``grep`` picks rows
    out), written as ``rows`` yields them: the counts, taken once the rows are written, come
    last (the same object as ``json.dumps`` of the whole, keys in another order).

    When taking the rows fails (an S3 read, Ctrl-C) the document is still closed, with
    ``"error"`` instead of ``"counts"`` (the rows written so far are all there are), and the
    exception goes on: a reader never gets a truncated document, and the exit status says
    it failed."""
    out = sys.stdout
    _state.began = True
    out.write('{"rows": [')
    chunk: list[str] = []
    sep = "\n"
    try:
        for row in rows:
            chunk.append(sep + json.dumps(row))
            sep = ",\n"
            if len(chunk) >= 1000:
                out.write("".join(chunk))
                chunk.clear()
    except BaseException as exc:
        # Ctrl-C, or a stop signal taken as one (its name: dxt_core.cli.Stopped)
        how = str(exc.args[0]) if exc.args else "Ctrl-C"
        said = f"interrupted ({how})" if isinstance(exc, KeyboardInterrupt) else str(exc)
        out.write("".join(chunk))
        out.write('\n],\n"error": ' + json.dumps(said or type(exc).__name__) + "}\n")
        raise
    out.write("".join(chunk))
    out.write('\n],\n"counts": ' + json.dumps(counts()) + "}\n")
