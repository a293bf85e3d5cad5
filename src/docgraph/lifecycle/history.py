"""Build records: each namespace build and the outcome of each of its phases per source,
kept by the backend's :class:`~docgraph.store.lifecycle.BuildHistoryStore` (the catalog file,
or the PostgreSQL database every process shares)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from docgraph.model import Outcome as Outcome
from docgraph.model import PhaseOutcome as PhaseOutcome
from docgraph.store.lifecycle import BuildHistoryStore, StoredBuild, StoredPhase
from docgraph.telemetry.metrics import observe_build

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import IngestProgress

BuildOutcome = Literal["ok", "partial", "error", "running"]

#: The phase of a build in progress: its one phase row, outcome ``running``, says how far
#: it got ("indexing: 12 of 60 files"); replaced by the real phases when the build ends.
PROGRESS_PHASE = "progress"
#: How often a build in progress writes how far it got (seconds).
PROGRESS_EVERY_SECONDS = 1.0

#: Phases of a build, in order. ``store`` is the transactional write of a document's chunks;
#: ``graph`` and ``communities`` run once per namespace (source ``*``).
PHASES = ("crawl", "extract", "chunk", "embed", "entities", "store", "graph", "communities")
NAMESPACE_WIDE = "*"


@dataclass
class NamespaceBuild:
    """One build of one namespace: its phases per source and the overall outcome."""

    namespace: str
    started_at: float
    finished_at: float = 0.0
    phases: list[PhaseOutcome] = field(default_factory=list)
    documents_changed: int = 0
    chunks_embedded: int = 0
    bodies_read: int = 0
    id: int | None = None

    @property
    def outcome(self) -> BuildOutcome:
        """``running`` while the build is in progress; then ``error`` if any phase failed,
        ``partial`` if some documents failed, else ``ok``."""
        outcomes = {p.outcome for p in self.phases}
        if "running" in outcomes:
            return "running"
        if "error" in outcomes:
            return "error"
        return "partial" if "partial" in outcomes else "ok"

    @property
    def errors(self) -> list[PhaseOutcome]:
        """Phases that failed or partly failed."""
        return [p for p in self.phases if p.outcome in ("error", "partial")]


def _outcome(value: str) -> Outcome:
    if value in ("ok", "partial", "error", "skipped", "running"):
        return value  # type: ignore[return-value]
    return "error"


class BuildHistory:
    """Reads and writes build records through the backend's build history store."""

    def __init__(self, store: BuildHistoryStore) -> None:
        self.store = store
        self._running: set[int] = set()  # ids of builds this process has in progress

    def record(self, build: NamespaceBuild, keep: int = 50) -> int:
        """Store a finished build (and drop all but the newest ``keep`` of its namespace)."""
        build.id = self.store.record(_stored(build), keep)
        return build.id

    def start(self, namespace: str) -> NamespaceBuild:
        """Record a build of ``namespace`` in progress (outcome ``running``, so status shows
        it) and return it; :meth:`finish` replaces it with the finished build. Builds of
        the namespace still marked running are from a process that ended mid-build (only
        the leader builds, and it is this one): they are marked as interrupted."""
        for stale in self.recent(namespace, limit=5):
            if stale.outcome == "running" and stale.id is not None \
                    and stale.id not in self._running:
                last = " ".join(p.message for p in stale.phases if p.outcome == "running")
                stale.phases = [p for p in stale.phases if p.outcome != "running"] + [
                    PhaseOutcome(NAMESPACE_WIDE, PROGRESS_PHASE, "error",
                                 "interrupted: the process ended before the build finished"
                                 + (f" (last seen: {last})" if last else ""))]
                stale.finished_at = stale.finished_at or stale.started_at
                self.store.update(_stored(stale))
        build = NamespaceBuild(namespace, now())
        build.id = self.store.record(_stored(replace(build, phases=[
            PhaseOutcome(NAMESPACE_WIDE, PROGRESS_PHASE, "running", "starting")])),
            keep=1_000_000)
        self._running.add(build.id)
        return build

    def progress(self, build: NamespaceBuild, message: str, done: int = 0) -> None:
        """Say how far a build in progress got (its one ``progress`` phase)."""
        if build.id is None:
            return
        step = PhaseOutcome(NAMESPACE_WIDE, PROGRESS_PHASE, "running", message, done,
                            now() - build.started_at)
        # Stored with the phases finished so far; ``build`` itself is left as it is.
        self.store.update(_stored(replace(build, phases=[*build.phases, step])))

    def finish(self, build: NamespaceBuild, keep: int = 50) -> int:
        """Replace a build started with :meth:`start` by its finished record (or record it,
        if it was never started), dropping all but the newest ``keep`` of its namespace."""
        if build.id is None:
            build_id = self.record(build, keep)
            _observe(build)
            return build_id
        if not build.finished_at:
            build.finished_at = now()
        self.store.update(_stored(build), keep)
        self._running.discard(build.id)
        _observe(build)
        return build.id

    def latest(self, namespace: str) -> NamespaceBuild | None:
        """The newest build of ``namespace``."""
        found = self.recent(namespace, limit=1)
        return found[0] if found else None

    def last_success_at(self, namespace: str) -> float | None:
        """When the newest build that did not fail (``ok`` or ``partial``) finished."""
        return self.store.last_success_at(namespace)

    def recent(self, namespace: str | None = None, limit: int = 20) -> list[NamespaceBuild]:
        """The newest builds (of one namespace, or of all), newest first."""
        return [_build(b) for b in self.store.recent(namespace, limit)]

    def namespaces(self) -> list[str]:
        """Namespaces with at least one recorded build."""
        return self.store.namespaces()


def _observe(build: NamespaceBuild) -> None:
    """Count a finished build in the process's metrics (its outcome, duration, phases and
    embedding work, :func:`~docgraph.telemetry.metrics.observe_build`)."""
    observe_build(build.outcome, (build.finished_at or now()) - build.started_at,
                  [(p.phase, p.outcome, p.seconds) for p in build.phases
                   if p.phase != PROGRESS_PHASE],
                  build.chunks_embedded)


def _stored(build: NamespaceBuild) -> StoredBuild:
    return StoredBuild(
        build.namespace, build.started_at, build.finished_at, build.outcome,
        build.documents_changed, build.chunks_embedded, build.bodies_read,
        tuple(StoredPhase(p.source, p.phase, p.outcome, p.message, p.items, p.seconds)
              for p in build.phases), build.id)


def _build(stored: StoredBuild) -> NamespaceBuild:
    return NamespaceBuild(
        stored.namespace, stored.started_at, stored.finished_at,
        [PhaseOutcome(p.source, p.phase, _outcome(p.outcome), p.message, p.items, p.seconds)
         for p in stored.phases],
        stored.documents_changed, stored.chunks_embedded, stored.bodies_read, stored.id,
    )


def now() -> float:
    """Wall-clock time, in one place so tests can reason about it."""
    return time.time()


class BuildProgress:
    """A progress callback that also writes how far a build in progress got to its history
    row (at most every :data:`PROGRESS_EVERY_SECONDS`), so ``status`` - of any process -
    shows it; ``then`` is called with every update."""

    def __init__(self, history: BuildHistory, build: NamespaceBuild,
                 then: Callable[[IngestProgress], None] | None = None) -> None:
        self.history = history
        self.build = build
        self.then = then
        self.source = ""
        self._written = 0.0

    def phase(self, message: str, done: int = 0) -> None:
        """Record the build's current step now (e.g. ``graph``)."""
        self._written = time.monotonic()
        self.history.progress(self.build, message, done)

    def __call__(self, state: IngestProgress) -> None:
        if self.then is not None:
            self.then(state)
        if time.monotonic() - self._written >= PROGRESS_EVERY_SECONDS:
            where = f" {self.source}" if self.source else ""
            self.phase(f"indexing{where}: {state.done_files} of {state.total_files} files, "
                       f"{state.chunks_written} chunks written", state.done_files)
