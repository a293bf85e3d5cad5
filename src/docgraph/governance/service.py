"""The one governed service: every read from every entry point passes through it once.

MCP tools, the JSON API, the CLI and the Python API all call :class:`Governance`. Each
operation runs one chain, in one direction::

    validate inputs -> resolve caller -> namespaces (pre-filter, routing may only narrow)
      -> run (engines through GovernedSearch / listings through browse)
         -> Visibility (the one row check) -> trace stored after filtering
      -> audit record (always, also for denials and errors)

No entry point composes its own checks; there is no second path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from docgraph.errors import ConfigError, InvalidQuery
from docgraph.evidence.hints import QueryTransformer
from docgraph.evidence.lookup import KnowledgeService, LookupResult
from docgraph.evidence.port import KnowledgeSearchHit, hit_from_search_hit
from docgraph.evidence.project import publish
from docgraph.evidence.settings import EvidenceSettings
from docgraph.governance import browse
from docgraph.governance.audit import AuditLog, AuditRecord, stamp_token
from docgraph.governance.caller import AccessDenied, Caller
from docgraph.governance.entitlements import Entitlements, principal_of, resolve_namespaces
from docgraph.governance.inputs import check_count, check_optional_text, check_text
from docgraph.governance.ports import GovernedIndex
from docgraph.governance.read import READ_SCOPES, ReadPage, ReadScope
from docgraph.governance.read import read as read_by_id
from docgraph.governance.routing import route_namespaces
from docgraph.governance.rows import RowAuthorizer
from docgraph.governance.search import GovernedSearch
from docgraph.governance.visibility import Visibility
from docgraph.limits import (
    MAX_CONTEXT_BUDGET,
    MAX_CURSOR_CHARS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PAGE,
    MAX_READ_BUDGET,
    MIN_CONTEXT_BUDGET,
    MIN_READ_BUDGET,
    SEARCH_MODES,
    SearchMode,
)
from docgraph.llm import ChatModel
from docgraph.model import SearchHit
from docgraph.retrieve.cohort import CohortResult
from docgraph.retrieve.context import GraphContext, assemble_context
from docgraph.sources.naming import PublicIdentity
from docgraph.store.graph import CommunityInfo, EntityInfo, Neighbor
from docgraph.telemetry import content_attributes, request_scope, span
from docgraph.telemetry.metrics import DENIALS, GOVERNED_REQUESTS, ROW_CHECK_FAILURES
from docgraph.telemetry.tracing import current_trace_id

R = TypeVar("R")
#: The index a :class:`Governance` governs: anything with what :class:`GovernedIndex` lists
#: (the composition root, a :class:`~docgraph.DocGraph`); kept as its own type in
#: :attr:`Governance.root` for the serve layer above.
IndexT = TypeVar("IndexT", bound=GovernedIndex, covariant=True)


@dataclass
class Answer:
    """A generated answer with the evidence keys it cites (only visible, used blocks)."""

    text: str
    citations: list[str] = field(default_factory=list)
    blocks: list[SearchHit] = field(default_factory=list)


Redactor = Callable[[Answer], Answer]


class Governance(Generic[IndexT]):
    """Governed access to one index (``root``, see :class:`GovernedIndex`): validate,
    resolve, pre-filter, re-check, trace, audit."""

    def __init__(
        self,
        root: IndexT,
        entitlements: Entitlements,
        row_authorizer: RowAuthorizer | None = None,
        *,
        router: ChatModel | None = None,
        descriptions: Mapping[str, str] | None = None,
        chat_model: ChatModel | None = None,
        redactor: Redactor | None = None,
        audit: AuditLog | None = None,
        evidence: EvidenceSettings | None = None,
        overfetch: int = 2,
        base_url: str | None = None,
    ) -> None:
        self._root = root
        #: The index's settings: one object, brought up to date at each request's entry.
        self.settings = root.settings
        #: The server's base URL, for console links in results that must carry a ``url``
        #: (default: ``[serve]``'s, see :meth:`~docgraph.config.ServeSettings.base_url`).
        self.base_url = base_url or self.settings.serve.base_url()
        self.entitlements = entitlements
        self.row_authorizer = row_authorizer
        self.router = router
        self.descriptions = dict(descriptions or {})
        self.chat_model = chat_model
        self.redactor = redactor
        self.audit = audit if audit is not None else AuditLog(root.audit_store)
        self.evidence = evidence or EvidenceSettings()
        self.overfetch = overfetch
        #: Whether callers read every document whatever its permission set: only the
        #: index file's owner of a local command without ``[governance]``
        #: (:func:`~docgraph.serve.setup.local_governance`), who reads every row too.
        self.every_document = False

    @property
    def root(self) -> IndexT:
        """The index this service governs, as it was given (the serve layer's facade)."""
        return self._root

    # -- the chain ----------------------------------------------------------------------

    def namespaces(self, caller: Caller, query: str | None = None) -> frozenset[str]:
        """The caller's entitled namespaces, narrowed by routing when a query is given."""
        return self._namespaces(caller, query, self._root.query_store.namespaces())

    def _namespaces(self, caller: Caller, query: str | None, known: Iterable[str]
                    ) -> frozenset[str]:
        """:meth:`namespaces` over ``known`` (the namespaces that have a source)."""
        entitled = resolve_namespaces(caller, self.entitlements, known)
        if query is None or self.router is None:
            return entitled
        return route_namespaces(query, entitled, self.descriptions, self.router)

    def _request(self, caller: Caller, operation: str, query: str,
                 run: Callable[[Visibility, AuditRecord], R]) -> R:
        """Resolve, build the request's visibility, run, audit (always: the record and the
        traces the request made, in one write). Admin changes of other processes apply from
        here (:meth:`GovernedIndex.sync_settings`), once.

        The request runs under its request id (the transport's, else a new one): the audit
        record, the traces and the log lines of the request carry it; with tracing on it
        is one span (``docgraph.governed``) with a child per phase."""
        with span("governed", operation=operation, **content_attributes(query=query or None)), \
                request_scope(current_trace_id()) as request_id:
            return self._governed(caller, operation, query, run, request_id)

    def _governed(self, caller: Caller, operation: str, query: str,
                  run: Callable[[Visibility, AuditRecord], R], request_id: str) -> R:
        """:meth:`_request` under its request id."""
        self._root.sync_settings()
        record = AuditRecord(user_id=caller.user_id, operation=operation,
                             role=caller.active_role, query_hash=AuditRecord.hash_query(query),
                             issuer=caller.issuer, subject=caller.subject,
                             request_id=request_id)
        started = time.perf_counter()
        scope: Visibility | None = None
        try:
            with span("resolve_namespaces"):
                # the principal every decision of this request is made for: the caller with
                # the groups the policy declares it a member of
                caller = principal_of(caller, self.entitlements)
                record.groups = sorted(caller.groups)
                # One read of the registered sources per request: the namespaces that have
                # one are resolved from it, and the request's agent-visible names and URLs
                # (:meth:`identity`) come from the same rows.
                sources = tuple(self._root.query_store.list_sources())
                allowed = self._namespaces(caller, query or None,
                                           {s.namespace for s in sources})
                record.namespaces = sorted(allowed)
            scope = Visibility(caller, allowed, self.row_authorizer, self._root.query_store,
                               sources=sources, every_document=self.every_document)
            return run(scope, record)
        except AccessDenied as exc:
            record.outcome, record.reason = "denied", str(exc)
            DENIALS.labels(operation).inc()
            raise
        except Exception as exc:
            record.outcome, record.reason = "error", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if scope is not None:
                record.row_drops = scope.dropped
                record.authorizer_failures = list(scope.failures)
                ROW_CHECK_FAILURES.inc(len(scope.failures))
            record.duration_ms = (time.perf_counter() - started) * 1000
            if caller.issuer is not None:
                record.traces = [stamp_token(trace, caller) for trace in record.traces]
            GOVERNED_REQUESTS.labels(operation, record.outcome).inc()
            with span("audit", outcome=record.outcome):
                self.audit.write(record)

    def _search(self, scope: Visibility, record: AuditRecord) -> GovernedSearch:
        """The engines as ``scope`` sees them; the traces they make go to ``record``, stored
        with it in one write when the request ends (:meth:`_request`)."""
        root = self._root
        return GovernedSearch(root.cohort_engine, root.searcher, scope, record.traces.append,
                              overfetch=self.overfetch)  # global mode: the engine's model

    # -- retrieval ----------------------------------------------------------------------

    def _pending(self, scope: Visibility) -> int:
        """Chunks of the caller's namespaces not embedded yet (the dense lane skips them
        until their build embeds them), so an answer can say its dense lane was partial."""
        if not scope.namespaces:
            return 0
        return sum(self._root.chunk_index().pending_counts(scope.namespaces).values())

    def retrieve(self, caller: Caller, query_text: str, *, k: int = 10,
                 mode: SearchMode = "vector_first", return_trace: bool = False) -> CohortResult:
        """Search as ``caller`` in any mode (cohort modes with lanes, paths and a trace;
        ``hybrid`` and ``dense`` rank single chunks)."""
        check_text(query_text, "query_text")
        check_count(k, "k")
        if mode not in SEARCH_MODES:
            raise InvalidQuery(f"mode: must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")

        def run(scope: Visibility, record: AuditRecord) -> CohortResult:
            engine = self._search(scope, record)
            result = engine.search(query_text, namespaces=scope.namespaces, k=k, mode=mode,
                                   return_trace=return_trace)
            record.evidence_keys = [h.chunk_id for h in result.hits]
            return replace(result, unavailable_row_sources=tuple(sorted(scope.unavailable)),
                           pending_chunks=self._pending(scope))
        return self._request(caller, f"retrieve:{mode}", query_text, run)

    def search(self, caller: Caller, query_text: str, *, k: int = 10,
               mode: SearchMode = "vector_first") -> list[SearchHit]:
        """The hits of :meth:`retrieve`."""
        return self.retrieve(caller, query_text, k=k, mode=mode).hits

    def context(self, caller: Caller, query_text: str, *, token_budget: int = 4000) -> GraphContext:
        """Entities | Relationships | Community Reports | Source Text from visible text only."""
        check_text(query_text, "query_text")
        check_count(token_budget, "token_budget", low=MIN_CONTEXT_BUDGET, high=MAX_CONTEXT_BUDGET)

        def run(scope: Visibility, record: AuditRecord) -> GraphContext:
            engine = self._search(scope, record)
            context = assemble_context(engine, query_text, namespaces=scope.namespaces,
                                       token_budget=token_budget)
            record.evidence_keys = context.chunk_ids
            return replace(context, unavailable_row_sources=tuple(sorted(scope.unavailable)),
                           pending_chunks=self._pending(scope))
        return self._request(caller, "context", query_text, run)

    def lookup(self, caller: Caller, query: str) -> LookupResult:
        """The evidence pipeline (``lookup_knowledge``) as ``caller``: the governed cohort
        search in ``vector_first`` mode answers each search the pipeline asks for, then
        post-processing and projection with agent-visible ids and citation URLs (the blocks
        keep the stored keys). Calls go one way: this drives the pipeline's steps and hands
        it hits and names; the pipeline never calls back."""
        check_text(query, "query")

        def run(scope: Visibility, record: AuditRecord) -> LookupResult:
            with span("evidence"):
                return evidence(scope, record)

        def evidence(scope: Visibility, record: AuditRecord) -> LookupResult:
            engine = self._search(scope, record)
            service = KnowledgeService(
                None, rag=self.settings.rag, evidence=self.evidence,
                transformer=QueryTransformer(scope.namespaces, descriptions=self.descriptions),
            )
            steps = service.lookup_steps(query, searched="vector_first")
            request = next(steps)
            while True:
                if request.mode != "hybrid":  # the composite follows the hybrid convention
                    raise InvalidQuery(f"the governed evidence search follows the hybrid "
                                       f"convention only, got {request.mode!r}")
                allowed = scope.namespaces if request.category_filter is None \
                    else scope.namespaces & request.category_filter
                hits: list[KnowledgeSearchHit] = [hit_from_search_hit(h) for h in engine.search(
                    request.query, namespaces=allowed, k=request.top_k,
                    mode="vector_first").hits] if allowed else []
                try:
                    request = steps.send(hits)
                except StopIteration as done:
                    result: LookupResult = done.value
                    break
            record.evidence_keys = [b.evidence_key for b in result.blocks]
            identity = self.identity(scope)
            names = {b.evidence_key: (
                identity.key(b.namespace, b.evidence_key),
                identity.url(b.namespace, b.doc_id, b.source, b.pages[0] if b.pages else None))
                for b in result.blocks if b.namespace and b.doc_id}
            return replace(result, projection=publish(result.projection, names),
                           unavailable_row_sources=tuple(sorted(scope.unavailable)),
                           pending_chunks=self._pending(scope))
        return self._request(caller, "lookup_knowledge", query, run)

    def answer(self, caller: Caller, query_text: str, *, k: int = 8) -> Answer:
        """Retrieve through the governed search, generate with the chat model, keep only
        citations of blocks actually given to it, then apply the redaction hook."""
        if self.chat_model is None:
            raise ConfigError("answer() needs a chat model (configure one for Governance)")
        model = self.chat_model
        check_text(query_text, "query_text")
        check_count(k, "k")

        def run(scope: Visibility, record: AuditRecord) -> Answer:
            engine = self._search(scope, record)
            hits = engine.search(query_text, namespaces=scope.namespaces, k=k).hits
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
            return answer
        return self._request(caller, "answer", query_text, run)

    # -- reading ------------------------------------------------------------------------

    def identity(self, scope: Visibility | None = None) -> PublicIdentity:
        """How agents see document ids and citation URLs (the sources as ``scope``'s request
        read them, else as registered now), with console links on :attr:`base_url`."""
        sources = scope.sources if scope is not None else self._root.query_store.list_sources()
        return PublicIdentity(sources, self.base_url)

    def read(self, caller: Caller, item_id: str, *, scope: ReadScope = "section",
             token_budget: int = 2000, cursor: str | None = None) -> ReadPage:
        """One page of what ``item_id`` (an evidence key or document id, agent-visible or
        stored form) names: the chunk, its section around it or the whole document, within
        ``token_budget``. Anything the caller may not read, or that does not exist, is the
        same :class:`~docgraph.errors.NotFound`."""
        check_text(item_id, "id", max_chars=MAX_ID_CHARS)
        check_count(token_budget, "token_budget", low=MIN_READ_BUDGET, high=MAX_READ_BUDGET)
        cursor = check_optional_text(cursor, "cursor", max_chars=MAX_CURSOR_CHARS)
        if scope not in READ_SCOPES:
            raise InvalidQuery(f"scope: must be one of {', '.join(READ_SCOPES)}, got {scope!r}")

        def run(visibility: Visibility, record: AuditRecord) -> ReadPage:
            page = read_by_id(self._root.query_store, visibility, self.identity(visibility),
                              item_id.strip(), span_scope=scope, token_budget=token_budget,
                              cursor=cursor, count_tokens=self._root.embedder.count_tokens)
            record.evidence_keys = [c.chunk_id for c in page.chunks]
            return page
        return self._request(caller, "read", item_id, run)

    # -- listings -----------------------------------------------------------------------

    def entities(self, caller: Caller, query: str | None = None,
                 entity_type: str | None = None, limit: int = 50) -> list[EntityInfo]:
        """Entities (name filter, type) with at least one chunk the caller may see."""
        name = check_optional_text(query, "query", max_chars=MAX_NAME_CHARS)
        kind = check_optional_text(entity_type, "entity_type", max_chars=MAX_NAME_CHARS)
        check_count(limit, "limit", high=MAX_PAGE)
        return self._request(caller, "entities", name or "",
                             lambda scope, _: browse.entities(self._root, scope, name, kind,
                                                              limit))

    def entity_mentions(self, caller: Caller, query: str, *, k: int = 10,
                        per_entity: int = 3) -> list[browse.EntityMentions]:
        """Entities matching or named by ``query``, each with visible chunks mentioning it."""
        check_text(query, "query_text")
        check_count(k, "k")
        return self._request(caller, "search_entities", query,
                             lambda scope, _: browse.entity_mentions(
                                 self._root, scope, query.strip(), k, per_entity))

    def neighbors(self, caller: Caller, entity: str, *, limit: int = 20) -> list[Neighbor]:
        """Entities co-occurring with ``entity`` that the caller sees a mention of."""
        check_text(entity, "entity", max_chars=MAX_NAME_CHARS)
        check_count(limit, "limit", high=MAX_PAGE)
        return self._request(caller, "neighbors", entity,
                             lambda scope, _: browse.neighbors(self._root, scope, entity,
                                                               limit))

    def communities(self, caller: Caller, *, level: int | None = None, limit: int = 100
                    ) -> list[CommunityInfo]:
        """Communities with the titles and members the caller may see."""
        check_count(limit, "limit", high=MAX_PAGE)
        return self._request(caller, "communities", "",
                             lambda scope, _: browse.communities(self._root, scope, level,
                                                                 limit))

    def documents(self, caller: Caller, after_id: int = 0, limit: int = 100) -> browse.DocumentPage:
        """One page of the source documents in reach (row documents only where the row
        re-check passes; community reports are not documents)."""
        check_count(limit, "limit", high=MAX_PAGE)
        return self._request(caller, "documents", "",
                             lambda scope, _: browse.documents(self._root, scope, after_id,
                                                               limit))

    def index_status(self, caller: Caller) -> browse.StatusView:
        """Freshness, counts and failed files of the caller's namespaces only."""
        return self._request(caller, "index_status", "",
                             lambda scope, _: browse.status(self._root, scope))
