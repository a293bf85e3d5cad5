"""Search as one caller: every mode, over-fetched, row-filtered, refilled, then traced.

:class:`GovernedSearch` wraps the engines (it does not subclass them): it asks the cohort
engine (``vector_first``, ``graph_first``, ``global``) or the hybrid searcher (``hybrid``,
``dense``) for more than ``k``, keeps what :class:`~docgraph.governance.visibility.Visibility`
lets through (community reports re-assembled where a hidden row contributed), widens and
asks again while fewer than ``k`` survive, and only then filters the trace and hands it to
``record_trace`` (the request stores it with its audit record, in one write). Context
assembly calls the same ``search``, so its sections come from the same filtered hits.

The engines get the caller's principals: their index lanes rank only documents the caller
may read (filtered before ranking, :mod:`docgraph.store.restricted`), so a caller who may
read 1% of a namespace still gets ``k`` hits; the refill is left for table rows the re-check
hides and for an index that cannot filter (Milvus).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import cached_property

from docgraph.embedding.embedders import Embedder
from docgraph.governance.reports import visible_report
from docgraph.governance.visibility import Visibility, visible_mentions
from docgraph.graph.extract import EntityExtractor
from docgraph.graph.normalize import canonical_key
from docgraph.limits import ENGINE_MAX_K, SearchMode
from docgraph.llm import ChatModel
from docgraph.model import SearchHit
from docgraph.retrieve.cohort import (
    CohortResult,
    CohortSearch,
    map_reduce_global_context,
)
from docgraph.retrieve.hybrid import HybridSearcher
from docgraph.retrieve.trace import RetrievalTrace, stored_payload
from docgraph.store.base import TraceEntry
from docgraph.store.graph import GraphStore
from docgraph.telemetry import span


def _doc_of(chunk_id: str) -> str:
    return chunk_id.rsplit("#chunk-", 1)[0]


class GovernedSearch:
    """The engines seen by one caller in one request (see the module docstring).
    ``chat_model`` answers global mode (map-reduce over the reports); by default the cohort
    engine's own."""

    def __init__(self, cohort: Callable[[], CohortSearch], hybrid: Callable[[], HybridSearcher],
                 scope: Visibility, record_trace: Callable[[TraceEntry], None] | None, *,
                 chat_model: ChatModel | None = None, overfetch: int = 2,
                 max_rounds: int = 4) -> None:
        self._make_cohort = cohort
        self._make_hybrid = hybrid
        self.scope = scope
        self.record_trace = record_trace
        self.chat_model = chat_model
        self.overfetch = overfetch
        self.max_rounds = max_rounds

    @cached_property
    def cohort(self) -> CohortSearch:
        """The cohort engine, made on first use (``hybrid`` and ``dense`` never need it)."""
        return self._make_cohort()

    @cached_property
    def hybrid(self) -> HybridSearcher:
        """The single-chunk searcher, made on first use."""
        return self._make_hybrid()

    @property
    def embedder(self) -> Embedder:
        """The cohort engine's embedder."""
        return self.cohort.embedder

    @property
    def graph(self) -> GraphStore:
        """The graph store behind the cohort engine."""
        return self.cohort.graph

    @property
    def extractor(self) -> EntityExtractor | None:
        """The cohort engine's entity extractor."""
        return self.cohort.extractor

    def _visible_hits(self, hits: list[SearchHit]) -> list[SearchHit]:
        kept: list[SearchHit] = []
        for hit in self.scope.visible(hits):
            if hit.doc_id.startswith("community://"):
                shown = visible_report(hit, self.scope, self.graph)
                if shown is None:
                    continue
                hit = shown
            kept.append(hit)
        return kept

    @property
    def readers(self) -> frozenset[str] | None:
        """The principals the engines rank for (None: the owner, who reads every
        document)."""
        return None if self.scope.every_document else self.scope.caller.principals

    def _once(self, query_text: str, allowed: frozenset[str], k: int, mode: SearchMode
              ) -> CohortResult:
        # The caller's principals go down to the index lanes: a document the caller may
        # not read is filtered out before ranking, so k is filled from what it may read
        # (the hits are still decided one by one below).
        if mode == "hybrid" or mode == "dense":
            with span("search", mode=mode, k=k):
                return CohortResult(self.hybrid.search(query_text, namespaces=allowed, k=k,
                                                       mode=mode, readers=self.readers))
        result = self.cohort.search(query_text, namespaces=allowed, k=k, mode=mode,
                                    return_trace=True, answer=False, readers=self.readers)
        # the gates the engine read with the chunks are the catalog's record: deciding its
        # hits and candidates starts from them (a hit's own ``origin`` is never trusted
        # alone, see Visibility.visible)
        self.scope.know_gates(result.doc_gates)
        return result

    def search(self, query_text: str, *, namespaces: Iterable[str], k: int = 10,
               mode: SearchMode = "vector_first", return_trace: bool = False) -> CohortResult:
        """Up to ``k`` hits the caller may see, in retrieval order (ranks renumbered).

        ``namespaces`` can only narrow the caller's set (the mode is checked at the entry,
        :meth:`~docgraph.governance.Governance.retrieve`)."""
        allowed = frozenset(namespaces) & self.scope.namespaces
        fetch = min(ENGINE_MAX_K, max(k * self.overfetch, k))
        kept: list[SearchHit] = []
        result = CohortResult([])
        for _ in range(self.max_rounds):
            result = self._once(query_text, allowed, fetch, mode) if allowed else result
            kept = self._visible_hits(result.hits)
            if len(kept) >= k or len(result.hits) < fetch or fetch >= ENGINE_MAX_K:
                break
            fetch = min(ENGINE_MAX_K, fetch * 2)
        self.scope.dropped += len(result.hits) - len(kept)
        hits = [replace(h, original_rank=i + 1) for i, h in enumerate(kept[:k])]
        model = self.chat_model if self.chat_model is not None or mode != "global" \
            else self.cohort.chat_model  # the engine's own (made with the settings as synced)
        if mode == "global" and model is not None and hits:
            result.answer, hits = map_reduce_global_context(query_text, hits, model, k)
        if result.trace is not None:
            self._finish_trace(result.trace, hits, result.entity_docs)
        result.paths = {c: p for c, p in result.paths.items()
                        if c in {h.chunk_id for h in hits}}
        result.hits = hits
        if not return_trace:
            result.trace = None
        return result

    def _finish_trace(self, trace: RetrievalTrace, hits: list[SearchHit],
                      entity_docs: dict[str, set[tuple[str, str]]]) -> None:
        """Drop every candidate the caller may not see, record what was returned, store.
        ``entity_docs``: per entity name, documents known to mention it (the engine's)."""
        ids = {c for lane in trace.candidates.values() for c in lane}
        hidden = self.scope.hidden_documents({_doc_of(c) for c in ids})
        trace.candidates = {lane: [c for c in rows if _doc_of(c) not in hidden]
                            for lane, rows in trace.candidates.items()}
        trace.final_provenance = {h.chunk_id: h.lanes[0] for h in hits if h.lanes}
        # a name with a mention in a document the caller may see is seen; only the others
        # are decided by reading their mentions
        undecided = [n for n in trace.query_entities_found
                     if not self._seen_in(entity_docs.get(n, set()))]
        unseen = self._unseen_entities(undecided)
        if unseen:  # an entity only hidden rows mention is "not found" for this caller
            trace.query_entities_found = [n for n in trace.query_entities_found
                                          if n not in unseen]
            trace.query_entities_missing = [*trace.query_entities_missing, *sorted(unseen)]
            trace.completeness = {n: "not found" if n in unseen else how
                                  for n, how in trace.completeness.items()}
        if self.record_trace is not None:
            self.record_trace(TraceEntry(trace.id, trace.created_at,
                                         stored_payload(trace, self.scope.caller.user_id)))


    def _seen_in(self, documents: set[tuple[str, str]]) -> bool:
        """Whether the caller may see one of these (namespace, document)s."""
        reachable = {doc for namespace, doc in documents if namespace in self.scope.namespaces}
        return bool(reachable - self.scope.hidden_documents(reachable))

    def _unseen_entities(self, names: list[str]) -> set[str]:
        """The entity names (as found in the graph) that no chunk visible to the caller
        mentions."""
        if not names:
            return set()
        graph = self.graph
        by_key = {canonical_key(n): n for n in names} | {n.casefold(): n for n in names}
        entities = graph.entities_by_key(by_key, self.scope.namespaces)
        seen = visible_mentions(graph, self.scope, [e.id for e in entities], 1)
        shown = {e.name for e in entities if e.id in seen}
        return {n for n in names if n not in shown}
