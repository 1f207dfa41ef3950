"""Documents of one ``@timestamp`` in a fixed order, whatever order the server gave them.

A slice is sorted by ``@timestamp``; among documents of the same millisecond (collectd sends
every node's values at the same instants, so there are many) Elasticsearch's order is its own:
``_shard_doc`` with a point in time, which a segment merge, a reindex or a snapshot restore
changes, and no order at all with a scroll. Written as given, a rerun over unchanged data could
give other JSON Lines bytes (and HDF5 CPU sums added in another order). Here each group of
equal timestamps is put in ``<_index>/<_id>`` order before it is written; a group that runs
on into the next page is held until it is complete, so the order does not depend on where the
server's pages end either. This is the path of every export from a server that writes JSON
Lines (a saved file, ``--input``, keeps its own order); an
HDF5-only export reads columnar pages as they come (:mod:`.columnar_hits`), and there the
CPU sums of one millisecond's documents follow the server's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from dxt_core.backends.collectd_es.query import Hit


def _key(h: Hit) -> tuple[int, str, str]:
    return int(h["sort"][0]), str(h.get("_index") or ""), str(h.get("_id") or "")


def _ts(h: Hit) -> int:
    return int(h["sort"][0])


class TieOrder:
    """Feeds a slice's checked pages (each sorted by ``sort[0]``) through :meth:`pages`, and
    :meth:`rest` at the slice's end; what comes out is the same hits with every group of equal
    ``sort[0]`` in ``(_index, _id)`` order. Holds at most one group between pages."""

    def __init__(self) -> None:
        self._held: list[Hit] = []

    def pages(self, hits: Sequence[Hit]) -> Iterator[list[Hit]]:
        page = list(hits)
        if not page:
            return
        if self._held:
            n = _lead(page, _ts(self._held[0]))
            self._held.extend(page[:n])
            if n == len(page):
                return
            yield sorted(self._held, key=_key)
            page = page[n:]
        cut = len(page) - _lead(page[::-1], _ts(page[-1]))
        self._held = page[cut:]
        if cut:
            yield sorted(page[:cut], key=_key)  # stable: only equal timestamps move

    def rest(self) -> list[Hit]:
        """The last group, ordered (the slice has ended)."""
        held, self._held = sorted(self._held, key=_key), []
        return held


def _lead(page: list[Hit], t: int) -> int:
    """How many hits at the start of ``page`` have ``sort[0] == t``."""
    n = 0
    for h in page:
        if _ts(h) != t:
            break
        n += 1
    return n


def ordered_feed(pages: Iterable[Sequence[Hit]]) -> Iterator[list[Hit]]:
    """``pages`` of one slice with their ties ordered (:class:`TieOrder`)."""
    ties = TieOrder()
    for page in pages:
        yield from ties.pages(page)
    rest = ties.rest()
    if rest:
        yield rest
