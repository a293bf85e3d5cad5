"""What a community's title and report are made from, computed for all communities of a
level at once over the co-occurrence graph's sparse matrices: how many members each chunk
links (:func:`hits_per_chunk`), how often a member co-occurs inside its community
(:func:`inside_counts`), the chunks mentioning the most members (:func:`central_chunks`),
the strongest inner edges (:func:`strongest_inner_edges`), the table rows and the documents
with a permission set a community draws on (:func:`row_documents`,
:func:`access_documents`), and the identity order that breaks ties (:func:`identity_rank`),
so an incremental build chooses what a fresh one does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from docgraph.graph.communities import Community
from docgraph.graph.cooccurrence import CooccurrenceGraph
from docgraph.graph.reports import CANDIDATE_CHUNKS
from docgraph.model import RowOrigin
from docgraph.store.graph import NamespaceLinks

T = TypeVar("T")


def row_documents(
    links: NamespaceLinks, communities: Sequence[Community], graph: CooccurrenceGraph
) -> list[list[tuple[str, RowOrigin]]]:
    """Per community, every row document (doc id, origin) with a chunk linking one of its
    members: the complete set of table rows its title and report can draw on (member names,
    relationships and passages all come from chunks linking members)."""
    return _documents_behind(links.row_chunks, links, communities, graph)


def access_documents(
    links: NamespaceLinks, communities: Sequence[Community], graph: CooccurrenceGraph
) -> list[list[tuple[str, frozenset[str]]]]:
    """Per community, every document with a permission set (doc id, set) with a chunk
    linking one of its members, as :func:`row_documents` finds the rows."""
    return _documents_behind(links.access_chunks, links, communities, graph)


def _documents_behind(chunks: dict[int, tuple[str, T]], links: NamespaceLinks,
                      communities: Sequence[Community], graph: CooccurrenceGraph
                      ) -> list[list[tuple[str, T]]]:
    """Per community, the (doc id, value) of ``chunks`` (chunk row id -> doc id, value)
    that link one of its members, by doc id."""
    if not chunks:
        return [[] for _ in communities]
    node_ids = graph.entity_ids.tolist()
    member_of: dict[int, list[int]] = {}
    for index, community in enumerate(communities):
        for node in community.nodes:
            member_of.setdefault(node_ids[node], []).append(index)
    found: list[dict[str, T]] = [{} for _ in communities]
    mask = np.isin(links.chunk_rowids, np.fromiter(chunks, dtype=np.int64))
    for chunk, entity in zip(links.chunk_rowids[mask].tolist(),
                             links.entity_ids[mask].tolist(), strict=True):
        doc_id, value = chunks[chunk]
        for index in member_of.get(entity, ()):
            found[index][doc_id] = value
    return [sorted(d.items(), key=lambda item: item[0]) for d in found]


def identity_rank(identity_order: npt.NDArray[np.int64], rowids: npt.NDArray[np.int64]
                   ) -> npt.NDArray[np.int64]:
    """Each of ``rowids``' position in identity order (document id, chunk index); a row id
    missing from it sorts after every known one, by row id."""
    fallback = len(identity_order) + rowids
    if len(identity_order) == 0:
        return fallback
    by_rowid = np.argsort(identity_order, kind="stable")
    sorted_ids = identity_order[by_rowid]
    at = np.minimum(np.searchsorted(sorted_ids, rowids), len(sorted_ids) - 1)
    return np.where(sorted_ids[at] == rowids, by_rowid[at], fallback).astype(np.int64)


def hits_per_chunk(graph: CooccurrenceGraph, groups: Sequence[Sequence[int]]
                    ) -> sp.csc_matrix:
    """Chunk x group: how many members of each group (node indices) each chunk links; one
    sparse product for all groups."""
    if not groups:
        return sp.csc_matrix((graph.incidence.shape[0], 0))
    columns = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    rows = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups])
    indicator = sp.csr_matrix((np.ones(len(rows)), (rows, columns)),
                              shape=(graph.incidence.shape[1], len(groups)))
    per_chunk = sp.csc_matrix(graph.incidence @ indicator)
    per_chunk.sort_indices()
    return per_chunk


def inside_counts(graph: CooccurrenceGraph, per_chunk: sp.csc_matrix) -> sp.csc_matrix:
    """Node x group: the chunks where a node co-occurs with another member of the group
    (chunks linking at least two members), the numerator of
    :func:`~docgraph.graph.reports.specificity`."""
    core = (per_chunk >= 2).astype(np.float64)
    return sp.csc_matrix(graph.incidence.T @ core)


def sparse_columns(matrix: sp.csc_matrix) -> list[dict[int, float]]:
    """Each column of a sparse matrix as row -> value (one pass over its arrays; indexing
    the matrix cell by cell costs far more)."""
    indptr, indices, data = matrix.indptr, matrix.indices.tolist(), matrix.data.tolist()
    return [dict(zip(indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]],
                     strict=True)) for i in range(matrix.shape[1])]


def central_chunks(
    graph: CooccurrenceGraph, per_chunk: sp.csc_matrix, wanted: Sequence[int],
    chunk_rank: npt.NDArray[np.int64], per_group: int = CANDIDATE_CHUNKS,
) -> list[list[int]]:
    """Row ids of the chunks mentioning the most members of each wanted group (ties: first
    in identity order, ``chunk_rank``, so an incremental build picks what a fresh one does),
    ``per_group`` at most: the passages a report chooses its sentences from."""
    out: list[list[int]] = []
    for g in wanted:
        lo, hi = per_chunk.indptr[g], per_chunk.indptr[g + 1]
        chunk_index, hits = per_chunk.indices[lo:hi], per_chunk.data[lo:hi]
        top = chunk_index[np.lexsort((chunk_rank[chunk_index], -hits))[:per_group]]
        out.append(graph.chunk_rowids[top].tolist())
    return out


def strongest_inner_edges(
    graph: CooccurrenceGraph, communities: Sequence[Community], wanted: Sequence[int],
    per_community: int = 8,
) -> dict[int, list[tuple[int, int, int]]]:
    """(node a, node b, shared chunks) of the edges inside each wanted community, most
    shared chunks first (ties: lower node indices first); one pass per level."""
    out: dict[int, list[tuple[int, int, int]]] = {i: [] for i in wanted}
    n_nodes = len(graph.entity_ids)
    for level in sorted({communities[i].level for i in wanted}):
        label = np.full(n_nodes, -1, dtype=np.int64)
        for i in wanted:
            if communities[i].level == level:
                label[list(communities[i].nodes)] = i
        src_label = label[graph.sources]
        inner = np.flatnonzero((src_label == label[graph.targets]) & (src_label >= 0))
        order = inner[np.lexsort((graph.targets[inner], graph.sources[inner],
                                  -graph.chunks[inner], src_label[inner]))]
        labels = src_label[order]
        first = np.searchsorted(labels, labels, side="left")
        rank = np.arange(len(order)) - first
        for e in order[rank < per_community].tolist():
            out[int(label[graph.sources[e]])].append(
                (int(graph.sources[e]), int(graph.targets[e]), int(graph.chunks[e])))
    return out
