"""Pending chunks on PostgreSQL (see :mod:`docgraph.store.pending`): a chunk stored before
its vector has a NULL ``embedding`` (migration 22), found through the partial index
``chunks_pending``. Filling a vector updates the row in place: the dense search is SQL over
the table (NULLs skipped, absent from the HNSW index until set), so nothing in memory has
to follow it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from docgraph.model import Vector
from docgraph.store.pending import PendingChunk, pending_counts_sql


class _Database(Protocol):
    """What the mixin uses of :class:`~docgraph.store.postgres.PostgresCatalog`."""

    def connection(self) -> Any: ...

    def transaction(self) -> AbstractContextManager[Any]: ...


class PostgresPendingVectors:
    """:class:`~docgraph.store.pending.PendingVectors` for the PostgreSQL catalog (a
    mixin)."""

    def pending_chunks(self: _Database, source_id: int | None, limit: int
                       ) -> list[PendingChunk]:
        """Up to ``limit`` pending text chunks of the source (every source's when None),
        oldest first."""
        source = "" if source_id is None else " AND d.source_id = %s"
        rows = self.connection().execute(
            "SELECT c.id, c.breadcrumb, c.text, c.embed_hash FROM chunks c"
            " JOIN documents d ON d.id = c.document_id"
            f" WHERE c.embedding IS NULL AND c.kind = 'text'{source} ORDER BY c.id LIMIT %s",
            (() if source_id is None else (source_id,)) + (limit,)).fetchall()
        return [PendingChunk(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def fill_vectors(self: _Database, fills: Sequence[tuple[int, Vector]]) -> int:
        """Set the vectors of pending chunks in one transaction; chunks deleted or filled
        meanwhile are skipped."""
        if not fills:
            return 0
        filled = 0
        with self.transaction() as db:
            for rowid, vector in fills:
                filled += db.execute(
                    "UPDATE chunks SET embedding = %s WHERE id = %s AND embedding IS NULL",
                    (np.asarray(vector, dtype=np.float32), int(rowid))).rowcount
        return filled

    def pending_counts(self: _Database, namespaces: Iterable[str] | None = None, *,
                       open_only: bool = False) -> dict[str, int]:
        """Pending chunks per namespace (through the partial index: no pending chunk, one
        empty index probe). ``open_only``: only those of documents every reader of the
        namespace may see (no permission set, not a table row, not a report), the count an
        agent may be told."""
        rows = self.connection().execute(
            pending_counts_sql("c.embedding IS NULL", open_only)).fetchall()
        wanted = None if namespaces is None else set(namespaces)
        return {str(name): int(count) for name, count in rows
                if wanted is None or name in wanted}
