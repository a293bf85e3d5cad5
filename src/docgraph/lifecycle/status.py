"""``index_status``: per namespace, the last build and its outcome, staleness, document and
chunk counts, and the errors of the last build."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from docgraph.lifecycle.history import PhaseOutcome

if TYPE_CHECKING:
    from docgraph.app import DocGraph


@dataclass(frozen=True)
class NamespaceStatus:
    """Freshness of one namespace.

    ``staleness_seconds`` is now minus the end of the last build that did not fail (``ok`` or
    ``partial``); None when no build ever succeeded. ``overdue`` is True when that is more
    than twice the refresh interval (or there never was a successful build)."""

    namespace: str
    documents: int
    chunks: int
    last_build_at: float | None
    last_outcome: str | None
    last_success_at: float | None
    staleness_seconds: float | None
    overdue: bool
    errors: list[PhaseOutcome] = field(default_factory=list)
    failed_documents: int = 0
    last_indexed_at: float | None = None
    #: While a build of the namespace runs (``last_outcome`` ``running``): how far it got,
    #: e.g. ``indexing file:///docs: 12 of 60 files, 140 chunks written``. A build whose
    #: process ended before it finished (killed) shows as ``interrupted``.
    in_progress: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def index_status(graph: DocGraph, now: float | None = None) -> list[NamespaceStatus]:
    """The freshness of every namespace that has sources or build records."""
    now = time.time() if now is None else now
    history = graph.build_history
    interval = float(graph.settings.refresh.interval_seconds)
    stats = {s.namespace: s for s in graph.store.stats()}
    names = sorted(set(graph.store.namespaces()) | set(history.namespaces()))
    out: list[NamespaceStatus] = []
    leader: str | bool | None = False  # looked up once, when a build shows as running
    for name in names:
        latest = history.latest(name)
        outcome: str | None = latest.outcome if latest else None
        progress = None
        if latest is not None and outcome == "running":
            if leader is False:
                leader = graph.leadership.leader()
            if leader is None:  # no process leads, so none builds: it was killed
                outcome = "interrupted"
            else:
                progress = " ".join(p.message for p in latest.phases if p.outcome == "running")
        success = history.last_success_at(name)
        stale = None if success is None else max(0.0, now - success)
        ns = stats.get(name)
        out.append(NamespaceStatus(
            namespace=name,
            documents=ns.documents if ns else 0,
            chunks=ns.chunks if ns else 0,
            last_build_at=(latest.finished_at or latest.started_at) if latest else None,
            last_outcome=outcome,
            last_success_at=success,
            staleness_seconds=stale,
            overdue=stale is None or stale > 2 * interval,
            errors=latest.errors if latest else [],
            failed_documents=ns.failures if ns else 0,
            last_indexed_at=ns.last_indexed_at if ns else None,
            in_progress=progress,
        ))
    return out
