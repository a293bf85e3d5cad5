"""Audit log of governed requests: who asked, what they could see, what they got."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, fields
from typing import Any

from docgraph.governance.caller import Caller
from docgraph.store.base import AuditStore, TraceEntry, TraceLog
from docgraph.telemetry import current_request_id


@dataclass
class AuditRecord:
    """One governed request. The query itself is stored only as a hash."""

    user_id: str
    operation: str
    outcome: str = "ok"  # ok | denied | error
    role: str | None = None
    #: The issuer and subject of the token behind the request (None for a local caller).
    issuer: str | None = None
    subject: str | None = None
    #: The groups the request was decided for (the caller's and those the policy declares).
    groups: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    query_hash: str = ""
    evidence_keys: list[str] = field(default_factory=list)
    row_drops: int = 0
    authorizer_failures: list[str] = field(default_factory=list)
    reason: str = ""
    duration_ms: float = 0.0
    at: float = field(default_factory=time.time)
    #: The request's id (:mod:`docgraph.telemetry.context`): the same in its log lines,
    #: its retrieval traces and its OpenTelemetry trace.
    request_id: str = field(default_factory=lambda: current_request_id() or "")
    #: The retrieval traces the request made, stored with the record in one transaction;
    #: not part of the record's payload.
    traces: list[TraceEntry] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        """What the audit log stores of the request (every field but the traces)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "traces"}

    @staticmethod
    def hash_query(query: str) -> str:
        """sha256 of the query text (the text itself is never logged)."""
        return hashlib.sha256(query.encode("utf-8")).hexdigest()


class AuditLog:
    """Audit records of governed requests, written to the backend's audit store."""

    def __init__(self, store: AuditStore) -> None:
        self.store = store

    def write(self, record: AuditRecord) -> None:
        """Append one record, with the traces the request made (one write)."""
        self.store.append(record.at, record.user_id, record.operation, record.outcome,
                          record.payload(), record.traces)

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        return self.store.recent(limit)


class UnrecordedAuditLog(AuditLog):
    """An audit log that writes no record (its store is still read by :meth:`recent`); the
    traces a request made are still stored, in ``traces``.

    For reads that only render a page a person looks at (the console's Status and Graph
    pages are the admin's ``index_status``, ``entities``, ``neighbors`` and ``communities``):
    recording each render buried the agents' requests under 2-4 rows per page view. What a
    person changes or asks (sign-in, changes, playground queries) is written through the
    ordinary log."""

    def __init__(self, store: AuditStore, traces: TraceLog) -> None:
        super().__init__(store)
        self.traces = traces

    def write(self, record: AuditRecord) -> None:
        """Keep no record; store the request's traces."""
        for trace in record.traces:
            self.traces.save(trace.trace_id, trace.created_at, trace.payload)


def stamp_token(trace: TraceEntry, caller: Caller) -> TraceEntry:
    """``trace`` with the issuer and subject of the token behind ``caller`` in its payload,
    so a stored trace says which identity asked, as its audit row does."""
    return TraceEntry(trace.trace_id, trace.created_at,
                      {**trace.payload, "issuer": caller.issuer, "subject": caller.subject})
