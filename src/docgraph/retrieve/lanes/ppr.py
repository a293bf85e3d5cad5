"""The personalized-PageRank lane (HippoRAG 2's mechanism; the walk itself is
:mod:`docgraph.retrieve.ppr`): its ranking joins relevance as a third reciprocal-rank list
(:mod:`docgraph.retrieve.fusion`), and its best chunks not yet in the pool are admitted (on:
it pays on the 2Wiki and SciFact test halves, ``bench/tune_cohort.py``)."""

from __future__ import annotations

import time

from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.lanes.base import PPR
from docgraph.retrieve.pool import CohortQuery
from docgraph.retrieve.ppr import LocalGraph, personalized_pagerank


class PprLane:
    """Personalized PageRank over the local entity-chunk graph.

    Nodes: the strongest seeds, their non-hub entities (``entities_per_seed`` each) and the
    query's non-hub entities, and those entities' strongest chunks; every node is checked
    to be in the caller's namespaces *before* the walk, so nothing of another namespace can
    carry or pass on probability. The walk restarts at the seeds (by fused score) and the
    query's entities (by specificity, 1 / chunks mentioning it). Admits the best-walked
    chunks not yet in the pool (similarity-gated) and leaves every walked chunk's
    probability, in walk order, on ``q.walked`` for the ranking's relevance."""

    name = PPR
    needs_entities = True

    def enabled(self, settings: CohortSettings) -> bool:
        return settings.ppr_lane

    def run(self, q: CohortQuery) -> None:
        t = time.perf_counter()
        s = q.settings
        seeds = q.fused[: s.ppr_from_seeds]
        query_ids = q.query_ids
        ns_ids = list(q.catalog.namespace_ids(sorted(q.allowed)).values())
        seed_ids = [r.rowid for r in seeds]
        links = q.links_of(seed_ids)
        kept = set(q.non_hub(e for r in seed_ids for e, _, _ in links[r]))
        wanted = [e for r in seed_ids
                  for e in [e for e, _, _ in links[r] if e in kept][: s.entities_per_seed]]
        wanted += q.non_hub(query_ids)
        entities = q.entities_within(wanted, ns_ids)
        reached = q.capped_chunks(sorted(entities), s.ppr_chunks_per_entity)
        chunks = q.chunks_within([*seed_ids, *(r for _, r, _, _ in reached)], ns_ids)
        chunk_links = q.links_of(chunks)
        graph = LocalGraph.from_links({c: chunk_links[c] for c in chunks}, entities)
        restart: dict[tuple[str, int], float] = {}
        named = [e for e in dict.fromkeys(query_ids) if e in entities]
        share = s.ppr_entity_restart if named else 0.0
        seed_mass = sum(r.score for r in seeds if r.rowid in chunks)
        for r in seeds:
            if r.rowid in chunks and seed_mass > 0:
                restart[("chunk", r.rowid)] = (1.0 - share) * r.score / seed_mass
        specificity = {e: 1.0 / max(q.counts.get(e, 1), 1) for e in named}
        for e, weight in specificity.items():
            restart[("entity", e)] = share * weight / sum(specificity.values())
        scores = personalized_pagerank(graph, restart, s.ppr_damping)
        ranked = sorted((r for r, p in scores.items() if p > 0),
                        key=lambda r: (-scores[r], r))
        fresh = [r for r in ranked if r not in q.pool]
        chosen: list[int] = []
        step = max(2 * s.ppr_budget, 16)  # vectors read in walk order until the budget fills
        for start in range(0, len(fresh), step):
            if len(chosen) >= s.ppr_budget:
                break
            part = fresh[start:start + step]
            vectors = q.index.vectors(part)
            chosen += [r for r in part if r in vectors
                       and float(vectors[r] @ q.vector) >= s.ppr_min_similarity]
        chosen = chosen[: s.ppr_budget]
        for rowid in chosen:
            q.admit(rowid, PPR, f"walk probability {scores[rowid]:.4f}")
        q.trace.add(PPR, [str(r) for r in chosen])
        q.trace.timings_ms[PPR] = (time.perf_counter() - t) * 1000
        q.walked = {r: scores[r] for r in ranked}
