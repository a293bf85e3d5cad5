"""The Python API: :class:`DocGraph` wires settings, store, embedder, ingest and retrieval."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docgraph.config import Settings, load_settings
from docgraph.embedding.embedders import Embedder, make_embedder
from docgraph.errors import BuildInterrupted, UnknownNamespace, UnsupportedByBackend
from docgraph.graph.build import GraphBuilder, GraphBuildReport, make_extractor
from docgraph.graph.extract import EntityExtractor
from docgraph.graph.phrase_cache import PhraseCache
from docgraph.ingest.pipeline import (
    IngestPipeline,
    IngestReport,
    ProgressCallback,
    check_embedding_model,
)
from docgraph.lifecycle.admin import AdminSettings
from docgraph.lifecycle.history import (
    NAMESPACE_WIDE,
    BuildHistory,
    BuildProgress,
    NamespaceBuild,
    PhaseOutcome,
)
from docgraph.lifecycle.leadership import Leadership
from docgraph.lifecycle.outcomes import describe_error, phases_after_failure, phases_of_report
from docgraph.lifecycle.refresher import Refresher
from docgraph.lifecycle.shared_settings import SharedSettings
from docgraph.lifecycle.status import NamespaceStatus, index_status
from docgraph.llm import ChatModel, OpenAIChatModel
from docgraph.model import DocumentRecord, SearchHit, SearchModeName, SourceRecord
from docgraph.retrieve.cohort import CohortMode, CohortResult, CohortSearch, CohortSettings
from docgraph.retrieve.context import GraphContext, assemble_context
from docgraph.retrieve.hybrid import HybridSearcher
from docgraph.sources.credentials import Credentials
from docgraph.sources.folder import FolderCrawler
from docgraph.sources.registry import SourceRegistry
from docgraph.sources.urn import normalize_urn
from docgraph.store.base import (
    AuditStore,
    ChunkIndex,
    FailureRecord,
    NamespaceStats,
    StoreCatalog,
    TraceLog,
    require_namespaces,
)
from docgraph.store.graph import CommunityInfo, EntityInfo, GraphStore, Neighbor
from docgraph.store.lifecycle import LeaderLock
from docgraph.store.ports import StorePorts, open_ports
from docgraph.store.sessions import ConsoleSessionStore
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


class DocGraph:
    """One docgraph index: build it from folders, search it.

    >>> dg = DocGraph.open("my-index.db")              # doctest: +SKIP
    >>> dg.index("docs/", namespace="handbook")        # doctest: +SKIP
    >>> dg.search("parental leave", namespaces={"handbook"}, k=5)  # doctest: +SKIP

    Thread-safe for concurrent searches; builds are serialized.
    """

    def __init__(self, settings: Settings | None = None, embedder: Embedder | None = None) -> None:
        self._settings = settings or load_settings()
        self._shared_settings: SharedSettings | None = None
        self.embedder = embedder or make_embedder(self.settings.embed)
        self.backend = self.settings.store.backend
        self.ports: StorePorts = open_ports(self.settings.store)
        self.store: StoreCatalog = self.ports.catalog
        self.extractor: EntityExtractor | None = (
            make_extractor(self.settings.graph) if self.settings.graph.enabled else None
        )
        #: Chunk tokens and mentions key-phrase graph builds keep between builds.
        self.phrase_cache = PhraseCache()
        self._chat_model: ChatModel | None = None
        self._chat_settings: tuple[object, ...] | None = None  # what _chat_model was made of
        self.last_graph_reports: list[GraphBuildReport] = []
        self.cohort_settings = CohortSettings.from_config(self.settings.retrieval)
        self._index: ChunkIndex | None = None
        self._index_lock = threading.Lock()
        self._build_lock = threading.RLock()  # an elected build may call another
        self.config_file: Path | None = None
        self._shared_settings = SharedSettings(self.ports.settings, self._settings)
        self._shared_settings.sync(force=True)

    @property
    def settings(self) -> Settings:
        """This index's settings: the file and environment, with admin changes made by any
        process of the index applied (re-checked every few seconds, see
        :mod:`docgraph.lifecycle.shared_settings`)."""
        shared = self._shared_settings
        if shared is not None:
            shared.sync()
        return self._settings

    @property
    def chat_model(self) -> ChatModel | None:
        """The chat model of ``[llm]`` (None when unset), made again whenever those settings
        change (an admin change in any process of the index applies at its next use)."""
        llm = self.settings.llm
        key = (llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)
        if key != self._chat_settings:
            self._chat_model = (
                OpenAIChatModel(llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)
                if llm.base_url is not None and llm.model is not None else None)
            self._chat_settings = key
        return self._chat_model

    @chat_model.setter
    def chat_model(self, model: ChatModel | None) -> None:
        """Use ``model`` (e.g. a local one) until the ``[llm]`` settings change."""
        llm = self.settings.llm
        self._chat_model = model
        self._chat_settings = (llm.base_url, llm.model, llm.api_key_env, llm.timeout_s)

    @property
    def shared_settings(self) -> SharedSettings:
        """The admin settings stored in the index (shared by every process)."""
        assert self._shared_settings is not None
        return self._shared_settings

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        config_file: str | Path | None = None,
        embedder: Embedder | None = None,
        **overrides: Any,
    ) -> DocGraph:
        """Open (or create) an index; ``path`` overrides ``store.path`` from the settings."""
        settings = load_settings(config_file, **overrides)
        if path is not None:
            settings.store.path = Path(path)
        graph = cls(settings, embedder)
        graph.config_file = Path(config_file) if config_file is not None else None
        return graph

    # -- backends ------------------------------------------------------------

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

    # -- sources and lifecycle -------------------------------------------------

    @property
    def build_lock(self) -> threading.RLock:
        """Held by every build: builds of one process are serialized (re-entrant, so a
        build may call another, e.g. in a ``before_build`` callback)."""
        return self._build_lock

    @cached_property
    def sources(self) -> SourceRegistry:
        """Document folders, SQL sources and column tags (credentials from env/secrets)."""
        credentials = Credentials(self.settings.sources.secrets_file,
                                  timeout_s=self.settings.sources.timeout_s)
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
        """The one process that builds this index: every build (refresh, :meth:`index`,
        :meth:`remove_folder`, :meth:`build_graph`, :meth:`reindex_full`) runs as its leader
        (see :mod:`docgraph.lifecycle.leadership`)."""
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

    def index_status(self) -> list[NamespaceStatus]:
        """Per namespace: last build and outcome, staleness, counts, errors."""
        return index_status(self)

    # -- building ------------------------------------------------------------

    def add_folder(self, folder: str | Path, namespace: str = "default") -> SourceRecord:
        """Register a folder (local path or URN) in ``namespace`` without indexing it."""
        return self.sources.add_folder(folder, namespace)

    def index(
        self,
        folder: str | Path,
        namespace: str = "default",
        progress: ProgressCallback | None = None,
        *,
        wait_seconds: float = 0.0,
    ) -> IngestReport:
        """Register ``folder`` in ``namespace`` (if new) and bring its index up to date.

        Builds as the index's leader: while another process leads (a ``docgraph serve`` or
        ``refresh --watch`` refreshing it), waits up to ``wait_seconds`` for it to stop,
        then raises :class:`~docgraph.errors.RefreshBusy` naming it, having registered
        nothing."""
        check_embedding_model(self.store, self.embedder)
        hint = (f"register the folder with `docgraph sources add {folder} --domain "
                f"{namespace}` and the leader indexes it at its next refresh, or wait with "
                "`docgraph index --wait SECONDS` (wait_seconds=)")
        with self.leadership.elected(f"indexing {folder}", wait_seconds, hint):
            source = self.add_folder(folder, namespace)
            history = self.build_history
            build = history.start(namespace)  # status shows it in progress, how far it got
            tracker = BuildProgress(history, build, progress)
            tracker.source = source.urn
            report: IngestReport | None = None
            pipeline = self._pipeline()
            try:
                if self.extractor is not None:
                    self.refresher.load_vocabulary()
                options = self.sources.credentials.storage_options(source.urn)
                with FolderCrawler(source.urn, self.settings.loader.include, options) \
                        as crawler:
                    report = pipeline.index_source(source, tracker, crawler=crawler)
                build.phases = phases_of_report(source.urn, report)
                _count_report(build, report)
                if self.extractor is not None:
                    tracker.phase("graph")
                    build.phases.extend(_graph_phases(namespace, self._build_graphs()))
            except KeyboardInterrupt as exc:
                interrupted = exc if isinstance(exc, BuildInterrupted) else BuildInterrupted(
                    0 if report is None else len(report.added) + len(report.updated),
                    phase="graph" if report is not None else pipeline.phase)
                build.phases.append(PhaseOutcome(
                    source.urn, interrupted.phase or "store", "error",
                    f"interrupted after {interrupted.done} of {interrupted.total} files; "
                    f"{interrupted.kept} documents kept, the next build continues"))
                build.documents_changed = interrupted.kept
                history.finish(build, keep=self.settings.refresh.keep_builds)
                if interrupted is exc:
                    raise
                raise interrupted from exc
            except Exception as exc:  # recorded like the refresher's, then raised
                message = describe_error(exc)
                if report is None:  # the ingest failed
                    build.phases.extend(phases_after_failure(source.urn, pipeline.phase,
                                                             message, {}))
                else:  # the graph build failed
                    build.phases.append(PhaseOutcome(NAMESPACE_WIDE, "graph", "error", message))
                history.finish(build, keep=self.settings.refresh.keep_builds)
                raise
            history.finish(build, keep=self.settings.refresh.keep_builds)
            return report

    def refresh(self, progress: ProgressCallback | None = None) -> list[IngestReport]:
        """Re-index every registered source (unchanged files cost a metadata check).

        A source that fails is recorded with its phase and message (see :meth:`status`)
        and keeps what was indexed from it; the other sources still build."""
        return self.refresher.run_once(progress).reports

    def reindex_full(self, progress: ProgressCallback | None = None) -> list[IngestReport]:
        """Drop every vector and re-embed the whole corpus with the configured model (as the
        refresh leader: nothing is dropped while another process leads)."""

        def drop_vectors() -> None:
            self.store.clear_all_chunks()
            with self._index_lock:
                index, self._index = self._index, None
            _close_index(index)

        return self.refresher.run_once(progress, force_graph=True,
                                       before_build=drop_vectors).reports

    def remove_folder(self, folder: str | Path, namespace: str = "default", *,
                      wait_seconds: float = 0.0) -> int:
        """Unregister a folder and delete everything indexed from it, then rebuild the
        namespace's graph; returns documents removed. Runs as the index's leader, like
        :meth:`index` (``wait_seconds`` the same)."""
        hint = "wait with `--wait SECONDS` (wait_seconds=), or stop that process"
        with self.leadership.elected(f"removing {normalize_urn(folder)}", wait_seconds, hint):
            removed = self.sources.remove_folder(folder, namespace)
            self._build_graphs()
        return removed

    def _pipeline(self) -> IngestPipeline:
        return IngestPipeline(
            self.store, self.embedder, self.settings.loader, extractor=self.extractor
        )

    def _build_graphs(self, force: bool = False) -> list[GraphBuildReport]:
        """Rebuild the graph of every namespace whose documents changed (or all, if forced)."""
        if self.extractor is None:
            return []
        builder = GraphBuilder(
            self.graph_store, self.embedder, self.settings.graph, self.extractor, self.chat_model,
            self.phrase_cache,
        )
        names = self.store.namespaces() if force else self.graph_store.dirty_namespaces()
        self.last_graph_reports = [builder.build(ns) for ns in names]
        return self.last_graph_reports

    def build_graph(self, namespaces: Iterable[str] | None = None, *,
                    wait_seconds: float = 0.0) -> list[GraphBuildReport]:
        """Rebuild the entity graph, communities and reports of ``namespaces`` (default: those
        whose documents changed). Also re-extracts entities if the vocabulary changed. Runs
        as the index's leader, like :meth:`index`."""
        if self.extractor is None:
            return []
        hint = "the leader rebuilds changed graphs at its next refresh; or wait (wait_seconds=)"
        with self.leadership.elected("a graph build", wait_seconds, hint):
            if namespaces is None:
                return self._build_graphs()
            builder = GraphBuilder(self.graph_store, self.embedder, self.settings.graph,
                                   self.extractor, self.chat_model, self.phrase_cache)
            return [builder.build(ns) for ns in namespaces]

    # -- querying ------------------------------------------------------------

    def chunk_index(self) -> ChunkIndex:
        """The chunk index chosen by ``[store] index`` (created on first use, then kept in
        step with the catalog)."""
        with self._index_lock:
            if self._index is None:
                check_embedding_model(self.store, self.embedder)
                self._index = self._open_index()
            return self._index

    def _open_index(self) -> ChunkIndex:
        return self.ports.chunk_index(self.embedder.dimension)

    def searcher(self) -> HybridSearcher:
        """A hybrid searcher over this index."""
        return HybridSearcher(self.store, self.chunk_index(), self.embedder, self.settings.index)

    def cohort_engine(self, settings: CohortSettings | None = None) -> CohortSearch:
        """The cohort search engine over this index."""
        index = self.chunk_index()
        check_embedding_model(self.store, self.embedder)
        return CohortSearch(
            self.store, index, self.graph_store, self.embedder, self.extractor,
            settings or self.cohort_settings, self.chat_model,
        )

    def search(
        self,
        query: str,
        *,
        namespaces: Iterable[str],
        k: int = 10,
        mode: SearchModeName | CohortMode = "hybrid",
        strict: bool = True,
    ) -> list[SearchHit]:
        """Top ``k`` chunks for ``query`` in ``namespaces`` (an explicit, non-empty set).

        ``hybrid`` and ``dense`` rank single chunks; ``vector_first``, ``graph_first`` and
        ``global`` run cohort search (see :meth:`retrieve`). ``strict`` (the default)
        raises :class:`~docgraph.errors.UnknownNamespace` for a namespace the index does
        not hold (a typo would otherwise answer nothing); the governed service passes
        False, since a caller's domains may hold nothing yet."""
        namespaces = self._namespaces(namespaces, strict)
        if mode in ("vector_first", "graph_first", "global"):
            return self.retrieve(query, namespaces=namespaces, k=k, mode=mode,
                                 strict=False).hits  # checked above
        check_embedding_model(self.store, self.embedder)
        return self.searcher().search(query, namespaces=namespaces, k=k, mode=mode)  # type: ignore[arg-type]

    def retrieve(
        self,
        query_text: str,
        *,
        namespaces: Iterable[str],
        k: int = 10,
        mode: CohortMode = "vector_first",
        return_trace: bool = False,
        strict: bool = True,
    ) -> CohortResult:
        """Cohort search: lanes, composite ranking, modes, optional trace (``strict``: as
        in :meth:`search`)."""
        namespaces = self._namespaces(namespaces, strict)
        return self.cohort_engine().search(
            query_text, namespaces=namespaces, k=k, mode=mode, return_trace=return_trace
        )

    def context(
        self, query: str, *, namespaces: Iterable[str], token_budget: int = 4000,
        strict: bool = True,
    ) -> GraphContext:
        """Entities | Relationships | Community Reports | Source Text within a token budget
        (``strict``: as in :meth:`search`)."""
        namespaces = self._namespaces(namespaces, strict)
        return assemble_context(
            self.cohort_engine(), query, namespaces=namespaces, token_budget=token_budget
        )

    def entities(
        self,
        namespaces: Iterable[str],
        query: str | None = None,
        entity_type: str | None = None,
        limit: int = 50,
        strict: bool = True,
    ) -> list[EntityInfo]:
        """Entities of ``namespaces``, most mentioned first, filtered by name and type
        (``strict``: as in :meth:`search`)."""
        namespaces = self._namespaces(namespaces, strict)
        return self.graph_store.find_entities(namespaces, query, entity_type, limit)

    def neighbors(self, entity: str, namespaces: Iterable[str], limit: int = 20,
                  strict: bool = True) -> list[Neighbor]:
        """Entities co-occurring with ``entity`` (a name or canonical key), strongest first
        (``strict``: as in :meth:`search`)."""
        from docgraph.graph.normalize import canonical_key

        allowed = self._namespaces(namespaces, strict)
        keys = {canonical_key(entity), canonical_key(entity, "code"), entity.casefold()}
        found = self.graph_store.entities_by_key(keys, allowed)
        return self.graph_store.neighbors([e.id for e in found], limit)

    def communities(
        self, namespaces: Iterable[str], level: int | None = None, limit: int = 100,
        strict: bool = True,
    ) -> list[CommunityInfo]:
        """Communities of ``namespaces`` with their top members (largest first;
        ``strict``: as in :meth:`search`)."""
        namespaces = self._namespaces(namespaces, strict)
        return self.graph_store.communities(namespaces, level, limit)

    def namespaces(self) -> list[str]:
        """Namespaces that have at least one registered folder."""
        return self.store.namespaces()

    def _namespaces(self, namespaces: Iterable[str], strict: bool) -> frozenset[str]:
        """``namespaces`` as a set; with ``strict``, refuse one the index does not hold.
        None or a bare string is refused as no set of names (``InvalidQuery``)."""
        if namespaces is None or isinstance(namespaces, str):
            require_namespaces(namespaces)  # raises, naming the mistake
        wanted = frozenset(namespaces)
        if strict and wanted:
            held = self.store.namespaces()
            unknown = sorted(wanted.difference(held))
            if unknown:
                raise UnknownNamespace(
                    f"this index holds no namespace {', '.join(map(repr, unknown))}; it holds "
                    + (", ".join(map(repr, sorted(held))) if held else "none yet (index a "
                       "folder first)"))
        return wanted

    def documents(
        self, namespaces: Iterable[str], after_id: int = 0, limit: int = 100,
        strict: bool = True,
    ) -> list[DocumentRecord]:
        """Documents of ``namespaces`` after the cursor ``after_id`` (``strict``: as in
        :meth:`search`)."""
        namespaces = self._namespaces(namespaces, strict)
        return self.store.list_documents(namespaces, after_id, limit)

    def status(self) -> IndexStatus:
        """Model, counts per namespace, sources and failures."""
        return IndexStatus(
            path=self.ports.location,
            embedding_model=self.store.embedding_model(),
            namespaces=self.store.stats(),
            sources=self.store.list_sources(),
            failures=self.store.failures(),
            builds=self.index_status(),
            refresh_leader=self.leadership.leader(),
            this_process_leads=self.leadership.leading,
            refresher_running="refresher" in self.__dict__ and self.refresher.running,
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

    def __enter__(self) -> DocGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count_report(build: NamespaceBuild, report: IngestReport) -> None:
    """Add one source's ingest report to its namespace build's counts."""
    build.documents_changed += len(report.added) + len(report.updated) + len(report.removed)
    build.chunks_embedded += report.chunks_embedded
    build.bodies_read += report.bodies_read


def _graph_phases(namespace: str, reports: list[GraphBuildReport]) -> list[PhaseOutcome]:
    """The graph phase of a namespace build, from the graph builds it ran."""
    for report in reports:
        if report.namespace == namespace:
            return [PhaseOutcome(NAMESPACE_WIDE, "graph", "ok",
                                 f"{report.entities} entities, {report.edges} edges"),
                    PhaseOutcome(NAMESPACE_WIDE, "communities", "ok",
                                 f"{report.communities} communities, {report.reports} reports")]
    return [PhaseOutcome(NAMESPACE_WIDE, "graph", "ok", "up to date")]


def _close_index(index: ChunkIndex | None) -> None:
    """Release an index's connections (a Milvus client); the embedded index has none."""
    close = getattr(index, "close", None)
    if callable(close):
        close()
