"""``index_status``: per namespace, the last build and its outcome, staleness, document and
chunk counts, and the errors of the last build (the :class:`~docgraph.model.NamespaceStatus`
type lives on the ground floor, so governance lists it without importing the lifecycle)."""

from __future__ import annotations

import time

from docgraph.lifecycle.ports import StatusRoot
from docgraph.model import NamespaceStatus as NamespaceStatus


def index_status(root: StatusRoot, now: float | None = None, *,
                 open_pending: bool = False) -> list[NamespaceStatus]:
    """The freshness of every namespace that has sources or build records. Pending chunks
    are every document's (the operator's count), or with ``open_pending`` those of open
    documents only (what an agent may be told; read once either way)."""
    now = time.time() if now is None else now
    history = root.build_history
    interval = float(root.settings.refresh.interval_seconds)
    stats = {s.namespace: s for s in root.store.stats()}
    pending = root.store.pending_counts(open_only=open_pending)
    names = sorted(set(root.store.namespaces()) | set(history.namespaces()))
    out: list[NamespaceStatus] = []
    leader: str | bool | None = False  # looked up once, when a build shows as running
    for name in names:
        latest = history.latest(name)
        outcome: str | None = latest.outcome if latest else None
        progress = None
        if latest is not None and outcome == "running":
            if leader is False:
                leader = root.leadership.leader()
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
            pending_chunks=pending.get(name, 0),
        ))
    return out
