"""The governed entry point: every operation resolves the caller's namespaces, searches with
them as a pre-filter, re-checks table-row chunks after ranking (over-fetching to refill), and
filters every text-bearing output (hits, trace, context, reports, answers) the same way.

There is no second governance path: context assembly, global mode and answers all run
through :class:`GovernedCohortSearch`, whose ``search`` applies the filter.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from docgraph.errors import ConfigError
from docgraph.governance.audit import AuditLog, AuditRecord
from docgraph.governance.caller import AccessDenied, Caller
from docgraph.governance.entitlements import Entitlements, resolve_namespaces
from docgraph.governance.reports import visible_report
from docgraph.governance.routing import route_namespaces
from docgraph.governance.rows import RowAuthorizer, check_rows
from docgraph.llm import ChatModel
from docgraph.model import DocumentRecord, SearchHit
from docgraph.retrieve.cohort import (
    CohortMode,
    CohortResult,
    CohortSearch,
    CohortSettings,
    map_reduce_global_context,
)
from docgraph.retrieve.context import GraphContext, assemble_context
from docgraph.retrieve.hybrid import MAX_K
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.sqlite_graph import EntityInfo

if TYPE_CHECKING:
    from docgraph.app import DocGraph

log = logging.getLogger(__name__)


@dataclass
class Answer:
    """A generated answer with the evidence keys it cites (only visible, used blocks)."""

    text: str
    citations: list[str] = field(default_factory=list)
    blocks: list[SearchHit] = field(default_factory=list)


Redactor = Callable[[Answer], Answer]


@dataclass
class _FilterStats:
    dropped: int = 0
    failures: list[str] = field(default_factory=list)


def _doc_of(chunk_id: str) -> str:
    return chunk_id.rsplit("#chunk-", 1)[0]


class GovernedCohortSearch(CohortSearch):
    """A cohort engine bound to one caller: its ``search`` over-fetches, drops what the row
    re-check rejects, re-assembles community reports from visible members, and filters the
    trace. Built per request (it holds the caller)."""

    def __init__(self, base: CohortSearch, caller: Caller, authorizer: RowAuthorizer | None,
                 overfetch: int = 2, max_rounds: int = 4) -> None:
        super().__init__(base.catalog, base.index, base.graph, base.embedder, base.extractor,
                         base.settings, base.traces, chat_model=None)
        self.caller = caller
        self.authorizer = authorizer
        self.overfetch = overfetch
        self.max_rounds = max_rounds
        self.report_model = base.chat_model
        self.stats = _FilterStats()

    def _visible(self, hits: list[SearchHit]) -> list[SearchHit]:
        origins = {h.doc_id: h.origin for h in hits if h.origin is not None}
        decision = check_rows(self.caller, self.authorizer, origins)
        self.stats.failures.extend(decision.failures)
        kept: list[SearchHit] = []
        for hit in hits:
            if hit.doc_id in decision.denied_doc_ids:
                self.stats.dropped += 1
                continue
            if hit.doc_id.startswith("community://"):
                shown = visible_report(hit, self.caller, self.catalog, self.graph,
                                       self.authorizer)
                if shown is None:
                    self.stats.dropped += 1
                    continue
                hit = shown
            kept.append(hit)
        return kept

    def _filter_trace(self, trace: RetrievalTrace) -> None:
        ids = {c for lane in trace.candidates.values() for c in lane}
        ids |= set(trace.final_provenance)
        origins = self.catalog.origins_for({_doc_of(c) for c in ids})
        denied = check_rows(self.caller, self.authorizer, origins).denied_doc_ids
        trace.candidates = {lane: [c for c in rows if _doc_of(c) not in denied]
                            for lane, rows in trace.candidates.items()}
        trace.final_provenance = {c: lane for c, lane in trace.final_provenance.items()
                                  if _doc_of(c) not in denied}

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
        """Cohort search for the bound caller; returns up to ``k`` visible hits."""
        allowed = frozenset(namespaces)
        fetch = min(MAX_K, max(k * self.overfetch, k))
        kept: list[SearchHit] = []
        result = CohortResult([])
        for _ in range(self.max_rounds):
            result = super().search(query_text, namespaces=allowed, k=fetch, mode=mode,
                                    return_trace=True, settings=settings)
            kept = self._visible(result.hits)
            if len(kept) >= k or len(result.hits) < fetch or fetch >= MAX_K:
                break
            fetch = min(MAX_K, fetch * 2)
        hits = [replace(h, original_rank=i + 1) for i, h in enumerate(kept[:k])]
        if mode == "global" and self.report_model is not None and hits:
            answer, hits = map_reduce_global_context(query_text, hits, self.report_model, k)
            result.answer = answer
        trace = result.trace
        if trace is not None:
            self._filter_trace(trace)
            trace.final_provenance = {h.chunk_id: h.lanes[0] for h in hits if h.lanes}
        visible_ids = {h.chunk_id for h in hits}
        result.paths = {c: p for c, p in result.paths.items() if c in visible_ids}
        result.hits = hits
        result.trace = trace if return_trace else None
        return result


class Governance:
    """Governed access to a :class:`DocGraph`: resolve, pre-filter, re-check, audit."""

    def __init__(
        self,
        graph: DocGraph,
        entitlements: Entitlements,
        row_authorizer: RowAuthorizer | None = None,
        *,
        router: ChatModel | None = None,
        descriptions: Mapping[str, str] | None = None,
        chat_model: ChatModel | None = None,
        redactor: Redactor | None = None,
        audit: AuditLog | None = None,
        overfetch: int = 2,
    ) -> None:
        self.graph = graph
        self.entitlements = entitlements
        self.row_authorizer = row_authorizer
        self.router = router
        self.descriptions = dict(descriptions or {})
        self.chat_model = chat_model
        self.redactor = redactor
        self.audit = audit if audit is not None else AuditLog(graph.catalog)
        self.overfetch = overfetch

    # -- namespaces -----------------------------------------------------------------

    def namespaces(self, caller: Caller, query: str | None = None) -> frozenset[str]:
        """The caller's entitled namespaces, narrowed by routing when a query is given."""
        entitled = resolve_namespaces(caller, self.entitlements, self.graph.namespaces())
        if query is None or self.router is None:
            return entitled
        return route_namespaces(query, entitled, self.descriptions, self.router)

    def _engine(self, caller: Caller) -> GovernedCohortSearch:
        return GovernedCohortSearch(self.graph.cohort_engine(), caller, self.row_authorizer,
                                    self.overfetch)

    def _audited(self, caller: Caller, operation: str, query: str,
                 run: Callable[[frozenset[str], AuditRecord], Any]) -> Any:
        record = AuditRecord(user_id=caller.user_id, operation=operation,
                             role=caller.active_role, query_hash=AuditRecord.hash_query(query))
        started = time.perf_counter()
        try:
            allowed = self.namespaces(caller, query or None)
            record.namespaces = sorted(allowed)
            return run(allowed, record)
        except AccessDenied as exc:
            record.outcome, record.reason = "denied", str(exc)
            raise
        except Exception as exc:
            record.outcome, record.reason = "error", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            record.duration_ms = (time.perf_counter() - started) * 1000
            self.audit.write(record)

    # -- operations -------------------------------------------------------------------

    def retrieve(self, caller: Caller, query_text: str, *, k: int = 10,
                 mode: CohortMode = "vector_first", return_trace: bool = False) -> CohortResult:
        """Cohort search as ``caller`` (all lanes and modes)."""
        def run(allowed: frozenset[str], record: AuditRecord) -> CohortResult:
            engine = self._engine(caller)
            result = engine.search(query_text, namespaces=allowed, k=k, mode=mode,
                                   return_trace=return_trace)
            record.evidence_keys = [h.chunk_id for h in result.hits]
            record.row_drops = engine.stats.dropped
            record.authorizer_failures = engine.stats.failures
            return result
        result: CohortResult = self._audited(caller, f"retrieve:{mode}", query_text, run)
        return result

    def search(self, caller: Caller, query_text: str, *, k: int = 10,
               mode: CohortMode = "vector_first") -> list[SearchHit]:
        """The hits of :meth:`retrieve`."""
        return self.retrieve(caller, query_text, k=k, mode=mode).hits

    def context(self, caller: Caller, query_text: str, *, token_budget: int = 4000
                ) -> GraphContext:
        """Entities | Relationships | Community Reports | Source Text from visible text only."""
        def run(allowed: frozenset[str], record: AuditRecord) -> GraphContext:
            engine = self._engine(caller)
            context = assemble_context(engine, query_text, namespaces=allowed,
                                       token_budget=token_budget)
            record.evidence_keys = context.chunk_ids
            record.row_drops = engine.stats.dropped
            record.authorizer_failures = engine.stats.failures
            return context
        context: GraphContext = self._audited(caller, "context", query_text, run)
        return context

    def answer(self, caller: Caller, query_text: str, *, k: int = 8) -> Answer:
        """Retrieve through the governed search, generate with the chat model, keep only
        citations of blocks actually given to it, then apply the redaction hook."""
        if self.chat_model is None:
            raise ConfigError("answer() needs a chat model (configure one for Governance)")
        model = self.chat_model

        def run(allowed: frozenset[str], record: AuditRecord) -> Answer:
            engine = self._engine(caller)
            hits = engine.search(query_text, namespaces=allowed, k=k).hits
            blocks = "\n\n".join(f"[{i + 1}] {h.text}" for i, h in enumerate(hits))
            text = model.complete(
                "Answer the question using only the numbered blocks; cite blocks as [n].\n\n"
                f"Question: {query_text}\n\n{blocks}"
            ) if hits else "No visible evidence answers this question."
            cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text)})
            used = [hits[n - 1] for n in cited if 1 <= n <= len(hits)]
            # Citations that point at no visible block are removed from the text.
            text = re.sub(r"\[(\d+)\]",
                          lambda m: m.group(0) if 1 <= int(m.group(1)) <= len(hits) else "",
                          text)
            answer = Answer(text, [h.chunk_id for h in used], used)
            if self.redactor is not None:
                answer = self.redactor(answer)
            record.evidence_keys = answer.citations
            record.row_drops = engine.stats.dropped
            return answer
        answer: Answer = self._audited(caller, "answer", query_text, run)
        return answer

    def entities(self, caller: Caller, query: str | None = None, entity_type: str | None = None,
                 limit: int = 50) -> list[EntityInfo]:
        """Entities with at least one chunk the caller may see."""
        def run(allowed: frozenset[str], record: AuditRecord) -> list[EntityInfo]:
            found = self.graph.entities(allowed, query, entity_type, limit * 2)
            links = self.graph.graph_store.chunks_for_entities([e.id for e in found], 50)
            chunks = self.graph.catalog.chunks_by_rowid([r for _, r, _, _ in links])
            origins = {c.doc_id: c.origin for c in chunks.values() if c.origin is not None}
            denied = check_rows(caller, self.row_authorizer, origins).denied_doc_ids
            visible = {e for e, r, _, _ in links
                       if r in chunks and chunks[r].doc_id not in denied}
            return [e for e in found if e.id in visible][:limit]
        found: list[EntityInfo] = self._audited(caller, "entities", query or "", run)
        return found

    def documents(self, caller: Caller, after_id: int = 0, limit: int = 100
                  ) -> list[DocumentRecord]:
        """Documents in reach (row documents only where the row re-check passes)."""
        def run(allowed: frozenset[str], record: AuditRecord) -> list[DocumentRecord]:
            docs = self.graph.documents(allowed, after_id, limit)
            origins = self.graph.catalog.origins_for(d.doc_id for d in docs)
            denied = check_rows(caller, self.row_authorizer, origins).denied_doc_ids
            return [d for d in docs if d.doc_id not in denied]
        docs: list[DocumentRecord] = self._audited(caller, "documents", "", run)
        return docs
