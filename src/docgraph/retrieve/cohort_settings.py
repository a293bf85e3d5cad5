"""Every knob of cohort search that is not a fixed constant, in one frozen value.

Three kinds of constant, each in one place:

* **Settings** (the ``[retrieval]`` section of ``docgraph.toml``,
  :class:`docgraph.config.RetrievalSettings`): lanes on/off, pool sizes and budgets,
  similarity gates, fusion weights. Their defaults are read from there, so the toml, the
  docs and the engine cannot disagree; :meth:`CohortSettings.from_config` carries a
  configured section over.
* **Tuning knobs** (:data:`TUNING_KNOBS`): fields of :class:`CohortSettings` that the
  benches vary (``bench/tune_cohort.py`` searches them on the tuning half of the committed
  splits, ``bench/ablation.py`` switches them) but that are deliberately not settings: they
  are coupled heuristics of the multi-hop ranking (hops, hub threshold, walk shape, lane
  priorities), chosen jointly, and a value changed alone has no measured meaning. Code
  (benches, tests, a Python caller) sets them with ``dataclasses.replace``.
* **Private constants** (``_NAME`` in the module that uses them, each with why): values
  nothing varies, that bound a read or are inert at the tuned defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from docgraph.config import RetrievalSettings
from docgraph.retrieve.lanes.base import CLUSTER, ENTITY, GRAPH, PPR, SEED, STRUCTURAL

_CONFIG = RetrievalSettings()  # the settings' defaults


@dataclass(frozen=True)
class CohortSettings:
    """The engine's knobs with their defaults. Callers set only ``k``, ``query_text`` and
    ``mode``; ``DocGraph`` builds this from ``[retrieval]`` (:meth:`from_config`), benches
    and tests replace fields (``bench/ablation.py`` has the numbers behind each lane;
    ``bench/tune_cohort.py`` re-chose the constants on the tuning half of the committed
    query splits, see docs/ARCHITECTURE.md "Retrieval")."""

    # -- settings ([retrieval], docgraph.config.RetrievalSettings has each one's why) --
    # lanes (the seed lane always runs: every other lane expands from its seeds)
    structural_lane: bool = _CONFIG.structural_lane
    entity_lane: bool = _CONFIG.entity_lane
    graph_lane: bool = _CONFIG.graph_lane
    cluster_lane: bool = _CONFIG.cluster_lane
    ppr_lane: bool = _CONFIG.ppr_lane
    completeness: bool = _CONFIG.completeness
    # pool sizes
    seed_candidates: int = _CONFIG.seed_candidates
    seed_pool: int = _CONFIG.seed_pool
    entity_budget: int = _CONFIG.entity_budget
    graph_budget: int = _CONFIG.graph_budget
    cluster_budget: int = _CONFIG.cluster_budget
    ppr_budget: int = _CONFIG.ppr_budget
    # similarity gates
    entity_min_similarity: float = _CONFIG.entity_min_similarity
    graph_min_similarity: float = _CONFIG.graph_min_similarity
    cluster_min_similarity: float = _CONFIG.cluster_min_similarity
    ppr_min_similarity: float = _CONFIG.ppr_min_similarity
    # fusion (docgraph.retrieve.fusion)
    rrf_k: int = _CONFIG.rrf_k
    relevance_weight: float = _CONFIG.relevance_weight
    priority_weight: float = _CONFIG.priority_weight
    coverage_weight: float = _CONFIG.coverage_weight
    redundancy_penalty: float = _CONFIG.redundancy_penalty
    navigation_weight: float = _CONFIG.navigation_weight
    ppr_weight: float = _CONFIG.ppr_weight

    # -- tuning knobs (TUNING_KNOBS: varied by the benches, not settings) --
    # lane priorities: which lane a chunk counts as, and a term of the composite score
    seed_priority: float = 1.0
    structural_priority: float = 0.9
    entity_priority: float = 0.7
    graph_priority: float = 0.6
    cluster_priority: float = 0.5
    ppr_priority: float = 0.7
    seed_pool_grows_with_k: bool = True  # admit max(seed_pool, k) seeds
    # entity lane (docgraph.retrieve.lanes.entity)
    entity_from_seeds: int = 3  # strongest seeds whose entities the lane expands
    entities_per_seed: int = 12
    chunks_per_entity: int = 8
    entity_max_df: float = 0.02  # an entity in more than this share of chunks is a hub
    # hops (multi-hop questions, see docgraph.retrieve.lanes.entity)
    hop_inherit: bool = True
    hop_intro_position: int = 5  # "introduces": first mention within this many characters
    hop_min_ratio: float = 0.3  # hop similarity >= ratio x its seed's similarity
    hops_per_seed: int = 1
    bridge_needs_intro: bool = False  # a bridge entity is covered only by its introducing
    # chunk (no effect while the bridge weight, docgraph.retrieve.fusion, is 0)
    # personalized-PageRank lane: a walk over the chunks and entities around the query
    ppr_from_seeds: int = 3  # strongest seeds the walk restarts at (weighted by fused score)
    ppr_chunks_per_entity: int = 8  # chunks read per entity node (its strongest links)
    ppr_damping: float = 0.5  # probability the walk continues (HippoRAG 2 uses 0.5)
    ppr_entity_restart: float = 0.5  # restart mass on the query's entities (rest: seeds)
    # query entities
    query_names_capitalized: bool = True  # a one-word name counts only if the query capitalizes it

    @classmethod
    def from_config(cls, section: RetrievalSettings) -> CohortSettings:
        """The defaults with the ``[retrieval]`` settings of ``section``."""
        return cls(**section.model_dump())

    def priority(self, lane: str) -> float:
        """The priority of a lane."""
        return {
            SEED: self.seed_priority,
            STRUCTURAL: self.structural_priority,
            ENTITY: self.entity_priority,
            GRAPH: self.graph_priority,
            CLUSTER: self.cluster_priority,
            PPR: self.ppr_priority,
        }[lane]


#: The fields of :class:`CohortSettings` that are deliberately not settings (see the module
#: docstring); every other field is a setting of ``[retrieval]``
#: (``tests/retrieve/test_cohort.py``).
TUNING_KNOBS: frozenset[str] = frozenset({
    "seed_priority", "structural_priority", "entity_priority", "graph_priority",
    "cluster_priority", "ppr_priority", "seed_pool_grows_with_k", "entity_from_seeds",
    "entities_per_seed", "chunks_per_entity", "entity_max_df", "hop_inherit",
    "hop_intro_position", "hop_min_ratio", "hops_per_seed", "bridge_needs_intro",
    "ppr_from_seeds", "ppr_chunks_per_entity", "ppr_damping", "ppr_entity_restart",
    "query_names_capitalized",
})
