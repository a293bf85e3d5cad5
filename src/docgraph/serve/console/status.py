"""The Status page: per namespace counts, the last build with every phase's outcome,
staleness, failed files, who refreshes the index, and the console's "refresh now"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from docgraph.errors import RefreshBusy
from docgraph.governance import AccessDenied, Caller
from docgraph.serve.console.changes import BackgroundJob
from docgraph.serve.console.ports import ConsoleGovernance, ConsoleIndex

log = logging.getLogger(__name__)


@dataclass
class RefreshJob(BackgroundJob):
    """A "refresh now" of the console: wakes the server's refresh loop when it runs, or
    builds once in a background thread (through the elected leadership, so never beside
    another builder). Requests never wait for the build."""

    root: ConsoleIndex

    def request(self) -> tuple[bool, str]:
        """Start a refresh (or wake the loop); ``(started, what happened)``."""
        refresher = self.root.refresher
        if refresher.running:
            refresher.trigger()
            leader = refresher.leader()
            if refresher.leading or leader is None:
                return True, "the refresh loop of this server starts a round now"
            return False, (f"the refresh is led by {leader}; this server builds only once it "
                           "leads (the leader refreshes on its interval)")
        if not self._launch("docgraph-console-refresh", self._run):
            return False, "a refresh started from the console is still running"
        return True, "refresh started"

    def _run(self) -> None:
        try:
            result = self.root.refresher.run_once(wait_seconds=0)
            changed = sum(b.documents_changed for b in result.builds)
            outcomes = ", ".join(f"{b.namespace}: {b.outcome}" for b in result.builds)
            self.message = (f"built {len(result.builds)} namespace(s), {changed} document(s) "
                            f"changed" + (f" ({outcomes})" if outcomes else ""))
        except RefreshBusy as exc:
            self.error = str(exc)
        except Exception as exc:
            log.exception("console refresh failed")
            self.error = f"{type(exc).__name__}: {exc}"


def status_page(governance: ConsoleGovernance, admin: Caller, job: RefreshJob) -> dict[str, Any]:
    """Per namespace: counts, the last build with every phase's outcome, staleness; the
    failed files with reasons; who refreshes the index and the console's own refresh."""
    root = governance.root
    try:
        view = governance.index_status(admin)
    except AccessDenied:  # no namespace exists yet: '*' expands to nothing
        from docgraph.governance.browse import StatusView

        info = root.status()
        view = StatusView(info.embedding_model, root.settings.refresh.interval_seconds,
                          [], {}, refresh_leader=info.refresh_leader,
                          this_process_leads=info.this_process_leads,
                          refresher_running=info.refresher_running)
    namespaces = []
    for b in view.builds:
        stats = view.stats.get(b.namespace)
        latest = root.build_history.latest(b.namespace)
        namespaces.append({
            "name": b.namespace, "documents": b.documents, "chunks": b.chunks,
            "entities": stats.entities if stats else 0,
            "communities": stats.communities if stats else 0,
            "last_build_at": b.last_build_at, "last_outcome": b.last_outcome,
            "staleness_seconds": b.staleness_seconds, "overdue": b.overdue,
            "failed_documents": b.failed_documents, "in_progress": b.in_progress,
            "phases": [{"source": p.source, "phase": p.phase, "outcome": p.outcome,
                        "message": view.told(b.namespace, p.message), "items": p.items,
                        "seconds": p.seconds}
                       for p in (latest.phases if latest else [])],
        })
    model = view.embedding_model
    return {
        "namespaces": namespaces,
        "failures": [{"namespace": f.namespace, "source": f.source_urn, "path": f.path,
                      "reason": f.reason, "at": f.at} for f in view.failures],
        "embedding_model": f"{model[0]} ({model[1]} dimensions)" if model else None,
        "interval": view.refresh_interval_seconds,
        "leader": view.refresh_leader, "this_process_leads": view.this_process_leads,
        "refresher_running": view.refresher_running,
        "job": {"running": job.running, "started_at": job.started_at,
                "finished_at": job.finished_at, "message": job.message, "error": job.error},
    }
