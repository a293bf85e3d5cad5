"""BM25 over a posting snapshot of :class:`docgraph.store.lexical.PostingIndex`: the exact
top ``k`` without scoring every row that shares a word with the query.

The exhaustive way (:func:`exhaustive_scores`, the index's only way before) adds every
posting of every query term into a per-row accumulator and ranks the matched rows: its cost
is the query terms' posting lists plus two arrays as long as the index (57 ms a query at 10M
chunks). :func:`top_k` gets the same answer with *MaxScore* (Turtle and Flood, 1995): each
term has an upper bound on what it can add to a row's score
(:func:`docgraph.store.bm25_bounds.term_bounds`, the
largest length-normalised term frequency in its list, kept with the term-major copy);
terms are taken rarest (highest bound) first, every readable row of a taken term's list is
scored exactly (the other terms' frequencies looked up in their lists, which
are sorted by row), and as soon as the bounds of the terms not taken yet add up to less than
the ``k``-th best score so far, no row seen only in their lists can enter the top ``k``:
their lists (the long ones, of common words) are never walked. A long list kept in impact
order is walked only down to where it can still lift a row to the threshold, after its top
is scored to raise the threshold (:mod:`docgraph.store.bm25_impact`). Rows appended since
the term-major copy was built (the tail) are scored directly first.

Where pruning cannot pay (a query of common words only, or so few readable rows that the
threshold stays low), a cost estimate sends the query to the exhaustive way, or, for a
caller who may read only a few rows, to scoring just those rows (:func:`top_k` says how).
Whatever the way, a row's score is computed by the same element-wise expression with the
terms added in the same order, so the scores are bit-identical and so is the ranking
(best first, ties by row id). A heavy query may be pruned in row ranges on two or more
cores at once, when threads are idle (:mod:`docgraph.store.bm25_parts`): the same answer.

Bounds stay valid through appends (tail rows are scored, not bounded), deletes (a dead
row's posting only makes a bound looser) and changing statistics: the idf is applied at
query time, and a bound computed at reference average length ``a0`` is scaled by
``max(1, a / a0)`` for a kind of average length ``a`` (``tf / (tf + c + d * len / a)`` grows
at most by that factor). Bounds are stored as float32 with a relative margin, so rounding
never makes one fall below a true contribution.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from docgraph.store import bm25_impact, bm25_parts, posting_lookup, topk
from docgraph.store.matching import LaneFilter, Matching
from docgraph.store.rows import plain

if TYPE_CHECKING:
    from docgraph.store.lexical import _Snapshot

K1, B, IDF_FLOOR = 1.5, 0.5, 1e-6
# Relative margin on every bound (float32 storage and summation rounding).
BOUND_MARGIN = 1e-5
# Cost model of the way a query takes, in ns, fitted on bench/bm25_lane.py's queries at 100k
# and 1M chunks (2 shared cores, loaded): exhaustive, a posting added into the per-row
# accumulator and a row of the index swept (allocation, matched rows); pruned, a posting
# of a walked list read and filtered, and a row's binary search in another term's list.
EXHAUSTIVE_NS_PER_POSTING = 130.0
EXHAUSTIVE_NS_PER_ROW = 12.0
PRUNED_NS_PER_POSTING = 50.0
PRUNED_NS_PER_LOOKUP = 80.0
# A caller's readable rows are scored alone (looked up in every query term's list) when that
# costs less than reading this share of the lists. Measured (bench/bm25_lane.py, p50 against
# MaxScore): 0.69x for a caller who may read 1 % of 100k chunks, 1.1x for 1 % of 1M, 7x for
# 10 % of 1M; so only when the readable rows are very few next to the lists.
ROWS_SHARE = 0.1

# A walked list of this many fresh rows or more is cut by a floor from its own addends
# (:func:`docgraph.store.topk.floor`) before its rows are looked up in the other lists; on
# shorter lists finding the floor cost more than the lookups it spared (100k and 1M chunks:
# per-query median 1.07-1.1x with every list cut).
FLOOR_MIN_ROWS = 1 << 16

Strategy = Literal["auto", "exhaustive", "pruned", "rows"]


@dataclass
class Cost:
    """What a search read (filled in when a caller passes one): postings of the lists it
    walked, and rows it scored by looking their terms up."""

    postings_read: int = 0
    rows_scored: int = 0
    #: Rows the pruned way looked up in other terms' lists (a row counted once a list).
    lookups: int = 0
    way: str = ""
    #: Row ranges the pruned way answered at once (:mod:`docgraph.store.bm25_parts`).
    parts: int = 1

    def add(self, other: Cost) -> None:
        """Count what ``other`` (one range's search) read, too."""
        self.postings_read += other.postings_read
        self.rows_scored += other.rows_scored
        self.lookups += other.lookups


@dataclass(frozen=True)
class Query:
    """A query's terms that occur in live rows of ``kind`` (query order) and their idf."""

    kind: int
    terms: list[int]
    idf: list[float]
    average: float


def prepare(s: _Snapshot, term_ids: Sequence[int], kind: int) -> Query | None:
    """The query's scoring statistics for ``kind``; None when nothing can match."""
    if not 0 <= kind < len(s.live_rows):
        return None
    live = int(s.live_rows[kind])
    kind_df = s.df[kind]
    ids = [t for t in dict.fromkeys(term_ids) if 0 <= t < len(kind_df) and kind_df[t] > 0]
    if live == 0 or not ids:
        return None
    live_length = float(s.live_length[kind])
    average = live_length / live if live_length > 0 else 1.0
    idf = []
    for term in ids:
        df = int(kind_df[term])
        idf.append(max(math.log((live - df + 0.5) / (df + 0.5)), IDF_FLOOR))
    return Query(kind, ids, idf, average)


def _contribution(s: _Snapshot, rows: npt.NDArray[np.int64], tf: npt.NDArray[np.float64],
                  idf: float, average: float) -> npt.NDArray[np.float64]:
    """One term's BM25 addend for ``rows`` (the one expression every way uses, so that
    scores are bit-identical whichever way computed them)."""
    norm = K1 * (1.0 - B + B * s.lengths[rows] / average)
    out: npt.NDArray[np.float64] = idf * tf * (K1 + 1.0) / (tf + norm)
    return out


def _list(s: _Snapshot, term: int) -> tuple[int, int]:
    """[lo, hi) of ``term``'s postings in the term-major copy."""
    if term + 1 < len(s.term_ptr):
        return int(s.term_ptr[term]), int(s.term_ptr[term + 1])
    return 0, 0


def _tail_hits(s: _Snapshot, q: Query) -> tuple[int, npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """(first tail posting, tail postings' term ids, offsets of those matching a term)."""
    tail_start = int(s.row_ptr[s.main_rows])
    tail_terms = s.terms[tail_start:s.nnz]
    hits = (np.flatnonzero(np.isin(tail_terms, q.terms)) if len(tail_terms)
            else np.zeros(0, np.int64))
    return tail_start, tail_terms, hits


def exhaustive_scores(
    s: _Snapshot, q: Query
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """(BM25 score per row position, whether a term matched a live row of the kind): every
    posting of every query term added into accumulators as long as the index."""
    total = np.zeros(s.n, np.float64)
    matched = np.zeros(s.n, bool)
    tail_start, tail_terms, in_tail = _tail_hits(s, q)
    for term, idf in zip(q.terms, q.idf, strict=True):
        parts_rows: list[npt.NDArray[np.int64]] = []
        parts_weights: list[npt.NDArray[np.float32]] = []
        lo, hi = _list(s, term)
        if hi > lo:
            parts_rows.append(s.term_rows[lo:hi].astype(np.int64))
            parts_weights.append(s.term_weights[lo:hi])
        if len(in_tail):
            hits = in_tail[tail_terms[in_tail] == term]
            if len(hits):
                postings = tail_start + hits
                parts_rows.append(np.searchsorted(s.row_ptr[: s.n + 1], postings,
                                                  side="right") - 1)
                parts_weights.append(s.weights[postings])
        if not parts_rows:
            continue
        rows = np.concatenate(parts_rows)
        tf = np.concatenate(parts_weights).astype(np.float64)
        total[rows] += _contribution(s, rows, tf, idf, q.average)
        matched[rows] = True
    matched &= s.alive[: s.n] & (s.kinds[: s.n] == q.kind)
    return total, matched


def exact_scores(
    s: _Snapshot, q: Query, rows: npt.NDArray[np.int64], skip: frozenset[int] = frozenset(),
    known: tuple[int, npt.NDArray[np.float64]] | None = None,
    spans: dict[int, tuple[int, int]] | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """(score, matched) of the given row positions (ascending, unique), each term's
    frequency found in its list (:func:`~docgraph.store.posting_lookup.find`; tail rows: in
    their own postings). Terms in ``skip`` are known to match none of these rows; ``known`` =
    (term, its addend for each row): a term every one of these rows has (main rows only),
    scored by the caller from its list, so it is not looked up (the same addend, added in the
    same order); ``spans``: where to look each term up, when not its whole list (the part
    that holds these rows)."""
    total = np.zeros(len(rows), np.float64)
    matched = np.zeros(len(rows), bool)
    if len(rows) == 0:
        return total, matched
    tail = rows >= s.main_rows
    tail_tf: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
    if tail.any():  # tail rows: their own postings (ids ascending within a row)
        at = np.flatnonzero(tail)
        starts, ends = s.row_ptr[rows[at]], s.row_ptr[rows[at] + 1]
        counts = ends - starts
        posting = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(
            int(counts.sum()))
        owner = np.repeat(at, counts)
        terms = s.terms[posting]
        for term in q.terms:
            hit = terms == term
            tail_tf[term] = owner[hit], s.weights[posting[hit]].astype(np.float64)
    for term, idf in zip(q.terms, q.idf, strict=True):
        if term in skip:
            continue
        if known is not None and known[0] == term:
            # every row has it: added in place (the same addend as through the index below)
            total += known[1]
            matched[:] = True
            continue
        lo, hi = spans[term] if spans is not None else _list(s, term)
        found_at: list[npt.NDArray[np.int64]] = []
        found_tf: list[npt.NDArray[np.float64]] = []
        if hi > lo:
            at, pos = posting_lookup.find(s.term_rows[lo:hi], rows)
            found_at.append(at)
            found_tf.append(s.term_weights[lo + pos].astype(np.float64))
        if term in tail_tf and len(tail_tf[term][0]):
            found_at.append(tail_tf[term][0])
            found_tf.append(tail_tf[term][1])
        if not found_at:
            continue
        where = np.concatenate(found_at)
        if len(where):
            total[where] += _contribution(s, rows[where], np.concatenate(found_tf), idf,
                                          q.average)
            matched[where] = True
    return total, matched


def top_k(
    s: _Snapshot, q: Query, k: int, namespace_ids: list[int],
    keep: npt.NDArray[np.bool_] | None, strategy: Strategy = "auto",
    cost: Cost | None = None, matching: Matching | None = None,
) -> list[tuple[int, float]]:
    """The best ``k`` readable rows (row id, score), best first, ties by row id; the
    ``strategy`` (``auto``: by the cost model) decides only the cost, never the answer
    (``cost``, when given, is told what was read)."""
    cost = cost if cost is not None else Cost()
    accept = LaneFilter(s, q.kind, namespace_ids, keep, matching, max(1, FLOOR_MIN_ROWS))
    lists = [_list(s, t) for t in q.terms]
    postings = sum(hi - lo for lo, hi in lists)
    exhaustive_cost = (EXHAUSTIVE_NS_PER_POSTING * postings
                       + EXHAUSTIVE_NS_PER_ROW * s.n)
    if strategy == "auto" and keep is not None:  # few readable rows: look only them up
        readable = int(np.count_nonzero(keep[: s.n]))
        if (PRUNED_NS_PER_LOOKUP * readable * len(q.terms)
                < ROWS_SHARE * PRUNED_NS_PER_POSTING * postings):
            strategy = "rows"
    if strategy == "rows" and keep is not None:
        s = plain(s)
        accept.s = s
        rows = np.flatnonzero(keep[: s.n])
        rows = rows[accept(rows)]
        cost.way, cost.rows_scored = "rows", len(rows)
        scores, matched = exact_scores(s, q, rows)
        return topk.ranked(s.rowids, rows[matched], scores[matched], k)
    if strategy != "exhaustive":
        found = _maxscore(s, q, k, accept, lists, postings,
                          exhaustive_cost if strategy == "auto" else math.inf, cost)
        if found is not None:
            return found
        accept.s = s  # pruning does not pay: the exhaustive way, over the mapped arrays
    return _exhaustive(s, q, k, accept, cost)


def _exhaustive(s: _Snapshot, q: Query, k: int, accept: LaneFilter,
                cost: Cost) -> list[tuple[int, float]]:
    cost.way = "exhaustive"
    cost.postings_read = int(s.nnz - s.row_ptr[s.main_rows]) + sum(
        hi - lo for lo, hi in (_list(s, t) for t in q.terms))
    total, matched = exhaustive_scores(s, q)
    rows = np.flatnonzero(matched)
    rows = rows[accept(rows)]
    return topk.ranked(s.rowids, rows, total[rows], k)


def _maxscore(s: _Snapshot, q: Query, k: int, accept: LaneFilter, lists: list[tuple[int, int]],
              postings: int, give_up_at: float, cost: Cost) -> list[tuple[int, float]] | None:
    """The pruned way: over the whole index, or over row ranges at once when the query is
    heavy and threads are idle (:mod:`docgraph.store.bm25_parts`); None once its estimated
    cost passes ``give_up_at`` (ns)."""
    s = plain(s)
    accept.s = s
    helpers = bm25_parts.HELPERS
    extra = helpers.take(bm25_parts.wanted(postings, s.main_rows))
    orders = bm25_impact.orders(s, q.terms, lists)
    if not extra:
        return _pruned(s, q, k, accept, lists, orders, give_up_at, cost, tail=True, bar=None)
    try:
        bar = topk.Bar()
        ranges = bm25_parts.ranges(s.main_rows, extra + 1)
        costs = [Cost() for _ in ranges]
        spans = [bm25_parts.spans(s.term_rows, lists, start, stop) for start, stop in ranges]
        tasks = [functools.partial(_pruned, s, q, k, accept, part,
                                   bm25_impact.parts(orders, lists, part),
                                   give_up_at / len(ranges), each, stop >= s.main_rows, bar)
                 for (_, stop), part, each in zip(ranges, spans, costs, strict=True)]
    except BaseException:
        helpers.give(extra)
        raise
    found = helpers.run(tasks)
    cost.way, cost.parts, cost.postings_read = "pruned", len(ranges), 0
    for part in costs:
        cost.add(part)
    if any(answer is None for answer in found):
        return None
    return bm25_parts.merge([answer for answer in found if answer is not None], k)


def term_bound(s: _Snapshot, q: Query, i: int, g: float) -> float:
    """A bound on the ``i``-th query term's addend to any row whose length-normalised
    frequency of it is at most ``g`` at the bounds' average length (:mod:`bm25_bounds`)."""
    scale = max(1.0, q.average / s.bound_average) if s.bound_average > 0 else math.inf
    return q.idf[i] * (K1 + 1.0) * g * scale * (1.0 + BOUND_MARGIN)


def _tail_rows(s: _Snapshot, q: Query, accept: LaneFilter) -> npt.NDArray[np.int64]:
    """The rows appended since the term-major copy that have a query term and pass the
    filters (the pruned way scores them first, exactly: they are never bounded)."""
    tail_start, _, hits = _tail_hits(s, q)
    if not len(hits):
        return np.zeros(0, np.int64)
    rows = np.unique(np.searchsorted(s.row_ptr[: s.n + 1], tail_start + hits, side="right") - 1)
    return rows[accept(rows)]


def _pruned(s: _Snapshot, q: Query, k: int, accept: LaneFilter, lists: list[tuple[int, int]],
            found: list[bm25_impact.Order | None], give_up_at: float, cost: Cost, tail: bool,
            bar: topk.Bar | None) -> list[tuple[int, float]] | None:
    """MaxScore (see the module) over ``lists`` (each query term's list, or its part in a
    range of rows; ``found``: those in impact order, read in the same part) and, with
    ``tail``, the rows appended since the term-major copy; None once its estimated cost
    passes ``give_up_at`` (ns) or another range's did (``bar``: what the ranges of one
    query share)."""
    bounds = [term_bound(s, q, i, float(s.term_bound[term])) if hi > lo else 0.0
              for i, (term, (lo, hi)) in enumerate(zip(q.terms, lists, strict=True))]
    tail_rows = _tail_rows(s, q, accept) if tail else np.zeros(0, np.int64)
    seen, seen_scores = [tail_rows], [exact_scores(s, q, tail_rows)[0]]
    best = topk.Best(k, bar)
    best.add(seen_scores[0])
    cost.way, cost.rows_scored = "pruned", len(tail_rows)
    cost.postings_read = int(s.nnz - s.row_ptr[s.main_rows]) if tail else 0
    spans = dict(zip(q.terms, lists, strict=True))
    seen_main = np.zeros(0, np.int64)  # main rows met so far (scored or ruled out)
    order = sorted(range(len(q.terms)), key=lambda i: -bounds[i])
    # what each term can add to a row not met yet: its bound, the bound past what was read
    # of a list in impact order (bm25_impact), 0 once its list is read whole
    residual = list(bounds)
    taken: set[int] = set()  # terms whose lists were read whole
    spent = 0.0

    def gives_up(spent: float) -> bool:  # (one range giving up stops the others)
        if spent > give_up_at and bar is not None:
            bar.given_up = True
        return spent > give_up_at or (bar is not None and bar.given_up)

    for j, i in enumerate(order):
        # summed afresh (not by subtracting: that leaves a rounding residue where nothing
        # is left, which could drop a tied row)
        if math.fsum(residual) < best.threshold:
            break
        lo, hi = lists[i]
        remaining = math.fsum(r for o, r in enumerate(residual) if o != i)
        ordered, whole = found[i], True
        if ordered is not None:  # its top scored first: a threshold to cut it by
            rows, seed = bm25_impact.seed(s, lo, ordered, seen_main)
            seen_main = _merged(seen_main, rows)
            rows = rows[accept(rows)]
            cost.postings_read += seed
            cost.rows_scored += len(rows)
            seen.append(rows)
            seen_scores.append(exact_scores(s, q, rows)[0])
            best.add(seen_scores[-1])
        if ordered is not None and best.threshold > -math.inf:
            count = ordered.prefix(s, term_bound(s, q, i, 1.0), best.threshold - remaining)
            whole = count >= ordered.size or count > bm25_impact.PREFIX_SHARE * ordered.size
        if whole:
            taken.add(q.terms[i])
            residual[i] = 0.0
            offsets, count = None, hi - lo
        else:
            assert ordered is not None
            residual[i] = term_bound(s, q, i, ordered.residual(s, count))
            offsets = ordered.offsets(s, count)
            count = len(offsets)
        if count == 0:
            continue
        spent += PRUNED_NS_PER_POSTING * count
        if gives_up(spent):
            return None
        cost.postings_read += count
        listed = (s.term_rows[lo:hi] if offsets is None
                  else s.term_rows[lo + offsets]).astype(np.int64)
        fresh = accept(listed)
        fresh &= ~posting_lookup.contains(seen_main, listed)
        at = np.flatnonzero(fresh)
        rows = listed[at]
        seen_main = _merged(seen_main, rows)
        tf = s.term_weights[lo + (at if offsets is None else offsets[at])].astype(np.float64)
        partial = _contribution(s, rows, tf, q.idf[i], q.average)
        # A row's full score is at least this term's addend (the others add >= 0), so the
        # k-th best of the scores met so far and of these addends is a floor under the
        # final k-th best: rows this term and the later ones cannot lift to it are dropped
        # before their other terms are looked up (on the first list, where no score is met
        # yet, that lookup was the query's cost: 735k binary searches in a 5.6M list).
        floor = best.threshold
        if len(partial) >= max(1, FLOOR_MIN_ROWS) and partial.min() + remaining < max(
                partial.max(), best.scores.max() if len(best.scores) else -math.inf):
            floor = max(floor, topk.floor(best.scores, partial, k))  # (else it can drop no row)
        if floor > -math.inf:
            lifted = partial + remaining >= floor
            if not lifted.all():
                rows, partial = rows[lifted], partial[lifted]
        spent += PRUNED_NS_PER_LOOKUP * len(rows) * (len(order) - j - 1)
        if gives_up(spent):
            return None
        cost.rows_scored += len(rows)
        rows, scores = _reaching(s, q, rows, (q.terms[i], partial), frozenset(taken - {
            q.terms[i]}), dict(zip(q.terms, residual, strict=True)), best, cost, spans)
        seen.append(rows)
        seen_scores.append(scores)
        best.add(scores)
    cut = best.threshold if best.threshold > -math.inf else None
    return topk.ranked(s.rowids, np.concatenate(seen), np.concatenate(seen_scores), k, cut)


def _merged(met: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The ascending union of two ascending arrays of distinct rows."""
    if not len(met):
        return rows
    both = np.concatenate([met, rows])
    both.sort(kind="stable")  # two ascending runs: a merge
    return both


def _reaching(s: _Snapshot, q: Query, rows: npt.NDArray[np.int64],
              known: tuple[int, npt.NDArray[np.float64]], skip: frozenset[int],
              bound_of: dict[int, float], best: topk.Best, cost: Cost,
              spans: dict[int, tuple[int, int]],
              ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Those of a walked list's ``rows`` (main rows, ascending; ``known`` = its term and
    their addends) that can still enter the top ``k``, with their exact scores. The other
    terms (not in ``skip``: known to match none of them) are looked up one at a time,
    highest bound first; while more remain and the rows are many (``FLOOR_MIN_ROWS``),
    the rows whose partial score plus the bounds of the terms not looked up yet stay under
    the floor (:func:`docgraph.store.topk.floor` of the scores met and these partial
    scores) are dropped before the next lookup: a row of one rare word only, in a query of
    several, is not looked up in every other list (at 10M chunks 1.1M rows were looked up
    in two lists of 1.5M and 2.2M). Scores are summed in the query's term order, as
    :func:`exact_scores` sums them, so they are bit-identical."""
    term, first = known
    if len(rows) < max(1, FLOOR_MIN_ROWS) or len(q.terms) - len(skip) < 3:
        return rows, exact_scores(s, q, rows, skip, known, spans)[0]  # no floor between
    idf_of = dict(zip(q.terms, q.idf, strict=True))
    lookups = sorted((t for t in q.terms if t not in skip and t != term),
                     key=lambda t: -bound_of[t])
    found: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    partial = first.copy()
    for j, other in enumerate(lookups):
        lo, hi = spans[other]
        if hi > lo:
            cost.lookups += len(rows)
            at, pos = posting_lookup.find(s.term_rows[lo:hi], rows)
            added = _contribution(s, rows[at], s.term_weights[lo + pos].astype(np.float64),
                                  idf_of[other], q.average)
            found.append((other, at, added))
            partial[at] += added
        later = sum(bound_of[t] for t in lookups[j + 1:])
        if (j + 1 == len(lookups) or not len(rows)  # (exact; or every row was dropped)
                or partial.min() + later >= max(partial.max(), best.threshold)):
            continue  # (else none could be dropped)
        floor = max(best.threshold, topk.floor(best.scores, partial, best.k))
        if floor > -math.inf:
            reach = partial + later >= floor
            if not reach.all():
                kept = np.cumsum(reach) - 1  # each kept row's new index
                rows, partial, first = rows[reach], partial[reach], first[reach]
                found = [(t, kept[at[reach[at]]], added[reach[at]]) for t, at, added in found]
    total = np.zeros(len(rows), np.float64)
    by_term = {t: (at, added) for t, at, added in found}
    for each in q.terms:  # the order exact_scores adds them in, the same addends
        if each == term:
            total += first
        elif each in by_term:
            at, added = by_term[each]
            total[at] += added
    return rows, total
