"""A heavy BM25 query answered in row ranges on two threads at once
(:mod:`docgraph.store.bm25_parts`): the same answer as one search, split only while a thread
is idle, and never waiting on a busy pool. (That every split answers exactly, over random
indexes with tails, deletions and filters, is in ``test_bm25_topk.py``'s property test.)"""

from __future__ import annotations

import threading

import pytest

from docgraph.store import bm25, bm25_parts
from docgraph.store.bm25_parts import Helpers
from tests.store.test_bm25_topk import _one_namespace


def _index():  # type: ignore[no-untyped-def]
    """20,000 rows, three words: the answer depends on rows from every part of the lists."""
    return _one_namespace([{0: 1.0 + i % 3, 1: 1.0 + (i * 7) % 5}
                           if i % 3 == 0 else {0: 1.0, 2: 2.0 + i % 4} for i in range(20_000)])


def test_a_heavy_query_is_split_while_a_thread_is_idle_and_answers_the_same() -> None:
    index = _index()
    want = index.search([0, 1, 2], 10, [1], strategy="exhaustive")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 1_000)
        helpers = Helpers(lambda: 1)
        patch.setattr(bm25_parts, "HELPERS", helpers)
        ran: set[str] = set()
        pruned = bm25._pruned

        def traced(*args, **kwargs):  # type: ignore[no-untyped-def]
            ran.add(threading.current_thread().name)
            return pruned(*args, **kwargs)

        patch.setattr(bm25, "_pruned", traced)
        split = bm25.Cost()
        assert index.search([0, 1, 2], 10, [1], strategy="pruned", cost=split) == want
        assert split.parts == 2 and len(ran) == 2  # the caller and a pool thread
        assert helpers.take(2) == 1  # the thread was given back, once
        one = bm25.Cost()  # now none is idle: one search, in this thread
        assert index.search([0, 1, 2], 10, [1], strategy="pruned", cost=one) == want
        assert one.parts == 1
        assert split.postings_read == one.postings_read  # each posting read by one range
        light = bm25.Cost()
        helpers.give()
        patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 10**9)
        assert index.search([0, 1, 2], 10, [1], strategy="pruned", cost=light) == want
        assert light.parts == 1


def test_a_range_no_thread_has_started_is_answered_by_the_caller() -> None:
    """The pool's one thread is still busy when a query hands it a range (it was counted
    idle a moment before): the caller does not wait for it, it answers both ranges."""
    helpers = Helpers(lambda: 1)
    release = threading.Event()
    busy = helpers._pool.get().submit(release.wait)
    try:
        assert helpers.take(1) == 1
        here = threading.current_thread().name
        done = helpers.run([lambda: ("a", threading.current_thread().name),
                            lambda: ("b", threading.current_thread().name)])
        assert done == [("a", here), ("b", here)]
    finally:
        release.set()
        busy.result()
    assert helpers.take(2) == 1  # the thread was given back, once


def test_an_error_in_a_range_reaches_the_caller_and_gives_the_threads_back() -> None:
    helpers = Helpers(lambda: 2)
    assert helpers.take(2) == 2

    def fails() -> int:
        raise ValueError("range 2")

    with pytest.raises(ValueError, match="range 2"):
        helpers.run([lambda: 1, fails, lambda: 3])
    helpers._pool.get().shutdown(wait=True)
    assert helpers._lent == 0


def test_ranges_cover_the_rows_once() -> None:
    for rows in (2, 3, 7, 20_000, 10_000_001):
        for parts in range(1, min(rows, 5) + 1):
            ranges = bm25_parts.ranges(rows, parts)
            assert len(ranges) == parts and ranges[0][0] == 0 and ranges[-1][1] == rows
            assert all(a < b for a, b in ranges)
            assert all(ranges[i][1] == ranges[i + 1][0] for i in range(parts - 1))


def test_with_one_thread_a_query_nothing_is_split() -> None:
    """``DOCGRAPH_SCAN_THREADS=1`` (the threads one query may use): no helper, no pool."""
    helpers = Helpers(lambda: 0)
    assert helpers.take(3) == 0
    assert helpers._pool._pool is None


def test_queries_searched_at_once_from_many_threads_answer_as_alone() -> None:
    """Eight threads search at once, each query split when a pool thread is idle and not
    when none is (the pool's two threads are contended): every answer is the one the query
    gets alone, and every thread is given back."""
    index = _index()
    queries = [([0, 1, 2], 10), ([1, 2], 7), ([0, 2], 25), ([2, 1, 0], 3)]
    want = [index.search(terms, k, [1], strategy="exhaustive") for terms, k in queries]
    helpers = Helpers(lambda: 2)
    wrong: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25_parts, "SPLIT_MIN_POSTINGS", 1_000)
        patch.setattr(bm25_parts, "HELPERS", helpers)

        def search(worker: int) -> None:
            for round_ in range(12):
                i = (worker + round_) % len(queries)
                terms, k = queries[i]
                if index.search(terms, k, [1], strategy="pruned") != want[i]:
                    wrong.append(f"worker {worker} round {round_}: {terms}")

        threads = [threading.Thread(target=search, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not wrong
    assert helpers.take(3) == 2  # every thread was given back, each once
