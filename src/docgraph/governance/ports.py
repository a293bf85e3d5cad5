"""What the governed service uses of the index: :class:`GovernedIndex`, the narrow protocol
the composition root (:class:`docgraph.root.Root`, and so :class:`docgraph.DocGraph`)
satisfies. Governance never imports the root; it is handed one.

It lists the storage ports governance reads (catalog, graph store, traces, audit), the two
search engines, the embedder (token counts), the entity extractor (query entities), the
chat model, the settings, and the index status it filters per caller
(:class:`IndexStatusView`; the per-namespace :class:`~docgraph.model.NamespaceStatus` is a
ground-floor type, so governance needs nothing of the lifecycle).
"""

from __future__ import annotations

from typing import Protocol

from docgraph.config import Settings
from docgraph.embedding.embedders import Embedder
from docgraph.graph.extract import EntityExtractor
from docgraph.llm import ChatModel
from docgraph.model import NamespaceStatus, SourceRecord
from docgraph.retrieve.cohort import CohortSearch
from docgraph.retrieve.hybrid import HybridSearcher
from docgraph.store.base import (
    AuditStore,
    ChunkIndex,
    FailureRecord,
    NamespaceStats,
    ReplicaStatus,
    StoreCatalog,
    TraceLog,
)
from docgraph.store.graph import GraphStore


class IndexStatusView(Protocol):
    """What the governed status listing reads of the whole index's status."""

    @property
    def embedding_model(self) -> tuple[str, int] | None: ...

    @property
    def namespaces(self) -> list[NamespaceStats]: ...

    @property
    def sources(self) -> list[SourceRecord]: ...

    @property
    def failures(self) -> list[FailureRecord]: ...

    @property
    def builds(self) -> list[NamespaceStatus]: ...

    @property
    def refresh_leader(self) -> str | None: ...

    @property
    def this_process_leads(self) -> bool: ...

    @property
    def refresher_running(self) -> bool: ...

    @property
    def replicas(self) -> list[ReplicaStatus]: ...


class GovernedIndex(Protocol):
    """Everything :class:`~docgraph.governance.Governance` and its listings use of an index.

    ``settings`` is read as last synced: the service calls :meth:`sync_settings` once at
    the entry of every request, not on each read."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> StoreCatalog: ...

    @property
    def graph_store(self) -> GraphStore: ...

    @property
    def query_store(self) -> StoreCatalog:
        """The catalog as queries read it (the read replicas, when there are some)."""
        ...

    @property
    def query_graph_store(self) -> GraphStore:
        """The graph store as queries read it (the read replicas, when there are some)."""
        ...

    @property
    def traces(self) -> TraceLog: ...

    @property
    def audit_store(self) -> AuditStore: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def extractor(self) -> EntityExtractor | None: ...

    @property
    def chat_model(self) -> ChatModel | None: ...

    def sync_settings(self) -> None:
        """Apply admin changes made by other processes (at most every few seconds)."""

    def chunk_index(self) -> ChunkIndex:
        """The chunk index (its pending-vector counts, as of its last sync)."""
        ...

    def searcher(self) -> HybridSearcher:
        """The single-chunk searcher (``hybrid``, ``dense``)."""
        ...

    def cohort_engine(self) -> CohortSearch:
        """The cohort engine (``vector_first``, ``graph_first``, ``global``)."""
        ...

    def status(self, *, open_pending: bool = False) -> IndexStatusView:
        """The whole index's status (governance keeps the caller's namespaces of it;
        ``open_pending``: pending chunks of open documents only)."""
        ...
