"""The ``[retrieval]`` section: cohort search (which lanes run, how wide the pool is, how the
pool is ranked)."""

from __future__ import annotations

from pydantic import Field

from docgraph.config.section import Section


class RetrievalSettings(Section):
    """Cohort search (``DocGraph.retrieve``, ``lookup_knowledge``, the cohort modes of
    ``search_documents``): which lanes run, how wide the pool is, how the pool is ranked.

    The defaults were chosen on the tuning half of the benchmark splits
    (``bench/tune_cohort.py``, ``bench/ablation.py``). The engine's other constants are not
    settings; ``docgraph.retrieve.cohort_settings`` says why."""

    structural_lane: bool = Field(
        default=False,
        description="Structural lane: the previous, next and parent-section chunks of the "
                    "strongest seeds. Off: no retrieval gain measured (bench/ablation.py).",
    )
    entity_lane: bool = Field(
        default=True,
        description="Entity lane: chunks sharing a (non-hub) entity with the query or the "
                    "strongest seeds, and the multi-hop 'hops' among them.",
    )
    graph_lane: bool = Field(
        default=False,
        description="Graph lane: chunks supporting the strongest entity-graph edges of the "
                    "query's entities. Off: no gain measured (bench/ablation.py); "
                    "graph_first mode traverses the graph whatever this says.",
    )
    cluster_lane: bool = Field(
        default=False,
        description="Cluster lane: chunks of entities in the same community as the query's. "
                    "Off: no gain measured (bench/ablation.py).",
    )
    ppr_lane: bool = Field(
        default=True,
        description="Personalized-PageRank lane: a walk over the entity-chunk graph around "
                    "the strongest seeds and the query's entities; its ranking joins "
                    "relevance and its best new chunks join the pool (pays on the 2Wiki and "
                    "SciFact test halves, bench/tune_cohort.py).",
    )
    completeness: bool = Field(
        default=True,
        description="Look up every entity the query names that the pool lacks (and search "
                    "for names the graph does not know); also reports which named entities "
                    "were found (lookup_knowledge's unmatched_entities).",
    )
    seed_candidates: int = Field(
        default=100, ge=1, le=10_000,
        description="Depth of the seed lane's dense and BM25 candidate lists (at least k).",
    )
    seed_pool: int = Field(
        default=30, ge=1, le=10_000,
        description="Seeds admitted to the pool: the best of the fused seed lists (at least "
                    "k of them).",
    )
    entity_budget: int = Field(
        default=40, ge=0, le=10_000,
        description="Chunks the entity lane adds at most (its hops come on top).",
    )
    graph_budget: int = Field(
        default=30, ge=0, le=10_000,
        description="Chunks the graph lane adds at most (graph_first: at least 3 k).",
    )
    cluster_budget: int = Field(
        default=20, ge=0, le=10_000, description="Chunks the cluster lane adds at most.",
    )
    ppr_budget: int = Field(
        default=20, ge=0, le=10_000, description="Chunks the PPR lane adds at most.",
    )
    entity_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk of the entity lane needs (the similarity "
                    "gates depend on the embedding model; chosen with the default model).",
    )
    graph_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk of the graph lane needs (vector_first).",
    )
    cluster_min_similarity: float = Field(
        default=0.25, ge=-1, le=1,
        description="Cosine to the query a chunk of the cluster lane needs.",
    )
    ppr_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk the PPR lane adds needs.",
    )
    rrf_k: int = Field(
        default=20, ge=1, le=1000,
        description="Reciprocal-rank constant of the cohort's relevance (its dense, BM25 and "
                    "walk lists, weighed alike). Not index.rrf_k (10, with lexical_weight): "
                    "the cohort's fusion was tuned on its own; 20 beat the customary 60 "
                    "(bench/results/ablation_rrf20.json) and 10 gained too little on the "
                    "tuning half to replace it (bench/tune_cohort.py).",
    )
    relevance_weight: float = Field(
        default=0.5, ge=0, le=10,
        description="Weight of relevance (the fused rank lists) in the composite score.",
    )
    priority_weight: float = Field(
        default=0.2, ge=0, le=10,
        description="Weight of the priority of the lane that brought a chunk in the "
                    "composite score.",
    )
    coverage_weight: float = Field(
        default=0.15, ge=0, le=10,
        description="Weight of marginal coverage (query entities a chunk adds to those "
                    "already selected) in the composite score.",
    )
    redundancy_penalty: float = Field(
        default=0.1, ge=0, le=10,
        description="MMR penalty: times a chunk's highest cosine to a chunk already "
                    "selected, subtracted from its composite score.",
    )
    navigation_weight: float = Field(
        default=0.5, ge=0, le=1,
        description="Factor on the relevance of a chunk that is a list of links ('See also', "
                    "a table of contents), as index.navigation_weight is for hybrid search; "
                    "1 = weighed like any chunk.",
    )
    ppr_weight: float = Field(
        default=1.0, ge=0, le=10,
        description="Weight of the PPR walk's ranking as a third reciprocal-rank list of "
                    "relevance (0: the lane only admits chunks).",
    )
