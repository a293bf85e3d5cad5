"""The BM25 lane's per-term upper bounds (:mod:`docgraph.store.bm25`'s MaxScore) and the
long lists' impact orders (:mod:`docgraph.store.bm25_impact`), computed once when the
term-major copy of the postings is built (:class:`docgraph.store.lexical.PostingIndex`) and
kept with it (in the sidecar too: 4 bytes a posting of the lists in impact order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from docgraph.store.bm25 import BOUND_MARGIN, K1, B

# Postings whose bound is computed at once (bounds the transient memory of the pass to a few
# arrays of this length: ~30 MB).
BOUND_CHUNK = 1 << 20


def _frequency(tf: npt.NDArray[np.float32], lengths: npt.NDArray[np.float32],
               average: float) -> npt.NDArray[np.float64]:
    """Each posting's length-normalised frequency ``tf / (tf + K1 * (1 - B + B * length /
    average))``: a term's addend over ``idf * (K1 + 1)`` at that average length."""
    f = tf.astype(np.float64)
    return f / (f + K1 * (1.0 - B + B * lengths.astype(np.float64) / average))


def term_bounds(
    term_ptr: npt.NDArray[np.int64], term_rows: npt.NDArray[np.int32],
    term_weights: npt.NDArray[np.float32], lengths: npt.NDArray[np.float32], average: float,
) -> npt.NDArray[np.float32]:
    """Per term: the largest length-normalised frequency (:func:`_frequency`) over its
    list (0 for an empty one), rounded up; computed in chunks of postings so the transient
    memory stays small however large the index."""
    terms = len(term_ptr) - 1
    out = np.zeros(max(terms, 0), np.float64)
    nnz = int(term_ptr[-1]) if terms > 0 else 0
    start = 0
    while start < nnz:
        # the chunk ends at a term boundary (a term longer than a chunk is taken whole)
        end_term = int(np.searchsorted(term_ptr, start + BOUND_CHUNK, side="right")) - 1
        first = int(np.searchsorted(term_ptr, start, side="right")) - 1
        end_term = max(end_term, first + 1)
        end = int(term_ptr[end_term])
        g = _frequency(term_weights[start:end], lengths[term_rows[start:end]], average)
        ptr = term_ptr[first:end_term + 1] - start
        nonempty = np.flatnonzero(ptr[1:] > ptr[:-1])
        if len(nonempty):
            out[first + nonempty] = np.maximum.reduceat(g, ptr[:-1][nonempty])
        start = end
    return (out * (1.0 + BOUND_MARGIN)).astype(np.float32)


# A list of at least this many postings also keeps its postings in impact order (for
# :mod:`docgraph.store.bm25_impact`), in blocks of IMPACT_BLOCK with a bound each.
IMPACT_MIN = 1 << 17
IMPACT_BLOCK = 1024


@dataclass(frozen=True)
class ImpactOrders:
    """The long lists' postings in impact order: ``terms`` (ascending term ids) each has
    ``order[ptr[i]:ptr[i + 1]]``, the offsets into its list (term-major copy) sorted by
    length-normalised frequency ``g`` at the bounds' average length, highest first (ties by
    offset); and per block of ``IMPACT_BLOCK`` of those offsets,
    ``bound[block_ptr[i] + b]``, the ``g`` of the block's first posting rounded up: a bound
    on every posting from that block on."""

    terms: npt.NDArray[np.int32]
    ptr: npt.NDArray[np.int64]
    order: npt.NDArray[np.int32]
    block_ptr: npt.NDArray[np.int64]
    bound: npt.NDArray[np.float32]
    block: int = IMPACT_BLOCK  # postings a block

    @classmethod
    def none(cls) -> ImpactOrders:
        """No list in impact order."""
        return cls(np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32),
                   np.zeros(1, np.int64), np.zeros(0, np.float32))

    @classmethod
    def added(cls, snap: Any) -> ImpactOrders | None:
        """The orders of a posting snapshot that has none (restored from a state saved
        before them), as a rebuild of its term-major copy would give; None when it has some
        or no list is long enough."""
        if len(snap.impact_terms) or not snap.main_rows:
            return None
        found = impact_orders(snap.term_ptr, snap.term_rows, snap.term_weights,
                              snap.lengths[: snap.main_rows], snap.bound_average)
        return found if len(found.terms) else None

    @classmethod
    def of(cls, snap: Any) -> ImpactOrders:
        """The orders a posting snapshot holds."""
        return cls(snap.impact_terms, snap.impact_ptr, snap.impact_order,
                   snap.impact_block_ptr, snap.impact_bound, snap.impact_block)

    def fits(self, term_ptr: npt.NDArray[np.int64]) -> bool:
        """Whether these arrays agree with each other and with the lists they order."""
        if (len(self.ptr) != len(self.terms) + 1 or len(self.block_ptr) != len(self.terms) + 1
                or int(self.ptr[-1]) != len(self.order) or self.block < 1
                or int(self.block_ptr[-1]) != len(self.bound)):
            return False
        terms = self.terms.astype(np.int64)
        if len(terms) and (terms.min() < 0 or terms.max() >= len(term_ptr) - 1):
            return False
        sizes = term_ptr[terms + 1] - term_ptr[terms]
        return bool((np.diff(self.ptr) == sizes).all()
                    and (np.diff(self.block_ptr) == -(-sizes // self.block)).all())

    def fields(self) -> dict[str, Any]:
        """The posting snapshot's fields that hold these (``impact_terms``, ...), in the
        snapshot's order."""
        return {"impact_terms": self.terms, "impact_ptr": self.ptr,
                "impact_order": self.order, "impact_block_ptr": self.block_ptr,
                "impact_bound": self.bound, "impact_block": self.block}


def impact_orders(
    term_ptr: npt.NDArray[np.int64], term_rows: npt.NDArray[np.int32],
    term_weights: npt.NDArray[np.float32], lengths: npt.NDArray[np.float32], average: float,
    min_list: int | None = None, block: int | None = None,
) -> ImpactOrders:
    """The impact order of every list of at least ``min_list`` postings (by
    :func:`_frequency`, one list at a time; ``min_list`` and ``block``: by
    default ``IMPACT_MIN`` and ``IMPACT_BLOCK``)."""
    min_list = IMPACT_MIN if min_list is None else min_list
    block = IMPACT_BLOCK if block is None else block
    sizes = np.diff(term_ptr)
    terms = np.flatnonzero(sizes >= max(1, min_list)).astype(np.int32)
    ptr = np.zeros(len(terms) + 1, np.int64)
    np.cumsum(sizes[terms], out=ptr[1:])
    block_ptr = np.zeros(len(terms) + 1, np.int64)
    np.cumsum(-(-sizes[terms] // block), out=block_ptr[1:])
    order = np.zeros(int(ptr[-1]), np.int32)
    bound = np.zeros(int(block_ptr[-1]), np.float32)
    for i, term in enumerate(terms.tolist()):
        lo, hi = int(term_ptr[term]), int(term_ptr[term + 1])
        g = _frequency(term_weights[lo:hi], lengths[term_rows[lo:hi]], average)
        by_impact = np.argsort(-g, kind="stable")
        order[ptr[i]:ptr[i + 1]] = by_impact
        bound[block_ptr[i]:block_ptr[i + 1]] = (g[by_impact[::block]]
                                                * (1.0 + BOUND_MARGIN))
    return ImpactOrders(terms, ptr, order, block_ptr, bound, block)


def derived(term_ptr: npt.NDArray[np.int64], term_rows: npt.NDArray[np.int32],
            term_weights: npt.NDArray[np.float32], lengths: npt.NDArray[np.float32],
            average: float) -> dict[str, Any]:
    """The posting snapshot's fields computed from a new term-major copy: the average
    length they are computed at, each term's bound and the long lists' impact orders."""
    return {"bound_average": average,
            "term_bound": term_bounds(term_ptr, term_rows, term_weights, lengths, average),
            **impact_orders(term_ptr, term_rows, term_weights, lengths, average).fields()}
