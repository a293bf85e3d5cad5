"""Cohort search: one ``search()`` assembles candidates from several lanes, ranks them with a
composite of relevance, lane priority and marginal coverage minus an MMR redundancy penalty,
and returns the top ``k`` with the lane that brought each (its provenance).

Lanes (each switchable in :class:`CohortSettings`; all stay inside the namespace pre-filter):

========================  ==============================================================
``seed``                  dense + BM25 fused by reciprocal rank
``structural``            previous / next / parent-section chunks of the strongest seeds
``entity_adjacent``       chunks sharing an entity with the query or the strongest seeds,
                          gated by similarity to the query
``graph``                 entity-graph traversal from the query's entities (off by default)
``cluster_adjacent``      chunks of entities in the same community, budget-limited
========================  ==============================================================

Relevance keeps lexical evidence: it is a reciprocal-rank fusion, over the whole pool, of the
cosine ranking and the BM25 ranking (BM25 scored for every pool member, not only seeds).
Modes: ``vector_first`` (seeds, then expansions), ``graph_first`` (entity traversal drives,
similarity reranks) and ``global`` (community reports only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from docgraph.errors import InvalidQuery
from docgraph.graph.extract import EntityExtractor
from docgraph.ingest.embed import Embedder
from docgraph.llm import ChatModel
from docgraph.model import ChunkKind, ScoredRow, SearchHit, StoredChunk, Vector
from docgraph.retrieve.fusion import rrf_fuse
from docgraph.retrieve.hybrid import MAX_K, MAX_QUERY_CHARS
from docgraph.retrieve.query_entities import find_query_entities
from docgraph.retrieve.trace import RetrievalTrace, TraceStore
from docgraph.store.base import require_namespaces
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite_graph import EntityInfo, SQLiteGraphStore

CohortMode = Literal["vector_first", "graph_first", "global"]
LANES = ("seed", "structural", "entity_adjacent", "graph", "cluster_adjacent")


@dataclass(frozen=True)
class CohortSettings:
    """Every internal knob of cohort search, with defaults. Callers set only ``k``,
    ``query_text`` and ``mode``; these exist for ablation benchmarks."""

    # lanes
    seed_lane: bool = True
    structural_lane: bool = True
    entity_lane: bool = True
    graph_lane: bool = False
    cluster_lane: bool = True
    completeness: bool = True
    # lane priorities
    seed_priority: float = 1.0
    structural_priority: float = 0.9
    entity_priority: float = 0.7
    graph_priority: float = 0.6
    cluster_priority: float = 0.5
    # composite ranking
    relevance_weight: float = 0.5
    priority_weight: float = 0.2
    coverage_weight: float = 0.3
    redundancy_penalty: float = 0.1
    rrf_k: int = 60
    # seed lane
    seed_candidates: int = 100
    seed_pool: int = 30
    seed_pool_grows_with_k: bool = True  # admit max(seed_pool, k) seeds
    # structural lane
    structural_from: int = 5
    # entity lane
    entity_from_seeds: int = 3
    entities_per_seed: int = 4
    chunks_per_entity: int = 8
    entity_max_df: float = 0.02
    entity_min_similarity: float = 0.15
    entity_budget: int = 40
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
    # completeness
    completeness_per_entity: int = 3
    # coverage targets
    bridge_weight: float = 0.5
    max_bridge_entities: int = 10

    def priority(self, lane: str) -> float:
        """The priority of a lane."""
        return {
            "seed": self.seed_priority,
            "structural": self.structural_priority,
            "entity_adjacent": self.entity_priority,
            "graph": self.graph_priority,
            "cluster_adjacent": self.cluster_priority,
        }[lane]


@dataclass
class _Candidate:
    rowid: int
    lane: str  # the highest-priority lane that brought it (its provenance)
    lanes: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)


@dataclass
class CohortResult:
    """Ranked hits, the trace (when asked for) and, in global mode with a chat model, the
    map-reduced answer."""

    hits: list[SearchHit]
    trace: RetrievalTrace | None = None
    answer: str | None = None
    paths: dict[str, list[str]] = field(default_factory=dict)  # chunk id -> entity paths


ChunkFilter = Callable[[list[SearchHit]], list[SearchHit]]


class CohortSearch:
    """The main retrieval engine. Holds no per-query state: safe to share between threads."""

    def __init__(
        self,
        catalog: SQLiteCatalog,
        index: EmbeddedChunkIndex,
        graph: SQLiteGraphStore,
        embedder: Embedder,
        extractor: EntityExtractor | None,
        settings: CohortSettings | None = None,
        traces: TraceStore | None = None,
        chat_model: ChatModel | None = None,
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.graph = graph
        self.embedder = embedder
        self.extractor = extractor
        self.settings = settings or CohortSettings()
        self.traces = traces
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
    ) -> CohortResult:
        """The top ``k`` chunks for ``query_text`` within ``namespaces`` (required)."""
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
            result = self._global(query_text, allowed, k, s, trace)
        else:
            result = self._cohort(query_text, allowed, k, s, trace,
                                  graph_first=mode == "graph_first")
        trace.timings_ms["total"] = (time.perf_counter() - started) * 1000
        trace.final_provenance = {h.chunk_id: h.lanes[0] for h in result.hits}
        if self.traces is not None:
            self.traces.save(trace)
        result.trace = trace if return_trace else None
        return result

    # -- helpers ---------------------------------------------------------------

    def _seed_rows(
        self, query: str, vector: Vector, allowed: frozenset[str], depth: int, kind: ChunkKind
    ) -> list[ScoredRow]:
        dense = self.index.dense_search(vector, depth, allowed, kind=kind)
        lexical = self.index.lexical_search(query, depth, allowed, kind=kind)
        return rrf_fuse([dense, lexical], k=self.settings.rrf_k)

    def _gated(
        self,
        rows: list[int],
        query_vector: Vector,
        floor: float,
        budget: int,
        pool: dict[int, _Candidate],
    ) -> list[int]:
        """New row ids (not in the pool) with similarity >= floor, most similar first."""
        fresh = [r for r in dict.fromkeys(rows) if r not in pool]
        if not fresh:
            return []
        vectors = self.index.vectors(fresh)
        scored = sorted(
            ((float(vectors[r] @ query_vector), r) for r in fresh if r in vectors),
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

    def _non_hub(self, entity_ids: list[int], total_chunks: int, s: CohortSettings) -> list[int]:
        counts = self.graph.entity_chunk_counts(entity_ids)
        limit = max(s.entity_max_df * total_chunks, 3)
        return [e for e in entity_ids if counts.get(e, 0) <= limit]

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
        t = time.perf_counter()
        query_vector = self.embedder.embed_query(query)
        trace.timings_ms["embed_query"] = (time.perf_counter() - t) * 1000

        pool: dict[int, _Candidate] = {}
        t = time.perf_counter()
        fused = self._seed_rows(query, query_vector, allowed, max(s.seed_candidates, k), "text")
        width = max(s.seed_pool, k) if s.seed_pool_grows_with_k else s.seed_pool
        seeds = [r.rowid for r in fused[:width]]
        trace.timings_ms["seed"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        query_entities, unknown = (
            find_query_entities(query, self.extractor, self.graph, allowed)
            if (s.entity_lane or s.graph_lane or s.cluster_lane or s.completeness or graph_first)
            else ([], [])
        )
        total_chunks = self.graph.namespace_chunk_count(allowed)
        seed_entities: list[int] = []
        if seeds:
            by_chunk = self.graph.entities_of_chunks(seeds[: s.entity_from_seeds])
            for rowid in seeds[: s.entity_from_seeds]:
                links = [e for e, _ in by_chunk.get(rowid, [])]
                seed_entities.extend(self._non_hub(links, total_chunks, s)[: s.entities_per_seed])
        query_ids = [e.id for e in query_entities]
        trace.timings_ms["query_entities"] = (time.perf_counter() - t) * 1000

        paths: dict[int, list[str]] = {}
        if graph_first:
            self._graph_lane(query_ids or list(dict.fromkeys(seed_entities)), query_vector,
                             pool, s, trace, paths, budget=max(s.graph_budget, 3 * k), floor=-1.0)
            if not query_ids:
                trace.notes.append("graph_first: the query names no known entity; traversal "
                                   "started from the strongest seeds' entities")
            for rowid in seeds[: max(5, k // 2)]:
                self._admit(pool, rowid, "seed", "seed", s)
        else:
            if s.seed_lane:
                for rowid in seeds:
                    self._admit(pool, rowid, "seed", "seed", s)
            trace.add("seed", [str(r) for r in seeds])
            if s.structural_lane:
                self._structural_lane(seeds[: s.structural_from], pool, s, trace)
            if s.entity_lane:
                self._entity_lane(query_ids + seed_entities, query_vector, total_chunks, pool, s,
                                  trace)
            if s.graph_lane:
                self._graph_lane(query_ids or seed_entities, query_vector, pool, s, trace, paths,
                                 budget=s.graph_budget, floor=s.graph_min_similarity)
            if s.cluster_lane:
                self._cluster_lane(query_ids or seed_entities, query_vector, pool, s, trace)

        if s.completeness:
            self._complete(query, query_entities, unknown, query_vector, allowed, pool, s, trace)
        else:
            trace.query_entities_found = [e.name for e in query_entities]
        trace.pool_size = len(pool)

        t = time.perf_counter()
        bridge = [e for e in dict.fromkeys(seed_entities) if e not in set(query_ids)]
        selected = self._rank(query, query_vector, allowed, k, pool, s, query_ids,
                              bridge[: s.max_bridge_entities])
        trace.timings_ms["rank"] = (time.perf_counter() - t) * 1000
        hits = self._hits(selected, pool)
        for hit in hits:
            trace.candidates.setdefault("_returned", []).append(hit.chunk_id)
        # Replace internal row ids in the lane lists by chunk ids for readability.
        ids = self.catalog.chunks_by_rowid(
            [int(r) for lane in trace.candidates.values() for r in lane if r.isdigit()]
        )
        trace.candidates = {
            lane: [ids[int(r)].chunk_id if r.isdigit() and int(r) in ids else r for r in rows]
            for lane, rows in trace.candidates.items() if lane != "_returned"
        }
        chunk_paths = {h.chunk_id: paths[h.rowid] for h in hits if h.rowid in paths}
        return CohortResult(hits, paths=chunk_paths)

    def _structural_lane(self, seeds: list[int], pool: dict[int, _Candidate],
                         s: CohortSettings, trace: RetrievalTrace) -> None:
        t = time.perf_counter()
        added: list[str] = []
        for source, neighbour, relation in self.catalog.structural_neighbours(seeds):
            if neighbour not in pool:
                added.append(str(neighbour))
            self._admit(pool, neighbour, "structural", f"{relation} of {source}", s)
        trace.add("structural", added)
        trace.timings_ms["structural"] = (time.perf_counter() - t) * 1000

    def _entity_lane(self, entity_ids: list[int], query_vector: Vector, total_chunks: int,
                     pool: dict[int, _Candidate], s: CohortSettings,
                     trace: RetrievalTrace) -> None:
        t = time.perf_counter()
        entities = self._non_hub(list(dict.fromkeys(entity_ids)), total_chunks, s)
        links = self.graph.chunks_for_entities(entities, s.chunks_per_entity)
        via: dict[int, int] = {}
        for entity_id, rowid, _, _ in links:
            via.setdefault(rowid, entity_id)
        chosen = self._gated([r for _, r, _, _ in links], query_vector, s.entity_min_similarity,
                             s.entity_budget, pool)
        for rowid in chosen:
            self._admit(pool, rowid, "entity_adjacent", f"shares entity {via[rowid]}", s)
        trace.add("entity_adjacent", [str(r) for r in chosen])
        trace.timings_ms["entity_adjacent"] = (time.perf_counter() - t) * 1000

    def _graph_lane(self, start: list[int], query_vector: Vector, pool: dict[int, _Candidate],
                    s: CohortSettings, trace: RetrievalTrace, paths: dict[int, list[str]],
                    budget: int, floor: float) -> None:
        t = time.perf_counter()
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
        for entity_id, rowid, _, _ in self.graph.chunks_for_entities(
                start, s.graph_chunks_per_entity):
            rows.append(rowid)
            row_paths.setdefault(rowid, []).append(f"mentions {names.get(entity_id, entity_id)}")
        chosen = self._gated(rows, query_vector, floor, budget, pool)
        for rowid in chosen:
            self._admit(pool, rowid, "graph", "; ".join(row_paths[rowid][:3]), s)
            paths[rowid] = row_paths[rowid][:5]
        trace.add("graph", [str(r) for r in chosen])
        trace.timings_ms["graph"] = (time.perf_counter() - t) * 1000

    def _cluster_lane(self, start: list[int], query_vector: Vector, pool: dict[int, _Candidate],
                      s: CohortSettings, trace: RetrievalTrace) -> None:
        t = time.perf_counter()
        peers = self.graph.community_peers(start, s.cluster_peers)
        links = self.graph.chunks_for_entities(peers, s.cluster_chunks_per_entity)
        chosen = self._gated([r for _, r, _, _ in links], query_vector, s.cluster_min_similarity,
                             s.cluster_budget, pool)
        for rowid in chosen:
            self._admit(pool, rowid, "cluster_adjacent", "community peer", s)
        trace.add("cluster_adjacent", [str(r) for r in chosen])
        trace.timings_ms["cluster_adjacent"] = (time.perf_counter() - t) * 1000

    def _complete(self, query: str, query_entities: list[EntityInfo], unknown: list[str],
                  query_vector: Vector, allowed: frozenset[str], pool: dict[int, _Candidate],
                  s: CohortSettings, trace: RetrievalTrace) -> None:
        """Make sure each entity the query names is represented in the pool."""
        t = time.perf_counter()
        present = self.graph.entities_of_chunks(list(pool))
        in_pool = {e for links in present.values() for e, _ in links}
        for entity in query_entities:
            if entity.id in in_pool:
                trace.completeness[entity.name] = "in cohort"
                continue
            links = self.graph.chunks_for_entities([entity.id], 4 * s.completeness_per_entity)
            chosen = self._gated([r for _, r, _, _ in links], query_vector, -1.0,
                                 s.completeness_per_entity, pool)
            for rowid in chosen:
                self._admit(pool, rowid, "entity_adjacent", f"completeness: {entity.name}", s)
            trace.add("entity_adjacent", [str(r) for r in chosen])
            trace.completeness[entity.name] = "entity lookup" if chosen else "not found"
        for name in unknown:  # named by the query, unknown to the graph: search for it
            rows = self.index.lexical_search(name, 4 * s.completeness_per_entity, allowed)
            texts = self.catalog.chunks_by_rowid([r.rowid for r in rows])
            folded = name.casefold()
            containing = [r.rowid for r in rows
                          if r.rowid in texts and folded in texts[r.rowid].text.casefold()]
            fresh = [r for r in containing if r not in pool][: s.completeness_per_entity]
            for rowid in fresh:
                self._admit(pool, rowid, "entity_adjacent", f"completeness search: {name}", s)
            trace.add("entity_adjacent", [str(r) for r in fresh])
            trace.completeness[name] = "per-entity search" if containing else "not found"
        trace.query_entities_found = [n for n, how in trace.completeness.items()
                                      if how != "not found"]
        trace.query_entities_missing = [n for n, how in trace.completeness.items()
                                        if how == "not found"]
        trace.timings_ms["completeness"] = (time.perf_counter() - t) * 1000

    # -- ranking ------------------------------------------------------------------

    def _rank(self, query: str, query_vector: Vector, allowed: frozenset[str], k: int,
              pool: dict[int, _Candidate], s: CohortSettings, query_ids: list[int],
              bridge_ids: list[int]) -> list[tuple[int, float, float, float | None]]:
        """Greedy composite + MMR selection; returns (rowid, score, similarity, bm25)."""
        vectors = self.index.vectors(list(pool))
        rows = [r for r in pool if r in vectors]
        if not rows:
            return []
        matrix = np.stack([vectors[r] for r in rows])
        sims = matrix @ query_vector
        lexical = self.index.lexical_scores(query, rows, allowed)
        dense_rank = {r: i for i, r in enumerate(
            sorted(rows, key=lambda r: (-float(sims[rows.index(r)]), r)))}
        lex_rank = {r: i for i, r in enumerate(
            sorted(lexical, key=lambda r: (-lexical[r], r)))}
        best = 2.0 / (s.rrf_k + 1)
        relevance = np.array([
            (1.0 / (s.rrf_k + 1 + dense_rank[r])
             + (1.0 / (s.rrf_k + 1 + lex_rank[r]) if r in lex_rank else 0.0)) / best
            for r in rows
        ])
        priority = np.array([s.priority(pool[r].lane) for r in rows])
        weights: dict[int, float] = {e: 1.0 for e in query_ids}
        for e in bridge_ids:
            weights.setdefault(e, s.bridge_weight)
        total_weight = sum(weights.values())
        chunk_entities = self.graph.entities_of_chunks(rows) if weights else {}
        covers = [
            {e for e, _ in chunk_entities.get(r, []) if e in weights} for r in rows
        ]
        base = s.relevance_weight * relevance + s.priority_weight * priority
        max_sim = np.zeros(len(rows))
        covered: set[int] = set()
        taken = np.zeros(len(rows), dtype=bool)
        out: list[tuple[int, float, float, float | None]] = []
        for _ in range(min(k, len(rows))):
            gain = np.array([
                sum(weights[e] for e in c - covered) / total_weight if total_weight else 0.0
                for c in covers
            ])
            score = base + s.coverage_weight * gain - s.redundancy_penalty * max_sim
            score[taken] = -np.inf
            order = np.lexsort((np.array(rows), -relevance, -score))
            pick = int(order[0])
            taken[pick] = True
            covered |= covers[pick]
            max_sim = np.maximum(max_sim, matrix @ matrix[pick])
            r = rows[pick]
            out.append((r, float(score[pick]), float(sims[pick]), lexical.get(r)))
        return out

    def _hits(self, selected: list[tuple[int, float, float, float | None]],
              pool: dict[int, _Candidate]) -> list[SearchHit]:
        chunks = self.catalog.chunks_by_rowid([r for r, _, _, _ in selected])
        hits: list[SearchHit] = []
        for rowid, score, sim, lexical in selected:
            chunk = chunks.get(rowid)
            if chunk is None:
                continue
            candidate = pool[rowid]
            lanes = (candidate.lane, *sorted(candidate.lanes - {candidate.lane}))
            hits.append(_hit(chunk, score, len(hits) + 1, sim, lexical, lanes))
        return hits

    # -- global -------------------------------------------------------------------

    def _global(self, query: str, allowed: frozenset[str], k: int, s: CohortSettings,
                trace: RetrievalTrace) -> CohortResult:
        t = time.perf_counter()
        vector = self.embedder.embed_query(query)
        fused = self._seed_rows(query, vector, allowed, max(s.seed_candidates, k),
                                "community_report")
        depth = k if self.chat_model is None else max(k, 8)
        rows = fused[:depth]
        chunks = self.catalog.chunks_by_rowid([r.rowid for r in rows])
        vectors = self.index.vectors([r.rowid for r in rows])
        hits = [
            _hit(chunks[r.rowid], r.score, i + 1,
                 float(vectors[r.rowid] @ vector) if r.rowid in vectors else None, None,
                 ("community_report",))
            for i, r in enumerate(rows) if r.rowid in chunks
        ]
        trace.add("community_report", [h.chunk_id for h in hits])
        trace.pool_size = len(fused)
        trace.timings_ms["reports"] = (time.perf_counter() - t) * 1000
        if not hits:
            trace.notes.append("no community reports in reach (graph not built or empty)")
        if self.chat_model is None:
            trace.notes.append("no chat model configured: community reports are returned "
                               "ranked by hybrid relevance, not map-reduced")
            return CohortResult(hits[:k])
        t = time.perf_counter()
        answer, ranked = map_reduce_global_context(query, hits, self.chat_model, k)
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
         lexical: float | None, lanes: tuple[str, ...]) -> SearchHit:
    return SearchHit(
        chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, chunk_index=chunk.index,
        namespace=chunk.namespace, text=chunk.text, title=chunk.title,
        source_path=chunk.source_path, section_path=chunk.section_path, score=score,
        score_label="hybrid", original_rank=rank, dense_similarity=similarity,
        lexical_score=lexical, lanes=lanes, rowid=chunk.rowid,
    )
