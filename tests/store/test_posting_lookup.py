"""Finding rows in a posting list (:mod:`docgraph.store.posting_lookup`): whichever way
answers (the rows marked and read at the list, stamps scattered from the list, a binary
search of each row in the list or of each posting among the rows), the answer is the rows
present and their positions, also when the stamp array still holds the stamps of other
lists (it is never cleared), when every array is lent out, and a mark array goes back to
its pool unmarked, also when the lookup fails."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.store import posting_lookup
from docgraph.store.posting_lookup import (
    StampPool,
    contains,
    find,
    marked,
    probed,
    searched,
    stamped,
)

_sorted_rows = st.lists(st.integers(0, 300), unique=True, max_size=120).map(sorted)


def _expected(listed: list[int], rows: list[int]) -> tuple[list[int], list[int]]:
    where = {r: i for i, r in enumerate(listed)}
    hits = [i for i, r in enumerate(rows) if r in where]
    return hits, [where[rows[i]] for i in hits]


@settings(max_examples=300, deadline=None)
@given(lists=st.lists(st.tuples(_sorted_rows, _sorted_rows), min_size=1, max_size=6),
       limit=st.integers(0, 2))
def test_found_rows_and_positions_are_exact_whatever_stamps_are_left(
        lists: list[tuple[list[int], list[int]]], limit: int) -> None:
    pool = StampPool(limit)  # one pool across the lists: later ones meet stale stamps
    marks = StampPool(limit, np.bool_)
    for listed, rows in lists:
        hits, positions = find(np.array(listed, np.int32), np.array(rows, np.int64), pool,
                               marks)
        assert (hits.tolist(), positions.tolist()) == _expected(listed, rows)
        flags = contains(np.array(listed, np.int64), np.array(rows, np.int64))
        assert flags.tolist() == [r in set(listed) for r in rows]
        if listed and rows:  # each way forced, through the same pools
            for way in (lambda a, b: marked(a, b, marks), lambda a, b: stamped(a, b, pool),
                        searched, probed):
                got = way(np.array(listed, np.int32), np.array(rows, np.int64))
                if got is not None:  # None: every array of its pool lent out (limit 0)
                    assert (got[0].tolist(), got[1].tolist()) == _expected(listed, rows)


def test_a_stale_stamp_beyond_the_list_is_not_taken_for_a_hit() -> None:
    """Row 7 sat at position 5 of a longer list; in a two-row list its stamp points past
    the end (and a stamp 0 points at another row): neither may count as found."""
    pool = StampPool(1)
    find(np.array([1, 2, 3, 4, 5, 7], np.int32), np.array([7], np.int64), pool)
    hits, positions = find(np.array([1, 9], np.int32), np.array([2, 7, 9], np.int64), pool)
    assert hits.tolist() == [2] and positions.tolist() == [1]


def test_the_shared_pool_lends_one_array_per_core_at_most() -> None:
    pool = StampPool(2)
    first, second = pool.take(10), pool.take(10)
    assert first is not None and second is not None and pool.take(10) is None
    pool.give(first)
    again = pool.take(5)
    assert again is first  # reused, not reallocated
    assert posting_lookup.POOL.limit >= 1


def test_rows_past_the_lists_type_are_searched_without_wrapping() -> None:
    """The rows are searched as the list's type (int32: else numpy copies the list): a row
    past int32 wraps to another key there (2**32 + 3 to 3), and must still be no hit."""
    listed = np.array([3, 9, 2**31 - 1], np.int32)
    hits, positions = find(listed, np.array([3, 2**31 - 1, 2**31 + 3], np.int64), StampPool(0))
    assert hits.tolist() == [0, 1] and positions.tolist() == [0, 2]
    hits, _ = find(np.array([0, 3], np.int32), np.array([2**32 + 3], np.int64), StampPool(0))
    assert hits.tolist() == []


def test_find_reads_marks_for_a_thin_list_and_stamps_for_a_dense_one() -> None:
    """The rule: a list covering at most 1/8 of the positions it spans is found by marks
    (the mark pool lends an array), a denser one by stamps, a list over 8x the rows by a
    search and one under 1/8 of them by a probe (neither pool lends)."""
    rows = np.arange(0, 4000, 2, dtype=np.int64)
    thin = np.arange(0, 4000, 10, dtype=np.int32)  # 1 in 10
    dense = np.arange(0, 4000, 4, dtype=np.int32)  # 1 in 4
    long = np.arange(0, 40000, 1, dtype=np.int32)  # 20x the rows
    short = np.arange(1, 4000, 25, dtype=np.int32)  # 1/12.5 of the rows
    for listed, way in ((thin, "marks"), (dense, "stamps"), (long, "search"),
                        (short, "probe")):
        assert posting_lookup.way(listed, len(rows)) == way
        pool, marks = _Counting(1), _Counting(1, np.bool_)
        hits, positions = find(listed, rows, pool, marks)
        assert (hits.tolist(), positions.tolist()) == _expected(listed.tolist(), rows.tolist())
        assert (marks.lent, pool.lent) == {"marks": (1, 0), "stamps": (0, 1),
                                           "search": (0, 0), "probe": (0, 0)}[way], way


def test_a_mark_array_goes_back_unmarked_also_when_the_lookup_fails() -> None:
    """The rows are marked, then reading the marks fails (a list that is not of integers):
    the error reaches the caller and the array goes back to the pool with no row marked
    (else a later lookup would find rows that are not in its list)."""
    marks = StampPool(1, np.bool_)
    rows = np.array([2, 5, 9], np.int64)
    try:
        marked(np.array([2.0, 5.0]), rows, marks)
    except (TypeError, IndexError):
        pass
    else:
        raise AssertionError("reading marks at floats did not fail")
    mark = marks.take(10)
    assert mark is not None and not mark.any()
    marks.give(mark)
    hits, positions = find(np.array([1, 9, 30, 40, 50, 60, 70, 80], np.int32), rows,
                           StampPool(0), marks)
    assert hits.tolist() == [2] and positions.tolist() == [1]


class _Counting(StampPool):
    """A pool that counts the arrays it lends."""

    lent = 0

    def take(self, length: int) -> np.ndarray | None:  # type: ignore[type-arg]
        self.lent += 1
        return super().take(length)
