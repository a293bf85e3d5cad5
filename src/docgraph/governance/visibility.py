"""What one caller may see during one request: the one visibility decision.

A :class:`Visibility` holds the caller's namespace set (the search pre-filter) and decides,
for any document, chunk or hit, whether its text may be shown: it must lie in one of those
namespaces, its document's permission set (if it has one) must name one of the caller's
principals (``user:<id>``, ``group:<name>``), and, when it comes from a table row, the row
must pass the re-check. Every governed read (hits of every mode, entity mentions, listings,
report sources, traces) asks this object and nothing else; each document's gate (row origin
and permission set, :class:`~docgraph.model.DocGate`) is read at most once per request, each
row decided at most once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from docgraph.governance.caller import Caller
from docgraph.governance.rows import RowAuthorizer, check_rows
from docgraph.model import (
    Access,
    DocGate,
    RowOrigin,
    SourceRecord,
    StoredChunk,
    access_allows,
)
from docgraph.store.base import StoreCatalog
from docgraph.store.graph import GraphStore
from docgraph.telemetry import span


class _Located(Protocol):
    """Anything placed in a namespace and a document (chunks, hits, document records)."""

    @property
    def namespace(self) -> str: ...

    @property
    def doc_id(self) -> str: ...


T = TypeVar("T", bound=_Located)

#: Links read per entity to find visible mentions: bounds work, never what may be shown.
MENTION_SCAN = 50


@dataclass
class Visibility:
    """The visibility decisions of one caller in one request (not shared between requests:
    row rights can change between them)."""

    caller: Caller
    namespaces: frozenset[str]
    authorizer: RowAuthorizer | None
    catalog: StoreCatalog
    #: The registered sources as this request read them (its namespaces were resolved
    #: from them; agent-visible names and citation URLs are made from them).
    sources: tuple[SourceRecord, ...] = ()
    dropped: int = 0
    failures: list[str] = field(default_factory=list)
    #: The table sources whose row re-check failed in this request (their rows were left
    #: out, fail closed). Only rows in the caller's namespaces are ever re-checked, so
    #: each name is one of a source the caller's namespaces include.
    unavailable: set[str] = field(default_factory=set)
    #: The owner of the index file (local commands without ``[governance]``): every
    #: document's permission set lets it in, as the row re-check lets it see every row.
    every_document: bool = False
    _row_visible: dict[RowOrigin, bool] = field(default_factory=dict)
    #: The gate of each document looked up in this request (None: neither a row origin nor
    #: a permission set), read once per request.
    _gates: dict[str, DocGate | None] = field(default_factory=dict)

    def may_read(self, access: Access) -> bool:
        """Whether the caller's principals are let in by a permission set."""
        return self.every_document or access_allows(access, self.caller.principals)

    def hidden_rows(self, origins: Iterable[RowOrigin]) -> set[RowOrigin]:
        """The table rows the caller may not see: one re-check batch per table for the rows
        not decided yet in this request; an authorizer failure hides (fail closed) and is
        recorded in :attr:`failures`."""
        wanted = set(origins)
        pending = {str(i): o for i, o in enumerate(o for o in wanted
                                                   if o not in self._row_visible)}
        if pending:
            with span("row_check", rows=len(pending)):
                decision = check_rows(self.caller, self.authorizer, pending)
            self.failures.extend(decision.failures)
            self.unavailable.update(decision.unavailable)
            for key, origin in pending.items():
                self._row_visible[origin] = key not in decision.denied_doc_ids
        return {o for o in wanted if not self._row_visible[o]}

    def any_hidden(self, origins: Iterable[RowOrigin], batch: int = 1000) -> bool:
        """Whether the caller may not see at least one of the rows: re-checked in batches,
        stopping at the first batch that hides one (a stored report over many rows needs
        only that answer)."""
        pending = list(dict.fromkeys(origins))
        return any(self.hidden_rows(pending[i:i + batch])
                   for i in range(0, len(pending), batch))

    def know_gates(self, gates: Mapping[str, DocGate | None]) -> None:
        """Remember the gate the catalog records for each document (None: neither a row
        origin nor a permission set), as read by an engine in this request with the
        document's chunks: later decisions about these documents use them instead of
        reading the same rows again. Documents already looked up keep what was read first."""
        for doc_id, gate in gates.items():
            self._gates.setdefault(doc_id, gate)

    def hidden_documents(self, doc_ids: Iterable[str]) -> set[str]:
        """Which of the given documents the caller may not read: its permission set names
        none of the caller's principals, or the row re-check hides its row (a document with
        neither is never hidden here: its namespace decides)."""
        wanted = list(dict.fromkeys(doc_ids))
        unread = [d for d in wanted if d not in self._gates]
        if unread:
            read = self.catalog.gates_for(unread)
            self._gates.update({d: read.get(d) for d in unread})
        gates = {d: g for d in wanted if (g := self._gates[d]) is not None}
        denied = {d for d, g in gates.items() if not self.may_read(g.access)}
        origins = {d: g.origin for d, g in gates.items()
                   if d not in denied and g.origin is not None}
        hidden = self.hidden_rows(origins.values())
        return denied | {d for d, o in origins.items() if o in hidden}

    def decide_ids(self, candidates: Iterable[tuple[str, str]]) -> set[str]:
        """Decide what a read by id asks about its candidate (namespace, stored document id)
        pairs before anything stored is looked at, the same way whether they exist or not:
        the gates of every candidate are read (one catalog read of all of them), and an id
        shaped like a row document (``schema.table.column/<pk>``) of a table source in its
        namespace has that row re-checked in the source database. A missing row thus costs
        the same statements as one the re-check hides, so a caller cannot tell from the
        answer's timing which primary keys exist in a table it may not read. Later
        decisions about these rows and documents use what was decided here. Returns the
        candidate documents the caller may not read (their text need not be fetched)."""
        pairs = list(dict.fromkeys(candidates))
        tables: dict[int, RowOrigin | None] = {}
        origins: list[RowOrigin] = []
        for namespace, doc_id in pairs:
            prefix, sep, pk = doc_id.partition("/")
            if not sep or not pk or "://" in doc_id:
                continue
            for source in self.sources:
                if (source.namespace == namespace and source.scheme == "sql"
                        and source.urn.partition("://")[2].partition("/")[2] == prefix):
                    if source.id not in tables:
                        tables[source.id] = self.catalog.row_table(source.id)
                    table = tables[source.id]
                    if table is not None:
                        origins.append(replace(table, pk_value=pk))
        self.hidden_rows(origins)
        return self.hidden_documents(doc_id for _, doc_id in pairs)

    def visible(self, items: Iterable[T]) -> list[T]:
        """The items (chunks, hits, document records) in the caller's namespaces whose table
        row, if they come from one, passes the re-check; in their order.

        An item is hidden when the origin or permission set it carries hides it *or* the
        gate the catalog records for its document does: a code path that forgot to carry
        either cannot make a restricted document look free-standing."""
        in_reach = [item for item in items if item.namespace in self.namespaces
                    and self.may_read(getattr(item, "access", None))]
        carried = [getattr(item, "origin", None) for item in in_reach]
        hidden = self.hidden_rows(o for o in carried if isinstance(o, RowOrigin))
        hidden_docs = self.hidden_documents({item.doc_id for item in in_reach})
        return [item for item, origin in zip(in_reach, carried, strict=True)
                if origin not in hidden and item.doc_id not in hidden_docs]


def visible_links(store: GraphStore, scope: Visibility, entity_ids: Iterable[int],
                  scan: int) -> list[tuple[int, StoredChunk]]:
    """(entity id, chunk) for the chunks among each entity's ``scan`` strongest mentions that
    ``scope``'s caller may see, strongest association first."""
    links = store.chunks_for_entities(entity_ids, scan)
    chunks = store.catalog.chunks_by_rowid([rowid for _, rowid, _, _ in links])
    visible = {c.rowid: c for c in scope.visible(chunks.values())}
    return [(entity_id, visible[rowid]) for entity_id, rowid, _, _ in links
            if rowid in visible]


def visible_mentions(store: GraphStore, scope: Visibility, entity_ids: Iterable[int],
                     per_entity: int) -> dict[int, list[StoredChunk]]:
    """Per entity, up to ``per_entity`` chunks mentioning it that ``scope``'s caller may see
    (strongest association first); an entity with none is absent."""
    out: dict[int, list[StoredChunk]] = {}
    for entity_id, chunk in visible_links(store, scope, entity_ids, MENTION_SCAN):
        rows = out.setdefault(entity_id, [])
        if len(rows) < per_entity:
            rows.append(chunk)
    return out
