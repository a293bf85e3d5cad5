"""Which of a query's rows are in a posting list, and where: the BM25 lane's membership test
(:mod:`docgraph.store.bm25` looks every row it scores up in the other query terms' lists).

Both arrays hold ascending, unique row positions. Four ways answer, each cheapest where it
is used (chosen on random sorted arrays at 10M positions, not on queries):

- *search*: a binary search per row, against a list much longer than the rows asked about.
  Against one not much longer each search is a chain of cache misses (at 10M chunks a query
  of common words looked 1.1M rows up in lists of 1.5M and 2.2M postings: ~40 ms a list).
- *marks*: the rows asked about are marked in a byte array indexed by row position (1 byte
  a row: 10 MB at 10M chunks, small enough to stay mostly in cache), the list reads its
  marks back in one pass, and the marks are cleared. For lists up to ~1M postings (the
  common ones) this is the cheapest way, 1.5-4x less than the other two.
- *stamps*: for longer lists with many rows asked about, the list is scattered into a
  *stamp array* (each row's stamp is its position in the list), read back at the rows, and
  each stamp checked against the list itself. Because the check is exact, stamps left by
  earlier lists need no clearing: a stale stamp that points at the row it stands for is a
  true answer, any other fails the check. 4 bytes a row (40 MB at 10M chunks).

- *probe*: against a list much shorter than the rows asked about (the few rows a search has
  met, asked about a list it walks), each of the list's postings is searched for among
  the rows instead: the cost follows the short side, where the marks' would follow the
  rows (at 10M chunks a walked list of 1M rows was marked to find 1,024 met rows in it).

Mark and stamp arrays are as long as the index and held by one query at a time; at most one
of each per core is kept (:class:`StampPool`). A query that finds none free while that
many are out searches instead (the same answer).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from docgraph.parallel import core_count

# A list at most this many times longer than the rows asked about is scattered into stamps;
# a longer one is searched. Chosen on random sorted arrays at 10M positions (not on the
# benchmark's queries): the two ways cost the same at ~8-16x (a 2M list: 7.2 / 9.2 ms at
# 16x, 20.5 / 12.2 ms at 4x; a 5.6M list: 25.1 / 26.5 ms at 16x, 66.8 / 28.7 ms at 4x).
SCATTER_RATIO = 8

# Rows asked about over this many times the list's postings are found by a probe of each
# posting among them. Chosen on the same random arrays (`bench/posting_lookup_ways.py`,
# lists of 1k-300k): at 8x either way may win (the probe in 5 of 8 cells), from 16x on the
# probe wins every cell (1k postings in 1M rows: 0.54 ms, against 2.37 ms for the marks).
PROBE_RATIO = 8

# Of the lists that would be scattered, one of at most MARK_MAX_LIST postings that covers at
# most 1 / MARK_SPARSE of the row positions it spans reads marks instead. Chosen on the same
# kind of random arrays (`bench/posting_lookup_ways.py`): at 10M positions marks cost 0.3-0.6x
# the stamps for lists of 300k-1M postings; over a denser list (300k in 1M positions) the
# scatter runs nearly in order and stamps cost half the marks.
MARK_MAX_LIST = 1 << 20
MARK_SPARSE = 8


class StampPool:
    """Stamp (or mark) arrays lent to one query at a time; at most ``limit`` exist at once.
    New arrays are zeros of ``dtype``."""

    def __init__(self, limit: int, dtype: type[np.generic] = np.int32) -> None:
        self.limit = limit
        self.dtype = dtype
        self._free: list[npt.NDArray[Any]] = []
        self._out = 0
        self._lock = threading.Lock()
        self._positions = np.zeros(0, np.int32)  # 0, 1, 2, ...: the stamps written

    def take(self, length: int) -> npt.NDArray[Any] | None:
        """A stamp array of at least ``length`` rows, or None when ``limit`` are lent."""
        with self._lock:
            while self._free:
                stamps = self._free.pop()
                if len(stamps) >= length:
                    self._out += 1
                    return stamps
            if self._out >= self.limit:
                return None
            self._out += 1
        # room to grow by an eighth before it is replaced; zeros are valid stamps, and no mark
        return np.zeros(length + length // 8, self.dtype)

    def give(self, stamps: npt.NDArray[Any]) -> None:
        """Return a stamp array from :meth:`take`."""
        with self._lock:
            self._out -= 1
            self._free.append(stamps)

    def positions(self, count: int) -> npt.NDArray[np.int32]:
        """0 .. ``count`` - 1 (a view of one array kept for reuse)."""
        positions = self._positions
        if len(positions) < count:
            positions = np.arange(count + count // 8, dtype=np.int32)
            self._positions = positions  # a reader of the old one keeps its own reference
        return positions[:count]


_CORES = core_count(limit=os.cpu_count() or 1)
POOL = StampPool(_CORES)  # one per core this process may use
MARKS = StampPool(_CORES, np.bool_)  # all False whenever one is in the pool


Found = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
Way = Literal["marks", "stamps", "search", "probe"]


def find(listed: npt.NDArray[np.integer[Any]], rows: npt.NDArray[np.int64],
         pool: StampPool = POOL, marks: StampPool = MARKS) -> Found:
    """(indices into ``rows`` of those in ``listed``, their positions in ``listed``), both
    ascending; ``listed`` and ``rows`` ascending and unique."""
    if len(listed) == 0 or len(rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    chosen, found = way(listed, len(rows)), None
    if chosen == "probe":
        return probed(listed, rows)
    if chosen == "marks":
        found = marked(listed, rows, marks)
    if chosen != "search" and found is None:  # (marks all lent: stamps)
        found = stamped(listed, rows, pool)
    return searched(listed, rows) if found is None else found


def way(listed: npt.NDArray[np.integer[Any]], rows: int) -> Way:
    """How :func:`find` looks ``rows`` rows up in ``listed`` (non-empty) while arrays are
    free: a probe of a list over ``PROBE_RATIO`` times shorter; a search against one over
    ``SCATTER_RATIO`` times longer; else marks for a list short and thin enough
    (``MARK_MAX_LIST``, ``MARK_SPARSE``), stamps for the others."""
    if rows > PROBE_RATIO * len(listed):
        return "probe"
    if len(listed) > SCATTER_RATIO * rows:
        return "search"
    span = int(listed[-1]) - int(listed[0]) + 1
    thin = len(listed) <= MARK_MAX_LIST and len(listed) * MARK_SPARSE <= span
    return "marks" if thin else "stamps"


def marked(listed: npt.NDArray[np.integer[Any]], rows: npt.NDArray[np.int64],
           marks: StampPool = MARKS) -> Found | None:
    """:func:`find` by marking ``rows`` in an array of ``marks`` and reading the marks at
    ``listed``; None when every mark array is lent out. Both non-empty."""
    mark = marks.take(max(int(rows[-1]), int(listed[-1])) + 1)
    if mark is None:
        return None
    try:
        mark[rows] = True
        positions = np.flatnonzero(mark.take(listed))
        mark[rows] = False  # the pool's arrays hold no marks
    except BaseException:
        mark.fill(False)  # stopped between the two writes: no row may stay marked
        raise
    finally:
        marks.give(mark)
    return np.searchsorted(rows, listed[positions]), positions


def stamped(listed: npt.NDArray[np.integer[Any]], rows: npt.NDArray[np.int64],
            pool: StampPool = POOL) -> Found | None:
    """:func:`find` by scattering ``listed`` into an array of ``pool`` as stamps and reading
    them at ``rows``; None when every stamp array is lent out. Both non-empty."""
    stamps = pool.take(max(int(rows[-1]), int(listed[-1])) + 1)
    if stamps is None:
        return None
    try:
        # indexed by intp: with the int32 list itself numpy takes a slower path
        # (a 5.6M list: 19.2 ms, against 13.0 ms with this copy made first)
        stamps[listed.astype(np.intp, copy=False)] = pool.positions(len(listed))
        at = stamps[rows].astype(np.int64)
    finally:
        pool.give(stamps)
    np.minimum(at, len(listed) - 1, out=at)  # a stale stamp may lie past this list
    hit = np.flatnonzero(listed[at] == rows)
    return hit, at[hit]


def searched(listed: npt.NDArray[np.integer[Any]], rows: npt.NDArray[np.int64]) -> Found:
    """:func:`find` by a binary search per row."""
    # The rows as the list's type: else numpy first copies the whole list to the wider one
    # (a 5.6M list of int32 for 7k int64 rows: 8.2 ms, against 1.0 ms for the search). A row
    # too large for that type wraps to another key, and is no hit: the check reads the rows.
    at = np.searchsorted(listed, rows.astype(listed.dtype, copy=False))
    ok = at < len(listed)
    ok[ok] = listed[at[ok]] == rows[ok]
    hit = np.flatnonzero(ok)
    return hit, at[hit]


def probed(listed: npt.NDArray[np.integer[Any]], rows: npt.NDArray[np.int64]) -> Found:
    """:func:`find` by a binary search of each of ``listed``'s postings among ``rows``:
    :func:`searched` with the two arrays' parts swapped."""
    positions, hits = searched(rows, listed.astype(np.int64, copy=False))
    return hits, positions


def contains(listed: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Whether each of ``rows`` (ascending, unique) is in ``listed`` (ascending, unique)."""
    found = np.zeros(len(rows), bool)
    found[find(listed, rows)[0]] = True
    return found
