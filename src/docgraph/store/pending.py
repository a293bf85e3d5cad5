"""Chunks stored before their vectors: a build commits each document's chunks (text, BM25
terms) as soon as they are prepared, so BM25 finds them at once, and embeds them behind in
large batches across documents. Until its vector arrives a chunk is *pending*: a per-row fact
in the catalog (SQLite: an empty ``vector`` blob; PostgreSQL: a NULL ``embedding``), which
every dense reader skips (a pending chunk is never ranked with a made-up vector), and which
an interrupted build leaves for the next one to embed (nothing is extracted again).

How a vector reaches the dense lanes: on SQLite the filled chunk row is written again with
the same contents under a new row id and the pending row deleted (logged in
``chunk_tombstones``), so the in-memory chunk index and its sidecar follow it as they follow
any new row; PostgreSQL updates the row in place (its dense search is SQL over the table).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from docgraph.model import Vector


def pending_counts_sql(pending: str, open_only: bool) -> str:
    """The statement of :meth:`PendingVectors.pending_counts` (name, count per namespace),
    given the backend's test for a pending chunk ``c`` (``pending``)."""
    gate = (" JOIN documents d ON d.id = c.document_id AND d.access IS NULL"
            " AND d.origin_table IS NULL AND d.kind = 'document'") if open_only else ""
    return ("SELECT n.name, p.count FROM (SELECT c.namespace_id, count(*) AS count"
            f" FROM chunks c{gate} WHERE {pending} GROUP BY c.namespace_id) p"
            " JOIN namespaces n ON n.id = p.namespace_id")


class PendingChunk(NamedTuple):
    """A chunk waiting for its vector: its row id, what its embedded text is made of
    (breadcrumb and text) and the hash of the text it was stored for."""

    rowid: int
    breadcrumb: str
    text: str
    embed_hash: str


class PendingVectors(Protocol):
    """What a catalog offers for chunks stored before their vectors."""

    def pending_chunks(self, source_id: int | None, limit: int) -> list[PendingChunk]:
        """Up to ``limit`` pending text chunks of the source's documents (every source's
        when None), oldest first."""
        ...

    def fill_vectors(self, fills: Sequence[tuple[int, Vector]]) -> int:
        """Store the vectors of pending chunks (row id, unit vector) in one transaction;
        chunks deleted or filled meanwhile are skipped. Returns how many were filled."""
        ...

    def pending_counts(self, namespaces: Iterable[str] | None = None, *,
                       open_only: bool = False) -> dict[str, int]:
        """Pending chunks per namespace (of ``namespaces`` when given; absent: none);
        ``open_only``: only those of documents every reader of the namespace may see (no
        permission set, not a table row, not a report), what an agent may be told."""
        ...
