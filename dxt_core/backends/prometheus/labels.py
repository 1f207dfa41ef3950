"""A series' labels: decoded once per source from the servers' ``metric`` JSON
(:class:`LabelCache`) and checked once against the day's schema (:class:`LabelCheck`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from dxt_core.errors import SourceError

if TYPE_CHECKING:
    from dxt_core.backends.prometheus.columns import Columns

#: A series' labels, sorted: what tells series apart.
LabelKey = tuple[tuple[str, str], ...]


def label_key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


class LabelCache:
    """The labels of a source's series, each decoded once from its ``metric`` JSON.

    A day is asked for window after window. Prometheus lists the series of every window in
    the same order (by labels): when a window's ``metric`` texts are the last window's, in
    the same order, its lists of labels and keys are that window's, the same objects, found
    with one comparison of the joined texts and no work per series, and the writers reuse
    what they made of the list (the series' order and CSV tails). Measured on a 6-minute
    window of 10,000 series from Prometheus (decode and CSV write of one answer, best of
    12): 119 ms before, 108 ms. VictoriaMetrics 1.79 exports the series of each window in
    another order (measured: no two of six windows alike), so there each ``metric`` text is
    looked up in the cache, as before.
    """

    def __init__(self) -> None:
        self._by_meta: dict[bytes, tuple[dict[str, str], LabelKey]] = {}
        #: the last window's joined ``metric`` texts, its labels and keys, and whether
        #: each series is there once
        self._last: tuple[bytes, list[dict[str, str]], list[LabelKey], bool] = (b"", [], [], True)

    def __len__(self) -> int:
        return len(self._by_meta)

    def trim(self, keep: int) -> bool:
        """Forget every series when more than ``keep`` are held (a source that archives
        day after day would otherwise hold every series it ever saw, about 1.5 KB each);
        whether it did. Another thread's window in progress keeps the table it began with."""
        if len(self._by_meta) <= keep:
            return False
        self._by_meta = {}
        return True

    def series(
        self, metas: list[bytes], where: str, url: str, numbers: list[int] | None = None
    ) -> tuple[list[dict[str, str]], list[LabelKey], bool]:
        """The labels and keys of the series whose ``metric`` texts are ``metas``, and
        whether no series is there twice; ``numbers``: the answer's line of each (for the
        error that names one), when not their place in ``metas``."""
        # NUL joins them: valid JSON holds none (the texts of the last window were decoded,
        # so none of them held one, and an equal join is an equal list)
        joined = b"\0".join(metas)
        last = self._last
        if joined == last[0] and len(metas) == len(last[1]):
            return last[1], last[2], last[3]
        by_meta = self._by_meta
        found = [by_meta.get(m) for m in metas]
        for n, (m, hit) in enumerate(zip(metas, found, strict=True), 1):
            if hit is None:
                lab = decode_labels(m, numbers[n - 1] if numbers else n, where, url)
                found[n - 1] = by_meta[m] = (lab, label_key(lab))
        labels = [f[0] for f in found]  # type: ignore[index]
        keys = [f[1] for f in found]  # type: ignore[index]
        distinct = len(set(keys)) == len(keys)
        self._last = (joined, labels, keys, distinct)
        return labels, keys, distinct

    def one(self, meta: bytes, n: int, where: str, url: str) -> tuple[dict[str, str], LabelKey]:
        """One series' labels and key (the line-by-line path)."""
        hit = self._by_meta.get(meta)
        if hit is None:
            lab = decode_labels(meta, n, where, url)
            hit = self._by_meta[meta] = (lab, label_key(lab))
        return hit


def decode_labels(meta: bytes, n: int, where: str, url: str) -> dict[str, str]:
    try:
        doc = orjson.loads(meta)
    except orjson.JSONDecodeError as exc:
        raise SourceError(
            f"{where}: export line {n} is not a series ({exc}): {meta[:120]!r}; nothing of "
            "the window is archived (a cut answer? retry)",
            url=url,
        ) from exc
    if not isinstance(doc, dict):
        raise SourceError(f"{where}: export line {n}: metric is not an object", url=url)
    return {str(k): str(v) for k, v in doc.items()}


class LabelCheck:
    """The labels of a day's series against its schema (``keys``), each series once."""

    def __init__(self, keys: set[str]) -> None:
        self.keys = keys
        self.checked: set[LabelKey] = set()
        #: the last window's list of series (a window of the same list holds no new one:
        #: LabelCache hands the same object over while the series are the same)
        self.last: list[LabelKey] | None = None

    def new_series(self, cols: Columns) -> bool:
        """Whether ``cols`` may hold series not checked yet."""
        if cols.keys is self.last:
            return False
        self.last = cols.keys
        return True

    def extra_labels(self, cols: Columns) -> tuple[dict[str, str], list[str]] | None:
        """A series new to the check with labels outside the schema, and those labels."""
        for labels, key in zip(cols.labels, cols.keys, strict=True):
            if key in self.checked:
                continue
            self.checked.add(key)
            extra = set(labels) - self.keys
            if extra:
                return labels, sorted(extra)
        return None
