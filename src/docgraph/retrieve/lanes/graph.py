"""The graph lane: entity-graph traversal from the query's entities (else the strongest
seeds'): the chunks supporting each one's strongest edges and the chunks mentioning it, with
the entity paths that link them. Off by default in ``vector_first`` (no gain measured,
``bench/ablation.py``); ``graph_first`` mode is driven by it (:meth:`GraphLane.traverse`)."""

from __future__ import annotations

import time

from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.lanes.base import GRAPH
from docgraph.retrieve.pool import CohortQuery

# Strongest neighbours followed per start entity, and supporting (or mentioning) chunks read
# per edge or entity. Not settings: they bound the traversal's reads; what it adds is bounded
# by graph_budget and graph_min_similarity, which are.
_GRAPH_NEIGHBORS = 8
_GRAPH_CHUNKS_PER_ENTITY = 4


class GraphLane:
    name = GRAPH
    needs_entities = True

    def enabled(self, settings: CohortSettings) -> bool:
        return settings.graph_lane

    def run(self, q: CohortQuery) -> None:
        s = q.settings
        self.traverse(q, q.start_entities, budget=s.graph_budget,
                      floor=s.graph_min_similarity)

    @staticmethod
    def traverse(q: CohortQuery, start: list[int], budget: int, floor: float) -> None:
        """Admit up to ``budget`` chunks (similarity at least ``floor``) reached from
        ``start``; their entity paths go to ``q.paths``."""
        t = time.perf_counter()
        start = list(dict.fromkeys(start))
        names = {e.id: e.name for e in q.reads.entities_by_id(start).values()}
        rows: list[int] = []
        row_paths: dict[int, list[str]] = {}
        for entity_id in start:
            for neighbour in q.reads.neighbors([entity_id], _GRAPH_NEIGHBORS):
                path = (f"{names.get(entity_id, entity_id)} -[npmi {neighbour.weight:.2f}, "
                        f"{neighbour.chunks} chunks]- {neighbour.entity.name}")
                a, b = sorted((entity_id, neighbour.entity.id))
                for rowid in q.reads.edge_support(a, b, _GRAPH_CHUNKS_PER_ENTITY):
                    rows.append(rowid)
                    row_paths.setdefault(rowid, []).append(path)
        for entity_id, rowid, _, _ in q.read_capped_chunks(start, _GRAPH_CHUNKS_PER_ENTITY):
            rows.append(rowid)
            row_paths.setdefault(rowid, []).append(f"mentions {names.get(entity_id, entity_id)}")
        chosen = q.gated(rows, floor, budget)
        for rowid in chosen:
            q.admit(rowid, GRAPH, "; ".join(row_paths[rowid][:3]))
            q.paths[rowid] = row_paths[rowid][:5]
        q.trace.add(GRAPH, [str(r) for r in chosen])
        q.trace.timings_ms[GRAPH] = (time.perf_counter() - t) * 1000
