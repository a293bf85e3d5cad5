"""The retrieval trace: what each lane contributed, how long it took, and why each returned
chunk is there (its provenance). Traces are stored in a trace log (a store port), bounded by
retention. Its lanes are those of the one lane list, :data:`docgraph.retrieve.lanes.LANES`
(global mode: :data:`~docgraph.retrieve.lanes.REPORT_LANE`), as the console shows them.

Only the governed service stores traces, after its row filter (no candidate the caller was
denied), and like the audit log it stores the query as a sha256 hash, never as text.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from docgraph.telemetry import current_request_id


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
    #: The id of the request that made the trace (:mod:`docgraph.telemetry.context`), as
    #: its audit record and log lines carry it.
    request_id: str = field(default_factory=lambda: current_request_id() or "")

    def add(self, lane: str, chunk_ids: list[str]) -> None:
        """Record the candidates a lane produced (``lane``: a name of
        :data:`~docgraph.retrieve.lanes.LANE_NAMES` or the report lane)."""
        self.candidates.setdefault(lane, []).extend(chunk_ids)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def stored_payload(trace: RetrievalTrace, user_id: str) -> dict[str, Any]:
    """What a trace log stores of ``trace``: everything but the query, which is kept as its
    sha256 (like the audit log), plus the caller's user id."""
    payload = trace.to_dict()
    query = payload.pop("query")
    payload["query_hash"] = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()
    payload["user_id"] = user_id
    return payload
