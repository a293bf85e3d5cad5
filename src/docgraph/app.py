"""The Python API: :class:`DocGraph`, the owner's verbs (index, refresh, search, retrieve,
listings) over the composition root :class:`~docgraph.root.Root`, which wires settings,
storage ports, embedder and engines once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

from docgraph.config import Settings, load_settings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import BuildInterrupted, StoreFull, UnknownNamespace
from docgraph.governance.inputs import (
    InvalidArgument,
    check_encodable,
    check_string,
    check_text,
)
from docgraph.graph.build import GraphBuilder, GraphBuildReport
from docgraph.ingest.pipeline import (
    IngestPipeline,
    IngestReport,
    ProgressCallback,
    check_embedding_model,
)
from docgraph.lifecycle.history import (
    NAMESPACE_WIDE,
    BuildProgress,
    NamespaceBuild,
)
from docgraph.lifecycle.outcomes import describe_error, phases_after_failure, phases_of_report
from docgraph.limits import (
    COHORT_MODES,
    ENGINE_MAX_QUERY_CHARS,
    MAX_NAME_CHARS,
    CohortMode,
    SearchMode,
)
from docgraph.llm import ChatModel
from docgraph.model import (
    DocumentRecord,
    PhaseOutcome,
    SearchHit,
    SourceRecord,
)
from docgraph.retrieve.cohort import CohortResult
from docgraph.retrieve.context import GraphContext, assemble_context
from docgraph.root import IndexStatus as IndexStatus
from docgraph.root import Root
from docgraph.sources.folder import FolderCrawler
from docgraph.sources.urn import normalize_urn
from docgraph.store.base import require_namespaces
from docgraph.store.graph import CommunityInfo, EntityInfo, Neighbor


class DocGraph(Root):
    """One docgraph index: build it from folders, search it (the owner's API over the
    composition root, :class:`~docgraph.root.Root`, which it extends with verbs).

    >>> dg = DocGraph.open("my-index.db")              # doctest: +SKIP
    >>> dg.index("docs/", namespace="handbook")        # doctest: +SKIP
    >>> dg.search("parental leave", namespaces={"handbook"}, k=5)  # doctest: +SKIP

    Thread-safe for concurrent searches; builds are serialized.
    """

    @property
    def settings(self) -> Settings:
        """This index's settings: the file and environment, with admin changes made by any
        process of the index applied (re-checked every few seconds when read here, see
        :mod:`docgraph.lifecycle.shared_settings`; the engines below read them as synced at
        the entry of a request)."""
        self.sync_settings()
        return self._settings

    @property
    def chat_model(self) -> ChatModel | None:
        """The chat model of ``[llm]`` (None when unset), made again whenever those settings
        change; read here, admin changes of other processes are synced first."""
        self.sync_settings()
        return self._current_chat_model()

    @chat_model.setter
    def chat_model(self, model: ChatModel | None) -> None:
        """Use ``model`` (e.g. a local one) until the ``[llm]`` settings change."""
        self._use_chat_model(model)

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
        docgraph = cls(settings, embedder)
        docgraph.config_file = Path(config_file) if config_file is not None else None
        return docgraph

    # -- building ------------------------------------------------------------

    def add_folder(self, folder: str | Path, namespace: str = "default") -> SourceRecord:
        """Register a folder (local path or URN) in ``namespace`` without indexing it."""
        return self.sources.add_folder(_folder(folder), _new_namespace(namespace))

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
        folder, namespace = _folder(folder), _new_namespace(namespace)
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
                with suppress(StoreFull):  # a full disk cannot take the record either
                    history.finish(build, keep=self.settings.refresh.keep_builds)
                raise
            history.finish(build, keep=self.settings.refresh.keep_builds)
            return report

    def refresh(self, progress: ProgressCallback | None = None) -> list[IngestReport]:
        """Re-index every registered source (unchanged files cost a metadata check).

        A source that fails is recorded with its phase and message (see :meth:`status`)
        and keeps what was indexed from it; the other sources still build."""
        return self.refresher.run_once(progress).reports

    def remove_folder(self, folder: str | Path, namespace: str = "default", *,
                      wait_seconds: float = 0.0) -> int:
        """Unregister a folder and delete everything indexed from it, then rebuild the
        namespace's graph; returns documents removed. Runs as the index's leader, like
        :meth:`index` (``wait_seconds`` the same)."""
        folder = _folder(folder)
        namespace = check_encodable(check_string(namespace, "namespace"), "namespace")
        hint = "wait with `--wait SECONDS` (wait_seconds=), or stop that process"
        with self.leadership.elected(f"removing {normalize_urn(folder)}", wait_seconds, hint):
            removed = self.sources.remove_folder(folder, namespace)
            self._build_graphs()
        return removed

    def _pipeline(self) -> IngestPipeline:
        return IngestPipeline(
            self.store, self.embedder, self.settings.loader, extractor=self.extractor,
            sources=self.settings.sources,
            # Milvus follows embedded rows only: its builds embed before they write
            embed_behind=self.settings.store.index != "milvus",
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

    def search(
        self,
        query: str,
        *,
        namespaces: Iterable[str],
        k: int = 10,
        mode: SearchMode = "hybrid",
        strict: bool = True,
    ) -> list[SearchHit]:
        """Top ``k`` chunks for ``query`` in ``namespaces`` (an explicit, non-empty set).

        ``hybrid`` and ``dense`` rank single chunks; ``vector_first``, ``graph_first`` and
        ``global`` run cohort search (see :meth:`retrieve`). ``strict`` (the default)
        raises :class:`~docgraph.errors.UnknownNamespace` for a namespace the index does
        not hold (a typo would otherwise answer nothing); the governed service passes
        False, since a caller's domains may hold nothing yet."""
        query = _query(query, "query")
        namespaces = self._namespaces(namespaces, strict)
        if mode in COHORT_MODES:
            return self.retrieve(query, namespaces=namespaces, k=k, mode=mode,
                                 strict=False).hits  # checked above
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
        in :meth:`search`); ``pending_chunks`` counts the searched chunks not embedded yet."""
        query_text = _query(query_text, "query_text")
        namespaces = self._namespaces(namespaces, strict)
        result = self.cohort_engine().search(
            query_text, namespaces=namespaces, k=k, mode=mode, return_trace=return_trace
        )
        pending = sum(self.chunk_index().pending_counts(namespaces).values())
        return dataclasses.replace(result, pending_chunks=pending) if pending else result

    def context(
        self, query: str, *, namespaces: Iterable[str], token_budget: int = 4000,
        strict: bool = True,
    ) -> GraphContext:
        """Entities | Relationships | Community Reports | Source Text within a token budget
        (``strict``: as in :meth:`search`)."""
        query = _query(query, "query")
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
        query = _optional_text(query, "query", MAX_NAME_CHARS)
        entity_type = _optional_text(entity_type, "entity_type", MAX_NAME_CHARS)
        namespaces = self._namespaces(namespaces, strict)
        return self.graph_store.find_entities(namespaces, query, entity_type, limit)

    def neighbors(self, entity: str, namespaces: Iterable[str], limit: int = 20,
                  strict: bool = True) -> list[Neighbor]:
        """Entities co-occurring with ``entity`` (a name or canonical key), strongest first
        (``strict``: as in :meth:`search`)."""
        from docgraph.graph.normalize import canonical_key

        entity = _text(entity, "entity", MAX_NAME_CHARS)
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
        None or a bare string is refused as no set of names (``InvalidQuery``). The entry of
        every query here: admin changes of other processes are applied first."""
        self.sync_settings()
        if namespaces is None or isinstance(namespaces, str):
            require_namespaces(namespaces)  # raises, naming the mistake
        wanted = frozenset(check_encodable(check_string(name, "namespaces"), "namespaces")
                           for name in namespaces)
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

    def __enter__(self) -> DocGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _query(value: object, name: str) -> str:
    """A query text the engines can take: :func:`_text` with the engine's bound."""
    return _text(value, name, ENGINE_MAX_QUERY_CHARS)


def _text(value: object, name: str, max_chars: int) -> str:
    """``value`` if the engines can take it, else :class:`InvalidArgument` naming ``name``:
    the governed entry's refusals (not a string, blank, over ``max_chars``, an unpaired
    surrogate), so the owner's API never meets a raw encoder or SQLite error (e.g. "LIKE or
    GLOB pattern too complex"). A NUL character stays allowed here: the engines take it as
    data (the governed entry refuses it for its transports)."""
    text = check_string(value, name)
    if not text.strip():
        raise InvalidArgument(name, "must contain more than whitespace")
    if len(text) > max_chars:
        raise InvalidArgument(name, f"{len(text)} characters; the limit is {max_chars}")
    return check_encodable(text, name)


def _optional_text(value: object, name: str, max_chars: int) -> str | None:
    """None for a missing or blank filter, else :func:`_text`'s result."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _text(value, name, max_chars)


def _new_namespace(value: object) -> str:
    """A namespace name a build may create: text of at most ``MAX_NAME_CHARS``."""
    return check_text(value, "namespace", max_chars=MAX_NAME_CHARS)


def _folder(value: str | Path) -> str | Path:
    """A folder path or URN that can be stored and opened, else :class:`InvalidArgument`
    naming ``folder``: no NUL, and no lone surrogate except those that stand for the bytes
    of a name that is not UTF-8 (Python's ``surrogateescape``, U+DC80 to U+DCFF, as
    ``os.fsdecode`` gives them: such a folder is indexed, its name escaped in ids)."""
    text = str(value) if isinstance(value, Path) else check_string(value, "folder")
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        check_encodable(text, "folder")  # names the offending surrogate
    if "\x00" in text:
        raise InvalidArgument("folder", "contains a NUL character")
    return value


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
