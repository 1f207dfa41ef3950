"""A command's rows as one JSON document on stdout, streamed (``dxt coverage --json``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any


def print_json_rows(rows: Iterable[dict[str, Any]], counts: Callable[[], dict[str, int]]) -> None:
    """``{"rows": [...], "counts": {...}}`` on stdout, one row a line (``grep`` picks rows
    out), written as ``rows`` yields them: the counts, taken once the rows are written, come
    last (the same object as ``json.dumps`` of the whole, keys in another order).

    When taking the rows fails (an S3 read, Ctrl-C) the document is still closed, with
    ``"error"`` instead of ``"counts"`` (the rows written so far are all there are), and the
    exception goes on: a reader never gets a truncated document, and the exit status says
    it failed."""
    out = sys.stdout
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
