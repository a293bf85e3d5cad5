"""The composition root: :class:`Root` opens one index and builds its engines once.

Everything below the application is handed what it uses from here, as a narrow protocol it
owns itself, and never imports this module: the refresher, the build history, the admin
settings and ``index_status`` (:mod:`docgraph.lifecycle.ports`), the governed service
(:class:`docgraph.governance.ports.GovernedIndex`) and the evidence pipeline
(:class:`docgraph.evidence.port.SearchIndex`). :class:`docgraph.app.DocGraph` is the
owner's API over this root (index, search, listings); it adds verbs, not wiring.

What is built once: the settings (the file and environment, with the admin changes every
process of the index shares applied in place, see :meth:`Root.sync_settings`), the
storage ports (:func:`~docgraph.store.ports.open_ports`), the embedder, the entity
extractor, the chunk index (opened on first use, when the embedding model is checked:
not per query) and the lifecycle objects. The search engines are light views over those,
made per request so they read the settings as they are now.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from docgraph.config import Settings, load_settings
from docgraph.embedding.embedders import Embedder, make_embedder
from docgraph.errors import UnsupportedByBackend
from docgraph.graph.build import GraphBuildReport, make_extractor
from docgraph.graph.extract import EntityExtractor
from docgraph.graph.phrase_cache import PhraseCache
from docgraph.ingest.pipeline import IngestReport, ProgressCallback, check_embedding_model
from docgraph.lifecycle.admin import AdminSettings
from docgraph.lifecycle.history import BuildHistory
from docgraph.lifecycle.leadership import Leadership
from docgraph.lifecycle.refresher import Refresher
from docgraph.lifecycle.shared_settings import SYNC_INTERVAL_S, SharedSettings
from docgraph.lifecycle.status import index_status
from docgraph.llm import ChatModel, OpenAIChatModel
from docgraph.model import NamespaceStatus, SourceRecord
from docgraph.retrieve.cohort import CohortSearch, CohortSettings
from docgraph.retrieve.hybrid import HybridSearcher
from docgraph.sources.credentials import Credentials
from docgraph.sources.registry import SourceRegistry
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
from docgraph.store.lifecycle import LeaderLock
from docgraph.store.ports import StorePorts, open_ports
from docgraph.store.sessions import ConsoleSessionStore
from docgraph.store.signin import SignInLimitStore
from docgraph.store.tokens import TokenStore

if TYPE_CHECKING:
    from docgraph.store.sqlite import SQLiteCatalog


@dataclass(frozen=True)
class IndexStatus:
    """What is in the index: model, per-namespace counts, sources and failed files."""

    path: str
    embedding_model: tuple[str, int] | None
    namespaces: list[NamespaceStats]
    sources: list[SourceRecord]
    failures: list[FailureRecord]
    builds: list[NamespaceStatus] = field(default_factory=list)
    refresh_leader: str | None = None  # pid@host of the process leading the refresh
    this_process_leads: bool = False
    refresher_running: bool = False  # this process runs the background refresh loop
    replicas: list[ReplicaStatus] = field(default_factory=list)  # [store] read_urls' lag


class Root:
    """One open index and its engines, built once (see the module docstring)."""

    def __init__(self, settings: Settings | None = None, embedder: Embedder | None = None) -> None:
        self._settings = settings or load_settings()
        self._embedder = embedder or make_embedder(self._settings.embed)
        self._model_checked: tuple[Embedder, float] | None = None  # embedder, when
        self.backend = self._settings.store.backend
        self.ports: StorePorts = open_ports(self._settings.store)
        self.store: StoreCatalog = self.ports.catalog
        #: The catalog as queries read it: the read replicas (``[store] read_urls``) when
        #: there are some, else :attr:`store`. Builds write through :attr:`store`.
        self.query_store: StoreCatalog = self.ports.query_catalog
        self.extractor: EntityExtractor | None = (
            make_extractor(self._settings.graph) if self._settings.graph.enabled else None
        )
        #: Chunk tokens and mentions key-phrase graph builds keep between builds.
        self.phrase_cache = PhraseCache()
        self._chat_model: ChatModel | None = None
        self._chat_settings: tuple[object, ...] | None = None  # what _chat_model was made of
        self.last_graph_reports: list[GraphBuildReport] = []
        self.cohort_settings = CohortSettings.from_config(self._settings.retrieval)
        self._index: ChunkIndex | None = None
        self._index_lock = threading.Lock()
        self._build_lock = threading.RLock()  # an elected build may call another
        self.config_file: Path | None = None
        self._shared_settings = SharedSettings(self.ports.settings, self._settings)
        self._shared_settings.sync(force=True)
        self._synced_at = time.monotonic()

    # -- settings and models -------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """This index's settings, as last synced (:meth:`sync_settings`); one object for
        the process's lifetime, changed in place by admin changes."""
        return self._settings

    def sync_settings(self) -> None:
        """Apply admin changes made by any process of the index (one look at the stored
        revision at most every :data:`~docgraph.lifecycle.shared_settings.SYNC_INTERVAL_S`
        seconds). Called at the entry of a request or a build, never per lookup step; in
        between it costs one clock read here."""
        shared, now = self._shared_settings, time.monotonic()
        if now - self._synced_at >= shared.interval_s:
            self._synced_at = now
            shared.sync()

    @property
    def shared_settings(self) -> SharedSettings:
        """The admin settings stored in the index (shared by every process)."""
        return self._shared_settings

    @property
    def embedder(self) -> Embedder:
        """The embedding model; another one (an admin model change) is checked against the
        index again before its first query."""
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Embedder) -> None:
        """Another model (an admin model change): checked against the index again, and the
        cohort engine's settings re-read, as the model's profile may have changed them
        (``docgraph.config.profiles``)."""
        self._embedder = embedder
        self._model_checked = None
        self.cohort_settings = CohortSettings.from_config(self._settings.retrieval)

    @property
    def chat_model(self) -> ChatModel | None:
        """The chat model of ``[llm]`` (None when unset), made again whenever those settings
        change (an admin change in any process of the index applies at its next use)."""
        return self._current_chat_model()

    @chat_model.setter
    def chat_model(self, model: ChatModel | None) -> None:
        """Use ``model`` (e.g. a local one) until the ``[llm]`` settings change."""
        self._use_chat_model(model)

    def _current_chat_model(self) -> ChatModel | None:
        llm = self._settings.llm
        key = (llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)
        if key != self._chat_settings:
            self._chat_model = (
                OpenAIChatModel(llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)
                if llm.base_url is not None and llm.model is not None else None)
            self._chat_settings = key
        return self._chat_model

    def _use_chat_model(self, model: ChatModel | None) -> None:
        llm = self._settings.llm
        self._chat_model = model
        self._chat_settings = (llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)

    def check_model(self) -> None:
        """Refuse to query with another embedding model than the index was built with
        (:class:`~docgraph.errors.EmbeddingModelMismatch`). Looked up once per embedder and
        then again at most every ``SYNC_INTERVAL_S`` seconds (another process may re-index
        with a new model), never per query; an index with no model yet is looked at
        until it has one."""
        embedder, now = self._embedder, time.monotonic()
        checked = self._model_checked
        if checked is not None and checked[0] is embedder and now - checked[1] < SYNC_INTERVAL_S:
            return
        recorded = self.store.embedding_model()  # one statement
        if recorded is not None and recorded != (embedder.name, embedder.dimension):
            check_embedding_model(self.store, embedder)  # raises, naming both models
            return
        self._model_checked = (embedder, now) if recorded is not None else None

    # -- the storage ports -----------------------------------------------------------------

    @property
    def catalog(self) -> SQLiteCatalog:
        """The raw embedded SQLite catalog, for tests and benchmarks that look inside the
        file. The product uses the ports (:attr:`store`, :attr:`graph_store`, ...)."""
        from docgraph.store.sqlite import SQLiteCatalog

        if not isinstance(self.store, SQLiteCatalog):
            raise UnsupportedByBackend(
                f"the raw SQLite catalog exists only with store.backend = 'embedded', not "
                f"{self.backend!r}; every feature works through the storage ports")
        return self.store

    @property
    def graph_store(self) -> GraphStore:
        """Entities, edges and communities, in the catalog's database (shared SQL)."""
        return self.ports.graph

    @property
    def query_graph_store(self) -> GraphStore:
        """The graph store as queries read it (from the read replicas, when there are
        some); graph builds write through :attr:`graph_store`."""
        return self.ports.query_graph

    @property
    def traces(self) -> TraceLog:
        """Retrieval traces stored by the governed service (in the backend's database)."""
        return self.ports.traces

    @property
    def audit_store(self) -> AuditStore:
        """The audit log of governed requests (in the backend's database)."""
        return self.ports.audit

    @property
    def token_store(self) -> TokenStore:
        """Bearer-token digests of ``docgraph serve`` (in the backend's database, shared by
        every process serving it)."""
        return self.ports.tokens

    @property
    def console_session_store(self) -> ConsoleSessionStore:
        """Web console sessions (in the backend's database, shared by every process serving
        it, so a session survives a restart and load balancing)."""
        return self.ports.console_sessions

    @property
    def signin_limit_store(self) -> SignInLimitStore:
        """The web console's sign-in buckets (in the backend's database, shared by every
        process serving it, so a limit per client address holds across the fleet)."""
        return self.ports.signin_limits

    # -- the engines -------------------------------------------------------------------------

    def chunk_index(self) -> ChunkIndex:
        """The chunk index chosen by ``[store] index`` (opened on first use, when the
        embedding model is checked, then kept in step with the catalog)."""
        with self._index_lock:
            if self._index is None:
                self.check_model()
                self._index = self.ports.chunk_index(self._embedder.dimension)
            return self._index

    @property
    def opened_chunk_index(self) -> ChunkIndex | None:
        """The chunk index if a query or a build opened it already, else None: what a
        metrics scrape reads (a scrape must not be what opens it)."""
        return self._index

    def searcher(self) -> HybridSearcher:
        """A hybrid searcher over this index (``hybrid`` and ``dense`` single chunks)."""
        index = self.chunk_index()
        self.check_model()
        return HybridSearcher(self.query_store, index, self._embedder, self._settings.index)

    def cohort_engine(self, settings: CohortSettings | None = None) -> CohortSearch:
        """The cohort search engine over this index."""
        index = self.chunk_index()
        self.check_model()
        return CohortSearch(self.query_store, index, self.query_graph_store, self._embedder,
                            self.extractor, settings or self.cohort_settings,
                            self._current_chat_model())

    def drop_vectors(self) -> None:
        """Drop every stored vector and close the chunk index (a full re-index's first
        step; the next query checks the model again)."""
        self.store.clear_all_chunks()
        with self._index_lock:
            index, self._index = self._index, None
        self._model_checked = None
        _close_index(index)

    # -- sources and lifecycle ---------------------------------------------------------------

    @property
    def build_lock(self) -> threading.RLock:
        """Held by every build: builds of one process are serialized (re-entrant, so a
        build may call another, e.g. in a ``before_build`` callback)."""
        return self._build_lock

    @cached_property
    def sources(self) -> SourceRegistry:
        """Document folders, SQL sources and column tags (credentials from env/secrets)."""
        credentials = Credentials(self._settings.sources.secrets_file,
                                  timeout_s=self._settings.sources.timeout_s)
        return SourceRegistry(self.store, self.ports.registry, credentials,
                              elect=self.leadership.elected)

    @cached_property
    def build_history(self) -> BuildHistory:
        """Recorded namespace builds and their phase outcomes."""
        return BuildHistory(self.ports.builds)

    @property
    def leader_lock(self) -> LeaderLock:
        """Elects the one process that refreshes this index: a PostgreSQL advisory lock, or
        a file lock beside the SQLite file."""
        return self.ports.leader

    @cached_property
    def leadership(self) -> Leadership:
        """The one process that builds this index: every build (refresh, ``index``,
        ``remove_folder``, ``build_graph``, :meth:`reindex_full`) runs as its leader (see
        :mod:`docgraph.lifecycle.leadership`)."""
        return Leadership(self.ports.leader, self._build_lock)

    @cached_property
    def refresher(self) -> Refresher:
        """The refresher (one global interval); ``refresher.start()`` runs it in the
        background while this process leads, ``refresher.run_once()`` builds every
        namespace now (see :class:`Refresher` for the leadership)."""
        return Refresher(self)

    @cached_property
    def admin(self) -> AdminSettings:
        """The admin settings (store, loader, index, refresh interval, chat model)."""
        return AdminSettings(self, self.config_file)

    def reindex_full(self, progress: ProgressCallback | None = None) -> list[IngestReport]:
        """Drop every vector and re-embed the whole corpus with the configured model (as the
        refresh leader: nothing is dropped while another process leads)."""
        return self.refresher.run_once(progress, force_graph=True,
                                       before_build=self.drop_vectors).reports

    def index_status(self) -> list[NamespaceStatus]:
        """Per namespace: last build and outcome, staleness, counts, errors."""
        return index_status(self)

    def status(self, *, open_pending: bool = False) -> IndexStatus:
        """Model, counts per namespace, sources and failures (``open_pending``: the builds'
        pending chunks of open documents only, see :func:`index_status`)."""
        return IndexStatus(
            path=self.ports.location,
            embedding_model=self.store.embedding_model(),
            namespaces=self.store.stats(),
            sources=self.store.list_sources(),
            failures=self.store.failures(),
            builds=index_status(self, open_pending=open_pending),
            refresh_leader=self.leadership.leader(),
            this_process_leads=self.leadership.leading,
            refresher_running="refresher" in self.__dict__ and self.refresher.running,
            replicas=self.ports.replicas(),
        )

    def close(self) -> None:
        """Close database connections (and the Milvus client, if one is open)."""
        with self._index_lock:
            index, self._index = self._index, None
        _close_index(index)
        refresher = self.__dict__.get("refresher")
        if refresher is not None:
            refresher.stop()
        self.ports.close()


def _close_index(index: ChunkIndex | None) -> None:
    """Release an index's connections (a Milvus client); the embedded index has none."""
    close = getattr(index, "close", None)
    if callable(close):
        close()
