"""What can still reach a top ``k``: the ``k`` largest of many scores without sorting them,
a floor under the final ``k``-th best from partial scores, and the running threshold of a
search (the BM25 lane's MaxScore, :mod:`docgraph.store.bm25`).

A partial score (some of a row's terms added) is never above the row's final score, since
every term adds a non-negative amount: so the ``k``-th best of scores met and of partial
scores is a floor under the final ``k``-th best, and a row whose partial score plus the
bounds of its terms not added yet stays under it cannot enter the top ``k``.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import numpy.typing as npt

# The k best of this many scores or fewer are found by np.partition directly; of more, by a
# cut from LARGEST_SAMPLE of them first (:func:`largest`).
LARGEST_DIRECT = 1 << 16
LARGEST_SAMPLE = 4096
LARGEST_SORT = 1 << 18  # what is above the cut is sorted up to this many


def largest(values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.float64]:
    """The ``k`` largest of ``values`` (all of them when fewer; in no order). BM25 scores
    of a query of common words take a handful of distinct values over a million rows (the
    rows' lengths alike, frequencies 1 or 2), where ``np.partition`` slows to 90-300 ms at
    1.7M (introselect splits ties badly); so a large array is first cut at a value taken
    from a strided sample, about ``4 k`` from the top, with one comparison, and only what
    is above it (ties included) is sorted. A cut the sample placed too high keeps fewer
    than ``k``; the whole array is then partitioned as before."""
    n = len(values)
    if n <= k:
        return values
    if n <= LARGEST_DIRECT:
        return np.partition(values, n - k)[n - k:]
    sample = np.sort(values[:: max(1, n // LARGEST_SAMPLE)])
    above = min(len(sample) - 1, int(4 * k * len(sample) / n))
    top = values[values >= sample[len(sample) - 1 - above]]
    if len(top) < k:
        return np.partition(values, n - k)[n - k:]
    if len(top) > LARGEST_SORT:  # a vast tie at the top: partition handles all-equal well
        return np.partition(top, len(top) - k)[len(top) - k:]
    return np.sort(top)[len(top) - k:]


def floor(met: npt.NDArray[np.float64], addends: npt.NDArray[np.float64], k: int) -> float:
    """A score at least ``k`` of the rows scored (``met``) and of the rows of a walked list
    (each row's full score at least its ``addends``) reach: so no higher than the final
    ``k``-th best; minus infinity when none is found. A value from a strided sample of the
    addends, about ``k`` (then 2 ``k``, 8 ``k``) from the top, checked by counting (one
    comparison a row; no sort of a million tied addends)."""
    n = len(addends)
    if n == 0 or n + len(met) < k:
        return -math.inf
    sample = np.sort(addends[:: max(1, n // LARGEST_SAMPLE)])
    for share in (1, 2, 8):  # the k-th best, if the sample is the whole array
        above = max(0, math.ceil(share * k * len(sample) / n) - 1)
        value = sample[len(sample) - 1 - min(len(sample) - 1, above)]
        if np.count_nonzero(addends >= value) + np.count_nonzero(met >= value) >= k:
            return float(value)
    return -math.inf


class Bar:
    """What the row ranges of one query, searched at once, share
    (:mod:`docgraph.store.bm25_parts`): the highest ``k``-th best score any range has met,
    a floor under the query's final ``k``-th best (every range prunes by it), and whether
    one range gave up pruning (then all stop)."""

    def __init__(self) -> None:
        self.value = -math.inf
        self.given_up = False
        self._lock = threading.Lock()

    def raise_to(self, value: float) -> None:
        """Take a range's ``k``-th best into account."""
        with self._lock:
            self.value = max(self.value, value)


class Best:
    """The ``k`` best scores met so far (not which rows): the pruning threshold, at least
    ``bar``'s when the search is one range of several."""

    def __init__(self, k: int, bar: Bar | None = None) -> None:
        self.k = k
        self.bar = bar
        self.scores = np.zeros(0, np.float64)
        self.own = -math.inf  # the k-th best met here (minus infinity while fewer than k)

    @property
    def threshold(self) -> float:
        """The score a row must reach to enter the top ``k``: no higher than its final
        ``k``-th best."""
        return self.own if self.bar is None else max(self.own, self.bar.value)

    def add(self, scores: npt.NDArray[np.float64]) -> None:
        """Take more scores into account."""
        if len(scores) == 0 or (len(self.scores) >= self.k and scores.max() <= self.own):
            return
        both = largest(np.concatenate([self.scores, scores]), self.k)
        self.scores = both
        if len(both) == self.k:
            self.own = float(both.min())
            if self.bar is not None:
                self.bar.raise_to(self.own)


def ranked(rowids: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
           scores: npt.NDArray[np.float64], k: int,
           cut: float | None = None) -> list[tuple[int, float]]:
    """The best ``k`` (row id, score) of ``rows`` (positions into ``rowids``), best first,
    ties by row id (``cut``: the ``k``-th best score, when known)."""
    if len(rows) > k:
        if cut is None:
            cut = float(largest(scores, k).min())
        inside = scores >= cut  # every row tied with the k-th, so ties go by row id
        rows, scores = rows[inside], scores[inside]
    ids = rowids[rows]
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in order]
