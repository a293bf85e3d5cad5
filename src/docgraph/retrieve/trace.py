"""The retrieval trace: what each lane contributed, how long it took, and why each returned
chunk is there (its provenance). Traces are stored in the catalog, bounded by retention.

Only the governed service stores traces, after its row filter (no candidate the caller was
denied), and like the audit log it stores the query as a sha256 hash, never as text.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from docgraph.store.sqlite import SQLiteCatalog

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created_at);
"""


@dataclass
class RetrievalTrace:
    """Lineage of one cohort search."""

    query: str
    mode: str
    k: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    created_at: float = field(default_factory=time.time)
    candidates: dict[str, list[str]] = field(default_factory=dict)  # lane -> chunk ids
    timings_ms: dict[str, float] = field(default_factory=dict)  # lane/phase -> ms
    query_entities_found: list[str] = field(default_factory=list)
    query_entities_missing: list[str] = field(default_factory=list)
    completeness: dict[str, str] = field(default_factory=dict)  # entity -> how it was found
    pool_size: int = 0
    final_provenance: dict[str, str] = field(default_factory=dict)  # chunk id -> lane
    notes: list[str] = field(default_factory=list)

    def add(self, lane: str, chunk_ids: list[str]) -> None:
        """Record the candidates a lane produced."""
        self.candidates.setdefault(lane, []).extend(chunk_ids)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


class TraceStore:
    """Keeps the most recent ``retention`` traces in the catalog file."""

    def __init__(self, catalog: SQLiteCatalog, retention: int = 1000) -> None:
        self.catalog = catalog
        self.retention = retention
        self.catalog.connection().executescript(_SCHEMA)

    def save(self, trace: RetrievalTrace, user_id: str = "") -> None:
        """Store a trace (the query as its sha256, with the caller's user id) and drop the
        oldest beyond the retention bound."""
        payload = trace.to_dict()
        query = payload.pop("query")
        payload["query_hash"] = hashlib.sha256(
            query.encode("utf-8", "surrogatepass")).hexdigest()
        payload["user_id"] = user_id
        with self.catalog.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO traces VALUES (?, ?, ?)",
                (trace.id, trace.created_at, json.dumps(payload)),
            )
            db.execute(
                "DELETE FROM traces WHERE id NOT IN"
                " (SELECT id FROM traces ORDER BY created_at DESC, id LIMIT ?)",
                (self.retention,),
            )

    def get(self, trace_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        """A stored trace by id, or the latest one for ``last``; with ``user_id``, only
        that caller's traces."""
        db = self.catalog.connection()
        if trace_id == "last":
            rows = db.execute("SELECT payload FROM traces ORDER BY created_at DESC, id")
        else:
            rows = db.execute("SELECT payload FROM traces WHERE id = ?", (trace_id,))
        for (raw,) in rows:
            payload: dict[str, Any] = json.loads(raw)
            if user_id is None or payload.get("user_id") == user_id:
                return payload
        return None

    def count(self) -> int:
        """Stored traces."""
        return int(self.catalog.connection().execute("SELECT count(*) FROM traces").fetchone()[0])
