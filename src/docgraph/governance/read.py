"""Read by id: a chunk with its section around it, or a whole document, paged within a
token budget, seen through one request's :class:`~docgraph.governance.visibility.Visibility`.

An id is an evidence key (``docId#chunk-N``) or a document id, in the agent-visible form
(``<display name>/<relative path>``) or the stored one (``file:///...``, a row document's
``schema.table.column/<pk>``). Whatever the reason nothing readable matches (the id never
existed, its namespace is outside the caller's set, its row fails the re-check, the chunk
index is out of range), the answer is one :class:`~docgraph.errors.NotFound` with the same
message, so a caller learns nothing about what exists beyond its reach.

The budget is a hard bound on what a page returns: a chunk costs its tokens, or more when
it is longer in characters than those tokens allow (:func:`~docgraph.budgets.cost`:
WordPiece counts a long run without spaces as one token), and a chunk that alone costs more
than the budget (chunks of an index built with a larger ``chunk_tokens``, or before chunks
were bounded in characters) is cut to it, ending in a truncation mark
(:attr:`ReadPage.truncated`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from docgraph.budgets import cost, cut_to_budget
from docgraph.errors import InvalidQuery, NotFound
from docgraph.governance.visibility import Visibility
from docgraph.model import StoredChunk
from docgraph.sources.naming import PublicIdentity, split_key
from docgraph.store.base import StoreCatalog

ReadScope = Literal["chunk", "section", "document"]
READ_SCOPES: tuple[ReadScope, ...] = get_args(ReadScope)


def not_found(item_id: str) -> NotFound:
    """The one answer for every id the caller cannot read."""
    return NotFound(f"id: nothing readable has the id {item_id!r}; pass a document_id, "
                    "chunk_id or id exactly as a search returned it")


@dataclass(frozen=True)
class ReadPage:
    """One page of a read: ``chunks`` (consecutive, in order) out of the span the read
    covers (``span`` chunk indexes: the chunk, its section or the whole document).

    ``next_start`` / ``previous_start`` are the chunk indexes later and earlier pages start
    at (None at either end); :func:`encode_read_cursor` turns them into cursors.
    ``truncated`` is the index of the page's one chunk when its text was cut to the budget
    (read it whole with a larger budget), else None. ``metadata`` is what the document's
    format said about it (mail headers, a PDF's author, Markdown front matter)."""

    namespace: str
    doc_id: str
    title: str
    path: str
    scope: ReadScope
    target_index: int | None
    section_path: tuple[str, ...]
    span: tuple[int, ...]
    chunks: tuple[StoredChunk, ...]
    tokens: int
    next_start: int | None
    previous_start: int | None
    truncated: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The page's chunks as one text, paragraphs apart."""
        return "\n\n".join(c.text for c in self.chunks)


def encode_read_cursor(start: int) -> str:
    """The opaque cursor of the page starting at chunk index ``start``."""
    return base64.urlsafe_b64encode(f"read:{start}".encode()).decode().rstrip("=")


def decode_read_cursor(cursor: str | None) -> int | None:
    """The chunk index a read cursor starts at (None: the first page)."""
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        kind, _, value = raw.partition(":")
        if kind != "read" or not value.isdigit() or len(value) > 9:
            raise ValueError(raw)
        return int(value)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise InvalidQuery("cursor: not a cursor returned by a read of this id") from exc


def _span(chunks: Sequence[StoredChunk], target: int | None, scope: ReadScope) -> list[int]:
    """Positions in ``chunks`` the read covers: all for a document; the target alone; or
    the consecutive chunks around it that share its section path."""
    if target is None or scope == "document":
        return list(range(len(chunks)))
    if scope == "chunk":
        return [target]
    section = chunks[target].section_path
    first = target
    while first > 0 and chunks[first - 1].section_path == section:
        first -= 1
    last = target
    while last + 1 < len(chunks) and chunks[last + 1].section_path == section:
        last += 1
    return list(range(first, last + 1))


def _page(costs: Mapping[int, int], span: Sequence[int], start: int | None, target: int | None,
          budget: int) -> tuple[list[int], int]:
    """The positions of one page within ``budget`` (always at least one chunk, which the
    caller cuts to the budget when it alone costs more).

    With a cursor the page runs forward from ``start``; the first page of a chunk or
    section read grows around the target chunk (after, then before, in turn), so the
    chunk asked for is always on it."""
    if start is not None:
        chosen: list[int] = []
        used = 0
        for pos in span[span.index(start):]:
            if chosen and used + costs[pos] > budget:
                break
            chosen.append(pos)
            used += costs[pos]
        return chosen, used
    anchor = span.index(target) if target is not None and target in span else 0
    lo = hi = anchor
    used = costs[span[anchor]]
    grew = True
    while grew:
        grew = False
        if hi + 1 < len(span) and used + costs[span[hi + 1]] <= budget:
            hi += 1
            used += costs[span[hi]]
            grew = True
        if lo > 0 and used + costs[span[lo - 1]] <= budget:
            lo -= 1
            used += costs[span[lo]]
            grew = True
    return list(span[lo:hi + 1]), used


def _previous_start(costs: Mapping[int, int], span: Sequence[int], first: int,
                    budget: int) -> int | None:
    """Where the page ending just before position ``first`` starts (None: none)."""
    at = span.index(first)
    if at == 0:
        return None
    used, start = 0, at
    while start > 0 and (start == at or used + costs[span[start - 1]] <= budget):
        start -= 1
        used += costs[span[start]]
    return span[start]


def read(catalog: StoreCatalog, visibility: Visibility, identity: PublicIdentity, item_id: str,
         *,
         span_scope: ReadScope, token_budget: int, cursor: str | None,
         count_tokens: Callable[[Sequence[str]], list[int]]) -> ReadPage:
    """One page of what ``item_id`` names, as ``visibility``'s caller may see it."""
    doc_part, chunk_index = split_key(item_id)
    candidates = identity.stored_candidates(doc_part, visibility.namespaces)
    if not candidates:
        raise not_found(item_id)
    # The same row statements whether the id exists or not; a hidden document's text is
    # not even fetched (so it costs no more than a missing one).
    hidden = visibility.decide_ids(candidates)
    wanted = {(n, d) for n, d in candidates if d not in hidden}
    stored = [c for c in catalog.document_chunks({d for _, d in wanted}, {n for n, _ in wanted})
              if (c.namespace, c.doc_id) in wanted] if wanted else []
    visible = visibility.visible(stored)
    for namespace, doc_id in candidates:  # most specific reading first
        chunks = [c for c in visible if c.namespace == namespace and c.doc_id == doc_id]
        positions = {c.index: i for i, c in enumerate(chunks)}
        if chunks and (chunk_index is None or chunk_index in positions):
            break
    else:
        raise not_found(item_id)
    target = None if chunk_index is None else positions[chunk_index]
    effective: ReadScope = "document" if target is None else span_scope
    span = _span(chunks, target, effective)
    start = decode_read_cursor(cursor)
    if start is not None:
        if start not in positions or positions[start] not in span:
            raise InvalidQuery("cursor: not a cursor returned by a read of this id")
        start = positions[start]
    # only the span is counted: a section read of a long document tokenizes one section
    costs = {p: cost(n, len(chunks[p].text)) for p, n
             in zip(span, count_tokens([chunks[p].text for p in span]), strict=True)}
    chosen, used = _page(costs, span, start, target, token_budget)
    shown = [chunks[p] for p in chosen]
    truncated = None
    if used > token_budget:  # one chunk over the whole budget: its start, marked as cut
        text, used = cut_to_budget(shown[0].text, token_budget, count_tokens)
        shown = [replace(shown[0], text=text)]
        truncated = shown[0].index
    after = span.index(chosen[-1]) + 1
    previous = _previous_start(costs, span, chosen[0], token_budget)
    section = chunks[target].section_path if target is not None else ()
    return ReadPage(
        namespace=namespace, doc_id=doc_id, title=chunks[0].title, path=chunks[0].source_path,
        scope=effective, target_index=chunk_index, section_path=section,
        span=tuple(chunks[p].index for p in span),
        chunks=tuple(shown), tokens=used,
        next_start=chunks[span[after]].index if after < len(span) else None,
        previous_start=None if previous is None else chunks[previous].index,
        truncated=truncated, metadata=catalog.document_metadata(namespace, doc_id),
    )
