"""The agent tools' arguments: their types, each declaring its JSON schema from
:mod:`docgraph.limits`, the argument model of every tool, the agent guidance (the server's
instructions and each tool's description, next to the arguments they explain), and the
listing cursor. :mod:`docgraph.serve.tools` runs the tools."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from docgraph.errors import InvalidQuery
from docgraph.governance.inputs import string_validator
from docgraph.limits import (
    AGENT_MAX_CONTEXT_BUDGET,
    AGENT_MIN_CONTEXT_BUDGET,
    MAX_CURSOR_CHARS,
    MAX_PAGE,
    MAX_QUERY_CHARS,
    MAX_RESULTS,
    CohortMode,
)
from docgraph.retrieve.lanes import SEED, lane_guide

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
