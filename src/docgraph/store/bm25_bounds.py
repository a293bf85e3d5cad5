"""The BM25 lane's per-term upper bounds (:mod:`docgraph.store.bm25`'s MaxScore), computed
once when the term-major copy of the postings is built
(:class:`docgraph.store.lexical.PostingIndex`) and kept with it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from docgraph.store.bm25 import BOUND_MARGIN, K1, B

# Postings whose bound is computed at once (bounds the transient memory of the pass to a few
# arrays of this length: ~30 MB).
BOUND_CHUNK = 1 << 20


def term_bounds(
    term_ptr: npt.NDArray[np.int64], term_rows: npt.NDArray[np.int32],
    term_weights: npt.NDArray[np.float32], lengths: npt.NDArray[np.float32], average: float,
) -> npt.NDArray[np.float32]:
    """Per term: the largest ``tf / (tf + K1 * (1 - B + B * length / average))`` over its
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
        tf = term_weights[start:end].astype(np.float64)
        g = tf / (tf + K1 * (1.0 - B + B * lengths[term_rows[start:end]].astype(np.float64)
                             / average))
        ptr = term_ptr[first:end_term + 1] - start
        nonempty = np.flatnonzero(ptr[1:] > ptr[:-1])
        if len(nonempty):
            out[first + nonempty] = np.maximum.reduceat(g, ptr[:-1][nonempty])
        start = end
    return (out * (1.0 + BOUND_MARGIN)).astype(np.float32)
