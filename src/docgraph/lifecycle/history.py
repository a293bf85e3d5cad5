"""Build records: each namespace build and the outcome of each of its phases per source,
kept by the backend's :class:`~docgraph.store.lifecycle.BuildHistoryStore` (the catalog file,
or the PostgreSQL database every process shares)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from docgraph.store.lifecycle import BuildHistoryStore, StoredBuild, StoredPhase

Outcome = Literal["ok", "partial", "error", "skipped"]
BuildOutcome = Literal["ok", "partial", "error"]

#: Phases of a build, in order. ``store`` is the transactional write of a document's chunks;
#: ``graph`` and ``communities`` run once per namespace (source ``*``).
PHASES = ("crawl", "extract", "chunk", "embed", "entities", "store", "graph", "communities")
NAMESPACE_WIDE = "*"


@dataclass(frozen=True, slots=True)
class PhaseOutcome:
    """How one phase went for one source (``*`` for namespace-wide phases).

    ``outcome``: ``ok``; ``partial`` (some documents failed, the rest went through);
    ``error`` (the phase failed for the source; ``message`` says why); ``skipped`` (not run
    because an earlier phase failed)."""

    source: str
    phase: str
    outcome: Outcome
    message: str = ""
    items: int = 0
    seconds: float = 0.0


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
        """``error`` if any phase failed, ``partial`` if some documents failed, else ``ok``."""
        outcomes = {p.outcome for p in self.phases}
        if "error" in outcomes:
            return "error"
        return "partial" if "partial" in outcomes else "ok"

    @property
    def errors(self) -> list[PhaseOutcome]:
        """Phases that failed or partly failed."""
        return [p for p in self.phases if p.outcome in ("error", "partial")]


def _outcome(value: str) -> Outcome:
    if value in ("ok", "partial", "error", "skipped"):
        return value  # type: ignore[return-value]
    return "error"


class BuildHistory:
    """Reads and writes build records through the backend's build history store."""

    def __init__(self, store: BuildHistoryStore) -> None:
        self.store = store

    def record(self, build: NamespaceBuild, keep: int = 50) -> int:
        """Store a finished build (and drop all but the newest ``keep`` of its namespace)."""
        build.id = self.store.record(StoredBuild(
            build.namespace, build.started_at, build.finished_at, build.outcome,
            build.documents_changed, build.chunks_embedded, build.bodies_read,
            tuple(StoredPhase(p.source, p.phase, p.outcome, p.message, p.items, p.seconds)
                  for p in build.phases),
        ), keep)
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
