"""The weighted entity co-occurrence graph, computed with sparse matrices.

``C = Xᵀ X`` over the binary chunk x entity incidence matrix gives, for every entity pair, the
number of chunks where both occur; no Python loop visits entity pairs. Edges are weighted by
normalized PMI, ``npmi(a, b) = log(p(ab) / (p(a) p(b))) / -log p(ab)`` with probabilities
over chunks, kept when positive and supported by ``min_cooccurrence`` chunks, and pruned to
the ``max_edges_per_entity`` strongest of either endpoint so hubs cannot swamp the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp


@dataclass(frozen=True)
class CooccurrenceGraph:
    """Undirected weighted edges between entity ids (``source < target``)."""

    entity_ids: npt.NDArray[np.int64]  # node index -> entity id
    sources: npt.NDArray[np.int64]  # node indices
    targets: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float64]
    chunks: npt.NDArray[np.int64]
    incidence: sp.csr_matrix  # chunk x node, binary
    chunk_rowids: npt.NDArray[np.int64]  # row index -> chunk row id


def build_cooccurrence(
    chunk_rowids: npt.NDArray[np.int64],
    entity_ids: npt.NDArray[np.int64],
    node_order: npt.NDArray[np.int64],
    min_cooccurrence: int = 1,
    max_edges_per_entity: int = 64,
) -> CooccurrenceGraph:
    """Build the graph from parallel link arrays (one row per chunk-entity link).

    ``node_order`` lists entity ids in the order nodes should get (e.g. sorted by canonical
    key, so equal inputs give equal graphs whatever the database ids are).
    """
    chunk_values, chunk_index = np.unique(chunk_rowids, return_inverse=True)
    node_index = _positions(np.asarray(node_order, dtype=np.int64),
                            np.asarray(entity_ids, dtype=np.int64))
    n_chunks, n_nodes = len(chunk_values), len(node_order)
    incidence = sp.csr_matrix(
        (np.ones(len(node_index), dtype=np.float64), (chunk_index, node_index)),
        shape=(n_chunks, n_nodes),
    )
    incidence.data[:] = 1.0  # duplicates collapse to presence
    co = sp.triu(incidence.T @ incidence, k=1).tocoo()
    keep = co.data >= min_cooccurrence
    src, dst, both = co.row[keep].astype(np.int64), co.col[keep].astype(np.int64), co.data[keep]
    # The product lists a row's entries in the order its chunks were met, i.e. by chunk row
    # id, which differs between a fresh build and one resumed after a crash: put the edges
    # in node order, so equal links give the same graph (and Leiden the same communities).
    canonical = np.lexsort((dst, src))
    src, dst, both = src[canonical], dst[canonical], both[canonical]
    df = np.asarray(incidence.sum(axis=0)).ravel()
    total = max(n_chunks, 1)
    p_ab = both / total
    pmi = np.log(p_ab / ((df[src] / total) * (df[dst] / total)))
    denominator = -np.log(p_ab)
    npmi = np.where(denominator > 1e-12, pmi / np.maximum(denominator, 1e-12), 1.0)
    positive = npmi > 0
    src, dst, both, npmi = src[positive], dst[positive], both[positive], npmi[positive]
    keep_mask = _top_per_node(src, dst, npmi, n_nodes, max_edges_per_entity)
    return CooccurrenceGraph(
        entity_ids=np.asarray(node_order, dtype=np.int64),
        sources=src[keep_mask],
        targets=dst[keep_mask],
        weights=npmi[keep_mask].astype(np.float64),
        chunks=both[keep_mask].astype(np.int64),
        incidence=incidence,
        chunk_rowids=chunk_values.astype(np.int64),
    )


def _positions(
    order: npt.NDArray[np.int64], values: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Index in ``order`` of every value (vectorized lookup; every value must occur)."""
    by_value = np.argsort(order, kind="stable")
    found = np.searchsorted(order[by_value], values)
    found = np.minimum(found, max(len(order) - 1, 0))
    if len(values) and (not len(order) or not np.array_equal(order[by_value][found], values)):
        raise ValueError("an entity id is missing from the node order")
    return by_value[found].astype(np.int64)


def _top_per_node(
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    n_nodes: int,
    limit: int,
) -> npt.NDArray[np.bool_]:
    """Edges among the ``limit`` strongest of their source or of their target; among edges
    of equal weight the one to the lower node index wins, so the choice depends only on the
    graph, never on the order the edges came in."""
    if len(src) == 0:
        return np.zeros(0, dtype=bool)
    keep = np.zeros(len(src), dtype=bool)
    for ends, others in ((src, dst), (dst, src)):
        order = np.lexsort((others, -weight, ends))  # by node, strongest first, then other end
        sorted_ends = ends[order]
        starts = np.searchsorted(sorted_ends, np.arange(n_nodes))
        rank = np.arange(len(order)) - starts[sorted_ends]
        keep[order[rank < limit]] = True
    return keep
