"""A heavy BM25 query answered in row ranges on more than one core.

A query whose terms' posting lists are long (``SPLIT_MIN_POSTINGS`` postings in all) is
answered as one search per range of row positions, each by the same MaxScore way
(:mod:`docgraph.store.bm25`) over the parts of the query terms' lists that lie in its range
(lists are sorted by row, so a part is a slice, found by two binary searches; a list in
impact order is read in its part, :func:`docgraph.store.bm25_impact.parts`), and their top
``k`` are merged: every row of the overall top ``k`` is in its own range's top ``k``, and the
merge orders them as one search does (best first, ties by row id), so the answer is the same
bit for bit. The ranges share the best ``k``-th score any of them has met
(:class:`docgraph.store.topk.Bar`), a floor under the final one that each prunes by. numpy
releases the GIL in the lookups, gathers and arithmetic that make up such a query, so the
ranges run at once.

The calling thread answers the first range; the others are handed to a small pool, one
thread a range, and only while its threads are idle (:meth:`Helpers.take`): on a server
whose cores already answer other queries nothing is split (each range finds its own rows
to prune by, so a split query costs more CPU in all: 1.15-1.29x at 10M chunks). A range
that no pool thread has started by the time the caller is done with its own is answered by
the caller as well, so a busy pool never makes a query wait.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from docgraph.parallel import LazyThreadPool, scan_threads

T = TypeVar("T")

# A query whose terms' lists hold at least this many postings in all is split, when a pool
# thread is idle. Chosen on the tuning halves of the 10M and 1M synthetic stores' queries
# (bench/bm25_split.py): at 10M splitting paid from 256k postings (per-query median
# 0.66-0.79x by bucket), at 1M it cost below 512k (1.08-1.26x) and paid above (0.93x).
SPLIT_MIN_POSTINGS = 1 << 19


class Helpers:
    """Threads that answer ranges of other threads' queries; ``size`` of them, counted
    out by :meth:`take` and back as each range ends."""

    def __init__(self, size: Callable[[], int]) -> None:
        self._size = size
        self._workers: int | None = None  # asked of ``size`` once, on first use
        self._pool = LazyThreadPool(self._count, "docgraph-bm25")
        self._lent = 0
        self._lock = threading.Lock()

    def _count(self) -> int:
        if self._workers is None:
            self._workers = max(0, self._size())
        return self._workers

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` threads are idle and now promised to the caller: give
        that many tasks to :meth:`run`, with one of the caller's own."""
        if wanted <= 0 or self._count() == 0:
            return 0
        with self._lock:
            got = max(0, min(wanted, self._count() - self._lent))
            self._lent += got
        return got

    def give(self, count: int = 1) -> None:
        """Give back ``count`` threads from :meth:`take` that no task will use."""
        with self._lock:
            self._lent -= count

    def _lend(self, task: Callable[[], T]) -> T:
        try:
            return task()
        finally:
            self.give()

    def run(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """Every task's result, in order: the first here, each other on a thread taken
        with :meth:`take` (``len(tasks) - 1`` of them), or here when none has started it
        by then. An exception in any task is raised here once the others are done or
        withdrawn."""
        pool = self._pool.get()
        futures: list[Future[T]] = [pool.submit(self._lend, task) for task in tasks[1:]]
        pending = list(zip(futures, tasks[1:], strict=True))
        try:
            results = [tasks[0]()]
            while pending:
                future, task = pending.pop(0)
                if future.cancel():  # not started: its thread was never lent
                    self.give()
                    results.append(task())
                else:
                    results.append(future.result())
            return results
        finally:
            for future, _ in pending:  # after an exception: withdraw what has not started
                if future.cancel():
                    self.give()


HELPERS = Helpers(lambda: scan_threads() - 1)  # with the caller: one thread a core


def wanted(postings: int, main_rows: int) -> int:
    """How many more ranges than one a query of ``postings`` over ``main_rows`` indexed rows
    could use (:meth:`Helpers.take` gives what is idle): none for a light query."""
    return main_rows - 1 if postings >= SPLIT_MIN_POSTINGS and main_rows >= 2 else 0


def ranges(main_rows: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive ranges [start, stop), sizes differing by one at most, covering
    [0, ``main_rows``) (``parts`` <= ``main_rows``: none empty)."""
    edges = [main_rows * i // parts for i in range(parts + 1)]
    return list(itertools.pairwise(edges))


def spans(term_rows: npt.NDArray[np.int32], lists: Sequence[tuple[int, int]], start: int,
          stop: int) -> list[tuple[int, int]]:
    """The part [lo, hi) of each list (a [lo, hi) of ``term_rows``, ascending rows) that
    holds the rows in [``start``, ``stop``)."""
    out = []
    first, last = term_rows.dtype.type(start), term_rows.dtype.type(stop)  # (a Python int
    for lo, hi in lists:  # would have numpy copy the list to int64 first: O(list), not log)
        rows = term_rows[lo:hi]
        out.append((lo + int(np.searchsorted(rows, first)), lo + int(np.searchsorted(rows, last))))
    return out


def merge(answers: Sequence[list[tuple[int, float]]], k: int) -> list[tuple[int, float]]:
    """The best ``k`` of ranges' top ``k`` (row id, score): best first, ties by row id."""
    return sorted((hit for answer in answers for hit in answer),
                  key=lambda hit: (-hit[1], hit[0]))[:k]
