"""The two append-only logs every backend keeps: retrieval traces and the audit log.

Both are ports (:class:`~docgraph.store.base.TraceLog`, :class:`~docgraph.store.base.AuditStore`)
written once in :mod:`docgraph.store.sql.logs` over both relational backends.
Rows are JSON payloads the callers shape (the governed service hashes the query before
anything reaches a log); each log keeps its newest ``retention`` rows (traces are pruned
every tenth of their bound, so a writer may leave up to a tenth more between prunes). On
PostgreSQL they live in the shared database, so every process serving it writes and reads
the same traces and audit records.
"""

from __future__ import annotations

from typing import Any

TRACE_RETENTION = 1000
AUDIT_RETENTION = 100_000


def owned_by(payload: dict[str, Any], user_id: str | None) -> bool:
    """Whether a trace payload belongs to ``user_id`` (any caller's when it is None)."""
    return user_id is None or payload.get("user_id") == user_id
