"""The refresher: one global interval, a build per namespace, every phase's outcome recorded.

:meth:`Refresher.run_once` builds every namespace: the live entity vocabulary of the
``entity:<type>`` columns is loaded first (never stored), then each source of the namespace
is crawled, extracted, chunked, embedded, entity-linked and stored (folders through
:class:`FolderCrawler` with their credentials, tagged columns row by row), then the
namespace's graph and communities are rebuilt if anything changed. Each phase's outcome is
recorded per source in the catalog (:class:`BuildHistory`). A failing source is an error
with its message - logged, recorded, never an empty source: nothing of it is deleted and
its previously indexed content stays searchable - and the other sources still build.

:meth:`Refresher.start` runs ``run_once`` in a background thread every
``refresh.interval_seconds`` (one interval for all namespaces); :meth:`Refresher.stop` ends
it cleanly after the namespace being built.

Exactly one process builds an index at a time: the one holding the backend's
:class:`~docgraph.store.lifecycle.LeaderLock` (a PostgreSQL advisory lock, or a file lock
beside the SQLite file), through :class:`~docgraph.lifecycle.leadership.Leadership`. The
background loop builds only while it leads, and keeps leading between rounds; a loop that
does not lead tries again every :data:`LEADER_RETRY_SECONDS` (or its interval, if shorter)
and takes over once the leader stops or dies. An explicit :meth:`Refresher.run_once` in a
process that does not lead waits up to ``wait_seconds`` for the lock, then raises
:class:`~docgraph.errors.RefreshBusy` naming the leader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from docgraph.errors import BuildInterrupted, DocgraphError
from docgraph.graph.build import (
    GraphBuilder,
    GraphBuildReport,
    extractor_fingerprint,
)
from docgraph.ingest.pipeline import (
    IngestPipeline,
    IngestReport,
    ProgressCallback,
    check_embedding_model,
)
from docgraph.lifecycle.history import (
    NAMESPACE_WIDE,
    BuildHistory,
    BuildProgress,
    NamespaceBuild,
)
from docgraph.lifecycle.leadership import Leadership
from docgraph.lifecycle.outcomes import (
    describe_error,
    graph_phase_of,
    phases_after_failure,
    phases_of_report,
)
from docgraph.lifecycle.ports import BuildRoot
from docgraph.lifecycle.vocabulary import ColumnKey, load_live_terms
from docgraph.model import PhaseOutcome, SourceRecord
from docgraph.sources.folder import FolderCrawler
from docgraph.sources.registry import SourceRegistry
from docgraph.store.lifecycle import LeaderLock
from docgraph.telemetry import span

log = logging.getLogger(__name__)

#: How often a process that does not lead tries to take over (at most; a shorter refresh
#: interval is used instead).
LEADER_RETRY_SECONDS = 5.0


@dataclass
class RefreshResult:
    """What one :meth:`Refresher.run_once` did: a build per namespace, ingest reports."""

    builds: list[NamespaceBuild] = field(default_factory=list)
    reports: list[IngestReport] = field(default_factory=list)
    graph_reports: list[GraphBuildReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no namespace build had a failed phase."""
        return all(b.outcome != "error" for b in self.builds)


class Refresher:
    """Keeps every namespace of an index fresh on one global interval; ``root`` is what it
    builds with (:class:`~docgraph.lifecycle.ports.BuildRoot`: the composition root, or a
    :class:`~docgraph.DocGraph` over it)."""

    def __init__(
        self,
        root: BuildRoot,
        interval_seconds: float | None = None,
        leader_lock: LeaderLock | None = None,
    ) -> None:
        self.root = root
        self._interval = interval_seconds
        self.leadership: Leadership = root.leadership if leader_lock is None \
            else Leadership(leader_lock, root.build_lock)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._vocabulary_cache: dict[ColumnKey, list[str]] = {}
        self.last_result: RefreshResult | None = None
        self.last_error: str | None = None
        self.runs = 0
        self._told_follower = False

    # -- configuration -----------------------------------------------------------

    @property
    def interval_seconds(self) -> float:
        """The global interval: the override given at construction, else the setting (read
        at every cycle, so an admin change applies without a restart)."""
        if self._interval is not None:
            return self._interval
        return float(self.root.settings.refresh.interval_seconds)

    @property
    def registry(self) -> SourceRegistry:
        """The index's source registry."""
        return self.root.sources

    @property
    def history(self) -> BuildHistory:
        """The index's build history."""
        return self.root.build_history

    @property
    def retry_seconds(self) -> float:
        """How often a loop that does not lead tries to take over."""
        return min(self.interval_seconds, LEADER_RETRY_SECONDS)

    @property
    def leader_lock(self) -> LeaderLock:
        """The lock that elects this index's one builder."""
        return self.leadership.lock

    @property
    def leading(self) -> bool:
        """Whether this process leads the refresh (holds the leader lock)."""
        return self.leadership.leading

    def leader(self) -> str | None:
        """Which process leads the refresh of this index (``pid@host``), or None."""
        return self.leadership.leader()

    # -- one refresh ---------------------------------------------------------------

    def run_once(
        self,
        progress: ProgressCallback | None = None,
        *,
        namespaces: Iterable[str] | None = None,
        force_graph: bool = False,
        wait_seconds: float = 0.0,
        before_build: Callable[[], None] | None = None,
    ) -> RefreshResult:
        """Build every namespace (or the given ones) once; returns what happened.

        Only the refresh leader builds: this process leads for the run (and keeps leading if
        its background loop runs). When another process leads, this waits up to
        ``wait_seconds`` for it to stop, then raises :class:`RefreshBusy` naming it - it
        never builds concurrently. ``before_build`` runs first, while leading (a full
        re-index drops the vectors there).

        Raises otherwise only when nothing can be built at all (the configured embedding
        model does not match the index); every per-source failure is recorded instead."""
        with self.leadership.elected(
                "a refresh", wait_seconds,
                "wait for it with `docgraph refresh --wait SECONDS` (wait_seconds=), or stop "
                "that process; it refreshes every namespace on its interval"):
            return self._run_leading(progress, namespaces, force_graph, before_build)

    def _run_leading(
        self,
        progress: ProgressCallback | None,
        namespaces: Iterable[str] | None,
        force_graph: bool,
        before_build: Callable[[], None] | None,
    ) -> RefreshResult:
        root = self.root
        root.sync_settings()  # admin changes of other processes apply from this round
        result = RefreshResult()
        if before_build is not None:
            before_build()
        check_embedding_model(root.store, root.embedder)
        registry = self.registry
        registry.sync_derived_sources()
        vocabulary_phases, vocabulary_complete = self.load_vocabulary()
        by_namespace: dict[str, list[SourceRecord]] = {}
        for source in root.store.list_sources():
            by_namespace.setdefault(source.namespace, []).append(source)
        # The graph phase runs where the backend offers the entity graph (an extractor).
        dirty = set(root.graph_store.dirty_namespaces()) \
            if root.extractor is not None else set()
        names = sorted(set(by_namespace) | dirty if namespaces is None else set(namespaces))
        for name in names:
            if self._stop.is_set() and threading.current_thread() is self._thread:
                log.info("refresher stopping: %d namespace(s) not built this round",
                         len(names) - len(result.builds))
                break
            build = self._build_namespace(
                name, by_namespace.get(name, []), vocabulary_phases, vocabulary_complete,
                progress, force_graph, result,
            )
            self.history.finish(build, keep=root.settings.refresh.keep_builds)
            result.builds.append(build)
            if build.outcome == "error":
                log.error("build of namespace %r failed: %s", name,
                          "; ".join(f"{p.source} {p.phase}: {p.message}"
                                    for p in build.phases if p.outcome == "error"))
        root.last_graph_reports = result.graph_reports
        self.last_result = result
        self.runs += 1
        return result

    def load_vocabulary(self) -> tuple[list[PhaseOutcome], bool]:
        """Replace the live layer of the entity extractor's vocabulary with the terms of
        every ``entity:<type>`` column (see :func:`~docgraph.lifecycle.vocabulary.
        load_live_terms`); returns the phase outcomes and whether it is complete."""
        extractor = self.root.extractor
        if extractor is None:
            return [], True
        return load_live_terms(extractor, self.registry,
                               self.root.settings.sources.max_vocabulary_terms,
                               self._vocabulary_cache)

    def _build_namespace(
        self,
        namespace: str,
        sources: list[SourceRecord],
        vocabulary_phases: list[PhaseOutcome],
        vocabulary_complete: bool,
        progress: ProgressCallback | None,
        force_graph: bool,
        result: RefreshResult,
    ) -> NamespaceBuild:
        build = self.history.start(namespace)  # shown in progress by every status
        try:
            with span("build", namespace=namespace, sources=len(sources)):
                return self._build_started(build, sources, vocabulary_phases,
                                           vocabulary_complete, progress, force_graph, result)
        except KeyboardInterrupt as exc:  # Ctrl-C: record how far it got, then stop
            kept = exc.kept if isinstance(exc, BuildInterrupted) else 0
            build.phases.append(PhaseOutcome(
                NAMESPACE_WIDE, exc.phase if isinstance(exc, BuildInterrupted) and exc.phase
                else "store", "error",
                f"interrupted; {kept} documents of the source being built kept, the next "
                "build continues"))
            build.finished_at = time.time()
            self.history.finish(build, keep=self.root.settings.refresh.keep_builds)
            raise

    def _build_started(
        self,
        build: NamespaceBuild,
        sources: list[SourceRecord],
        vocabulary_phases: list[PhaseOutcome],
        vocabulary_complete: bool,
        progress: ProgressCallback | None,
        force_graph: bool,
        result: RefreshResult,
    ) -> NamespaceBuild:
        namespace = build.namespace
        tracker = BuildProgress(self.history, build, progress)
        for source in sources:
            tracker.source = source.urn
            if source.scheme == "sql":
                report, phases = self._ingest_table(source, tracker)
            else:
                report, phases = self._ingest_folder(source, tracker)
            build.phases.extend(phases)
            if report is not None:
                result.reports.append(report)
                build.documents_changed += (len(report.added) + len(report.updated)
                                            + len(report.removed))
                build.chunks_embedded += report.chunks_embedded
                build.bodies_read += report.bodies_read
        build.phases.extend(vocabulary_phases)
        if self.root.extractor is not None:
            tracker.phase("graph")
        build.phases.extend(self._build_graph(namespace, vocabulary_complete, force_graph,
                                              result))
        build.finished_at = time.time()
        return build

    def _pipeline(self) -> IngestPipeline:
        root = self.root
        return IngestPipeline(root.store, root.embedder, root.settings.loader,
                              extractor=root.extractor, sources=root.settings.sources,
                              # Milvus follows embedded rows only: embed before writing
                              embed_behind=root.settings.store.index != "milvus")

    def _ingest_folder(
        self, source: SourceRecord, progress: ProgressCallback | None
    ) -> tuple[IngestReport | None, list[PhaseOutcome]]:
        started = time.perf_counter()
        try:
            options = self.registry.credentials.storage_options(source.urn)
            crawler = FolderCrawler(source.urn, self.root.settings.loader.include, options)
        except Exception as exc:
            message = describe_error(exc)
            log.error("cannot open %s: %s", source.urn, message)
            return None, phases_after_failure(source.urn, "crawl", message,
                                               {"crawl": time.perf_counter() - started})
        return self._ingest(source, lambda pipeline: pipeline.index_source(
            source, progress, crawler=crawler), crawler.close)

    def _ingest_table(
        self, source: SourceRecord, progress: ProgressCallback | None
    ) -> tuple[IngestReport | None, list[PhaseOutcome]]:
        tag = self.registry.tag_for(source)
        if tag is None:
            return None, [PhaseOutcome(source.urn, "crawl", "skipped",
                                       "no natural_language tag registered for this source")]
        started = time.perf_counter()
        try:
            reader = self.registry.reader(tag.source)
        except Exception as exc:
            message = describe_error(exc)
            log.error("cannot open SQL source %s: %s", tag.source, message)
            return None, phases_after_failure(source.urn, "crawl", message,
                                               {"crawl": time.perf_counter() - started})
        return self._ingest(source, lambda pipeline: pipeline.index_rows(
            source, reader.scan_rows(reader.resolve(tag.schema, tag.table, tag.column)),
            progress), reader.close)

    def _ingest(
        self, source: SourceRecord, ingest: Callable[[IngestPipeline], IngestReport],
        close: Callable[[], None],
    ) -> tuple[IngestReport | None, list[PhaseOutcome]]:
        """Run one source's ingest (a folder's or a table's) and close what it read from;
        a failure is logged and recorded in the phase it happened in, never raised."""
        pipeline = self._pipeline()
        try:
            report = ingest(pipeline)
        except Exception as exc:
            message = describe_error(exc)
            log.error("build of %s failed in phase %s: %s", source.urn, pipeline.phase, message,
                      exc_info=not isinstance(exc, DocgraphError))
            return None, phases_after_failure(source.urn, pipeline.phase, message, {})
        finally:
            close()
        return report, phases_of_report(source.urn, report)

    def _build_graph(
        self, namespace: str, vocabulary_complete: bool, force: bool, result: RefreshResult
    ) -> list[PhaseOutcome]:
        root = self.root
        extractor = root.extractor
        if extractor is None:
            return []
        store = root.graph_store
        recorded = store.vocabulary_hash(namespace)
        relink = recorded not in ("", extractor_fingerprint(extractor))
        if not (force or relink or namespace in store.dirty_namespaces()):
            return [PhaseOutcome(NAMESPACE_WIDE, "graph", "ok", "up to date"),
                    PhaseOutcome(NAMESPACE_WIDE, "communities", "ok", "up to date")]
        if not vocabulary_complete:
            message = "entity vocabulary incomplete (see entities errors); graph kept as it was"
            return [PhaseOutcome(NAMESPACE_WIDE, "graph", "skipped", message),
                    PhaseOutcome(NAMESPACE_WIDE, "communities", "skipped", message)]
        builder = GraphBuilder(store, root.embedder, root.settings.graph, extractor,
                               root.chat_model, root.phrase_cache)
        started = time.perf_counter()
        try:
            with span("build.graph", namespace=namespace):
                report = builder.build(namespace)
        except Exception as exc:
            phase = graph_phase_of(exc)
            message = describe_error(exc)
            log.error("graph build of namespace %r failed in phase %s: %s", namespace, phase,
                      message, exc_info=True)
            elapsed = time.perf_counter() - started
            if phase == "graph":
                return [PhaseOutcome(NAMESPACE_WIDE, "graph", "error", message, 0, elapsed),
                        PhaseOutcome(NAMESPACE_WIDE, "communities", "skipped", "graph failed")]
            return [PhaseOutcome(NAMESPACE_WIDE, "graph", "ok", "", 0, 0.0),
                    PhaseOutcome(NAMESPACE_WIDE, "communities", "error", message, 0, elapsed)]
        result.graph_reports.append(report)
        sec = report.seconds
        return [
            PhaseOutcome(NAMESPACE_WIDE, "graph", "ok",
                         f"{report.entities} entities, {report.edges} edges, "
                         f"{report.relinked_chunks} chunks relinked", report.entities,
                         sec.get("relink", 0.0) + sec.get("load", 0.0) + sec.get("edges", 0.0)),
            PhaseOutcome(NAMESPACE_WIDE, "communities", "ok",
                         f"{report.communities} communities, {report.reports} reports "
                         f"({report.reports_embedded} embedded)", report.communities,
                         sec.get("communities", 0.0) + sec.get("reports", 0.0)
                         + sec.get("store", 0.0)),
        ]

    # -- the background loop ---------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the background loop is running."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """In a daemon thread until :meth:`stop`: lead the refresh of this index and run
        :meth:`run_once` now and then every :attr:`interval_seconds`; while another process
        leads, try to take over every :attr:`retry_seconds` instead."""
        if self.running:
            return
        self._stop.clear()
        self._wake.clear()
        self.leadership.keep()  # leadership taken by any build of this process now stays
        self._thread = threading.Thread(target=self._loop, name="docgraph-refresher",
                                        daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Start the next refresh now instead of at the end of the interval."""
        self._wake.set()

    def stop(self, timeout: float | None = 60.0) -> bool:
        """Stop the loop after the namespace being built (and stop leading); True once the
        thread ended."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._thread = None
        return True

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                if self._lead():
                    self._tick()
                    wait = max(0.0, self.interval_seconds - (time.monotonic() - started))
                else:
                    wait = self.retry_seconds
                if self._stop.is_set():
                    break
                self._wake.wait(wait)
                self._wake.clear()
        finally:
            self.leadership.let_go()  # after a build of this process that is still running

    def _lead(self) -> bool:
        """Hold (or take) the leadership; False, logged once per change, while another
        process has it."""
        was = self.leadership.leading
        try:
            leads = self.leadership.try_lead()
        except Exception as exc:  # the lock's database is unreachable: try again later
            log.error("cannot take the refresh leadership: %s", describe_error(exc))
            return False
        if leads and not was:
            log.info("this process (%s) now leads the refresh", self.leader_lock.identity)
        elif not leads and (was or not self._told_follower):
            log.info("the refresh is led by another process; trying again every %.0fs",
                     self.retry_seconds)
            self._told_follower = True
        return leads

    def _tick(self) -> None:
        started = time.monotonic()
        try:
            with self.leadership.build_lock:  # after a build of this process, not beside it
                result = self._run_leading(None, None, False, None)
            log.info("refreshed %d namespace(s), %d document(s) changed, in %.1fs",
                     len(result.builds), sum(b.documents_changed for b in result.builds),
                     time.monotonic() - started)
            self.last_error = None if result.ok else "; ".join(
                f"{b.namespace}: {p.source} {p.phase}: {p.message}"
                for b in result.builds for p in b.phases if p.outcome == "error")
        except Exception as exc:  # e.g. embedding model mismatch: nothing was built
            self.last_error = describe_error(exc)
            log.exception("refresh failed")

    def __enter__(self) -> Refresher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
