"""Cohort search: one ``search()`` assembles candidates from several lanes, ranks them with a
composite of relevance, lane priority and marginal coverage minus an MMR redundancy penalty,
and returns the top ``k`` with the lane that brought each (its provenance).

This module is the orchestrator; the parts are modules of their own:

========================================  ===================================================
:mod:`docgraph.retrieve.lanes`            the lane list (``LANES``) and the ``Lane`` protocol
``lanes/seed.py``                         ``seed``: dense + BM25 fused by reciprocal rank
``lanes/structural.py``                   ``structural``: neighbouring sections (off)
``lanes/entity.py``                       ``entity_adjacent``: shared entities, and the hops
``lanes/graph.py``                        ``graph``: entity-graph traversal (off; drives
                                          ``graph_first``)
``lanes/cluster.py``                      ``cluster_adjacent``: community peers (off)
``lanes/ppr.py``                          ``ppr``: personalized PageRank around the query
``lanes/completeness.py``                 every entity the query names gets represented
:mod:`docgraph.retrieve.fusion`           the seed fusion and the composite ranking, with
                                          their constants
:mod:`docgraph.retrieve.pool`             the per-query state the lanes share
:mod:`docgraph.retrieve.cohort_settings`  ``CohortSettings``: settings and tuning knobs
:mod:`docgraph.retrieve.reports`          ``global`` mode (community reports, map-reduce)
========================================  ===================================================

Every lane stays inside the namespace pre-filter. Modes: ``vector_first`` (seeds, then the
expansion lanes), ``graph_first`` (entity traversal drives, similarity reranks) and
``global`` (community reports only).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from docgraph.embedding.embedders import Embedder
from docgraph.errors import InvalidQuery
from docgraph.graph.extract import EntityExtractor
from docgraph.limits import COHORT_MODES, ENGINE_MAX_K, ENGINE_MAX_QUERY_CHARS, CohortMode
from docgraph.llm import ChatModel
from docgraph.model import DocGate, SearchHit, StoredChunk
from docgraph.retrieve.cohort_settings import TUNING_KNOBS, CohortSettings
from docgraph.retrieve.fusion import Selected, fuse_seed_lists, rank_pool
from docgraph.retrieve.lanes.base import LANES, Lane
from docgraph.retrieve.lanes.cluster import ClusterLane
from docgraph.retrieve.lanes.completeness import complete
from docgraph.retrieve.lanes.entity import EntityLane
from docgraph.retrieve.lanes.graph import GraphLane
from docgraph.retrieve.lanes.ppr import PprLane
from docgraph.retrieve.lanes.seed import SeedLane, seed_lists, seed_width
from docgraph.retrieve.lanes.structural import StructuralLane
from docgraph.retrieve.pool import Candidate, CohortQuery, chunk_hit
from docgraph.retrieve.query_entities import cohort_query_entities
from docgraph.retrieve.reports import map_reduce_global_context, search_reports
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.base import ChunkIndex, StoreCatalog, require_namespaces
from docgraph.store.graph import GraphStore
from docgraph.telemetry import span

__all__ = [
    "LANES", "TUNING_KNOBS", "VECTOR_FIRST", "CohortMode", "CohortResult", "CohortSearch",
    "CohortSearcher", "CohortSettings", "map_reduce_global_context",
]

#: The lanes of ``vector_first`` in the order they run (each sees what the earlier ones
#: admitted; a chunk's provenance is the highest-priority lane that brought it).
VECTOR_FIRST: tuple[Lane, ...] = (SeedLane(), StructuralLane(), EntityLane(), GraphLane(),
                                  ClusterLane(), PprLane())


@dataclass
class CohortResult:
    """Ranked hits, the trace (when asked for) and, in global mode with a chat model, the
    map-reduced answer."""

    hits: list[SearchHit]
    trace: RetrievalTrace | None = None
    answer: str | None = None
    paths: dict[str, list[str]] = field(default_factory=dict)  # chunk id -> entity paths
    #: The gate (row origin, permission set) the catalog records for each document whose
    #: chunks this search read (None: neither), so a visibility check of its hits and
    #: candidates needs no second read of the same rows.
    doc_gates: dict[str, DocGate | None] = field(default_factory=dict)
    #: Per entity the query names (as found in the graph), the (namespace, document) of
    #: chunks read by this search that mention it: evidence that the entity is seen by a
    #: caller who may see one of them (a name absent here is decided by reading its
    #: mentions).
    entity_docs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    #: Names of the table sources whose row re-check failed during the search (their
    #: rows were left out, fail closed), set by the governed service; empty otherwise.
    unavailable_row_sources: tuple[str, ...] = ()
    #: Chunks of the searched namespaces stored but not embedded yet (a build embeds them
    #: behind its writes: BM25 finds them, the dense lane skips them), set by the governed
    #: service; 0 when every chunk has its vector.
    pending_chunks: int = 0


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
        readers: frozenset[str] | None = None,
    ) -> CohortResult:
        """The top ``k`` chunks for ``query_text`` within ``namespaces`` (required).

        The engine stores nothing: the trace is returned when asked for, and the governed
        service stores it after its row filter. ``answer=False`` skips global mode's
        map-reduce (a governed caller's answer is reduced from the visible reports only).
        ``readers``: every index lane ranks only the chunks these principals may read (see
        :meth:`~docgraph.store.base.ChunkIndex.for_query`); the governed path passes the
        caller's and still decides every hit itself."""
        allowed = require_namespaces(namespaces)
        if not isinstance(query_text, str) or not query_text.strip():
            raise InvalidQuery("query_text must be a non-empty string")
        if len(query_text) > ENGINE_MAX_QUERY_CHARS:
            raise InvalidQuery(
                f"query_text is {len(query_text)} characters; the limit is {ENGINE_MAX_QUERY_CHARS}"
            )
        if not isinstance(k, int) or not 1 <= k <= ENGINE_MAX_K:
            raise InvalidQuery(f"k must be an integer from 1 to {ENGINE_MAX_K}, got {k!r}")
        if mode not in COHORT_MODES:
            raise InvalidQuery(
                f"mode must be 'vector_first', 'graph_first' or 'global', got {mode!r}"
            )
        s = settings or self.settings
        with span("search", mode=mode, k=k):
            return self._search(query_text, allowed, k, mode, s, return_trace, answer,
                                readers)

    def _search(self, query_text: str, allowed: frozenset[str], k: int, mode: CohortMode,
                s: CohortSettings, return_trace: bool, answer: bool,
                readers: frozenset[str] | None) -> CohortResult:
        """:meth:`search` after its checks."""
        trace = RetrievalTrace(query=query_text, mode=mode, k=k)
        started = time.perf_counter()
        # The index as this query reads it: synced with the catalog once, now (a build of
        # another process is seen), not again by each lane's search.
        index = self.index.for_query(readers)
        if mode == "global":
            hits, reduced = search_reports(
                self.catalog, index, self.embedder, query_text, allowed, k, s, trace,
                self.chat_model if answer else None, self.chat_model is not None)
            result = CohortResult(hits, answer=reduced)
        else:
            result = self._cohort(query_text, allowed, k, s, trace, index,
                                  graph_first=mode == "graph_first")
        trace.timings_ms["total"] = (time.perf_counter() - started) * 1000
        trace.final_provenance = {h.chunk_id: h.lanes[0] for h in result.hits}
        result.trace = trace if return_trace else None
        return result

    # -- vector_first / graph_first ------------------------------------------------

    def _cohort(self, query: str, allowed: frozenset[str], k: int, s: CohortSettings,
                trace: RetrievalTrace, index: ChunkIndex, graph_first: bool) -> CohortResult:
        depth = max(s.seed_candidates, k)
        with span("lane.seed"):
            vector, dense, lexical, t = seed_lists(index, self.embedder, query, allowed,
                                                   depth, trace)
        with span("fusion"):
            fused = fuse_seed_lists(dense, lexical, s)
        # The hub threshold is relative to the loaded chunk index (all namespaces; counting
        # one namespace's chunks in SQL costs a table scan per query).
        q = CohortQuery(query, vector, allowed, s, trace, self.catalog, index, self.graph,
                        len(index), k, dense=dense, lexical=lexical, fused=fused)
        q.seeds = [r.rowid for r in fused[:seed_width(s, k)]]
        trace.timings_ms["seed"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        expands = graph_first or any(lane.needs_entities and lane.enabled(s)
                                     for lane in VECTOR_FIRST)
        q.sources = q.seeds[: s.entity_from_seeds]
        links = q.links_of(q.sources) if q.sources and expands else {}
        linked = [e for r in q.sources for e, _, _ in links.get(r, [])]
        # the entities the query names and those its strongest seeds link to: one read
        query_entities, unknown = (cohort_query_entities(q, self.extractor, linked)
                                   if expands or s.completeness else ([], []))
        q.query_ids = [e.id for e in query_entities]
        if q.sources and expands:
            kept = set(q.non_hub(linked))
            for rowid in q.sources:
                q.seed_entities.extend(
                    [e for e, _, _ in links[rowid] if e in kept][: s.entities_per_seed])
        q.seed_entities = list(dict.fromkeys(q.seed_entities))
        trace.timings_ms["query_entities"] = (time.perf_counter() - t) * 1000

        if graph_first:
            with span("lane.graph"):
                GraphLane.traverse(q, q.start_entities, budget=max(s.graph_budget, 3 * k),
                                   floor=-1.0)
            if not q.query_ids:
                trace.notes.append("graph_first: the query names no known entity; traversal "
                                   "started from the strongest seeds' entities")
            SeedLane.fill(q)
        else:
            for lane in VECTOR_FIRST:
                if lane.enabled(s):
                    with span(f"lane.{lane.name}"):
                        lane.run(q)

        if s.completeness:
            complete(query_entities, unknown, q)
        else:
            trace.query_entities_found = [e.name for e in query_entities]
        trace.pool_size = len(q.pool)

        t = time.perf_counter()
        with span("rank", pool=len(q.pool)):
            selected = rank_pool(q)
        trace.timings_ms["rank"] = (time.perf_counter() - t) * 1000
        hits = self._hits(selected, q.pool, {r.rowid for r in dense}, q.stored)
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
        chunk_paths = {h.chunk_id: q.paths[h.rowid] for h in hits if h.rowid in q.paths}
        read = [*q.stored.values(), *ids.values()]
        return CohortResult(hits, paths=chunk_paths,
                            doc_gates={c.doc_id: DocGate(c.origin, c.access)
                                       if c.origin is not None or c.access is not None
                                       else None for c in read},
                            entity_docs=q.documents_mentioning(query_entities))

    def _hits(self, selected: list[Selected], pool: dict[int, Candidate], dense_rows: set[int],
              stored: dict[int, StoredChunk] | None = None) -> list[SearchHit]:
        """The selected rows as hits, each with its lanes and the seed lane's lists that
        held it (``dense`` when in ``dense_rows``, ``bm25`` when it has a BM25 score); their
        chunks are taken from ``stored`` (read while ranking) where it has them, the others
        read (and added to it)."""
        stored = stored if stored is not None else {}
        chunks = {r: stored[r] for r, _, _, _ in selected if r in stored}
        missing = [r for r, _, _, _ in selected if r not in chunks]
        if missing:
            read = self.catalog.chunks_by_rowid(missing)
            chunks.update(read)
            stored.update(read)
        hits: list[SearchHit] = []
        for rowid, score, sim, lexical in selected:
            chunk = chunks.get(rowid)
            if chunk is None:
                continue
            candidate = pool[rowid]
            lanes = (candidate.lane, *sorted(candidate.lanes - {candidate.lane}))
            hit = chunk_hit(chunk, score, len(hits) + 1, sim, lexical, lanes, "composite")
            hit.seed_lists = tuple(name for name, held in (("dense", rowid in dense_rows),
                                                           ("bm25", lexical is not None))
                                   if held)
            hits.append(hit)
        return hits
