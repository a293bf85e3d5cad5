"""What the lifecycle uses of the index it keeps fresh: the narrow protocols the composition
root (:class:`docgraph.root.Root`, and so :class:`docgraph.DocGraph`) satisfies. The
lifecycle never imports the root; it is handed one.

- :class:`StatusRoot`: what ``index_status`` reads (the build history, counts, leadership).
- :class:`BuildRoot`: what the refresher builds with (the storage ports, the embedder, the
  extractor and chat model, the source registry, the leadership).
- :class:`AdminRoot`: what the admin settings change (the settings, the shared settings,
  the embedder, and the full re-index a model change forces).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from docgraph.config import Settings
from docgraph.embedding.embedders import Embedder
from docgraph.graph.build import GraphBuildReport
from docgraph.graph.extract import EntityExtractor
from docgraph.graph.phrase_cache import PhraseCache
from docgraph.llm import ChatModel
from docgraph.sources.registry import SourceRegistry
from docgraph.store.base import StoreCatalog
from docgraph.store.graph import GraphStore

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import IngestReport, ProgressCallback
    from docgraph.lifecycle.history import BuildHistory
    from docgraph.lifecycle.leadership import Leadership
    from docgraph.lifecycle.refresher import Refresher
    from docgraph.lifecycle.shared_settings import SharedSettings


class StatusRoot(Protocol):
    """What :func:`~docgraph.lifecycle.status.index_status` reads."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> StoreCatalog: ...

    @property
    def build_history(self) -> BuildHistory: ...

    @property
    def leadership(self) -> Leadership: ...


class BuildRoot(StatusRoot, Protocol):
    """What the :class:`~docgraph.lifecycle.refresher.Refresher` builds with; it records
    the graph builds of its last round in ``last_graph_reports``."""

    last_graph_reports: list[GraphBuildReport]

    @property
    def graph_store(self) -> GraphStore: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def extractor(self) -> EntityExtractor | None: ...

    @property
    def chat_model(self) -> ChatModel | None: ...

    @property
    def phrase_cache(self) -> PhraseCache: ...

    @property
    def sources(self) -> SourceRegistry: ...

    @property
    def build_lock(self) -> threading.RLock: ...

    def sync_settings(self) -> None:
        """Apply admin changes made by other processes (at the start of a round)."""


class AdminRoot(Protocol):
    """What :class:`~docgraph.lifecycle.admin.AdminSettings` reads and changes."""

    embedder: Embedder

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> StoreCatalog: ...

    @property
    def shared_settings(self) -> SharedSettings: ...

    @property
    def refresher(self) -> Refresher: ...

    def reindex_full(self, progress: ProgressCallback | None = None) -> list[IngestReport]:
        """Drop every vector and re-embed the corpus with :attr:`embedder`."""
        ...
