"""The agent tools as plain, governed operations, shared by the MCP server and the HTTP API.

Every operation takes a :class:`~docgraph.governance.Caller` resolved by the transport (never
from the arguments) and validated arguments; it resolves the caller's namespaces through
:class:`~docgraph.governance.Governance` (an empty set is an :class:`AccessDenied`), runs the
governed search, and returns a JSON-ready dict. No operation accepts a namespace, domain or
role argument. Operations are blocking: transports run them in worker threads.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from docgraph.app import DocGraph
from docgraph.budgets import char_limit, clip
from docgraph.errors import InvalidQuery
from docgraph.governance import Caller, Governance
from docgraph.governance.inputs import InvalidArgument, string_validator
from docgraph.limits import (
    AGENT_MAX_CONTEXT_BUDGET,
    AGENT_MIN_CONTEXT_BUDGET,
    MAX_CURSOR_CHARS,
    MAX_PAGE,
    MAX_QUERY_CHARS,
    MAX_RESULTS,
    CohortMode,
)
from docgraph.model import SearchHit, StoredChunk, page_list
from docgraph.retrieve.lanes import SEED, lane_guide
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
from docgraph.sources.naming import PublicIdentity

#: The query explore_topics runs when the agent gives none.
GENERIC_THEMES_QUERY = "main themes, topics and recurring subjects"
CHUNKS_PER_ENTITY = 3
SNIPPET_CHARS = 240


# -- argument types ---------------------------------------------------------------------------
# Each declares its JSON schema (what agents read) from docgraph.limits. Text arguments are
# checked here only for being a JSON string (one that can be encoded: no lone surrogate);
# their length and content are checked once, by the governed entry (governance/inputs.py),
# whose refusal names the argument. Numbers, the mode
# and cursors are checked against their schema here: the agent-facing bounds are narrower
# than the governed ones (a token_budget, the cohort modes), and a cursor is decoded before
# the governed call.

QueryText = Annotated[
    str,
    Field(json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
          description="One atomic question or search phrase; name entities explicitly "
                      f"(at most {MAX_QUERY_CHARS} characters)."),
    BeforeValidator(string_validator()),
]
OptionalQueryText = Annotated[
    Annotated[str, Field(json_schema_extra={"maxLength": MAX_QUERY_CHARS})] | None,
    Field(default=None,
          description="Optional focus for the themes; omit for the corpus-wide picture."),
    BeforeValidator(string_validator(optional=True)),
]
TopK = Annotated[
    int,
    Field(ge=1, le=MAX_RESULTS, description=f"How many results to return (1-{MAX_RESULTS}). "
                                            "Widen it before concluding the evidence is "
                                            "absent."),
]
TokenBudget = Annotated[
    int,
    Field(ge=AGENT_MIN_CONTEXT_BUDGET, le=AGENT_MAX_CONTEXT_BUDGET,
          description="Token budget of the whole context "
                      f"({AGENT_MIN_CONTEXT_BUDGET}-{AGENT_MAX_CONTEXT_BUDGET})."),
]
Cursor = Annotated[
    str | None,
    Field(default=None, max_length=MAX_CURSOR_CHARS,
          description="Opaque cursor from the previous page's next_cursor; omit for page 1."),
]
PageLimit = Annotated[
    int, Field(ge=1, le=MAX_PAGE, description=f"Documents per page (1-{MAX_PAGE}).")
]
ModeArg = Annotated[
    CohortMode,
    Field(description="vector_first (default): passages about the query, widened by "
                      "neighbouring and entity-sharing chunks. graph_first: how named entities "
                      "connect. global: community reports (corpus-wide themes)."),
]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookupKnowledgeArgs(_Args):
    """Arguments of ``lookup_knowledge``."""

    query: QueryText


class SearchDocumentsArgs(_Args):
    """Arguments of ``search_documents``."""

    query_text: QueryText
    k: TopK = 10
    mode: ModeArg = "vector_first"


class ExploreTopicsArgs(_Args):
    """Arguments of ``explore_topics``."""

    query_text: OptionalQueryText = None
    k: TopK = 5


class TraceConnectionsArgs(_Args):
    """Arguments of ``trace_connections``."""

    query_text: QueryText
    k: TopK = 10


class DocumentContextArgs(_Args):
    """Arguments of ``document_context``."""

    query_text: QueryText
    token_budget: TokenBudget = 4000


class SearchEntitiesArgs(_Args):
    """Arguments of ``search_entities``."""

    query_text: QueryText
    k: TopK = 10


class ListDocumentsArgs(_Args):
    """Arguments of ``list_documents``."""

    cursor: Cursor = None
    limit: PageLimit = 50


class IndexStatusArgs(_Args):
    """``index_status`` takes no arguments."""


# -- agent guidance -------------------------------------------------------------------------

GUIDANCE = (
    "How to query well: ask ONE atomic sub-question per call (split compound questions); "
    "name the entities explicitly (product names, codes, customers, people) instead of "
    "pronouns; say what kind of answer you expect (a date, a number, a procedure, a "
    "person); if the evidence looks thin, widen k or rephrase before concluding the "
    "information is absent. Results only ever come from the documents you are entitled "
    "to; you cannot and need not choose namespaces."
)

DESCRIPTIONS: dict[str, str] = {
    "lookup_knowledge": (
        "Evidence for a question: the best passages, deduplicated and cut to excerpts, "
        "each with a document_id you can cite, plus relevance_level and is_low_quality. "
        "Start here for factual questions. If is_low_quality is true, rephrase with "
        "explicit entity names or use search_documents with a larger k. " + GUIDANCE
    ),
    "search_documents": (
        "Ranked chunks for query_text with score (score_label composite: the engine's "
        "ranking score, higher is better; rrf: the fused rank score of global mode), source, "
        "section and the provenance lane that found each one (dense / bm25 / dense+bm25 = "
        "matched the query's meaning / words / both, " + lane_guide(skip=(SEED,))
        + "). Modes: vector_first "
        "(default) for 'what do the documents say about X'; graph_first for 'how is X "
        "related to Y'; global for corpus-wide themes. Exact names, codes and identifiers "
        "are matched lexically, so include them verbatim. " + GUIDANCE
    ),
    "explore_topics": (
        "Corpus-wide sensemaking: community reports (clusters of entities that occur "
        "together) ranked for the optional query_text, and a map-reduced answer when a chat "
        "model is configured. Use it for 'what themes run through these documents', "
        "'what are the main issues', or to get oriented before precise searches. Omit "
        "query_text for the overall picture. " + GUIDANCE
    ),
    "trace_connections": (
        "How entities relate: graph-first retrieval that starts from the entities named in "
        "query_text, walks the entity co-occurrence graph and returns the chunks that link "
        "them, each with the entity paths that connect it (paths). Name at least one "
        "entity explicitly, ideally two ('How is Nordhaven Logistics connected to error "
        "E-417?'). query_entities lists the entities recognised; unmatched_entities those "
        "not found in your documents. " + GUIDANCE
    ),
    "document_context": (
        "A ready-to-read context for answering query_text within token_budget tokens, in "
        "four sections: Entities, Relationships, Community Reports and Source Text (each "
        "source row starts with its [chunk id] for citation). Use it when you want one "
        "compact briefing rather than a ranked list. " + GUIDANCE
    ),
    "search_entities": (
        "Entities (products, organisations, codes, people, ...) whose name contains "
        "query_text or that query_text names, with their type, how many chunks mention "
        "them, and the chunks they appear in (chunk id, source, snippet). Use it to check "
        "the exact spelling of a name before searching, or to find where an entity is "
        "discussed. " + GUIDANCE
    ),
    "list_documents": (
        "The documents you can reach, page by page (pass next_cursor back as cursor), with "
        "version state: content hash, change token, chunk count and last update, and what "
        "the file says about itself (e.g. a PDF's author and page count) as metadata. Use it "
        "to see what the corpus contains, not to answer questions."
    ),
    "index_status": (
        "Freshness of your part of the index: per namespace, the last build, its outcome, "
        "staleness in seconds (and whether it is overdue), document and chunk counts, and "
        "the errors of the last build; and who refreshes the index (refresh.leader, "
        "pid@host or null when no process refreshes it, and whether this server is that "
        "process). Check it when results seem out of date or missing."
    ),
}

TITLES: dict[str, str] = {
    "lookup_knowledge": "Look up evidence",
    "search_documents": "Search documents",
    "explore_topics": "Explore topics",
    "trace_connections": "Trace connections",
    "document_context": "Document context",
    "search_entities": "Search entities",
    "list_documents": "List documents",
    "index_status": "Index status",
}


# -- helpers ----------------------------------------------------------------------------------

def format_validation_error(exc: ValidationError) -> str:
    """``argument: problem`` for every failed field, one per line (values are not echoed)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def encode_cursor(last_id: int) -> str:
    """The opaque cursor for documents after internal id ``last_id``."""
    return base64.urlsafe_b64encode(f"doc:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    """The internal id a cursor stands for (0 for the first page)."""
    if cursor is None or cursor == "":
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        kind, _, value = raw.partition(":")
        if kind != "doc" or not value.isdigit():
            raise ValueError(raw)
        return int(value)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise InvalidQuery("cursor: not a cursor returned by list_documents") from exc


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
        given = canonical_arguments(spec, arguments or {})
        unknown = unexpected_arguments(spec, given)
        if unknown:
            raise InvalidQuery(unexpected_arguments_message(spec, unknown, argument_first=True))
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
        return payload

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
        return out

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
        return out

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
        return out

    def document_context(self, caller: Caller, args: DocumentContextArgs) -> dict[str, Any]:
        """Entities | Relationships | Community Reports | Source Text within the budget."""
        context = self.governance.context(caller, args.query_text,
                                          token_budget=args.token_budget)
        identity = self.governance.identity()
        return {
            "query_text": args.query_text,
            "token_budget": args.token_budget,
            "tokens_used": dict(context.tokens),
            "source_chunks": [identity.key_anywhere(c) for c in context.chunk_ids],
            "sections": {name: [identity.cited_keys(r) for r in rows]
                         for name, rows in context.sections.items()},
        }

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
        return {"results": [search_result(h, identity) for h in result.hits]}

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
