"""The storage contract: a relational :class:`Catalog` (system of record) and a derived
:class:`ChunkIndex` (dense + lexical search accelerators).

Ingest and retrieve talk only to these protocols, so server backends (PostgreSQL, Milvus)
plug in without touching them. Every search takes an explicit, non-empty namespace set as a
pre-filter: there is no value that means "all namespaces".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from docgraph.errors import InvalidQuery
from docgraph.model import (
    Access,
    ChunkDraft,
    ChunkKind,
    DocGate,
    DocumentRecord,
    EntityLink,
    RowOrigin,
    ScoredRow,
    SourceRecord,
    StoredChunk,
    Vector,
)
from docgraph.store.pending import PendingVectors

if TYPE_CHECKING:
    from docgraph.store.lexical import CountedTerms


@dataclass(frozen=True, slots=True)
class ChunkPlace:
    """Where a chunk lives: its namespace (id), kind, document (row id) and title."""

    namespace_id: int
    kind: str
    document: int
    title: str


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """Everything needed to (re)write one document and its chunks in one transaction.

    ``embedded_texts`` are the exact strings that were embedded (breadcrumb + text) and
    ``vectors`` their unit vectors, one row per chunk; ``entity_links`` (empty, or one list
    per chunk) are the entities found in each chunk. ``metadata`` is what the format said
    about the document (:attr:`~docgraph.model.ExtractedDocument.metadata`); each chunk's
    pages and OCR flag travel on its :class:`~docgraph.model.ChunkDraft`.

    ``attachments`` are the documents carried inside this one (a mail's attachments, each
    with path ``<path>/<name>``, this write's source, namespace and change token): they are
    written in the same atomic unit with this document as their parent, and any attachment
    this document had before that is not among them is deleted with it. ``embed_hashes``
    replaces hashing ``embedded_texts`` when copying an index that knows only the hashes.
    ``line_hashes`` are the fingerprints of the document's paragraphs and list items as
    extracted (None: not counted), ``lines_dropped`` those left out as repeated across its
    source (:mod:`docgraph.ingest.boilerplate`).
    """

    source: SourceRecord
    path: str
    doc_id: str
    title: str
    content_hash: str
    change_token: str
    media_type: str
    chunks: Sequence[ChunkDraft]
    breadcrumbs: Sequence[str]
    embedded_texts: Sequence[str]
    vectors: Vector
    entity_links: Sequence[Sequence[EntityLink]] = ()
    origin: RowOrigin | None = None
    # BM25 term counts per chunk (docgraph.store.lexical.count_terms of breadcrumb + text),
    # when counted ahead (e.g. in a worker process); a catalog that needs them and finds
    # None counts them itself.
    lexical_terms: Sequence[CountedTerms] | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    attachments: Sequence[DocumentWrite] = ()
    embed_hashes: Sequence[str] | None = None
    line_hashes: Sequence[str] | None = None
    lines_dropped: Sequence[str] = ()
    #: Who may read it besides the namespace's grantees (:data:`~docgraph.model.Access`;
    #: an attachment's is its mail's).
    access: Access = None
    #: The language its words are analysed in for BM25 (ISO 639-1, :mod:`docgraph.languages`).
    language: str = "en"
    #: Per chunk, True where its vector is not computed yet: the chunk is stored *pending*
    #: (text and BM25 terms, no vector; its row in ``vectors`` is ignored), searchable by
    #: BM25 at once, and its vector is filled in later by the build
    #: (:class:`~docgraph.store.pending.PendingVectors`). None: every vector is given.
    missing: Sequence[bool] | None = None


@dataclass(frozen=True, slots=True)
class NamespaceStats:
    """Counts for one namespace."""

    namespace: str
    sources: int
    documents: int
    chunks: int
    failures: int
    last_indexed_at: float | None
    entities: int = 0
    communities: int = 0
    graph_built_at: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One read replica (``[store] read_urls``) as its primary sees it: how far behind it
    replays, so an operator sees a replica that lags or is gone."""

    url: str  # redacted
    standby: bool = False  # still in recovery (False after a promotion)
    replay_lsn: str | None = None
    lag_bytes: int | None = None  # WAL the primary wrote that it has not replayed
    last_replay_age_s: float | None = None  # since the last transaction it replayed
    error: str = ""  # why it could not be read (unreachable)


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """A file that could not be indexed, and why; ``access``: who may be told of it (the
    permission set the file had at its source when it failed: None, everyone the namespace
    is granted to; empty, the index's owner only, also for a failure recorded before
    failures carried their set)."""

    namespace: str
    source_urn: str
    path: str
    reason: str
    at: float
    access: Access = frozenset()


def require_namespaces(namespaces: Iterable[str] | None) -> frozenset[str]:
    """Validate a namespace pre-filter: a non-empty set of names. ``None`` is rejected."""
    if namespaces is None or isinstance(namespaces, str):
        raise InvalidQuery(
            "namespaces must be an explicit non-empty set of names "
            f"(got {namespaces!r}); there is no 'search everything' value"
        )
    names = frozenset(namespaces)
    if not names:
        raise InvalidQuery("empty namespace set: nothing may be searched")
    return names


class Catalog(Protocol):
    """The system of record: sources, documents, chunks (with vectors), the embedding model."""

    def embedding_model(self) -> tuple[str, int] | None:
        """(model name, dimension) the index was built with, or None for an empty index."""
        ...

    def set_embedding_model(self, name: str, dimension: int) -> None:
        """Record the embedding model of this index."""
        ...

    def add_source(self, urn: str, namespace: str, display_name: str | None = None,
                   public_url: str | None = None) -> SourceRecord:
        """Register a normalized folder URN in a namespace with its display name and public
        URL (idempotent: an existing registration is returned unchanged)."""
        ...

    def update_source(self, source: SourceRecord, *, display_name: str | None = None,
                      public_url: str | None = None, clear_public_url: bool = False
                      ) -> SourceRecord:
        """Change a source's display name and/or public URL (None keeps the value;
        ``clear_public_url`` removes the URL); returns the updated record."""
        ...

    def list_sources(self) -> list[SourceRecord]:
        """Every registered source."""
        ...

    def remove_source(self, source: SourceRecord) -> int:
        """Delete a source and everything derived from it; returns documents removed."""
        ...

    def namespaces(self) -> list[str]:
        """Names of every namespace that has a source."""
        ...

    def documents_for_source(self, source: SourceRecord) -> dict[str, DocumentRecord]:
        """The source's documents keyed by relative path (attachments included, with their
        :attr:`~docgraph.model.DocumentRecord.parent`)."""
        ...

    def write_document(self, write: DocumentWrite) -> DocumentRecord:
        """Insert or replace a document and all its chunks atomically."""
        ...

    def write_documents(self, writes: Sequence[DocumentWrite]) -> list[DocumentRecord]:
        """Insert or replace several documents, each atomically, in order, in one
        transaction with a savepoint per document (alike on every relational backend:
        ``docgraph.store.sql.documents``; ``tests/store/test_store_contract.py`` pins it).

        Every write is checked first (chunks, hashes, vectors and links line up, vectors
        finite; on PostgreSQL, whose vector index is per dimension, also as wide as the
        recorded model's): one refused leaves the whole batch unwritten.
        If a document then fails it keeps its old version, those before it commit, those
        after it are not written, and the error propagates. A crash or an interrupt before
        the commit leaves every document of the batch in its old version."""
        ...

    def line_counts(self, source: SourceRecord, floor: int) -> dict[str, int]:
        """The line fingerprints held by at least ``floor`` counted documents of the source,
        with how many hold each."""
        ...

    def line_fingerprints(self, source: SourceRecord, holding: Iterable[str]
                          ) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """(line fingerprints, fingerprints dropped) of the source's counted documents that
        hold any of ``holding`` or dropped any line, keyed by path (attachments included)."""
        ...

    def touch_document(self, document: DocumentRecord, change_token: str) -> None:
        """Record a new change token for a document whose content did not change (and for
        its attachments, which follow it)."""
        ...

    def delete_document(self, document: DocumentRecord) -> None:
        """Delete a document, its chunks and its attachments atomically."""
        ...

    def reusable_vectors(
        self, namespace: str, doc_id: str, embedded_text_hashes: Iterable[str]
    ) -> dict[str, Vector]:
        """Vectors of the document's current chunks whose embedded text hash matches."""
        ...

    def record_failure(self, source: SourceRecord, path: str, reason: str,
                       access: Access = frozenset()) -> None:
        """Remember that a file could not be indexed, and who may be told so (``access``:
        the file's permission set; the default, nobody but the index's owner)."""
        ...

    def clear_failure(self, source: SourceRecord, path: str) -> None:
        """Forget a failure once the file indexes (or disappears)."""
        ...

    def failures(self) -> list[FailureRecord]:
        """Files that could not be indexed."""
        ...

    def chunks_by_rowid(self, rowids: Sequence[int]) -> dict[int, StoredChunk]:
        """Stored chunks for the given row ids (missing ids are absent from the result)."""
        ...

    def chunk_places(self, rowids: Sequence[int]) -> dict[int, ChunkPlace]:
        """Where each chunk lives (absent: no such chunk), without its text: for chunks
        the cohort lanes consider but may not rank (callers compare the namespace)."""
        ...

    def placed_chunks(self, rowids: Sequence[int]
                      ) -> dict[int, tuple[StoredChunk, ChunkPlace]]:
        """:meth:`chunks_by_rowid` with where each chunk lives, in the same read (the
        cohort lanes ask where chunks live, then rank the same chunks by their text);
        callers compare the namespace themselves (a namespace filter in SQL makes SQLite
        scan the namespace's index instead)."""
        ...

    def stats(self) -> list[NamespaceStats]:
        """Per-namespace counts."""
        ...

    def clear_all_chunks(self) -> None:
        """Drop every chunk and forget every content hash (for a full re-index)."""
        ...


class ChunkIndex(Protocol):
    """Search accelerators derived from the catalog; both take a namespace pre-filter."""

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` by cosine similarity among the given namespaces."""
        ...

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` by BM25 among the given namespaces."""
        ...

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (absent: deleted)."""
        ...

    def __len__(self) -> int:
        """Live chunks in the index, all namespaces and kinds (the hub-threshold base)."""
        ...

    def pending_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        """Chunks of ``namespaces`` stored but not embedded yet (skipped by the dense
        search until their build embeds them), per namespace; absent: none. Only chunks of
        documents every reader of the namespace may see (no permission set, not a table row,
        not a report) are counted: the count goes into agents' answers, and counting a
        restricted document's chunks would tell a caller who may not read it that it exists
        and how large it is."""
        ...

    def for_query(self, readers: frozenset[str] | None = None) -> ChunkIndex:
        """The index as one query reads it: up to date with the catalog as of now, and not
        checked again by its searches (an index that follows the catalog checks it once per
        query instead of once per search); the searcher takes one at the start of a query
        and its lanes search through it. An index that needs no following returns itself.

        ``readers``: the caller's principals (``user:<id>``, ``group:<name>``); every
        search of the returned index then ranks only chunks whose document has no
        permission set or one naming a reader (filtered before ranking, so ``k`` is
        filled from what the caller may read). None: no such filter (the owner, and
        engine calls outside the governed path)."""
        ...

class StoreCatalog(Catalog, PendingVectors, Protocol):
    """A catalog that :class:`docgraph.DocGraph` can run on: the :class:`Catalog` contract plus
    document paging, build bookkeeping and closing (embedded SQLite and PostgreSQL)."""

    def namespace_ids(self, names: Iterable[str]) -> dict[str, int]:
        """Ids of the named namespaces that exist (unknown names are absent)."""
        ...

    def list_documents(
        self, namespaces: Iterable[str], after_id: int = 0, limit: int = 100
    ) -> list[DocumentRecord]:
        """Documents of the given namespaces, ordered by internal id, for cursor paging."""
        ...

    def mark_indexed(self, source: SourceRecord) -> None:
        """Record that a build of this source just finished."""
        ...

    def document_chunks(self, doc_ids: Iterable[str], namespaces: Iterable[str]
                        ) -> list[StoredChunk]:
        """The text chunks of the given documents in the given (non-empty) namespaces,
        ordered by namespace, document and chunk index: what a governed read pages over."""
        ...

    def gates_for(self, doc_ids: Iterable[str]) -> dict[str, DocGate]:
        """The row origin and permission set of the given documents (documents with
        neither are absent): what the governed visibility decision asks about."""
        ...

    def row_table(self, source_id: int) -> RowOrigin | None:
        """Where the rows of the table source ``source_id`` are re-checked: the origin of
        one of its row documents with an empty primary key value (None: it has none). A
        read by id re-checks the row an id names whether or not it was indexed, so a
        missing row costs what a hidden one does."""
        ...

    def restricted_counts(self, namespaces: Iterable[str]
                          ) -> list[tuple[str, frozenset[str], int, int]]:
        """(namespace, permission set, documents, text chunks) of the source documents with
        a permission set in the given namespaces, one row per distinct set: what a caller's
        counts leave out of the namespace's when it is not among a set's readers."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads of this thread inside the block see one snapshot of the catalog (a read
        transaction; inside one already: that one), for a figure made of several
        statements, such as a caller's counts (totals less :meth:`restricted_counts`)."""
        ...

    def set_document_access(self, changes: Mapping[int, Access]) -> int:
        """Store new permission sets (document row id -> access) without touching text or
        vectors, for each document and the documents carried inside it (a mail's
        attachments), and for the communities that draw on them; one transaction. Returns
        the documents changed."""
        ...

    def document_metadata(self, namespace: str, doc_id: str) -> dict[str, str]:
        """What the format said about one document (:attr:`DocumentRecord.metadata`; empty
        when nothing, or no such document): what a governed read shows with its chunks."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class TraceEntry:
    """One retrieval trace to store: its id, when it was made, its payload (shaped by the
    governed service, with the ``user_id`` it belongs to)."""

    trace_id: str
    created_at: float
    payload: Mapping[str, Any]


class TraceLog(Protocol):
    """Stored retrieval traces, newest kept (payloads are shaped by the governed service)."""

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Store one trace (replacing one with the same id)."""
        ...

    def get(self, trace_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        """A trace by id, or the newest for ``last``; with ``user_id``, only that caller's."""
        ...

    def count(self) -> int:
        """Stored traces."""
        ...

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest traces first (each payload with its ``id``)."""
        ...


class AuditStore(Protocol):
    """The append-only audit log of governed requests."""

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any], traces: Sequence[TraceEntry] = ()) -> None:
        """Append one record, and store the request's ``traces`` (as
        :meth:`TraceLog.save` does) in the same transaction: a governed request is one
        write, whatever it searched."""
        ...

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        ...


class SettingsStore(Protocol):
    """Admin settings changed at run time, shared by every process of the index."""

    def revision(self) -> int:
        """A number that grows with every stored change (0: none yet)."""
        ...

    def overrides(self) -> dict[str, dict[str, Any]]:
        """Every stored setting: section -> key -> value."""
        ...

    def record(self, changed: Mapping[str, Mapping[str, Any]], at: float) -> None:
        """Store changed values under one new revision."""
        ...
