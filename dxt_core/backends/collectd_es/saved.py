"""Saved exports as a page source (``dxt extract collectd-es --input``): pytokio's saved
format, a JSON list of pages of hits, or the archive's JSON Lines, one hit per line (gzip or
not), read one page at a time, and the hits of one family and window selected from them as
the server would answer the query."""

from __future__ import annotations

import datetime as dt
import gzip
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from dxt_core.backends.collectd_es.connection import DEFAULT_HOST_PREFIX
from dxt_core.backends.collectd_es.query import (
    Page,
    check_family,
    family_of,
    parse_timestamp_ms,
    to_ms,
)
from dxt_core.errors import ConfigError


def load_saved_pages(path: str | Path) -> list[Page]:
    """pytokio's saved format, whole: a JSON list of pages, each a list of hits (or a search
    response with ``hits.hits``); ``.gz`` is decompressed. Errors name the file and page.

    :func:`iter_saved_pages` reads the same files one page at a time."""
    return list(iter_saved_pages(path))


def _whole_file_pages(p: Path) -> list[Page]:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read input file ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(f"{p}: corrupt gzip ({exc}); re-save the input") from exc
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(
            f"{p}: not JSON ({exc}); expected pytokio's saved format, a list of pages of hits"
        ) from exc
    if not isinstance(doc, list):
        raise ConfigError(
            f"{p}: top level is {type(doc).__name__}, expected a list of pages (each a list "
            "of hits with _index, _id, _source)"
        )
    return [_checked_page(p, i, page) for i, page in enumerate(doc)]


def _checked_page(p: Path, i: int, page: Any) -> Page:
    if isinstance(page, dict):
        hits = page.get("hits", {}).get("hits") if isinstance(page.get("hits"), dict) else None
        if not isinstance(hits, list):
            raise ConfigError(f"{p}: page {i} is an object without hits.hits")
        page = hits
    if not isinstance(page, list):
        raise ConfigError(f"{p}: page {i} is {type(page).__name__}, expected a list of hits")
    for j, hit in enumerate(page):
        if not isinstance(hit, dict) or not isinstance(hit.get("_source"), dict):
            raise ConfigError(f"{p}: page {i}, hit {j} has no _source object")
    return page


#: where a page that is a list of hits may end: a ``]`` followed by the next page or by the
#: end of the top-level list. Such a ``]`` inside a page (an array of arrays) only costs a
#: failed parse: a prefix of a page is never valid JSON.
_PAGE_END = re.compile(rb"\](?=\s*(?:,\s*\[|\]))")
_SPACE = b" \t\r\n"
_CHUNK = 1 << 20


def iter_saved_pages(path: str | Path) -> Iterator[Page]:
    """The pages of a saved export, one at a time: memory holds one page, not the file.

    Pages that are lists of hits (pytokio's format) are streamed; a file whose pages are
    search responses (objects) is read whole. Errors name the file, page and hit."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read input file ({exc.strerror})") from exc
    with fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        scan = _PageScanner(p, gzip.GzipFile(fileobj=fh, mode="rb") if gz else fh)
        first = scan.next_byte()
        if first == ord("{"):  # one hit per line: the archive's own JSON Lines
            yield from _json_lines_pages(p, gz)
            return
        if first != ord("["):
            yield from _whole_file_pages(p)  # not a list: the whole-file reader says why
            return
        scan.pos += 1
        i = 0
        while True:
            c = scan.next_byte()
            if c == ord("]") and i == 0:
                scan.pos += 1
                break
            page = scan.page() if c == ord("[") else None
            if page is None:
                # pages that are objects (search responses), or a page that does not parse:
                # the whole-file reader reads them, or names what is wrong
                yield from _whole_file_pages(p)[i:]
                return
            yield _checked_page(p, i, page)
            i += 1
            c = scan.next_byte()
            if c == ord(","):
                scan.pos += 1
                continue
            if c == ord("]"):
                scan.pos += 1
                break
            yield from _whole_file_pages(p)[i:]
            return
        if scan.next_byte() is not None:
            raise ConfigError(
                f"{p}: not JSON (data after the list of pages); expected pytokio's saved "
                "format, a list of pages of hits"
            )


#: Hits per page of a JSON Lines input.
JSON_LINES_PAGE = 10_000


def _json_lines_pages(p: Path, gz: bool) -> Iterator[Page]:
    """The hits of a JSON Lines file, one ``{"_index", "_id", "_source"}`` per line (what
    ``--format jsonl`` and the DAG archive), in pages of :data:`JSON_LINES_PAGE`: the raw
    archive converts to HDF5 once the index has aged out. A file whose first line is not a
    hit (one search response, say) goes to the whole-file reader, which says what it is."""
    page: Page = []
    with p.open("rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw as fh:
        n, first = 0, True
        try:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    hit = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if first:  # the first hit's line: maybe no JSON Lines at all
                        yield from _whole_file_pages(p)
                        return
                    raise ConfigError(
                        f"{p}: line {n}: not JSON ({exc}); expected one hit per line "
                        '({"_index", "_id", "_source"}), as dxt archives them'
                    ) from exc
                if not isinstance(hit, dict) or not isinstance(hit.get("_source"), dict):
                    if first:
                        yield from _whole_file_pages(p)
                        return
                    raise ConfigError(f"{p}: line {n} has no _source object")
                first = False
                page.append(hit)
                if len(page) == JSON_LINES_PAGE:
                    yield page
                    page = []
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(
                f"{p}: corrupt gzip after line {n} ({exc}); re-save the input"
            ) from exc
    if page:
        yield page


class _PageScanner:
    """A byte stream read in chunks: the next non-space byte, and the next page (a JSON list
    of hits) parsed from where it starts, the chunks it spans joined."""

    def __init__(self, path: Path, stream: Any) -> None:
        self.path = path
        self.stream = stream
        self.buf = b""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Append the next chunk (the bytes before ``pos`` are dropped); False at the end."""
        if self.eof:
            return False
        try:
            chunk = self.stream.read(_CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(f"{self.path}: corrupt gzip ({exc}); re-save the input") from exc
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def next_byte(self) -> int | None:
        """The next non-space byte (not consumed), or None at the end of the file."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return None

    def page(self) -> Any:
        """The JSON list starting at ``pos`` (consumed), or None when none parses before the
        end of the file."""
        start, scan = self.pos, self.pos
        while True:
            for m in _PAGE_END.finditer(self.buf, scan):
                try:
                    page = orjson.loads(self.buf[start : m.end()])
                except orjson.JSONDecodeError:
                    continue
                self.pos = m.end()
                return page
            # The page goes on in the next chunk. A ']' at the end of this buffer may not have
            # shown what follows it yet: rescan from the last one.
            last = self.buf.rfind(b"]", start)
            if not self.more():
                return None
            # more() dropped the bytes before the page (pos == start): shift the indexes
            scan = last - start if last >= 0 else 0
            start = 0


def page_timestamps_ms(sources: list[Mapping[str, Any]]) -> list[int]:
    """``@timestamp`` of each ``_source`` in epoch ms; vectorised for the usual
    ``YYYY-MM-DDTHH:MM:SS[.fff]Z`` strings, :func:`parse_timestamp_ms` otherwise. Both cut
    a finer fraction to the millisecond below (as Elasticsearch stores dates), so a hit's
    time does not depend on the other hits of its page.
    Raises ValueError naming the index of the first bad value."""
    import numpy as np

    raw = [s.get("@timestamp") for s in sources]
    if all(type(v) is str and v.endswith("Z") for v in raw):
        try:
            stamps = np.array([str(v)[:-1] for v in raw], dtype="datetime64[ms]")
            return [int(x) for x in stamps.astype(np.int64)]
        except ValueError:
            pass  # fall through to the per-value parser, which names the bad one
    out: list[int] = []
    for i, v in enumerate(raw):
        try:
            out.append(parse_timestamp_ms(v))
        except ValueError as exc:
            raise _BadTimestamp(i, str(exc)) from exc
    return out


class _BadTimestamp(ValueError):
    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index


def select_saved_hits(
    pages: Iterable[Page],
    family: str,
    start: dt.datetime,
    end: dt.datetime,
    host_prefix: str = DEFAULT_HOST_PREFIX,
    where: str = "input",
) -> Iterator[Page]:
    """Saved hits of ``family`` in ``[start, end)`` with ``host_prefix``, as the server would
    answer the query. Each selected hit gets ``sort = [@timestamp ms]`` like exported hits
    (set in place: the pages are the caller's parsed copy of the file)."""
    check_family(family)
    lo, hi = to_ms(start), to_ms(end)
    for i, page in enumerate(pages):
        chosen = []
        for h in page:
            s = h["_source"]
            host = s.get("hostname")
            if family_of(s) == family and isinstance(host, str) and host.startswith(host_prefix):
                chosen.append(h)
        if not chosen:
            continue
        try:
            stamps = page_timestamps_ms([h["_source"] for h in chosen])
        except _BadTimestamp as exc:
            bad = chosen[exc.index]
            j = next(k for k, h in enumerate(page) if h is bad)
            raise ConfigError(f"{where}: page {i}, hit {j} (_id {bad.get('_id')}): {exc}") from exc
        out: Page = []
        for h, ts in zip(chosen, stamps, strict=True):
            if lo <= ts < hi:
                h["sort"] = [ts]
                out.append(h)
        if out:
            yield out
