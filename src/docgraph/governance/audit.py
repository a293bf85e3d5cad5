"""Audit log of governed requests: who asked, what they could see, what they got."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from docgraph.store.sqlite import SQLiteCatalog

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_log (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    user_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    outcome TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log(at);
"""


@dataclass
class AuditRecord:
    """One governed request. The query itself is stored only as a hash."""

    user_id: str
    operation: str
    outcome: str = "ok"  # ok | denied | error
    role: str | None = None
    namespaces: list[str] = field(default_factory=list)
    query_hash: str = ""
    evidence_keys: list[str] = field(default_factory=list)
    row_drops: int = 0
    authorizer_failures: list[str] = field(default_factory=list)
    reason: str = ""
    duration_ms: float = 0.0
    at: float = field(default_factory=time.time)

    @staticmethod
    def hash_query(query: str) -> str:
        """sha256 of the query text (the text itself is never logged)."""
        return hashlib.sha256(query.encode("utf-8")).hexdigest()


class AuditLog:
    """Append-only audit records in the catalog file, bounded by ``retention`` rows."""

    def __init__(self, catalog: SQLiteCatalog, retention: int = 100_000) -> None:
        self.catalog = catalog
        self.retention = retention
        self.catalog.connection().executescript(_SCHEMA)

    def write(self, record: AuditRecord) -> None:
        """Append one record."""
        with self.catalog.transaction() as db:
            db.execute(
                "INSERT INTO audit_log(at, user_id, operation, outcome, payload)"
                " VALUES (?, ?, ?, ?, ?)",
                (record.at, record.user_id, record.operation, record.outcome,
                 json.dumps(asdict(record), ensure_ascii=False)),
            )
            db.execute(
                "DELETE FROM audit_log WHERE id <= (SELECT max(id) FROM audit_log) - ?",
                (self.retention,),
            )

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        rows = self.catalog.connection().execute(
            "SELECT payload FROM audit_log ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]
