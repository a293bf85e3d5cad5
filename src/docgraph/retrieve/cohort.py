"""Cohort search: one ``search()`` assembles candidates from several lanes, ranks them with a
composite of relevance, lane priority and marginal coverage minus an MMR redundancy penalty,
and returns the top ``k`` with the lane that brought each (its provenance).

Lanes (each switchable in :class:`CohortSettings`; all stay inside the namespace pre-filter):

========================  ==============================================================
``seed``                  dense + BM25 fused by reciprocal rank
``structural``            previous / next / parent-section chunks of the strongest seeds
                          (off by default: no retrieval gain measured, see ``bench/ablation.py``)
``entity_adjacent``       chunks sharing an entity with the query or the strongest seeds,
                          gated by similarity to the query; among them the *hops* (below)
``graph``                 entity-graph traversal from the query's entities (off by default:
                          no gain measured, see ``bench/ablation.py``)
``cluster_adjacent``      chunks of entities in the same community, budget-limited (off by
                          default: no gain measured)
``ppr``                   personalized PageRank over the local entity-chunk graph around the
                          strongest seeds and the query's entities (``retrieve/ppr.py``): its
                          ranking joins relevance as a third reciprocal-rank list, and its best
                          chunks not yet in the pool are admitted (on: it pays on the 2Wiki
                          and SciFact test halves, ``bench/tune_cohort.py``)
========================  ==============================================================

Relevance is the hybrid reciprocal-rank fusion of each pool member's rank in the dense and the
BM25 candidate lists of the seed lane (the same fusion as ``DocGraph.search(mode="hybrid")``);
a member beyond the dense list ranks after it by its own similarity, and one beyond the BM25
list has no lexical evidence.

Hops (multi-hop questions). A seed is *anchored* when it introduces an entity the query names:
its document's title is named by the query, or it names a query entity within its first
``hop_intro_position`` characters. A chunk of another document that introduces an entity such
an anchored seed mentions (the document titled by the entity, or a chunk opening with it) is a
*hop* of that seed: the second passage of "where was the director of film X born?". The most
query-similar hop of each anchored seed (at least ``hop_min_ratio`` times the seed's
similarity) is ranked just behind its seed, and only an introducing chunk covers a bridge
entity (the seed itself mentions it). A query that names no entity makes no hop, so single-hop
retrieval keeps its hybrid ranking.

Modes: ``vector_first`` (seeds, then expansions), ``graph_first`` (entity traversal drives,
similarity reranks) and ``global`` (community reports only).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from docgraph.embedding.embedders import Embedder
from docgraph.errors import InvalidQuery
from docgraph.graph.extract import EntityExtractor
from docgraph.graph.normalize import canonical_key
from docgraph.llm import ChatModel
from docgraph.model import ChunkKind, ScoredRow, ScoreName, SearchHit, StoredChunk, Vector
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.retrieve.hybrid import LANE_POOL, MAX_K, MAX_QUERY_CHARS
from docgraph.retrieve.navigation import navigation_factor
from docgraph.retrieve.ppr import LocalGraph, personalized_pagerank
from docgraph.retrieve.query_entities import query_entity_keys
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.base import ChunkIndex, StoreCatalog, require_namespaces
from docgraph.store.graph import EntityInfo, GraphStore, Link
from docgraph.text import STOPWORDS

CohortMode = Literal["vector_first", "graph_first", "global"]
LANES = ("seed", "structural", "entity_adjacent", "graph", "cluster_adjacent", "ppr")


@dataclass(frozen=True)
class CohortSettings:
    """Every internal knob of cohort search, with defaults. Callers set only ``k``,
    ``query_text`` and ``mode``; these exist for ablation benchmarks (``bench/ablation.py``
    has the numbers behind each lane; ``bench/tune_cohort.py`` re-chose the constants on the
    tuning half of the committed query splits, see docs/ARCHITECTURE.md "Retrieval")."""

    # lanes
    seed_lane: bool = True
    structural_lane: bool = False  # no retrieval gain, +1.4 ms at 100k (bench/ablation.py)
    entity_lane: bool = True
    graph_lane: bool = False
    cluster_lane: bool = False
    ppr_lane: bool = True  # pays on the 2Wiki and SciFact test halves (bench/tune_cohort.py)
    completeness: bool = True
    # lane priorities
    seed_priority: float = 1.0
    structural_priority: float = 0.9
    entity_priority: float = 0.7
    graph_priority: float = 0.6
    cluster_priority: float = 0.5
    ppr_priority: float = 0.7
    # composite ranking
    relevance_weight: float = 0.5
    priority_weight: float = 0.2
    coverage_weight: float = 0.15
    redundancy_penalty: float = 0.1
    # factor on the relevance of a link-list chunk (docgraph.retrieve.navigation); 1 = none
    navigation_weight: float = 0.5
    rrf_k: int = 20  # as index.rrf_k; better than 60 here too (bench/results/ablation_rrf20.json)
    # seed lane
    seed_candidates: int = 100
    seed_pool: int = 30
    seed_pool_grows_with_k: bool = True  # admit max(seed_pool, k) seeds
    # structural lane
    structural_from: int = 5
    # entity lane
    entity_from_seeds: int = 3
    entities_per_seed: int = 12
    chunks_per_entity: int = 8
    entity_max_df: float = 0.02
    entity_min_similarity: float = 0.15
    entity_budget: int = 40
    entity_scan: int = 256  # links read per entity at most (bounds the cost of frequent ones)
    # hops (see the module docstring)
    hop_inherit: bool = True
    hop_intro_position: int = 5  # "introduces": first mention within this many characters
    hop_min_ratio: float = 0.3  # hop similarity >= ratio x its seed's similarity
    hop_offset: int = 0  # places behind the seed
    hops_per_seed: int = 1
    bridge_needs_intro: bool = False  # a bridge entity is covered only by its introducing
    # chunk (no effect while bridge_weight is 0)
    # graph lane
    graph_neighbors: int = 8
    graph_chunks_per_entity: int = 4
    graph_budget: int = 30
    graph_min_similarity: float = 0.15
    # cluster lane
    cluster_peers: int = 20
    cluster_chunks_per_entity: int = 3
    cluster_budget: int = 20
    cluster_min_similarity: float = 0.25
    # personalized-PageRank lane: a walk over the chunks and entities around the query
    ppr_from_seeds: int = 3  # strongest seeds the walk restarts at (weighted by fused score)
    ppr_chunks_per_entity: int = 8  # chunks read per entity node (its strongest links)
    ppr_damping: float = 0.5  # probability the walk continues (HippoRAG 2 uses 0.5)
    ppr_entity_restart: float = 0.5  # restart mass on the query's entities (rest: seeds)
    ppr_weight: float = 1.0  # weight of the walk's ranking as a reciprocal-rank list
    ppr_budget: int = 20  # chunks the lane adds to the pool at most
    ppr_min_similarity: float = 0.15  # similarity gate of the chunks it adds
    # completeness
    completeness_per_entity: int = 3
    query_names_capitalized: bool = True  # a one-word name counts only if the query capitalizes it
    # coverage targets
    bridge_weight: float = 0.0  # hops replace bridge coverage (see bench/ablation.py)
    max_bridge_entities: int = 10

    def priority(self, lane: str) -> float:
        """The priority of a lane."""
        return {
            "seed": self.seed_priority,
            "structural": self.structural_priority,
            "entity_adjacent": self.entity_priority,
            "graph": self.graph_priority,
            "cluster_adjacent": self.cluster_priority,
            "ppr": self.ppr_priority,
        }[lane]


@dataclass
class _Candidate:
    rowid: int
    lane: str  # the highest-priority lane that brought it (its provenance)
    lanes: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Hop:
    source: int  # row id of the anchored seed whose entity the chunk introduces
    source_position: int  # that seed's position among the seeds
    entity: int


@dataclass
class CohortResult:
    """Ranked hits, the trace (when asked for) and, in global mode with a chat model, the
    map-reduced answer."""

    hits: list[SearchHit]
    trace: RetrievalTrace | None = None
    answer: str | None = None
    paths: dict[str, list[str]] = field(default_factory=dict)  # chunk id -> entity paths




class CohortSearcher(Protocol):
    """What context assembly needs of a cohort engine: :class:`CohortSearch`, or the governed
    search that wraps it for one caller."""

    @property
    def embedder(self) -> Embedder:
        """The query embedder (its token counter sizes context sections)."""
        ...

    @property
    def graph(self) -> GraphStore:
        """The graph store entity names and relationships are read from."""
        ...

    @property
    def extractor(self) -> EntityExtractor | None:
        """The entity extractor that finds the query's entities."""
        ...

    def search(self, query_text: str, *, namespaces: Iterable[str], k: int = 10,
               mode: CohortMode = "vector_first", return_trace: bool = False) -> CohortResult:
        """The top ``k`` chunks for ``query_text`` within ``namespaces``."""
        ...

@dataclass
class _Query:
    """Per-query working state (never stored on the engine)."""

    text: str
    vector: Vector
    allowed: frozenset[str]
    settings: CohortSettings
    trace: RetrievalTrace
    reads: GraphStore  # its bounded lane reads (capped counts, capped chunks, links)
    total_chunks: int
    pool: dict[int, _Candidate] = field(default_factory=dict)
    links: dict[int, list[Link]] = field(default_factory=dict)  # chunk -> links cache
    stored: dict[int, StoredChunk] = field(default_factory=dict)  # pool chunks read in _rank
    counts: dict[int, int] = field(default_factory=dict)  # entity -> capped chunk count
    # (entity, per entity) -> its strongest links among its first entity_scan
    strongest: dict[tuple[int, int], list[tuple[int, int, float, int]]] = field(
        default_factory=dict)

    @property
    def hub_limit(self) -> int:
        return int(max(self.settings.entity_max_df * self.total_chunks, 3))

    def non_hub(self, entity_ids: Iterable[int]) -> list[int]:
        wanted = list(dict.fromkeys(entity_ids))
        missing = [e for e in wanted if e not in self.counts]
        if missing:
            self.counts.update(self.reads.capped_counts(missing, self.hub_limit))
        return [e for e in wanted if self.counts.get(e, 0) <= self.hub_limit]

    def capped_chunks(self, entity_ids: Iterable[int], per_entity: int
                      ) -> list[tuple[int, int, float, int]]:
        """``reads.capped_chunks`` with ``entity_scan``, each entity read once per query
        (the entity lane, the hops and the PPR lane ask for many of the same)."""
        wanted = list(dict.fromkeys(int(e) for e in entity_ids))
        missing = [e for e in wanted if (e, per_entity) not in self.strongest]
        if missing:
            for e in missing:
                self.strongest[(e, per_entity)] = []
            for row in self.reads.capped_chunks(missing, per_entity, self.settings.entity_scan):
                self.strongest[(row[0], per_entity)].append(row)
        return [row for e in wanted for row in self.strongest[(e, per_entity)]]

    def links_of(self, rowids: Iterable[int]) -> dict[int, list[Link]]:
        missing = [r for r in dict.fromkeys(int(r) for r in rowids) if r not in self.links]
        if missing:
            self.links.update(self.reads.chunk_links(missing))
        return self.links


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")
_WORD = re.compile(r"\w+", re.UNICODE)


def _title_key(title: str) -> str:
    """Canonical key of a document title without a trailing disambiguation, ``Rex Ingram
    (director)`` -> ``rex ingram``: the entity a document titled so is about."""
    return canonical_key(_DISAMBIGUATION.sub("", title or ""))


def _tokens(text: str) -> list[str]:
    """Word tokens, each canonicalized on its own (case, possessive, plural)."""
    return [canonical_key(w) for w in _WORD.findall(text)]


def _names(query_tokens: list[str], title: str) -> bool:
    """Whether the query names the title (its tokens as a contiguous run; a title of
    stopwords only names nothing)."""
    words = _tokens(_DISAMBIGUATION.sub("", title or ""))
    if not words or all(w in STOPWORDS for w in words):
        return False
    n = len(words)
    return any(query_tokens[i:i + n] == words for i in range(len(query_tokens) - n + 1))


class CohortSearch:
    """The main retrieval engine over the storage ports (catalog, chunk index, graph store:
    any backend). Holds no per-query state: safe to share between threads."""

    def __init__(
        self,
        catalog: StoreCatalog,
        index: ChunkIndex,
        graph: GraphStore,
        embedder: Embedder,
        extractor: EntityExtractor | None,
        settings: CohortSettings | None = None,
        chat_model: ChatModel | None = None,
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.graph = graph
        self.embedder = embedder
        self.extractor = extractor
        self.settings = settings or CohortSettings()
        self.chat_model = chat_model

    # -- entry point -----------------------------------------------------------

    def search(
        self,
        query_text: str,
        *,
        namespaces: Iterable[str],
        k: int = 10,
        mode: CohortMode = "vector_first",
        return_trace: bool = False,
        settings: CohortSettings | None = None,
        answer: bool = True,
    ) -> CohortResult:
        """The top ``k`` chunks for ``query_text`` within ``namespaces`` (required).

        The engine stores nothing: the trace is returned when asked for, and the governed
        service stores it after its row filter. ``answer=False`` skips global mode's
        map-reduce (a governed caller's answer is reduced from the visible reports only)."""
        allowed = require_namespaces(namespaces)
        if not isinstance(query_text, str) or not query_text.strip():
            raise InvalidQuery("query_text must be a non-empty string")
        if len(query_text) > MAX_QUERY_CHARS:
            raise InvalidQuery(
                f"query_text is {len(query_text)} characters; the limit is {MAX_QUERY_CHARS}"
            )
        if not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise InvalidQuery(f"k must be an integer from 1 to {MAX_K}, got {k!r}")
        if mode not in ("vector_first", "graph_first", "global"):
            raise InvalidQuery(
                f"mode must be 'vector_first', 'graph_first' or 'global', got {mode!r}"
            )
        s = settings or self.settings
        trace = RetrievalTrace(query=query_text, mode=mode, k=k)
        started = time.perf_counter()
        if mode == "global":
            result = self._global(query_text, allowed, k, s, trace,
                                  self.chat_model if answer else None)
        else:
            result = self._cohort(query_text, allowed, k, s, trace,
                                  graph_first=mode == "graph_first")
        trace.timings_ms["total"] = (time.perf_counter() - started) * 1000
        trace.final_provenance = {h.chunk_id: h.lanes[0] for h in result.hits}
        result.trace = trace if return_trace else None
        return result

    # -- helpers ---------------------------------------------------------------

    def _seed_rows(
        self, query: str, vector: Vector, allowed: frozenset[str], depth: int, kind: ChunkKind,
        rrf_k: int | None = None,
    ) -> list[ScoredRow]:
        """Dense and BM25 candidate lists, each ``depth`` deep, fused by reciprocal rank."""
        dense = self.index.dense_search(vector, depth, allowed, kind=kind)
        lexical = self.index.lexical_search(query, depth, allowed, kind=kind)
        return rrf_fuse([dense, lexical], k=self.settings.rrf_k if rrf_k is None else rrf_k)

    def _gated(self, rows: list[int], q: _Query, floor: float, budget: int) -> list[int]:
        """New row ids (not in the pool) with similarity >= floor, most similar first."""
        fresh = [r for r in dict.fromkeys(rows) if r not in q.pool]
        if not fresh or budget <= 0:
            return []
        vectors = self.index.vectors(fresh)
        scored = sorted(
            ((float(vectors[r] @ q.vector), r) for r in fresh if r in vectors),
            key=lambda x: (-x[0], x[1]),
        )
        return [r for sim, r in scored if sim >= floor][:budget]

    @staticmethod
    def _admit(pool: dict[int, _Candidate], rowid: int, lane: str, reason: str,
               s: CohortSettings) -> None:
        candidate = pool.get(rowid)
        if candidate is None:
            pool[rowid] = _Candidate(rowid, lane, {lane}, [reason])
            return
        candidate.lanes.add(lane)
        candidate.reasons.append(reason)
        if s.priority(lane) > s.priority(candidate.lane):
            candidate.lane = lane

    def _chunk_total(self) -> int:
        """Chunks the hub threshold is relative to: the loaded chunk index (all namespaces;
        counting one namespace's chunks in SQL costs a table scan per query)."""
        return len(self.index)

    def _query_entities(self, q: _Query) -> tuple[list[EntityInfo], list[str]]:
        """(entities of the namespaces the query names, extractor-found names not in the
        graph), as :func:`docgraph.retrieve.query_entities.find_query_entities` but without
        counting every mention of each (``chunk_count`` is capped at the hub limit + 1).
        Longer matches win: an entity whose key is inside a longer matched key is dropped."""
        keys = query_entity_keys(q.text, self.extractor)
        ns_ids = list(self.catalog.namespace_ids(sorted(q.allowed)).values())
        found = q.reads.entities_in(keys, ns_ids)
        if q.settings.query_names_capitalized:
            # A heuristic proper name is found capitalized in text; a single query word
            # written in lower case only ("place of birth") is the common noun, not it.
            words = _WORD.findall(q.text)
            lower = {canonical_key(w) for w in words if w == w.lower()}
            lower -= {canonical_key(w) for w in words if w != w.lower()}
            found = [f for f in found
                     if not (f[3] == "name" and " " not in f[1] and f[1] in lower)]
        matched = {key for _, key, _, _, _ in found}
        kept = [f for f in found
                if not any(f[1] != other and f" {f[1]} " in f" {other} " for other in matched)]
        order = {key: i for i, key in enumerate(keys)}
        kept.sort(key=lambda f: (order.get(f[1], 1 << 30), f[0]))
        q.non_hub([f[0] for f in kept])
        entities = [EntityInfo(i, key, name, etype, ns, q.counts.get(i, 0))
                    for i, key, name, etype, ns in kept]
        missing: list[str] = []
        if self.extractor is not None:
            for link in self.extractor.links(q.text):
                if link.key not in matched and (
                    link.type not in ("name", "acronym") or len(link.name.split()) > 1
                ):
                    missing.append(link.name)
        return entities, list(dict.fromkeys(missing))

    # -- vector_first / graph_first ------------------------------------------------

    def _cohort(
        self,
        query: str,
        allowed: frozenset[str],
        k: int,
        s: CohortSettings,
        trace: RetrievalTrace,
        graph_first: bool,
    ) -> CohortResult:
        depth = max(s.seed_candidates, k)
        # The BM25 seed list needs no vector: it runs in a lane thread while the query is
        # embedded and the dense list is searched (as in hybrid search), so the seed lane
        # costs the slower of the two lists, not their sum.
        pending = LANE_POOL.get().submit(self.index.lexical_search, query, depth, allowed,
                                         kind="text")
        try:
            t = time.perf_counter()
            query_vector = self.embedder.embed_query(query)
            trace.timings_ms["embed_query"] = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            dense = self.index.dense_search(query_vector, depth, allowed, kind="text")
        except BaseException:
            pending.cancel()
            raise
        lexical = pending.result()
        fused = rrf_fuse([dense, lexical], k=s.rrf_k)
        q = _Query(query, query_vector, allowed, s, trace, self.graph,
                   self._chunk_total())
        pool = q.pool
        width = max(s.seed_pool, k) if s.seed_pool_grows_with_k else s.seed_pool
        seeds = [r.rowid for r in fused[:width]]
        trace.timings_ms["seed"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        expands = (s.entity_lane or s.graph_lane or s.cluster_lane or s.ppr_lane
                   or graph_first)
        query_entities, unknown = (self._query_entities(q) if expands or s.completeness
                                   else ([], []))
        query_ids = [e.id for e in query_entities]
        sources = seeds[: s.entity_from_seeds]
        seed_entities: list[int] = []
        if sources and expands:
            links = q.links_of(sources)
            kept = set(q.non_hub(e for r in sources for e, _, _ in links[r]))
            for rowid in sources:
                seed_entities.extend(
                    [e for e, _, _ in links[rowid] if e in kept][: s.entities_per_seed])
        seed_entities = list(dict.fromkeys(seed_entities))
        trace.timings_ms["query_entities"] = (time.perf_counter() - t) * 1000

        paths: dict[int, list[str]] = {}
        hops: dict[int, _Hop] = {}
        walked: dict[int, float] = {}
        if graph_first:
            self._graph_lane(query_ids or seed_entities, q, paths,
                             budget=max(s.graph_budget, 3 * k), floor=-1.0)
            if not query_ids:
                trace.notes.append("graph_first: the query names no known entity; traversal "
                                   "started from the strongest seeds' entities")
            # The strongest seeds always take part; when the graph adds too little, more
            # seeds fill the pool up to k (a corpus without entities still answers k).
            for position, rowid in enumerate(seeds):
                if position >= max(5, k // 2) and len(pool) >= k:
                    break
                self._admit(pool, rowid, "seed", "seed", s)
        else:
            if s.seed_lane:
                for rowid in seeds:
                    self._admit(pool, rowid, "seed", "seed", s)
            trace.add("seed", [str(r) for r in seeds])
            if s.structural_lane:
                self._structural_lane(seeds[: s.structural_from], q)
            if s.entity_lane:
                hops = self._entity_lane(query_ids, seed_entities, sources, q)
            if s.graph_lane:
                self._graph_lane(query_ids or seed_entities, q, paths,
                                 budget=s.graph_budget, floor=s.graph_min_similarity)
            if s.cluster_lane:
                self._cluster_lane(query_ids or seed_entities, q)
            if s.ppr_lane:
                walked = self._ppr_lane(query_ids, fused[: s.ppr_from_seeds], q)

        if s.completeness:
            self._complete(query_entities, unknown, q)
        else:
            trace.query_entities_found = [e.name for e in query_entities]
        trace.pool_size = len(pool)

        t = time.perf_counter()
        bridge = [e for e in seed_entities if e not in set(query_ids)]
        selected = self._rank(q, k, query_ids, bridge[: s.max_bridge_entities], dense,
                              lexical, hops, walked)
        trace.timings_ms["rank"] = (time.perf_counter() - t) * 1000
        hits = self._hits(selected, pool, {r.rowid for r in dense}, q.stored)
        # Replace internal row ids in the lane lists by chunk ids for readability.
        known = {r: c.chunk_id for r, c in q.stored.items()}
        known.update((h.rowid, h.chunk_id) for h in hits)
        ids = self.catalog.chunks_by_rowid(
            [int(r) for lane in trace.candidates.values() for r in lane
             if r.isdigit() and int(r) not in known]
        )
        known.update((r, c.chunk_id) for r, c in ids.items())
        trace.candidates = {
            lane: [known.get(int(r), r) if r.isdigit() else r for r in rows]
            for lane, rows in trace.candidates.items()
        }
        chunk_paths = {h.chunk_id: paths[h.rowid] for h in hits if h.rowid in paths}
        return CohortResult(hits, paths=chunk_paths)

    def _structural_lane(self, seeds: list[int], q: _Query) -> None:
        t = time.perf_counter()
        added: list[str] = []
        for source, neighbour, relation in self.graph.structural_neighbours(seeds):
            if neighbour not in q.pool:
                added.append(str(neighbour))
            self._admit(q.pool, neighbour, "structural", f"{relation} of {source}", q.settings)
        q.trace.add("structural", added)
        q.trace.timings_ms["structural"] = (time.perf_counter() - t) * 1000

    def _entity_lane(self, query_ids: list[int], seed_entities: list[int], sources: list[int],
                     q: _Query) -> dict[int, _Hop]:
        """Chunks sharing an entity with the query or the strongest seeds, and the hops of
        the anchored seeds (see the module docstring). Returns the hops by row id (pool
        members or not)."""
        t = time.perf_counter()
        s = q.settings
        entities = q.non_hub(query_ids + seed_entities)
        links = q.capped_chunks(entities, s.chunks_per_entity)
        via: dict[int, int] = {}
        for entity_id, rowid, _, _ in links:
            via.setdefault(rowid, entity_id)
        hops = self._hops(query_ids, sources, q) if s.hop_inherit else {}
        chosen = self._gated([r for _, r, _, _ in links], q, s.entity_min_similarity,
                             s.entity_budget)
        # Hops are admitted beyond the budget (still gated by similarity).
        extra = self._gated([r for r in hops if r not in chosen], q, s.entity_min_similarity,
                            len(hops))
        for rowid in [*chosen, *extra]:
            hop = hops.get(rowid)
            reason = (f"introduces entity {hop.entity} of seed {hop.source}" if hop
                      else f"shares entity {via[rowid]}")
            self._admit(q.pool, rowid, "entity_adjacent", reason, s)
        q.trace.add("entity_adjacent", [str(r) for r in [*chosen, *extra]])
        q.trace.timings_ms["entity_adjacent"] = (time.perf_counter() - t) * 1000
        return hops

    def _hops(self, query_ids: list[int], sources: list[int], q: _Query) -> dict[int, _Hop]:
        """Chunks of other documents introducing an entity of an anchored seed."""
        s = q.settings
        links = q.links_of(sources)
        docs = q.reads.chunk_documents(sources)
        query_tokens = _tokens(q.text)
        wanted = set(query_ids)
        entity_source: dict[int, int] = {}
        for position, rowid in enumerate(sources):
            anchored = (_names(query_tokens, docs.get(rowid, (0, ""))[1])
                        or any(e in wanted and first <= s.hop_intro_position
                               for e, _, first in links[rowid]))
            if not anchored:
                continue
            bridges = q.non_hub(e for e, _, _ in links[rowid] if e not in wanted)
            for e in bridges[: s.entities_per_seed]:
                entity_source.setdefault(e, position)
        if not entity_source:
            return {}
        candidates = [x for x in q.capped_chunks(entity_source, s.chunks_per_entity)
                      if x[1] not in set(sources)]
        if not candidates:
            return {}
        keys = q.reads.entity_keys(entity_source)
        docs.update(q.reads.chunk_documents(x[1] for x in candidates))
        hops: dict[int, _Hop] = {}
        for entity_id, rowid, _, first in candidates:
            position = entity_source[entity_id]
            document, title = docs.get(rowid, (0, ""))
            if document == docs.get(sources[position], (-1, ""))[0]:
                continue  # the seed's own document: the structural lane's business
            if first > s.hop_intro_position and _title_key(title) != keys.get(entity_id):
                continue  # mentions the entity, does not introduce it
            known = hops.get(rowid)
            if known is None or position < known.source_position:
                hops[rowid] = _Hop(sources[position], position, entity_id)
        return hops

    def _graph_lane(self, start: list[int], q: _Query, paths: dict[int, list[str]],
                    budget: int, floor: float) -> None:
        t = time.perf_counter()
        s = q.settings
        start = list(dict.fromkeys(start))
        names = {e.id: e.name for e in self.graph.entities_by_id(start).values()}
        rows: list[int] = []
        row_paths: dict[int, list[str]] = {}
        for entity_id in start:
            for neighbour in self.graph.neighbors([entity_id], s.graph_neighbors):
                path = (f"{names.get(entity_id, entity_id)} -[npmi {neighbour.weight:.2f}, "
                        f"{neighbour.chunks} chunks]- {neighbour.entity.name}")
                a, b = sorted((entity_id, neighbour.entity.id))
                for rowid in self.graph.edge_support(a, b, s.graph_chunks_per_entity):
                    rows.append(rowid)
                    row_paths.setdefault(rowid, []).append(path)
        for entity_id, rowid, _, _ in q.reads.capped_chunks(start, s.graph_chunks_per_entity,
                                                        s.entity_scan):
            rows.append(rowid)
            row_paths.setdefault(rowid, []).append(f"mentions {names.get(entity_id, entity_id)}")
        chosen = self._gated(rows, q, floor, budget)
        for rowid in chosen:
            self._admit(q.pool, rowid, "graph", "; ".join(row_paths[rowid][:3]), s)
            paths[rowid] = row_paths[rowid][:5]
        q.trace.add("graph", [str(r) for r in chosen])
        q.trace.timings_ms["graph"] = (time.perf_counter() - t) * 1000

    def _ppr_lane(self, query_ids: list[int], seeds: list[ScoredRow], q: _Query
                  ) -> dict[int, float]:
        """Personalized PageRank over the local entity-chunk graph (``retrieve/ppr.py``).

        Nodes: the strongest seeds, their non-hub entities (``entities_per_seed`` each) and
        the query's non-hub entities, and those entities' strongest chunks; every node is
        checked to be in the caller's namespaces *before* the walk, so nothing of another
        namespace can carry or pass on probability. The walk restarts at the seeds (by fused
        score) and the query's entities (by specificity, 1 / chunks mentioning it). Admits
        the best-walked chunks not yet in the pool (similarity-gated) and returns every
        walked chunk's probability, which joins the ranking's relevance."""
        t = time.perf_counter()
        s = q.settings
        ns_ids = list(self.catalog.namespace_ids(sorted(q.allowed)).values())
        seed_ids = [r.rowid for r in seeds]
        links = q.links_of(seed_ids)
        kept = set(q.non_hub(e for r in seed_ids for e, _, _ in links[r]))
        wanted = [e for r in seed_ids
                  for e in [e for e, _, _ in links[r] if e in kept][: s.entities_per_seed]]
        wanted += q.non_hub(query_ids)
        entities = q.reads.entities_within(wanted, ns_ids)
        reached = q.capped_chunks(sorted(entities), s.ppr_chunks_per_entity)
        chunks = q.reads.chunks_within([*seed_ids, *(r for _, r, _, _ in reached)], ns_ids)
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
            vectors = self.index.vectors(part)
            chosen += [r for r in part if r in vectors
                       and float(vectors[r] @ q.vector) >= s.ppr_min_similarity]
        chosen = chosen[: s.ppr_budget]
        for rowid in chosen:
            self._admit(q.pool, rowid, "ppr", f"walk probability {scores[rowid]:.4f}", s)
        q.trace.add("ppr", [str(r) for r in chosen])
        q.trace.timings_ms["ppr"] = (time.perf_counter() - t) * 1000
        return {r: scores[r] for r in ranked}

    def _cluster_lane(self, start: list[int], q: _Query) -> None:
        t = time.perf_counter()
        s = q.settings
        peers = q.non_hub(self.graph.community_peers(start, s.cluster_peers))
        links = q.reads.capped_chunks(peers, s.cluster_chunks_per_entity, s.entity_scan)
        chosen = self._gated([r for _, r, _, _ in links], q, s.cluster_min_similarity,
                             s.cluster_budget)
        for rowid in chosen:
            self._admit(q.pool, rowid, "cluster_adjacent", "community peer", s)
        q.trace.add("cluster_adjacent", [str(r) for r in chosen])
        q.trace.timings_ms["cluster_adjacent"] = (time.perf_counter() - t) * 1000

    def _complete(self, query_entities: list[EntityInfo], unknown: list[str],
                  q: _Query) -> None:
        """Make sure each entity the query names is represented in the pool."""
        t = time.perf_counter()
        s, trace = q.settings, q.trace
        present = q.links_of(list(q.pool))
        in_pool = {e for r in q.pool for e, _, _ in present.get(r, [])}
        for entity in query_entities:
            if entity.id in in_pool:
                trace.completeness[entity.name] = "in cohort"
                continue
            links = q.reads.capped_chunks([entity.id], 4 * s.completeness_per_entity,
                                      s.entity_scan)
            chosen = self._gated([r for _, r, _, _ in links], q, -1.0,
                                 s.completeness_per_entity)
            for rowid in chosen:
                self._admit(q.pool, rowid, "entity_adjacent", f"completeness: {entity.name}", s)
            trace.add("entity_adjacent", [str(r) for r in chosen])
            trace.completeness[entity.name] = "entity lookup" if chosen else "not found"
        for name in unknown:  # named by the query, unknown to the graph: search for it
            rows = self.index.lexical_search(name, 4 * s.completeness_per_entity, q.allowed)
            texts = self.catalog.chunks_by_rowid([r.rowid for r in rows])
            folded = name.casefold()
            containing = [r.rowid for r in rows
                          if r.rowid in texts and folded in texts[r.rowid].text.casefold()]
            fresh = [r for r in containing if r not in q.pool][: s.completeness_per_entity]
            for rowid in fresh:
                self._admit(q.pool, rowid, "entity_adjacent", f"completeness search: {name}", s)
            trace.add("entity_adjacent", [str(r) for r in fresh])
            trace.completeness[name] = "per-entity search" if containing else "not found"
        trace.query_entities_found = [n for n, how in trace.completeness.items()
                                      if how != "not found"]
        trace.query_entities_missing = [n for n, how in trace.completeness.items()
                                        if how == "not found"]
        trace.timings_ms["completeness"] = (time.perf_counter() - t) * 1000

    # -- ranking ------------------------------------------------------------------

    def _rank(self, q: _Query, k: int, query_ids: list[int], bridge_ids: list[int],
              dense: list[ScoredRow], lexical: list[ScoredRow], hops: dict[int, _Hop],
              walked: dict[int, float] | None = None,
              ) -> list[tuple[int, float, float, float | None]]:
        """Greedy composite + MMR selection; returns (rowid, score, similarity, bm25).

        Relevance is the hybrid reciprocal-rank fusion of the pool member's rank in the
        dense and the BM25 candidate lists (normalized so rank 1 in both is 1), plus, with
        the PPR lane, ``ppr_weight`` times its reciprocal rank in the walk's ranking, times
        ``navigation_weight`` for a list of links; a hop inherits the base score of its
        seed, just behind it."""
        s, pool = q.settings, q.pool
        vectors = self.index.vectors(list(pool))
        rows = [r for r in pool if r in vectors]
        if not rows:
            return []
        n = len(rows)
        row_ids = np.array(rows, dtype=np.int64)
        matrix = np.stack([vectors[r] for r in rows])
        sims = (matrix @ q.vector).astype(np.float64)
        dense_pos = {r.rowid: i for i, r in enumerate(dense)}
        lex_pos = {r.rowid: i for i, r in enumerate(lexical)}
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
            stored = q.stored = self.catalog.chunks_by_rowid(rows)
            relevance = relevance * np.array(
                [navigation_factor(stored[r].text, stored[r].section_path, s.navigation_weight)
                 if r in stored else 1.0 for r in rows])
        priority = np.array([s.priority(pool[r].lane) for r in rows])
        base = s.relevance_weight * relevance + s.priority_weight * priority
        if hops and s.hop_inherit:
            base = self._inherit(base, rows, sims, hops, s)
        weights: dict[int, float] = {e: 1.0 for e in query_ids}
        for e in bridge_ids:
            weights.setdefault(e, s.bridge_weight)
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
        out: list[tuple[int, float, float, float | None]] = []
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

    @staticmethod
    def _inherit(base: np.ndarray, rows: list[int], sims: np.ndarray, hops: dict[int, _Hop],
                 s: CohortSettings) -> np.ndarray:
        """Each seed's best hops (by similarity to the query, at least ``hop_min_ratio``
        times the seed's) take the base score of the candidate ``hop_offset`` places behind
        the seed (the j-th hop ``j`` places further), minus a hair."""
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
                target = min(rank_of[source] + s.hop_offset + j, len(ordered) - 1)
                out[i] = max(out[i], ordered[target] - 1e-6 * (j + 1))
        return out

    def _hits(self, selected: list[tuple[int, float, float, float | None]],
              pool: dict[int, _Candidate], dense_rows: set[int],
              stored: dict[int, StoredChunk] | None = None) -> list[SearchHit]:
        """The selected rows as hits, each with its lanes and the seed lane's lists that
        held it (``dense`` when in ``dense_rows``, ``bm25`` when it has a BM25 score); their
        chunks are taken from ``stored`` (read while ranking) where it has them, the others
        read."""
        stored = stored or {}
        chunks = {r: stored[r] for r, _, _, _ in selected if r in stored}
        missing = [r for r, _, _, _ in selected if r not in chunks]
        if missing:
            chunks.update(self.catalog.chunks_by_rowid(missing))
        hits: list[SearchHit] = []
        for rowid, score, sim, lexical in selected:
            chunk = chunks.get(rowid)
            if chunk is None:
                continue
            candidate = pool[rowid]
            lanes = (candidate.lane, *sorted(candidate.lanes - {candidate.lane}))
            hit = _hit(chunk, score, len(hits) + 1, sim, lexical, lanes, "composite")
            hit.seed_lists = tuple(name for name, held in (("dense", rowid in dense_rows),
                                                           ("bm25", lexical is not None))
                                   if held)
            hits.append(hit)
        return hits

    # -- global -------------------------------------------------------------------

    def _global(self, query: str, allowed: frozenset[str], k: int, s: CohortSettings,
                trace: RetrievalTrace, model: ChatModel | None) -> CohortResult:
        t = time.perf_counter()
        vector = self.embedder.embed_query(query)
        fused = self._seed_rows(query, vector, allowed, max(s.seed_candidates, k),
                                "community_report", s.rrf_k)
        depth = k if model is None else max(k, 8)
        rows = fused[:depth]
        chunks = self.catalog.chunks_by_rowid([r.rowid for r in rows])
        vectors = self.index.vectors([r.rowid for r in rows])
        hits = [
            _hit(chunks[r.rowid], r.score, i + 1,
                 float(vectors[r.rowid] @ vector) if r.rowid in vectors else None, None,
                 ("community_report",), "rrf")
            for i, r in enumerate(rows) if r.rowid in chunks
        ]
        trace.add("community_report", [h.chunk_id for h in hits])
        trace.pool_size = len(fused)
        trace.timings_ms["reports"] = (time.perf_counter() - t) * 1000
        if not hits:
            trace.notes.append("no community reports in reach (graph not built or empty)")
        if model is None:
            if self.chat_model is None:
                trace.notes.append("no chat model configured: community reports are returned "
                                   "ranked by hybrid relevance, not map-reduced")
            return CohortResult(hits[:k])
        t = time.perf_counter()
        answer, ranked = map_reduce_global_context(query, hits, model, k)
        trace.timings_ms["map_reduce"] = (time.perf_counter() - t) * 1000
        return CohortResult(ranked, answer=answer)


def map_reduce_global_context(
    query: str, reports: list[SearchHit], model: ChatModel, k: int
) -> tuple[str, list[SearchHit]]:
    """Map a chat model over each report (rate 0-100 how well it answers, and extract the
    key points), keep the ``k`` best-rated, and reduce their points into one answer."""
    rated: list[tuple[int, int, SearchHit, str]] = []
    for position, report in enumerate(reports):
        reply = model.complete(
            "Rate from 0 to 100 how useful this community report is for the question, then "
            "list its key points for the question. Answer as 'SCORE: <n>' on the first line, "
            f"then the points.\n\nQuestion: {query}\n\nReport:\n{report.text}"
        )
        first, _, rest = reply.strip().partition("\n")
        digits = "".join(ch for ch in first if ch.isdigit())
        rated.append((-(int(digits[:3]) if digits else 0), position, report, rest.strip()))
    rated.sort(key=lambda x: (x[0], x[1]))
    top = rated[:k]
    points = "\n\n".join(f"[{r.chunk_id}] {p}" for _, _, r, p in top if p)
    answer = model.complete(
        "Answer the question from these points, citing the bracketed ids you use.\n\n"
        f"Question: {query}\n\n{points}"
    ) if points else ""
    ranked = []
    for i, (_, _, report, _) in enumerate(top):
        report.original_rank = i + 1
        ranked.append(report)
    return answer, ranked


def _hit(chunk: StoredChunk, score: float, rank: int, similarity: float | None,
         lexical: float | None, lanes: tuple[str, ...], label: ScoreName) -> SearchHit:
    return SearchHit(
        chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, chunk_index=chunk.index,
        namespace=chunk.namespace, text=chunk.text, title=chunk.title,
        source_path=chunk.source_path, section_path=chunk.section_path, score=score,
        score_label=label, original_rank=rank, dense_similarity=similarity,
        lexical_score=lexical, lanes=lanes, rowid=chunk.rowid, origin=chunk.origin,
        pages=chunk.pages, ocr=chunk.ocr,
    )
