"""Rank fusion: reciprocal rank fusion (:func:`rrf_fuse`), and the cohort's ranking of its
pool (:func:`rank_pool`). The one place both fusions and their constants are stated.

**Hybrid search** (``DocGraph.search(mode="hybrid")``, :mod:`docgraph.retrieve.hybrid`):
``score = 1 / (index.rrf_k + dense rank) + index.lexical_weight / (index.rrf_k + BM25 rank)``
(1-based ranks; defaults ``rrf_k`` 10, ``lexical_weight`` 1.25), times
``index.navigation_weight`` (0.5) for a list of links.

**Cohort search** fuses the same two lists, with *its own* constants (``[retrieval]``,
:class:`docgraph.config.RetrievalSettings`; tuned separately, so they differ from hybrid's):

* seeds: ``rrf_fuse([dense, bm25], k=retrieval.rrf_k)``: ``rrf_k`` 20 and the two lists
  weighed alike (:func:`fuse_seed_lists`; global mode ranks community reports the same way);
* relevance of a pool member: ``(1 / (rrf_k + dense rank) + 1 / (rrf_k + BM25 rank)) /
  (2 / (rrf_k + 1))`` (rank 1 in both lists = 1), plus ``ppr_weight`` (1) times the same
  term for its rank in the PPR walk, times ``navigation_weight`` (0.5) for a list of links.
  A member beyond the dense list ranks after it by its own similarity; one beyond the BM25
  list (or the walk) has no term there;
* composite, chosen greedily ``k`` times: ``relevance_weight`` (0.5) x relevance +
  ``priority_weight`` (0.2) x the priority of its lane (``CohortSettings.priority``) +
  ``coverage_weight`` (0.15) x the share of the query's entities it adds -
  ``redundancy_penalty`` (0.1) x its highest cosine to a chunk already chosen (MMR); ties go
  to relevance, then row id. A hop (``docgraph.retrieve.lanes.entity``) takes the base score
  just behind its seed (:func:`inherit_hops`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from docgraph.model import ScoredRow
from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.navigation import navigation_factor
from docgraph.retrieve.pool import CohortQuery, Hop

# Coverage weight of a seed's "bridge" entities (those the query does not name). Not a
# setting: hops replaced bridge coverage (bench/ablation.py), so at 0 they weigh nothing.
_BRIDGE_WEIGHT = 0.0
# Bridge entities counted at most (inert while _BRIDGE_WEIGHT is 0).
_MAX_BRIDGE_ENTITIES = 10
# Places behind its seed a hop is ranked (0: right behind). Not a setting: never varied.
_HOP_OFFSET = 0

Selected = tuple[int, float, float, float | None]  # (rowid, score, similarity, bm25)


def rrf_fuse(ranked_lists: Sequence[Sequence[ScoredRow]], k: int = 60,
             weights: Sequence[float] | None = None) -> list[ScoredRow]:
    """Fuse ranked lists by reciprocal rank: ``score(d) = sum(w_i / (k + rank_i(d)))``,
    ``w_i`` = ``weights[i]`` (default 1 for every list).

    Ranks are 1-based. Ties are broken by the best single rank, then by row id, so the
    result is deterministic.
    """
    if weights is None:
        weights = [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(weights)} weights for {len(ranked_lists)} ranked lists")
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranked, weight in zip(ranked_lists, weights, strict=True):
        for rank, row in enumerate(ranked, start=1):
            scores[row.rowid] = scores.get(row.rowid, 0.0) + weight / (k + rank)
            best[row.rowid] = min(best.get(row.rowid, rank), rank)
    order = sorted(scores, key=lambda r: (-scores[r], best[r], r))
    return [ScoredRow(r, scores[r]) for r in order]


def fuse_seed_lists(dense: Sequence[ScoredRow], lexical: Sequence[ScoredRow],
                    settings: CohortSettings) -> list[ScoredRow]:
    """The cohort's seed ranking: the dense and BM25 lists fused with ``rrf_k``, weighed
    alike (not hybrid search's ``index.rrf_k`` and ``lexical_weight``)."""
    return rrf_fuse([dense, lexical], k=settings.rrf_k)


def rank_pool(q: CohortQuery) -> list[Selected]:
    """Greedy composite + MMR selection of ``q.k`` pool members (see the module docstring);
    returns (rowid, score, similarity, bm25) in order."""
    s, pool, k = q.settings, q.pool, q.k
    query_ids, dense, lexical, hops, walked = q.query_ids, q.dense, q.lexical, q.hops, q.walked
    bridge_ids = [e for e in q.seed_entities if e not in set(query_ids)][:_MAX_BRIDGE_ENTITIES]
    vectors = q.index.vectors(list(pool))
    lex_pos = {r.rowid: i for i, r in enumerate(lexical)}
    # A BM25 hit without a vector is a chunk not embedded yet (docgraph.store.pending): it
    # is ranked by its BM25 rank and lanes, with no similarity (a zero vector here only,
    # never in the dense lane); any other row without one is gone.
    rows = [r for r in pool if r in vectors or r in lex_pos]
    if not rows:
        return []
    n = len(rows)
    row_ids = np.array(rows, dtype=np.int64)
    unknown = np.zeros(len(q.vector), dtype=np.float32)
    matrix = np.stack([vectors.get(r, unknown) for r in rows])
    sims = (matrix @ q.vector).astype(np.float64)
    dense_pos = {r.rowid: i for i, r in enumerate(dense)}
    lex_score = {r.rowid: r.score for r in lexical}
    dense_rank = np.array([dense_pos.get(r, -1) for r in rows], dtype=np.float64)
    outside = np.flatnonzero(dense_rank < 0)
    if len(outside):  # beyond the dense list: after it, by own similarity
        order = outside[np.lexsort((row_ids[outside], -sims[outside]))]
        dense_rank[order] = len(dense) + np.arange(len(order))
    lex_rank = np.array([lex_pos.get(r, -1) for r in rows], dtype=np.float64)
    best = 2.0 / (s.rrf_k + 1)
    relevance = (1.0 / (s.rrf_k + 1 + dense_rank)
                 + np.where(lex_rank >= 0, 1.0 / (s.rrf_k + 1 + lex_rank), 0.0)) / best
    if walked and s.ppr_weight:
        walk_pos = {r: i for i, r in enumerate(walked)}  # walked is in walk order
        walk_rank = np.array([walk_pos.get(r, -1) for r in rows], dtype=np.float64)
        relevance = relevance + s.ppr_weight * np.where(
            walk_rank >= 0, 1.0 / (s.rrf_k + 1 + walk_rank), 0.0) / best
    if s.navigation_weight != 1.0:  # link lists ("See also") weigh as navigation
        stored = q.stored_chunks(rows)
        relevance = relevance * np.array(
            [navigation_factor(stored[r].text, stored[r].section_path, s.navigation_weight)
             if r in stored else 1.0 for r in rows])
    priority = np.array([s.priority(pool[r].lane) for r in rows])
    base = s.relevance_weight * relevance + s.priority_weight * priority
    if hops and s.hop_inherit:
        base = inherit_hops(base, rows, sims, hops, s)
    weights: dict[int, float] = {e: 1.0 for e in query_ids}
    for e in bridge_ids:
        weights.setdefault(e, _BRIDGE_WEIGHT)
    total_weight = sum(weights.values())
    entity_order = list(weights)
    column = {e: j for j, e in enumerate(entity_order)}
    covers = np.zeros((n, len(entity_order)), dtype=np.float64)
    if weights:
        chunk_links = q.links_of(rows)
        bridge = set(bridge_ids) - set(query_ids)
        for i, r in enumerate(rows):
            for e, _, _ in chunk_links.get(r, []):
                j = column.get(e)
                # a bridge entity is covered by the chunk that introduces it, not by
                # every chunk that mentions it (its own seed mentions it)
                if j is not None and (e not in bridge or not s.bridge_needs_intro
                                      or (r in hops and hops[r].entity == e)):
                    covers[i, j] = 1.0
    weight_vector = np.array([weights[e] for e in entity_order], dtype=np.float64)
    uncovered = np.ones(len(entity_order), dtype=np.float64)
    max_sim = np.zeros(n)
    taken = np.zeros(n, dtype=bool)
    tie = np.lexsort((row_ids, -relevance))  # tie-break order: relevance, then row id
    position = np.empty(n, dtype=np.int64)
    position[tie] = np.arange(n)
    out: list[Selected] = []
    for _ in range(min(k, n)):
        gain = ((covers @ (weight_vector * uncovered)) / total_weight if total_weight
                else np.zeros(n))
        score = base + s.coverage_weight * gain - s.redundancy_penalty * max_sim
        score[taken] = -np.inf
        top = np.flatnonzero(score == score.max())
        pick = int(top[np.argmin(position[top])])
        taken[pick] = True
        uncovered[covers[pick] > 0] = 0.0
        max_sim = np.maximum(max_sim, matrix @ matrix[pick])
        r = rows[pick]
        out.append((r, float(score[pick]), float(sims[pick]), lex_score.get(r)))
    return out


def inherit_hops(base: np.ndarray, rows: list[int], sims: np.ndarray, hops: dict[int, Hop],
                 s: CohortSettings) -> np.ndarray:
    """Each seed's best hops (by similarity to the query, at least ``hop_min_ratio`` times
    the seed's) take the base score of the candidate ``_HOP_OFFSET`` places behind the seed
    (the j-th hop ``j`` places further), minus a hair."""
    index = {r: i for i, r in enumerate(rows)}
    ordered = np.sort(base)[::-1]
    rank_of = {rows[i]: p for p, i in enumerate(np.argsort(-base, kind="stable"))}
    by_source: dict[int, list[int]] = {}
    for rowid, hop in hops.items():
        i, j = index.get(rowid), index.get(hop.source)
        if i is None or j is None or sims[i] < s.hop_min_ratio * sims[j]:
            continue
        by_source.setdefault(hop.source, []).append(i)
    out = base.copy()
    for source, members in by_source.items():
        members.sort(key=lambda i: (-sims[i], rows[i]))
        for j, i in enumerate(members[: s.hops_per_seed]):
            target = min(rank_of[source] + _HOP_OFFSET + j, len(ordered) - 1)
            out[i] = max(out[i], ordered[target] - 1e-6 * (j + 1))
    return out
