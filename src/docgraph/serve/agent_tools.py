"""Reading what was found, and the search/fetch pair of ChatGPT apps and deep research.

``read_document`` pages through a chunk's section or a whole document by id.
``search(query)`` and ``fetch(id)`` follow the shape OpenAI publishes for MCP servers
used by ChatGPT apps (formerly connectors), deep research and company knowledge
("Building MCP servers for ChatGPT Apps and API integrations", the revision after the
December 17, 2025 renaming): ``search`` answers one text content holding
``{"results": [{"id", "title", "url", "text"}]}`` and ``fetch`` one holding
``{"id", "title", "text", "url", "metadata"}``. Both run through the governed service with
the caller's visibility, like every other tool. Every result carries a ``url`` (hosts cite
it): the source's public URL when it has one, else the document's page in the web console
at that chunk (:meth:`~docgraph.sources.naming.PublicIdentity.passage_url`; it opens for a
signed-in console user, and shows only what that user may read).

Ids shown here are agent-visible (:class:`~docgraph.sources.naming.PublicIdentity`);
every tool accepts them and the stored (``file:///...``) form alike.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from docgraph.governance.inputs import string_validator
from docgraph.governance.read import ReadPage, ReadScope, encode_read_cursor
from docgraph.limits import (
    MAX_CURSOR_CHARS,
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    MAX_READ_BUDGET,
    MIN_READ_BUDGET,
)
from docgraph.model import SearchHit, StoredChunk, page_list
from docgraph.sources.naming import PublicIdentity

#: Results of ``search`` (the pair takes no k: its query is the only argument).
SEARCH_RESULTS = 10
#: Tokens one ``fetch`` returns (the section around the chunk, or a document's start).
FETCH_BUDGET = 4000
SEARCH_SNIPPET_CHARS = 300


def first_page(page: ReadPage) -> int | None:
    """The first page a read shows (its first chunk that has pages), for ``#page=N`` links."""
    for chunk in page.chunks:
        if chunk.pages is not None:
            return chunk.pages[0]
    return None


#: What a read or fetch says about a chunk cut to its budget.
TRUNCATED_NOTE = ("this chunk is longer than token_budget and was cut (its text ends in "
                  "'[…]'); read its id with a larger token_budget for all of it")


def _read_chunk(chunk: StoredChunk, identity: PublicIdentity,
                truncated: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"chunk_id": identity.key(chunk.namespace, chunk.chunk_id),
                           "index": chunk.index, "section": _section(chunk.section_path),
                           "text": chunk.text}
    if truncated:
        out["truncated"] = True
    if chunk.pages is not None:
        out["pages"] = page_list(chunk.pages)
    if chunk.ocr:
        out["ocr"] = True
    return out


# Argument types as in serve/tool_args.py: text arguments declare their bounds in the schema and
# are checked (once) by the governed entry; numbers, the scope and the cursor here.
ItemId = Annotated[
    str,
    Field(json_schema_extra={"minLength": 1, "maxLength": MAX_ID_CHARS},
          description="A chunk id (document_id / chunk_id / id of a search result, "
                      "'<source>/<path>#chunk-N') or a document id, exactly as returned."),
    BeforeValidator(string_validator()),
]
SearchQuery = Annotated[
    str,
    Field(json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
          description="One atomic question or search phrase; name entities explicitly."),
    BeforeValidator(string_validator()),
]
ReadScopeArg = Annotated[
    ReadScope,
    Field(description="For a chunk id: section (default: the chunk with the rest of its "
                      "section), chunk (the chunk alone) or document (the whole document). "
                      "A document id always reads the document."),
]
ReadBudget = Annotated[
    int,
    Field(ge=MIN_READ_BUDGET, le=MAX_READ_BUDGET,
          description=f"Tokens of text per page ({MIN_READ_BUDGET}-{MAX_READ_BUDGET})."),
]
ReadCursor = Annotated[
    str | None,
    Field(default=None, max_length=MAX_CURSOR_CHARS,
          description="next_cursor or previous_cursor of an earlier page of this id; "
                      "omit for the first page."),
]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadDocumentArgs(_Args):
    """Arguments of ``read_document``."""

    id: ItemId
    scope: ReadScopeArg = "section"
    token_budget: ReadBudget = 2000
    cursor: ReadCursor = None


class SearchArgs(_Args):
    """Arguments of ``search`` (ChatGPT apps / deep research)."""

    query: SearchQuery


class FetchArgs(_Args):
    """Arguments of ``fetch`` (ChatGPT apps / deep research)."""

    id: ItemId


DESCRIPTIONS: dict[str, str] = {
    "read_document": (
        "Read what a search found: give a chunk id (document_id of lookup_knowledge, "
        "chunk_id of search_documents, id of search) to get that chunk with the rest of "
        "its section, or a document id for the whole document, as consecutive chunks "
        "within token_budget, with title, section, source and url. Long text is paged: "
        "pass next_cursor back as cursor. Ids you cannot read are 'not found'."
    ),
    "search": (
        "Search the documents you are entitled to. Returns results with id, title, url "
        "(a link to the passage to cite) and a text snippet; pass an id to fetch for the "
        "full passage. Ask one atomic question per call and name entities explicitly."
    ),
    "fetch": (
        "The text behind a search result id: the passage with the rest of its section (or "
        "a document's beginning for a document id), with title, url and metadata (source, "
        "section, the chunk ids read, and a cursor for read_document when there is more)."
    ),
}

TITLES: dict[str, str] = {
    "read_document": "Read document",
    "search": "Search",
    "fetch": "Fetch",
}


def _section(path: tuple[str, ...]) -> str:
    return " > ".join(path)


def _snippet(text: str, limit: int = SEARCH_SNIPPET_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit - 1].rsplit(" ", 1)[0] + "…"


def read_payload(item_id: str, page: ReadPage, identity: PublicIdentity) -> dict[str, Any]:
    """A read page as agents see it (``read_document``)."""
    named = identity.source_of(page.namespace, page.doc_id)
    out: dict[str, Any] = {
        "id": item_id,
        "document_id": identity.document(page.namespace, page.doc_id),
        "title": page.title,
        "source": page.path,
        "source_name": None if named is None else named.name,
        "section": _section(page.section_path),
        "namespace": page.namespace,
        "scope": page.scope,
        "chunks": [_read_chunk(c, identity, c.index == page.truncated) for c in page.chunks],
        "tokens": page.tokens,
        "span": {"first_index": page.span[0], "last_index": page.span[-1],
                 "chunks": len(page.span)},
        "next_cursor": None if page.next_start is None else encode_read_cursor(page.next_start),
        "previous_cursor": (None if page.previous_start is None
                            else encode_read_cursor(page.previous_start)),
    }
    if page.metadata:
        out["metadata"] = dict(page.metadata)
    if page.truncated is not None:
        out["truncated"] = TRUNCATED_NOTE
    url = identity.url(page.namespace, page.doc_id, page.path, first_page(page))
    if url is not None:
        out["url"] = url
    return out


def search_result(hit: SearchHit, identity: PublicIdentity) -> dict[str, Any]:
    """One result of ``search``: id, title, url (when published) and a snippet."""
    section = _section(hit.section_path)
    title = hit.title if not section or section == hit.title else f"{hit.title} › {section}"
    out: dict[str, Any] = {"id": identity.key(hit.namespace, hit.chunk_id), "title": title,
                           "text": _snippet(hit.text)}
    url = identity.passage_url(hit.namespace, hit.doc_id, hit.source_path, hit.chunk_index,
                               hit.pages[0] if hit.pages else None)
    if url is not None:
        out["url"] = url
    return out


def fetch_payload(item_id: str, page: ReadPage, identity: PublicIdentity) -> dict[str, Any]:
    """The ``fetch`` document: id, title, text, url (when published), metadata."""
    metadata: dict[str, Any] = {
        "document_id": identity.document(page.namespace, page.doc_id),
        "source": page.path,
        "section": _section(page.section_path),
        "namespace": page.namespace,
        "chunk_ids": [identity.key(c.namespace, c.chunk_id) for c in page.chunks],
        "tokens": page.tokens,
    }
    if page.metadata:
        metadata["document_metadata"] = dict(page.metadata)
    if page.truncated is not None:
        metadata["truncated"] = TRUNCATED_NOTE
    if page.next_start is not None or page.previous_start is not None:
        metadata["more"] = ("the passage continues: call read_document with this id and "
                            "next_cursor (or previous_cursor)")
        metadata["next_cursor"] = (None if page.next_start is None
                                   else encode_read_cursor(page.next_start))
        metadata["previous_cursor"] = (None if page.previous_start is None
                                       else encode_read_cursor(page.previous_start))
    out: dict[str, Any] = {"id": item_id, "title": page.title, "text": page.text}
    at = page.target_index if page.target_index is not None else page.chunks[0].index
    url = identity.passage_url(page.namespace, page.doc_id, page.path, at, first_page(page))
    if url is not None:
        out["url"] = url
    out["metadata"] = metadata
    return out


# -- the prompt hosts offer their users ------------------------------------------------------

PROMPT_NAME = "research_question"
PROMPT_TITLE = "Research a question in the documents"
PROMPT_DESCRIPTION = (
    "Answer a question from the indexed documents: split it into atomic sub-questions, "
    "look each up, read the best passages and answer with citations."
)


def research_prompt(question: str) -> str:
    """The agent guidance of the ``research_question`` prompt, for one question."""
    return (
        "Answer the question below from the documents the docgraph tools reach, and only "
        "from them.\n"
        "1. Split it into atomic sub-questions: one fact, one entity or one relation each; "
        "replace pronouns by the names they stand for.\n"
        "2. Call lookup_knowledge once per sub-question, naming the entities explicitly "
        "(product names, codes, customers, people) and saying what kind of answer you "
        "expect (a date, a number, a procedure, a person).\n"
        "3. If is_low_quality is true, rephrase with exact names (search_entities shows "
        "their spelling) or use search_documents with a larger k before concluding that "
        "the documents do not say.\n"
        "4. For each evidence block you rely on, call read_document with its document_id "
        "to read the surrounding section.\n"
        "5. Answer, citing each statement with the document_id (and url, when given) it "
        "comes from; say plainly which sub-questions the documents leave open.\n\n"
        f"Question: {question}"
    )
