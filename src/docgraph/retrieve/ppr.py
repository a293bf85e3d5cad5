"""Personalized PageRank over the local entity-chunk graph of one query (HippoRAG 2's
mechanism, with docgraph's extracted entities in place of LLM triples; no model call).

Chunks and entities are the nodes, chunk-entity links (weighted by their association score)
the undirected edges. A random walk restarts at the query's entities and at the strongest
seed chunks; the stationary probability of each chunk node ranks it. A chunk that shares
several restart entities, or sits between two seeds, collects mass from each, which is how a
second-hop passage without a word of the query rises (the walk itself is igraph's PRPACK).

The caller builds the graph (bounded, namespace-restricted: see ``docgraph.retrieve.lanes.ppr``);
this module only holds it and walks it, so it is deterministic for a given graph: nodes are
numbered in a sorted order, never in arrival order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import igraph

from docgraph.store.graph import Link


@dataclass(frozen=True)
class LocalGraph:
    """A bipartite chunk-entity graph: ``edges`` are (chunk row id, entity id, weight)."""

    chunks: tuple[int, ...]
    entities: tuple[int, ...]
    edges: tuple[tuple[int, int, float], ...]

    @classmethod
    def from_links(cls, chunk_links: Mapping[int, Iterable[Link]], entities: Iterable[int],
                   min_weight: float = 1e-3) -> LocalGraph:
        """The subgraph induced by ``entities`` and the chunks of ``chunk_links`` (each
        chunk's links to other entities are dropped; a weight is at least ``min_weight``,
        so a weak link still connects)."""
        kept = set(entities)
        edges = sorted({(int(c), int(e), max(float(w), min_weight))
                        for c, links in chunk_links.items() for e, w, _ in links if e in kept})
        return cls(tuple(sorted({int(c) for c in chunk_links})),
                   tuple(sorted(kept)), tuple(edges))


def personalized_pagerank(graph: LocalGraph, restart: Mapping[tuple[str, int], float],
                          damping: float) -> dict[int, float]:
    """Stationary probability of each chunk of ``graph`` under a walk that continues with
    probability ``damping`` and restarts at the nodes of ``restart`` (keys ``("chunk", row
    id)`` or ``("entity", id)``; weights need not sum to 1; nodes absent from the graph are
    ignored). Empty when nothing to restart at is in the graph."""
    chunk_node = {c: i for i, c in enumerate(graph.chunks)}
    offset = len(graph.chunks)
    entity_node = {e: offset + i for i, e in enumerate(graph.entities)}
    reset = [0.0] * (offset + len(graph.entities))
    for (kind, key), weight in restart.items():
        node = chunk_node.get(key) if kind == "chunk" else entity_node.get(key)
        if node is not None and weight > 0:
            reset[node] += float(weight)
    if not graph.chunks or sum(reset) <= 0:
        return {}
    walk = igraph.Graph(n=len(reset), directed=False,
                        edges=[(chunk_node[c], entity_node[e]) for c, e, _ in graph.edges])
    scores = walk.personalized_pagerank(damping=damping, reset=reset, directed=False,
                                        weights=[w for _, _, w in graph.edges] or None,
                                        implementation="prpack")
    return {c: float(scores[i]) for c, i in chunk_node.items()}
