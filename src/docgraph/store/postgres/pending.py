"""Pending chunks on PostgreSQL (see :mod:`docgraph.store.pending`): a chunk stored before
its vector has a NULL ``embedding`` (migration 22), found through the partial index
``chunks_pending``. Filling a vector updates the row in place: the dense search is SQL over
the table (NULLs skipped, absent from the HNSW index until set), so nothing in memory has
to follow it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
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


#: How long the pending counts a dense search read may answer this thread's next
#: ``pending_counts`` (seconds): the answer it searched for asks right after its searches.
PENDING_REUSE_S = 1.0

#: A dense search's first statement (the chunks its namespaces hold, which picks the exact
#: scan or the graph) with the open documents' pending chunks of those namespaces (name,
#: count as JSON; through the partial index: one empty probe when none are pending).
CHUNKS_AND_PENDING_SQL = (
    "SELECT coalesce(sum(n), 0),"
    " (SELECT coalesce(json_object_agg(q.name, q.count), '{}'::json) FROM ("
    + pending_counts_sql("c.embedding IS NULL AND c.namespace_id = ANY(%(ns)s)", True)
    + ") q) FROM chunk_counts WHERE namespace_id = ANY(%(ns)s) AND kind = %(kind)s")


class SeenPending:
    """The open documents' pending chunks per namespace as this thread's dense searches
    read them (:data:`CHUNKS_AND_PENDING_SQL`), taken by the ``pending_counts`` of the
    answer they searched for, so that saying how many chunks its dense lane skipped costs
    the answer no statement of its own. The first dense search of an answer reads them;
    its next ones, on namespaces already read, do not. Taken once; not taken when older
    than :data:`PENDING_REUSE_S` or when this process wrote since (``writes``: the primary
    catalog's count of this process's committed transactions)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _fresh(self, names: Iterable[str], writes: int
               ) -> tuple[frozenset[str], dict[str, int], float, int] | None:
        seen = getattr(self._local, "seen", None)
        if (seen is None or seen[3] != writes
                or time.monotonic() - seen[2] >= PENDING_REUSE_S
                or not set(names) <= seen[0]):
            return None
        return seen  # type: ignore[no-any-return]

    def stale(self, names: Iterable[str], writes: int) -> bool:
        """Whether this thread has no counts of ``names`` to reuse."""
        return self._fresh(names, writes) is None

    def take(self, names: Iterable[str], writes: int) -> dict[str, int] | None:
        """The counts of ``names`` (only those with pending chunks), or None when this
        thread read none of one of them; either way, none are kept after."""
        wanted = set(names)
        seen = self._fresh(wanted, writes)
        self._local.seen = None
        if seen is None:
            return None
        return {n: c for n, c in seen[1].items() if n in wanted and c}

    def note(self, names: Iterable[str], counts: Mapping[str, int], writes: int) -> None:
        """Keep the counts read for ``names`` (absent from ``counts``: none pending), as of
        ``writes`` (read before the statement), with those read before for this answer."""
        earlier = self._fresh((), writes)
        kept = dict(earlier[1]) if earlier else {}
        kept.update({n: int(counts.get(n, 0)) for n in names})
        # as old as the oldest count kept: merging never makes an old count look fresh
        stamp = earlier[2] if earlier else time.monotonic()
        self._local.seen = (frozenset(kept), kept, stamp, writes)
