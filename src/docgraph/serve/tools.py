"""The agent tools as plain, governed operations, shared by the MCP server and the HTTP API.

Every operation takes a :class:`~docgraph.governance.Caller` resolved by the transport (never
from the arguments) and validated arguments; it resolves the caller's namespaces through
:class:`~docgraph.governance.Governance` (an empty set is an :class:`AccessDenied`), runs the
governed search, and returns a JSON-ready dict. No operation accepts a namespace, domain or
role argument. Operations are blocking: transports run them in worker threads. Their
arguments and the agent guidance are in :mod:`docgraph.serve.tool_args`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from docgraph.app import DocGraph
from docgraph.budgets import char_limit, clip
from docgraph.errors import InvalidQuery
from docgraph.governance import Caller, Governance
from docgraph.governance.inputs import InvalidArgument
from docgraph.model import SearchHit, StoredChunk, page_list
from docgraph.serve.agent_tools import DESCRIPTIONS as READ_DESCRIPTIONS
from docgraph.serve.agent_tools import (
    FETCH_BUDGET,
    SEARCH_RESULTS,
    FetchArgs,
    ReadDocumentArgs,
    SearchArgs,
    fetch_payload,
    read_payload,
    search_result,
)
from docgraph.serve.agent_tools import TITLES as READ_TITLES
from docgraph.serve.tool_args import (
    DESCRIPTIONS,
    TITLES,
    DocumentContextArgs,
    ExploreTopicsArgs,
    IndexStatusArgs,
    ListDocumentsArgs,
    LookupKnowledgeArgs,
    SearchDocumentsArgs,
    SearchEntitiesArgs,
    TraceConnectionsArgs,
    decode_cursor,
    encode_cursor,
    format_validation_error,
)
from docgraph.sources.naming import PublicIdentity
from docgraph.telemetry import span

#: The query explore_topics runs when the agent gives none.
GENERIC_THEMES_QUERY = "main themes, topics and recurring subjects"
CHUNKS_PER_ENTITY = 3
SNIPPET_CHARS = 240



def _section(hit: SearchHit) -> str:
    return " > ".join(hit.section_path)


def _snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _mention(chunk: StoredChunk, identity: PublicIdentity) -> dict[str, Any]:
    out: dict[str, Any] = {"chunk_id": identity.key(chunk.namespace, chunk.chunk_id),
                           "source": chunk.source_path,
                           "section": " > ".join(chunk.section_path),
                           "snippet": _snippet(chunk.text)}
    if chunk.pages is not None:
        out["pages"] = page_list(chunk.pages)
    return out


def note_unavailable(payload: dict[str, Any], sources: Sequence[str],
                     pending_chunks: int = 0) -> dict[str, Any]:
    """``payload`` telling its caller which row-level sources could not be re-checked (their
    rows were left out, fail closed), and which lanes were partial (``lanes``: chunks not
    embedded yet, found by keyword only), so a thin answer is not mistaken for a complete
    one; unchanged when every re-check answered and every chunk has its vector."""
    if pending_chunks:
        payload["lanes"] = {"dense": {"pending_chunks": pending_chunks}}
        payload["lanes_note"] = (
            f"{pending_chunks} chunk{'s are' if pending_chunks > 1 else ' is'} not embedded "
            "yet (a build is embedding them): they are found by keyword (BM25) only, not by "
            "meaning; ask again later for a complete answer")
    if sources:
        payload["unavailable_row_sources"] = list(sources)
        payload["unavailable_note"] = (
            f"the row-level source{'s' if len(sources) > 1 else ''} {', '.join(sources)} "
            "could not be checked just now: rows from "
            f"{'them' if len(sources) > 1 else 'it'} are left out of this answer; ask again "
            "later for a complete one")
    return payload


def hit_to_dict(hit: SearchHit, identity: PublicIdentity,
                paths: list[str] | None = None, max_chars: int | None = None
                ) -> dict[str, Any]:
    """A search result as agents see it (agent-visible ids; ``url`` when published), its
    text cut to ``max_chars`` (``"truncated": true``; read its id for all of it)."""
    text, cut = clip(hit.text, max_chars) if max_chars is not None else (hit.text, False)
    out: dict[str, Any] = {
        "rank": hit.original_rank,
        "chunk_id": identity.key(hit.namespace, hit.chunk_id),
        "document": identity.document(hit.namespace, hit.doc_id),
        "title": hit.title,
        "source": hit.source_path,
        "section": _section(hit),
        "namespace": hit.namespace,
        "score": round(float(hit.score), 6),
        "score_label": hit.score_label,  # what the score is: composite, rrf or dense
        "lane": hit.lane,  # named as the CLI names it: dense+bm25 for a seed both matched
        "lanes": list(hit.shown_lanes),
        "text": text,
    }
    if cut:
        out["truncated"] = True
    if hit.pages is not None:
        out["pages"] = page_list(hit.pages)
    if hit.ocr:
        out["ocr"] = True
    url = identity.url(hit.namespace, hit.doc_id, hit.source_path,
                       hit.pages[0] if hit.pages else None)
    if url is not None:
        out["url"] = url
    if paths is not None:
        out["paths"] = paths
    return out


# -- the operations ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolSpec:
    """One operation: name, agent-facing description, argument model and implementation."""

    name: str
    title: str
    description: str
    args: type[BaseModel]
    run: Callable[[DocgraphTools, Caller, Any], dict[str, Any]]

    def invoke(self, tools: DocgraphTools, caller: Caller, args: BaseModel) -> dict[str, Any]:
        """Run the operation on validated ``args``. The governed entry checks the text
        arguments; its refusal names the argument as governance spells it, renamed here to
        this tool's spelling where they differ (``search`` takes ``query``, which
        :meth:`Governance.retrieve <docgraph.governance.Governance.retrieve>` calls
        ``query_text``)."""
        try:
            return self.run(tools, caller, args)
        except InvalidArgument as exc:
            raise exc.renamed(tool_argument(self, exc.argument)) from exc.__cause__


class DocgraphTools:
    """The agent tools (the eight retrieval and listing tools, read_document and the
    search/fetch pair): validate arguments, call :class:`Governance` (the one governed
    path: it resolves, filters, traces and audits), format the answer as JSON."""

    def __init__(self, governance: Governance[DocGraph]) -> None:
        self.governance = governance
        self.graph = governance.root

    def call(self, name: str, caller: Caller,
             arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate ``arguments`` for tool ``name`` and run it as ``caller``.

        Raises :class:`InvalidQuery` (unknown tool, bad arguments, each named) or
        :class:`AccessDenied`."""
        spec = TOOLS.get(name)
        if spec is None:
            raise InvalidQuery(f"unknown tool {name!r}; tools are {', '.join(TOOLS)}")
        with span("validate", tool=name):
            given = canonical_arguments(spec, arguments or {})
            unknown = unexpected_arguments(spec, given)
            if unknown:
                raise InvalidQuery(unexpected_arguments_message(spec, unknown,
                                                                argument_first=True))
            try:
                args = spec.args.model_validate(given)
            except ValidationError as exc:
                raise InvalidQuery(format_validation_error(exc)) from exc
        return spec.invoke(self, caller, args)

    # -- tools ------------------------------------------------------------------------

    def lookup_knowledge(self, caller: Caller, args: LookupKnowledgeArgs) -> dict[str, Any]:
        """Projected evidence blocks for one question (the evidence pipeline, governed)."""
        result = self.governance.lookup(caller, args.query)
        payload: dict[str, Any] = {"query": args.query, **result.to_dict()}
        if not payload["evidence"]:
            payload["note"] = ("no visible evidence matched; rephrase with explicit entity "
                               "names or try search_documents with a larger k")
        return note_unavailable(payload, result.unavailable_row_sources,
                                result.pending_chunks)

    def _hit_chars(self) -> int:
        """The most characters of a hit's text shown: what a chunk built with the current
        ``loader.chunk_tokens`` may have (longer ones were stored before chunks were bounded
        in characters, or with a larger setting)."""
        return char_limit(self.graph.settings.loader.chunk_tokens)

    def search_documents(self, caller: Caller, args: SearchDocumentsArgs) -> dict[str, Any]:
        """Ranked chunks with their provenance lane."""
        result = self.governance.retrieve(caller, args.query_text, k=args.k, mode=args.mode)
        out: dict[str, Any] = {
            "query_text": args.query_text, "mode": args.mode, "k": args.k,
            "count": len(result.hits),
            "results": [hit_to_dict(h, self.governance.identity(), max_chars=self._hit_chars())
                        for h in result.hits],
        }
        if not result.hits:
            out["note"] = ("nothing visible matched; name entities explicitly, rephrase, or "
                           + ("build the graph for global mode" if args.mode == "global"
                              else "raise k"))
        return note_unavailable(out, result.unavailable_row_sources, result.pending_chunks)

    def explore_topics(self, caller: Caller, args: ExploreTopicsArgs) -> dict[str, Any]:
        """Community reports (global mode) and, with a chat model, a map-reduced answer."""
        query = args.query_text if args.query_text and args.query_text.strip() \
            else GENERIC_THEMES_QUERY
        result = self.governance.retrieve(caller, query, k=args.k, mode="global")
        reports = [{
            "rank": h.original_rank, "report_id": h.chunk_id, "title": h.title,
            "namespace": h.namespace, "score": round(float(h.score), 6), "text": h.text,
        } for h in result.hits]
        out: dict[str, Any] = {
            "query_text": args.query_text, "effective_query": query, "k": args.k,
            "count": len(reports), "reports": reports, "answer": result.answer,
        }
        if result.answer is None:
            out["answer_note"] = (
                "no chat model is configured: reports are ranked by relevance and not "
                "map-reduced into an answer; read them and synthesise yourself"
                if self.graph.chat_model is None else "no report produced an answer")
        if not reports:
            out["note"] = "no community reports in reach (the entity graph is not built or empty)"
        return note_unavailable(out, result.unavailable_row_sources, result.pending_chunks)

    def trace_connections(self, caller: Caller, args: TraceConnectionsArgs) -> dict[str, Any]:
        """Graph-first results, each with the entity paths that link it to the query."""
        result = self.governance.retrieve(caller, args.query_text, k=args.k,
                                          mode="graph_first", return_trace=True)
        trace = result.trace
        identity = self.governance.identity()
        out: dict[str, Any] = {
            "query_text": args.query_text, "k": args.k,
            "query_entities": list(trace.query_entities_found) if trace else [],
            "unmatched_entities": list(trace.query_entities_missing) if trace else [],
            "count": len(result.hits),
            "results": [hit_to_dict(h, identity, result.paths.get(h.chunk_id, []),
                                    self._hit_chars()) for h in result.hits],
        }
        if trace is not None and not trace.query_entities_found:
            out["note"] = ("no known entity was recognised in query_text: name entities "
                           "exactly (search_entities shows their spelling)")
        return note_unavailable(out, result.unavailable_row_sources, result.pending_chunks)

    def document_context(self, caller: Caller, args: DocumentContextArgs) -> dict[str, Any]:
        """Entities | Relationships | Community Reports | Source Text within the budget."""
        context = self.governance.context(caller, args.query_text,
                                          token_budget=args.token_budget)
        identity = self.governance.identity()
        return note_unavailable({
            "query_text": args.query_text,
            "token_budget": args.token_budget,
            "tokens_used": dict(context.tokens),
            "source_chunks": [identity.key_anywhere(c) for c in context.chunk_ids],
            "sections": {name: [identity.cited_keys(r) for r in rows]
                         for name, rows in context.sections.items()},
        }, context.unavailable_row_sources, context.pending_chunks)

    def search_entities(self, caller: Caller, args: SearchEntitiesArgs) -> dict[str, Any]:
        """Matching entities with the visible chunks that mention them."""
        found = self.governance.entity_mentions(caller, args.query_text, k=args.k,
                                                per_entity=CHUNKS_PER_ENTITY)
        identity = self.governance.identity()
        entities = [{
            "name": m.entity.name, "type": m.entity.type, "key": m.entity.key,
            "namespace": m.entity.namespace, "chunk_count": m.entity.chunk_count,
            "chunks": [_mention(c, identity) for c in m.chunks],
        } for m in found]
        out: dict[str, Any] = {"query_text": args.query_text, "count": len(entities),
                               "entities": entities}
        if not entities:
            out["note"] = ("no visible entity matched; try a shorter part of the name or "
                           "search_documents for the surrounding text")
        return out

    def list_documents(self, caller: Caller, args: ListDocumentsArgs) -> dict[str, Any]:
        """One page of the source documents in reach, with version state (community reports
        are derived from the graph and not listed)."""
        page = self.governance.documents(caller, decode_cursor(args.cursor), args.limit)
        identity = self.governance.identity()
        documents = []
        for d in page.documents:
            entry: dict[str, Any] = {
                "document": identity.document(d.namespace, d.doc_id), "title": d.title,
                "namespace": d.namespace, "path": d.path, "media_type": d.media_type,
                "chunks": d.chunk_count, "content_hash": d.content_hash[:16],
                "change_token": d.change_token, "updated_at": d.updated_at,
            }
            if d.metadata:
                entry["metadata"] = dict(d.metadata)
            url = identity.url(d.namespace, d.doc_id, d.path)
            if url is not None:
                entry["url"] = url
            documents.append(entry)
        next_cursor = None if page.next_after is None else encode_cursor(page.next_after)
        return {"count": len(documents), "documents": documents, "next_cursor": next_cursor}

    def index_status(self, caller: Caller, args: IndexStatusArgs) -> dict[str, Any]:
        """Freshness and counts of the caller's namespaces only."""
        view = self.governance.index_status(caller)
        identity = self.governance.identity()
        namespaces = []
        for b in view.builds:
            s = view.stats.get(b.namespace)
            namespaces.append({
                "namespace": b.namespace,
                "documents": b.documents, "chunks": b.chunks,
                "entities": s.entities if s else 0,
                "communities": s.communities if s else 0,
                "last_build_at": b.last_build_at, "last_outcome": b.last_outcome,
                "last_success_at": b.last_success_at,
                "last_indexed_at": b.last_indexed_at,
                "staleness_seconds": b.staleness_seconds, "overdue": b.overdue,
                "failed_documents": b.failed_documents,
                "in_progress": b.in_progress,
                **({"pending_chunks": b.pending_chunks} if b.pending_chunks else {}),
                "errors": [{"source": identity.source_name(b.namespace, p.source),
                            "phase": p.phase, "outcome": p.outcome,
                            "message": p.message} for p in b.errors],
            })
        model = view.embedding_model
        return {
            "embedding_model": {"name": model[0], "dimension": model[1]} if model else None,
            "refresh_interval_seconds": view.refresh_interval_seconds,
            "refresh": {"leader": view.refresh_leader,
                        "this_process_leads": view.this_process_leads,
                        "refresher_running": view.refresher_running,
                        "interval_seconds": view.refresh_interval_seconds},
            "namespaces": namespaces,
            "failed_files": [{"namespace": f.namespace,
                              "source": identity.source_name(f.namespace, f.source_urn),
                              "path": f.path,
                              "reason": f.reason, "at": f.at} for f in view.failures[:100]],
            # read replicas by position (their hosts are the operator's, not the agent's)
            "replicas": [{"replica": n, "standby": r.standby, "lag_bytes": r.lag_bytes,
                          "last_replay_age_s": r.last_replay_age_s, "reachable": not r.error}
                         for n, r in enumerate(view.replicas, 1)],
        }


    def read_document(self, caller: Caller, args: ReadDocumentArgs) -> dict[str, Any]:
        """A chunk with its section, or a whole document, paged within a token budget."""
        page = self.governance.read(caller, args.id, scope=args.scope,
                                    token_budget=args.token_budget, cursor=args.cursor)
        return read_payload(args.id.strip(), page, self.governance.identity())

    def search(self, caller: Caller, args: SearchArgs) -> dict[str, Any]:
        """The ``search`` of the search/fetch pair: ids, titles, urls and snippets."""
        result = self.governance.retrieve(caller, args.query, k=SEARCH_RESULTS)
        identity = self.governance.identity()
        return note_unavailable({"results": [search_result(h, identity) for h in result.hits]},
                                result.unavailable_row_sources, result.pending_chunks)

    def fetch(self, caller: Caller, args: FetchArgs) -> dict[str, Any]:
        """The ``fetch`` of the search/fetch pair: the text behind a search result id."""
        page = self.governance.read(caller, args.id, scope="section",
                                    token_budget=FETCH_BUDGET)
        return fetch_payload(args.id.strip(), page, self.governance.identity())


#: Spellings of an argument accepted for another at call time, where a tool takes the
#: other one only (``lookup_knowledge`` and ``search`` take ``query``, the other query
#: tools ``query_text``: an agent that guesses the other spelling is not refused). The
#: schema names the canonical argument only; the description mentions the alias.
ARGUMENT_ALIASES: dict[str, str] = {"query": "query_text", "query_text": "query"}

#: Arguments an agent may try that no tool takes, and why.
SCOPE_ARGUMENTS = frozenset({"namespace", "namespaces", "domain", "domains", "role"})


def canonical_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with each alias (:data:`ARGUMENT_ALIASES`) renamed to the argument the
    tool takes, where that is unambiguous: the tool does not take the alias itself and the
    canonical name is not given too (then the alias stays, and is refused as unexpected)."""
    fields = spec.args.model_fields
    out = dict(arguments)
    for alias, canonical in ARGUMENT_ALIASES.items():
        if alias in out and alias not in fields and canonical in fields \
                and canonical not in out:
            out[canonical] = out.pop(alias)
    return out


def tool_argument(spec: ToolSpec, argument: str) -> str:
    """``argument`` (as the governed service names it) as tool ``spec`` spells it: its alias
    (:data:`ARGUMENT_ALIASES`) where the tool takes that instead."""
    fields = spec.args.model_fields
    alias = ARGUMENT_ALIASES.get(argument)
    if alias is not None and argument not in fields and alias in fields:
        return alias
    return argument


def unexpected_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> list[str]:
    """The names in ``arguments`` the tool does not take, sorted."""
    return sorted(set(arguments) - set(spec.args.model_fields))


def expected_arguments(spec: ToolSpec) -> str:
    """The tool's arguments for an error message: ``query_text (required), k, mode``."""
    names = [f"{field} (required)" if info.is_required() else field
             for field, info in spec.args.model_fields.items()]
    return ", ".join(names) if names else "no arguments"


def unexpected_arguments_message(spec: ToolSpec, unknown: list[str], *,
                                 argument_first: bool = False) -> str:
    """The refusal of arguments ``unknown``: they, what the tool takes instead, the alias
    accepted where one applies, and why no scope argument exists. MCP's form starts
    ``invalid arguments for TOOL:``; ``argument_first`` gives the JSON API's
    ``argument: problem`` form instead."""
    names = ", ".join(unknown)
    takes = f"{spec.name} takes {expected_arguments(spec)}"
    message = (f"{names}: unexpected argument(s); {takes}" if argument_first else
               f"invalid arguments for {spec.name}: unexpected argument(s) {names}; {takes}")
    fields = spec.args.model_fields
    for name in unknown:
        canonical = ARGUMENT_ALIASES.get(name)
        if canonical in fields:
            message += f" ({name} is accepted for {canonical}, but not together with it)"
    if SCOPE_ARGUMENTS.intersection(unknown):
        message += ("; tools take no namespace, domain or role: your entitlements decide "
                    "what you can see")
    return message


def _alias_note(args: type[BaseModel]) -> str:
    notes = [f"{alias} is accepted for {canonical}."
             for alias, canonical in ARGUMENT_ALIASES.items()
             if canonical in args.model_fields and alias not in args.model_fields]
    return (" " + " ".join(notes)) if notes else ""


def _spec(name: str, args: type[BaseModel],
          run: Callable[[DocgraphTools, Caller, Any], dict[str, Any]]) -> ToolSpec:
    title = TITLES.get(name) or READ_TITLES[name]
    description = (DESCRIPTIONS.get(name) or READ_DESCRIPTIONS[name]) + _alias_note(args)
    return ToolSpec(name, title, description, args, run)


#: Every tool, in the order agents see them.
TOOLS: dict[str, ToolSpec] = {s.name: s for s in (
    _spec("lookup_knowledge", LookupKnowledgeArgs, DocgraphTools.lookup_knowledge),
    _spec("search_documents", SearchDocumentsArgs, DocgraphTools.search_documents),
    _spec("explore_topics", ExploreTopicsArgs, DocgraphTools.explore_topics),
    _spec("trace_connections", TraceConnectionsArgs, DocgraphTools.trace_connections),
    _spec("document_context", DocumentContextArgs, DocgraphTools.document_context),
    _spec("search_entities", SearchEntitiesArgs, DocgraphTools.search_entities),
    _spec("list_documents", ListDocumentsArgs, DocgraphTools.list_documents),
    _spec("index_status", IndexStatusArgs, DocgraphTools.index_status),
    _spec("read_document", ReadDocumentArgs, DocgraphTools.read_document),
    _spec("search", SearchArgs, DocgraphTools.search),
    _spec("fetch", FetchArgs, DocgraphTools.fetch),
)}
